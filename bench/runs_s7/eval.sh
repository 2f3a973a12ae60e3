#!/bin/bash
# eval.sh CPU ROW=INIT : the SST-2 protocol (bench/sst2_transfer.py) for one row, pinned to a core.
# Run from a worktree of the commit that trained the rows so later code changes do not mix in:
#   git worktree add /work/wt-eval <commit> && /work/wt-eval/bench/runs_s7/eval.sh 0 name=/abs/ckpt
MAIN=${MAIN:-/work/main}
CPU=$1; ROW=$2; shift 2
cd "$(dirname "$0")/../.."
TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2 \
  taskset -c $CPU $MAIN/.venv/bin/python bench/sst2_transfer.py --glue-dir $MAIN/../shared/data/glue/SST-2 \
  --out $MAIN/data/sst2 --vocab-file $MAIN/data/g64/vocab.txt --python $MAIN/.venv/bin/python --row "$ROW" "$@"
