"""Learns a BERT-style WordPiece vocabulary from a directory of text (tensorflow-text's learner).

python data_prep/learn_vocab.py --corpus-dir corpus/ --vocab-file vocab.txt --vocab-size 30522
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from electra_tf.data import vocab_learning  # noqa: E402
from electra_tf.data.corpus import CorpusError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus-dir", required=True)
    parser.add_argument("--vocab-file", required=True, help="Output path.")
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--max-corpus-mb", type=float, default=0, help="0: read everything.")
    parser.add_argument("--no-lower-case", dest="do_lower_case", action="store_false")
    parser.add_argument("--no-strip-accents", dest="strip_accents", action="store_false")
    parser.add_argument(
        "--method",
        choices=("wordpiece", "frequency"),
        default="wordpiece",
        help="wordpiece: tensorflow-text's learner (slow); frequency: fast, see frequency_vocab.",
    )
    parser.add_argument(
        "--strip-gutenberg-boilerplate",
        dest="strip_gutenberg",
        action="store_true",
        help="Keep only the text between each file's Project Gutenberg START and END lines.",
    )
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if os.path.isdir(args.vocab_file):
        print(f"error: --vocab-file {args.vocab_file} is a folder; name a file", file=sys.stderr)
        return 2
    if os.path.exists(args.vocab_file) and not args.overwrite:
        print(f"error: {args.vocab_file} exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    try:
        vocab_learning.check_vocab_size(args.vocab_size)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    max_bytes = int(args.max_corpus_mb * 1e6) or None
    try:
        lines = vocab_learning.corpus_lines(args.corpus_dir, max_bytes, args.strip_gutenberg)
        counts = vocab_learning.count_words(lines, args.do_lower_case, args.strip_accents)
        if args.method == "wordpiece":
            tokens = vocab_learning.learn_vocab(counts, args.vocab_size)
        else:
            tokens = vocab_learning.frequency_vocab(counts, args.vocab_size)
    except (CorpusError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    vocab_learning.write_vocab(tokens, args.vocab_file)
    print(
        f"wrote {args.vocab_file}: {len(tokens)} entries from {len(counts):,} distinct words "
        f"in {time.perf_counter() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
