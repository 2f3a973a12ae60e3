#!/bin/bash
# final.sh CPU NAME STEPS1 STEPS2 [EXTRA] : #12 equal-wall-time runs in two phases, one core each.
# Session 8 (the defaults): phase 1 at sequence length 16, batch 128, initializer_range 0.05
# (the pilots that first showed order use), STEPS1 steps at peak lr 5e-4, on the books plus
# SST-2's unlabelled training sentences (data/g16sst). Phase 2: length 64, batch 32, STEPS2 steps
# from phase 1's weights (fresh optimizer, 100 warm-up steps, peak lr 3e-4) on data/g64sst, so
# that positions 16-63 are trained before SST-2 fine-tuning at length 64. EXTRA picks the
# objective. bench/runs_s9/final.sh sets the variables below for session 9's runs:
#   INIT (0.05): the encoders' initializer_range in both phases;
#   SEQ2, BATCH2, DATA2 (64, 32, g64sst): phase 2's length, batch and data folder;
#   TAG (s8): the wall-time log, data/$DATA2/logs/$TAG-walltime.txt.
cd "$(dirname "$0")/../.."
CPU=$1; NAME=$2; STEPS1=$3; STEPS2=$4; EXTRA=${5:+, $5}
INIT=${INIT:-0.05}; SEQ2=${SEQ2:-64}; BATCH2=${BATCH2:-32}; DATA2=${DATA2:-g64sst}; TAG=${TAG:-s8}
start=$(date +%s)
SEQ=16 BATCH=128 INIT=$INIT bench/runs_s8/pilot.sh $CPU $NAME-p1 "\"learning_rate\": 0.0005, \"num_train_steps\": $STEPS1, \"save_checkpoints_steps\": 500$EXTRA"
mid=$(date +%s)
SEQ=$SEQ2 BATCH=$BATCH2 INIT=$INIT DATA=$DATA2 bench/runs_s8/pilot.sh $CPU $NAME-p2 "\"learning_rate\": 0.0003, \"num_warmup_steps\": 100, \"num_train_steps\": $STEPS2, \"save_checkpoints_steps\": 500, \"init_checkpoint\": \"data/g16sst/models/$NAME-p1/ckpt-$STEPS1\"$EXTRA"
end=$(date +%s)
echo "$NAME: phase 1 $((mid - start)) s, phase 2 $((end - mid)) s, total $((end - start)) s" | tee -a data/$DATA2/logs/$TAG-walltime.txt
