#!/bin/bash
# final.sh CPU NAME EXTRA : #12 session-7 equal-wall-time runs, one core each: pilot.sh's
# command on the seq-64 Gutenberg shards plus 6 copies of one shard of SST-2's unlabelled
# training sentences (all but the 2,000-sentence validation slice; data/g64sst, bench/README.md).
DATA=g64sst exec "$(dirname "$0")/pilot.sh" "$@"
