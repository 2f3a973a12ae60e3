"""Builds the default pre-training data (no download): English docstrings and documentation of
the Python standard library and installed packages -> corpus, vocab.txt, TFRecords.

    python data_prep/build_default_corpus.py --data-dir data/default

Idempotent: when <data-dir>/default_corpus.complete.json matches the files, it returns at once.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from electra_tf.data.default_corpus import build_default_data  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default="data/default")
    parser.add_argument("--max-corpus-mb", type=float, default=40.0)
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--num-processes", type=int, default=2)
    args = parser.parse_args(argv)
    build_default_data(
        args.data_dir,
        max_corpus_mb=args.max_corpus_mb,
        vocab_size=args.vocab_size,
        max_seq_length=args.max_seq_length,
        num_processes=args.num_processes,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
