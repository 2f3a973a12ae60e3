"""Pre-training TFRecords from OpenWebText, as the original's build_openwebtext_pretraining_dataset.py.

Expects $DATA_DIR/openwebtext/* (the OWT tar sub-archives, e.g. urlsf_subset00-1_data.xz) and
$DATA_DIR/vocab.txt; writes $DATA_DIR/pretrain_tfrecords. Each archive member is one document
(blank lines skipped), the original's mode. Archives are streamed, not extracted to disk.

    python data_prep/build_openwebtext_tfrecords.py --data-dir $DATA_DIR --num-processes 2
"""

# A thin wrapper, so that the original's command line keeps working: the command is
# electra_tf/cli/build_openwebtext_tfrecords.py (installed as `electra-build-openwebtext-tfrecords`).
import sys

from electra_tf.cli.build_openwebtext_tfrecords import main

if __name__ == "__main__":
    sys.exit(main())
