#!/bin/bash
# dapt.sh CPU NAME INIT STEPS [EXTRA] : #12 session-9 domain-adaptive phase, one core each.
# Continues a session-8 run (INIT: its phase-2 checkpoint) for STEPS steps on SST-2's
# unlabelled training sentences alone (data/g32sstonly: data/sst2text/tfrecords32, all training
# sentences but the validation slice; no labels, no dev sentence), length 32, batch 64, fresh
# optimizer, peak lr 3e-4 after 100 warm-up steps. EXTRA picks the objective.
cd "$(dirname "$0")/../.."
CPU=$1; NAME=$2; INIT_CKPT=$3; STEPS=$4; EXTRA=${5:+, $5}
start=$(date +%s)
SEQ=32 BATCH=64 INIT=0.05 DATA=g32sstonly bench/runs_s8/pilot.sh $CPU $NAME "\"learning_rate\": 0.0003, \"num_warmup_steps\": 100, \"num_train_steps\": $STEPS, \"save_checkpoints_steps\": 500, \"init_checkpoint\": \"$INIT_CKPT\"$EXTRA"
end=$(date +%s)
echo "$NAME: $((end - start)) s" | tee -a data/g32sstonly/logs/s9-walltime.txt
