#!/bin/bash
# serve_env.sh : issue #16, serving. `bench/bench_serve.py --no-xla` under each thread and oneDNN
# setting a model server can be given (threads through bench_serve's --threads, which sets
# them in the process as a server's flags would; the oneDNN settings through the environment),
# one process per setting, all in one sitting on a quiet machine (about 2 min each; HF PyTorch
# in the first and last, so that its figure brackets the others). Appends to bench/results/bench_serve_env_s12.txt.
#   TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1: oneDNN's fused matmuls keep their reordered weights
#     between calls (safe for serving: the weights never change; never for training);
#   TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD=1: the calling thread takes a share of each oneDNN
#     kernel's parallel work instead of waiting for the pool.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=bench/results/bench_serve_env_s12.txt
run() {  # label, INTRA,INTER (bench_serve --threads; 0,0 = TensorFlow's default), then VAR=value ...
  local label=$1 threads=$2; shift 2
  echo "== $label: threads $threads $* | $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $OUT
  env "$@" .venv/bin/python bench/bench_serve.py --no-xla --threads "$threads" \
    ${HF:+--hf-python "$HF"} 2>/dev/null | grep -E '^\| |^- ' | tee -a $OUT
}
HF=/tmp/hfenv/bin/python
[ -x $HF ] || HF=
run "1/2" 1,2 TF_CPP_MIN_LOG_LEVEL=2
H=$HF; HF=
run "1/2 frozen" 1,2 TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1
run "2/1" 2,1 TF_CPP_MIN_LOG_LEVEL=2
run "2/1 frozen" 2,1 TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1
run "2/1 frozen caller" 2,1 TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD=1
run "default frozen caller" 0,0 TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD=1
HF=$H
run "default" 0,0 TF_CPP_MIN_LOG_LEVEL=2
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $OUT
