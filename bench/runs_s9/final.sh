#!/bin/bash
# final.sh CPU NAME STEPS1 STEPS2 [EXTRA] : #12 session-9 equal-wall-time runs, one core each;
# bench/runs_s8/final.sh with these settings.
# The encoder starts at initializer_range 0.02 (the original's; a randomly initialised encoder
# at 0.05 fine-tunes to one class on SST-2, bench/README.md) and, for ELECTRA, the generator's
# own weights at 0.05 (`generator_initializer_range` in EXTRA), the range with which the
# session-8 generators learned word order at length 16.
# Phase 1 as session 8's (books + SST-2's unlabelled training sentences at length 16, batch 128,
# peak lr 5e-4). Phase 2: SST-2's unlabelled training sentences alone at length 32, batch 64
# (data/g32sstonly), from phase 1's weights (fresh optimizer, 100 warm-up steps, peak lr 3e-4).
INIT=0.02 SEQ2=32 BATCH2=64 DATA2=g32sstonly TAG=s9 exec "$(dirname "$0")/../runs_s8/final.sh" "$@"
