"""Builds the data of the shipped Gutenberg model (see electra_tf/cli/build_gutenberg_data.py).

    python data_prep/build_gutenberg_data.py --books-dir path/to/books \\
        --data-dir data/gutenberg
"""

# A thin wrapper: the command is electra_tf/cli/build_gutenberg_data.py
# (installed as `electra-build-gutenberg-data`).
import sys

from electra_tf.cli.build_gutenberg_data import main

if __name__ == "__main__":
    sys.exit(main())
