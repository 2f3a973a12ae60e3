#!/bin/bash
# final.sh CPU NAME STEPS1 STEPS2 [EXTRA] : #12 session-9 equal-wall-time runs, one core each.
# The encoder starts at initializer_range 0.02 (the original's; a randomly initialised encoder
# at 0.05 fine-tunes to one class on SST-2, bench/README.md) and, for ELECTRA, the generator's
# own weights at 0.05 (`generator_initializer_range`), the range with which the session-8
# generators learned word order at length 16.
# Phase 1: books + SST-2's unlabelled training sentences at length 16, batch 128, peak lr 5e-4,
# STEPS1 steps. Phase 2: SST-2's unlabelled training sentences alone at length 32, batch 64,
# from phase 1's weights (fresh optimizer, 100 warm-up steps, peak lr 3e-4), STEPS2 steps.
cd "$(dirname "$0")/../.."
CPU=$1; NAME=$2; STEPS1=$3; STEPS2=$4; EXTRA=${5:+, $5}
start=$(date +%s)
SEQ=16 BATCH=128 INIT=0.02 bench/runs_s8/pilot.sh $CPU $NAME-p1 "\"learning_rate\": 0.0005, \"num_train_steps\": $STEPS1, \"save_checkpoints_steps\": 500$EXTRA"
mid=$(date +%s)
SEQ=32 BATCH=64 INIT=0.02 DATA=g32sstonly bench/runs_s8/pilot.sh $CPU $NAME-p2 "\"learning_rate\": 0.0003, \"num_warmup_steps\": 100, \"num_train_steps\": $STEPS2, \"save_checkpoints_steps\": 500, \"init_checkpoint\": \"data/g16sst/models/$NAME-p1/ckpt-$STEPS1\"$EXTRA"
end=$(date +%s)
echo "$NAME: phase 1 $((mid - start)) s, phase 2 $((end - mid)) s, total $((end - start)) s" | tee -a data/g32sstonly/logs/s9-walltime.txt
