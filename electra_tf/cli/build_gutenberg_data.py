"""Builds the data of the shipped Gutenberg model: books split into train and held-out, a
WordPiece vocabulary learned on the training books, and packed TFRecords for both splits.

    python data_prep/build_gutenberg_data.py --books-dir path/to/books \\
        --data-dir data/gutenberg

Writes under --data-dir: corpus-train/ and corpus-heldout/ (symbolic links to the books; every
--heldout-every-th book in name order is held out), vocab.txt (learned on the training books
only, Gutenberg licence text stripped), pretrain_tfrecords/ (the training books, the default
place `electra_tf.pretrain` reads) and tfrecords-heldout/ (the held-out books, for
`eval_tfrecords`). Each file under --books-dir whose name ends in .txt, .txt.gz or .txt.xz is a
book; other files (a manifest, a README) are not.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from electra_tf.cli.tfrecord_flags import run_build  # noqa: E402
from electra_tf.data import vocab_learning  # noqa: E402
from electra_tf.data.tfrecord_builder import BuildOptions, is_complete  # noqa: E402

BOOK_SUFFIXES = (".txt", ".txt.gz", ".txt.xz")


def split_books(books_dir: str, data_dir: str, heldout_every: int) -> dict[str, list[str]]:
    """Links every book into corpus-train/ or corpus-heldout/; returns the names per split."""
    books = sorted(f for f in os.listdir(books_dir) if f.endswith(BOOK_SUFFIXES))
    if not books:
        raise SystemExit(f"error: no .txt / .txt.gz / .txt.xz books in {books_dir}")
    split: dict[str, list[str]] = {"train": [], "heldout": []}
    for index, name in enumerate(books, start=1):
        split["heldout" if index % heldout_every == 0 else "train"].append(name)
    for part, names in split.items():
        target_dir = os.path.join(data_dir, f"corpus-{part}")
        os.makedirs(target_dir, exist_ok=True)
        for name in names:
            link = os.path.join(target_dir, name)
            source = os.path.abspath(os.path.join(books_dir, name))
            if os.path.islink(link) and os.readlink(link) == source:
                continue
            if os.path.lexists(link):
                raise SystemExit(f"error: {link} exists and is not a link to {source}")
            os.symlink(source, link)
    return split


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--books-dir", required=True, help="A folder of Project Gutenberg books.")
    parser.add_argument("--data-dir", required=True, help="Where the splits and data go.")
    parser.add_argument("--heldout-every", type=int, default=35)
    parser.add_argument("--vocab-size", type=int, default=16384)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--train-shards", type=int, default=32)
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--overwrite", action="store_true", help="Rebuild existing outputs.")
    args = parser.parse_args(argv)

    split = split_books(args.books_dir, args.data_dir, args.heldout_every)
    print(f"{len(split['train'])} training books, held out: {', '.join(split['heldout'])}")
    vocab_file = os.path.join(args.data_dir, "vocab.txt")
    if os.path.exists(vocab_file) and not args.overwrite:
        print(f"keeping {vocab_file} (--overwrite relearns it)")
    else:
        start = time.perf_counter()
        train_dir = os.path.join(args.data_dir, "corpus-train")
        lines = vocab_learning.corpus_lines(train_dir, strip_gutenberg=True)
        tokens = vocab_learning.learn_vocab(vocab_learning.count_words(lines), args.vocab_size)
        vocab_learning.write_vocab(tokens, vocab_file)
        print(f"wrote {vocab_file}: {len(tokens)} entries in {time.perf_counter() - start:.0f} s")
    for part, output, shards in (
        ("train", "pretrain_tfrecords", args.train_shards),
        ("heldout", "tfrecords-heldout", 2),
    ):
        options = BuildOptions(
            corpus_dir=os.path.join(args.data_dir, f"corpus-{part}"),
            vocab_file=vocab_file,
            output_dir=os.path.join(args.data_dir, output),
            max_seq_length=args.max_seq_length,
            num_processes=args.num_processes,
            blanks_separate_docs=False,  # a book is one document
            num_out_files=shards,
            overwrite=args.overwrite,
            strip_gutenberg=True,
        )
        if is_complete(options.output_dir) and not args.overwrite:
            print(f"keeping {options.output_dir} (--overwrite rebuilds it)")
            continue
        if os.path.isdir(options.output_dir) and os.listdir(options.output_dir):
            # A build of this tool's own folder that was stopped: start it again (only the
            # builder's files are replaced).
            options = dataclasses.replace(options, overwrite=True)
        if run_build(options):
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
