#!/bin/bash
# waits for the s6 runs, then: held-out curves and the SST-2 rows, one core each
cd "$(dirname "$0")/../.."
while pgrep -f "model-name s6-electra --preset" >/dev/null || pgrep -f "model-name s6-mlm --preset" >/dev/null; do sleep 10; done
date > data/g64/logs/after.start
EXTRA_ARGS=--all-checkpoints bench/runs_s6/final_eval.sh 0 s6-electra '"learning_rate": 0.0003, "generator_lr_multiplier": 3.3333, "num_train_steps": 2500, "do_train": false, "do_eval": true' > data/g64/logs/s6-electra-eval.log 2>&1 &
EXTRA_ARGS=--all-checkpoints bench/runs_s6/final_eval.sh 1 s6-mlm '"electra_objective": false, "learning_rate": 0.001, "num_train_steps": 3475, "do_train": false, "do_eval": true' > data/g64/logs/s6-mlm-eval.log 2>&1 &
wait
T="TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1"
env TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python bench/sst2_transfer.py --glue-dir ../shared/data/glue/SST-2 --out data/sst2 --vocab-file data/g64/vocab.txt --row electra-s6=data/g64/models/s6-electra/ckpt-2500 > data/sst2/electra-s6.log 2>&1 &
env TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1 taskset -c 1 .venv/bin/python bench/sst2_transfer.py --glue-dir ../shared/data/glue/SST-2 --out data/sst2 --vocab-file data/g64/vocab.txt --row mlm-s6=data/g64/models/s6-mlm/ckpt-3475 > data/sst2/mlm-s6.log 2>&1 &
wait
date > data/g64/logs/after.done
