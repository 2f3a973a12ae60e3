#!/bin/bash
# compare.sh [EXTRA ARGS] : issue #15's comparison as run in session 10: the six objectives of
# configs/ablations/ for 20 min each (two at a time, one core each), the #12 shape on the books
# plus SST-2's unlabelled sentences at length 64 (data/g64sst: bench/README.md, "The recipe
# search, third round"), then SST-2 with the lr sweep cut to 1e-4 / 3e-4. Resumable: run it again.
cd "$(dirname "$0")/../.."
.venv/bin/python bench/compare_objectives.py --data-dir data/g64sst --preset gutenberg \
  --objectives electra,electra_15,replace_mlm,all_tokens_mlm,bert_mlm,electric \
  --minutes 20 --parallel 2 --warmup 0.125 --glue-dir ../shared/data/glue/SST-2 \
  --hparams bench/runs_s10/compare_shared.json --out data/cmp15/out --lrs 1e-4,3e-4 "$@"
