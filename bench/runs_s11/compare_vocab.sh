#!/bin/bash
# compare_vocab.sh [EXTRA ARGS] : issue #12, eighth round (session 11). Issue #15's session-10
# comparison of ELECTRA and the BERT masked LM (bench/runs_s10/compare.sh: 20 min each, one core
# each, the #12 shape, books + SST-2's unlabelled sentences at length 64, SST-2 with lrs 1e-4 and
# 3e-4) with one change: a vocabulary learned on the training books PLUS those SST-2 sentences
# (the books' own vocabulary splits review words: "boring" is not one piece). Builds its data
# under data/g64v first (each step skipped when its output exists). Resumable: run it again.
# The learned vocabulary has 15,582 entries; compare_vocab_shared.json sets "vocab_size" to it.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
D=data/g64v
if [ ! -s $D/vocab.txt ]; then
  mkdir -p $D/corpus-vocab
  for f in data/gutenberg/corpus-train/*; do ln -sf "../../gutenberg/corpus-train/$(basename "$f")" $D/corpus-vocab/; done
  ln -sf ../../sst2text/corpus/sst2-train-sentences.txt $D/corpus-vocab/
  $PY data_prep/learn_vocab.py --corpus-dir $D/corpus-vocab --vocab-file $D/vocab.txt \
    --vocab-size 16384 --strip-gutenberg-boilerplate
fi
build() {  # corpus output shards [extra]
  [ -d "$2" ] && [ -n "$(ls "$2")" ] && return 0
  $PY data_prep/build_tfrecords.py --corpus-dir "$1" --vocab-file $D/vocab.txt --output-dir "$2" \
    --max-seq-length 64 --no-blanks-separate-docs --num-processes 2 --num-out-files "$3" "${@:4}"
}
build data/gutenberg/corpus-train $D/books64 32 --strip-gutenberg-boilerplate
build data/gutenberg/corpus-heldout $D/tfrecords-heldout 1 --strip-gutenberg-boilerplate
build data/sst2text/corpus $D/sst2text64 1
if [ ! -d $D/pretrain_tfrecords ]; then
  mkdir -p $D/pretrain_tfrecords
  for f in $D/books64/pretrain_data.tfrecord-*; do ln -s "../books64/$(basename "$f")" $D/pretrain_tfrecords/; done
  for i in 0 1 2 3 4 5; do
    ln -s ../sst2text64/pretrain_data.tfrecord-0-of-1 $D/pretrain_tfrecords/pretrain_data.tfrecord-sst2-copy$i
  done
fi
$PY bench/compare_objectives.py --data-dir $D --preset gutenberg --objectives electra,bert_mlm \
  --minutes 20 --parallel 2 --warmup 0.125 --glue-dir ../shared/data/glue/SST-2 \
  --hparams bench/runs_s11/compare_vocab_shared.json --out data/cmp12v/out --lrs 1e-4,3e-4 "$@"
