"""Writes pre-training TFRecords from a directory of text (the original's
build_pretraining_dataset.py, same flags and output format; see electra_tf/data/tfrecord_builder.py).

    python data_prep/build_tfrecords.py --corpus-dir corpus/ --vocab-file vocab.txt \\
        --output-dir pretrain_tfrecords --num-processes 2
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from electra_tf.cli.tfrecord_flags import add_build_flags, options_from_flags, run_build  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus-dir", required=True, help="Directory of text files.")
    parser.add_argument("--vocab-file", required=True, help="WordPiece vocabulary.")
    parser.add_argument("--output-dir", required=True, help="Where to write the TFRecords.")
    add_build_flags(parser)
    args = parser.parse_args(argv)
    return run_build(options_from_flags(args, args.corpus_dir, args.vocab_file, args.output_dir))


if __name__ == "__main__":
    sys.exit(main())
