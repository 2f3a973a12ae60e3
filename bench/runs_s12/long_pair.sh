#!/bin/bash
# long_pair.sh [EXTRA ARGS] : issue #12, ninth round (session 12). The eighth round's pair
# (bench/runs_s11/compare_vocab.sh: the review-aware vocabulary of data/g64v, the #12 shape, books
# + six copies of SST-2's unlabelled sentences at length 64, lr 3e-4, 12.5% warm-up, one core
# each) with one change: 140 minutes of wall time per objective instead of 20, the issue's
# 150-minute budget less what a session needs to fine-tune the rows afterwards. The random row's
# fine-tuning runs are the eighth round's (same data, vocabulary, protocol and settings), copied
# in so that bench/sst2_transfer.py finds them cached. Resumable: run it again.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=data/cmp12L/out
if [ ! -d data/g64v/pretrain_tfrecords ] || [ ! -d data/cmp12v/out/sst2 ]; then
  echo "data/g64v and the eighth round's runs are missing: run bench/runs_s11/compare_vocab.sh first" >&2
  exit 1
fi
for split in val dev; do
  mkdir -p $OUT/sst2/$split/models
  for d in data/cmp12v/out/sst2/$split/models/random_*; do
    [ -e "$OUT/sst2/$split/models/$(basename "$d")" ] || cp -r "$d" $OUT/sst2/$split/models/
  done
done
.venv/bin/python bench/compare_objectives.py --data-dir data/g64v --preset gutenberg \
  --objectives electra,bert_mlm --minutes 140 --parallel 2 --warmup 0.125 \
  --glue-dir ../shared/data/glue/SST-2 --hparams bench/runs_s11/compare_vocab_shared.json \
  --out $OUT --lrs 1e-4,3e-4 "$@"
