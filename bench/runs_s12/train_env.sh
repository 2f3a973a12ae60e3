#!/bin/bash
# train_env.sh BASELINE_DIR : issue #16, training. `make bench`'s default row against Model
# Garden, with BASELINE_DIR (a checkout of the commit before a change, e.g. `git worktree add
# ../wt-s12 293cc3a`, the commit before the fused Adam update) as a row of the same run; then
# the same under each thread and oneDNN setting, one bench_train run per setting. On a quiet
# machine; appends to bench/results/bench_train_env_s12.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
BASE=${1:?usage: train_env.sh BASELINE_DIR}
OUT=bench/results/bench_train_env_s12.txt
run() {  # label, bench_train flags..., then -- VAR=value ...
  local label=$1; shift
  local flags=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done; shift || true
  echo "== $label: ${flags[*]} $* | $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $OUT
  env "$@" .venv/bin/python bench/bench_train.py --no-extras --rounds 2 "${flags[@]}" 2>/dev/null \
    | grep -E '^\| |^- |matmul|peak' | tee -a $OUT
}
run "fused Adam vs before" --configs default,mg-fp32 --baseline "$BASE" -- TF_CPP_MIN_LOG_LEVEL=2
run "intra 2 inter 1" --configs default,mg-fp32 --intra 2 --inter 1 -- TF_CPP_MIN_LOG_LEVEL=2
run "caller thread" --configs default,mg-fp32 -- TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD=1
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $OUT
