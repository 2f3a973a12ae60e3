#!/bin/bash
# final.sh CPU NAME STEPS1 STEPS2 EXTRA : #12 session-8 equal-wall-time runs, one core each.
# Phase 1: sequence length 16, batch 128, initializer_range 0.05 (the pilots that first showed
# order use), STEPS1 steps at peak lr 5e-4. Phase 2: length 64, batch 32, STEPS2 steps from
# phase 1's weights (fresh optimizer, 100 warm-up steps, peak lr 3e-4), so that positions
# 16-63 are trained before SST-2 fine-tuning at length 64. EXTRA picks the objective.
# Both phases on the books plus SST-2's unlabelled training sentences (bench/README.md).
cd "$(dirname "$0")/../.."
CPU=$1; NAME=$2; STEPS1=$3; STEPS2=$4; EXTRA=${5:+, $5}
start=$(date +%s)
SEQ=16 BATCH=128 INIT=0.05 bench/runs_s8/pilot.sh $CPU $NAME-p1 "\"learning_rate\": 0.0005, \"num_train_steps\": $STEPS1, \"save_checkpoints_steps\": 500$EXTRA"
mid=$(date +%s)
SEQ=64 BATCH=32 INIT=0.05 bench/runs_s8/pilot.sh $CPU $NAME-p2 "\"learning_rate\": 0.0003, \"num_warmup_steps\": 100, \"num_train_steps\": $STEPS2, \"save_checkpoints_steps\": 500, \"init_checkpoint\": \"data/g16sst/models/$NAME-p1/ckpt-$STEPS1\"$EXTRA"
end=$(date +%s)
echo "$NAME: phase 1 $((mid - start)) s, phase 2 $((end - mid)) s, total $((end - start)) s" | tee -a data/g64sst/logs/s8-walltime.txt
