"""Writes pre-training TFRecords from a directory of text (the original's
build_pretraining_dataset.py, same flags and output format; see electra_tf/data/tfrecord_builder.py).

    python data_prep/build_tfrecords.py --corpus-dir corpus/ --vocab-file vocab.txt \\
        --output-dir pretrain_tfrecords --num-processes 2
"""

# A thin wrapper, so that the original's command line keeps working: the command is
# electra_tf/cli/build_tfrecords.py (installed as `electra-build-tfrecords`).
import sys

from electra_tf.cli.build_tfrecords import main

if __name__ == "__main__":
    sys.exit(main())
