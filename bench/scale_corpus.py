"""A synthetic corpus of any size from a folder of books, for measuring the data stage at scale.

    python -m bench.scale_corpus --source-dir BOOKS --out-dir /big/disk/corpus-5g --size-mb 5000
    python -m bench.scale_corpus --source-dir BOOKS --out-dir /big/disk/owt --size-mb 1000 \\
        --layout openwebtext

The books (`*.txt`, `*.txt.gz`, `*.txt.xz` under --source-dir) are read once, their Project
Gutenberg licence text dropped, and split into paragraphs (blank-line separated). Each *copy*
then writes every book again with its paragraphs in a fresh random order (and the books in a
fresh order), until --size-mb megabytes (10^6 bytes) of text are written; the last copy is cut
short. So no two copies of a book hold the same byte sequence past a paragraph, and the
tokenizer's per-word cache sees a realistic vocabulary, not one book repeated.

Layouts:
- `books` (default): `copy-NNN/<book>.txt`, one plain text file per book and copy; paragraphs
  are separated by blank lines (the builder's default, blank lines end documents).
- `openwebtext`: the shape OpenWebText ships in and `build_openwebtext_tfrecords.py` reads:
  `openwebtext/urlsf_subsetNN-M_data.xz`, each an xz-compressed tar archive of
  --docs-per-archive `.txt` documents; a document is --paragraphs-per-doc consecutive
  shuffled paragraphs (about the size of a web page).

`.scale_corpus.json`, written last, holds the text size. The output folder must not exist or be empty (nothing is overwritten). Memory: the books'
paragraphs (about 1.1x the books' decompressed size) plus one archive.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    raise SystemExit("run it from the repository root as: python -m bench.scale_corpus")

import argparse
import io
import json
import lzma
import os
import random
import sys
import tarfile
import time

from electra_tf.data.corpus import gutenberg_body

BOOK_SUFFIXES = (".txt", ".txt.gz", ".txt.xz")
MANIFEST = ".scale_corpus.json"  # written last: a corpus without it is incomplete


def read_books(source_dir: str) -> list[tuple[str, list[str]]]:
    """(book name without suffixes, its paragraphs) for every book of `source_dir`, name order."""
    import gzip

    books = []
    for name in sorted(os.listdir(source_dir)):
        if not name.endswith(BOOK_SUFFIXES):
            continue
        path = os.path.join(source_dir, name)
        opener = lzma.open if name.endswith(".xz") else gzip.open if name.endswith(".gz") else open
        with opener(path, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        lines = gutenberg_body(iter(text.replace("\r\n", "\n").split("\n")))
        paragraphs, current = [], []
        for line in lines:
            if line.strip():
                current.append(line.rstrip())
            elif current:
                paragraphs.append("\n".join(current))
                current = []
        if current:
            paragraphs.append("\n".join(current))
        if paragraphs:
            books.append((name.split(".")[0], paragraphs))
    if not books:
        raise SystemExit(f"error: no .txt / .txt.gz / .txt.xz books in {source_dir}")
    return books


def _shuffled_copies(books, seed: int):
    """Endless (copy index, book name, paragraphs in a fresh order), copy after copy."""
    copy = 0
    while True:
        rng = random.Random(f"{seed}:{copy}")
        order = list(range(len(books)))
        rng.shuffle(order)
        for index in order:
            name, paragraphs = books[index]
            shuffled = list(paragraphs)
            rng.shuffle(shuffled)
            yield copy, name, shuffled
        copy += 1


def write_books(books, out_dir: str, size_bytes: int, seed: int) -> tuple[int, int]:
    written, files = 0, 0
    for copy, name, paragraphs in _shuffled_copies(books, seed):
        data = "\n\n".join(paragraphs).encode("utf-8") + b"\n"
        data = data[: size_bytes - written]
        folder = os.path.join(out_dir, f"copy-{copy:03d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{name}.txt"), "wb") as f:
            f.write(data)
        written += len(data)
        files += 1
        if written >= size_bytes:
            return written, files


def write_openwebtext(
    books,
    out_dir: str,
    size_bytes: int,
    seed: int,
    docs_per_archive: int,
    paragraphs_per_doc: int,
    xz_preset: int,
) -> tuple[int, int]:
    folder = os.path.join(out_dir, "openwebtext")
    os.makedirs(folder, exist_ok=True)

    def documents():
        for _, _, paragraphs in _shuffled_copies(books, seed):
            for start in range(0, len(paragraphs), paragraphs_per_doc):
                yield "\n\n".join(paragraphs[start : start + paragraphs_per_doc]) + "\n"

    written, archives, doc_index = 0, 0, 0
    docs = documents()
    while written < size_bytes:
        path = os.path.join(folder, f"urlsf_subset{archives // 1000:02d}-{archives}_data.xz")
        with lzma.open(path, "wb", preset=xz_preset) as raw:
            with tarfile.open(fileobj=raw, mode="w|") as archive:
                for _ in range(docs_per_archive):
                    data = next(docs).encode("utf-8")[: size_bytes - written]
                    member = tarfile.TarInfo(f"{doc_index:07d}-{doc_index * 7919 % 10**6:06x}.txt")
                    member.size = len(data)
                    archive.addfile(member, io.BytesIO(data))
                    written += len(data)
                    doc_index += 1
                    if written >= size_bytes:
                        break
        archives += 1
    return written, archives


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source-dir", required=True, help="A folder of .txt/.txt.xz books.")
    parser.add_argument("--out-dir", required=True, help="A new or empty folder.")
    parser.add_argument("--size-mb", type=float, required=True, help="Text to write, 10^6 B.")
    parser.add_argument("--layout", choices=("books", "openwebtext"), default="books")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--docs-per-archive", type=int, default=400)
    parser.add_argument("--paragraphs-per-doc", type=int, default=12)
    parser.add_argument("--xz-preset", type=int, default=1, help="0-9; 1 writes fast.")
    args = parser.parse_args(argv)
    if os.path.isdir(args.out_dir) and os.listdir(args.out_dir):
        raise SystemExit(f"error: {args.out_dir} is not empty; choose a new folder")
    os.makedirs(args.out_dir, exist_ok=True)
    start = time.perf_counter()
    books = read_books(args.source_dir)
    size = int(args.size_mb * 1e6)
    if args.layout == "books":
        written, files = write_books(books, args.out_dir, size, args.seed)
        what = f"{files:,} files"
    else:
        written, files = write_openwebtext(
            books,
            args.out_dir,
            size,
            args.seed,
            args.docs_per_archive,
            args.paragraphs_per_doc,
            args.xz_preset,
        )
        what = f"{files:,} archives"
    # Hidden, so a build does not read it; the size of the text, whatever the layout's compression.
    with open(os.path.join(args.out_dir, MANIFEST), "w") as f:
        json.dump({"text_bytes": written, "books": len(books), "layout": args.layout}, f)
    print(
        f"wrote {written / 1e6:,.1f} MB of text from {len(books)} books as {what} under "
        f"{args.out_dir} in {time.perf_counter() - start:,.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
