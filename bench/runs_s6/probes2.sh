#!/bin/bash
cd "$(dirname "$0")/../.."
while [ ! -f data/g64/logs/after.done ]; do sleep 10; done
P="env TF_NUM_INTRAOP_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python bench/frozen_probe.py --sst-dir data/sst2/val/finetuning_data/sst --vocab-file data/g64/vocab.txt"
( $P --model-dir data/g64/models/s6-electra --checkpoint none; $P --model-dir data/g64/models/s6-electra --checkpoint ckpt-2500 ) > data/g64/logs/frozen_a.jsonl 2>/dev/null &
( $P --model-dir data/g64/models/s6-mlm --checkpoint ckpt-3475; $P --model-dir data/gutenberg/models/electra-tiny-gutenberg --checkpoint ckpt-3200 ) > data/g64/logs/frozen_b.jsonl 2>/dev/null &
wait
