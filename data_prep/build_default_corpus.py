"""Builds the default pre-training data (no download): English docstrings and documentation of
the Python standard library and installed packages -> corpus, vocab.txt, TFRecords.

    python data_prep/build_default_corpus.py --data-dir data/default

Idempotent: when <data-dir>/default_corpus.complete.json matches the files, it returns at once.
"""

# A thin wrapper, so that the original's command line keeps working: the command is
# electra_tf/cli/build_default_corpus.py (installed as `electra-build-default-corpus`).
import sys

from electra_tf.cli.build_default_corpus import main

if __name__ == "__main__":
    sys.exit(main())
