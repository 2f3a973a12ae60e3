"""The default pre-training corpus: English prose already on the machine, no download.

Sources, walked in sorted order: docstrings (module, class, function) of the Python standard
library and of the packages installed in the environment, and their .rst/.md/.txt documents.
Paragraphs become lines; paragraphs that look like code or not like English are dropped, and
repeated paragraphs (licences, boilerplate) are kept once (by hash). Every 50th document (by
hash) goes to a held-out evaluation split (at least one: `_hold_one_out`).

Documents (`group_documents`): a source file's paragraphs (all docstrings of a module, or a
text file) stay together, and consecutive files of one package (the first folder under a root;
a root's own modules count as one package) are joined until a document holds at least
`_MIN_DOC_CHARS` characters; a document longer than `_MAX_DOC_CHARS` is split at a paragraph
boundary. The original's packing ends an example with its document (example_builder.py), so
one document per docstring, as before, left about 65% of the positions padding; documents of
this size leave under 10% (README, 'The default corpus').

`build_default_data(data_dir)` writes `corpus/`, `eval_corpus/`, `vocab.txt`,
`pretrain_tfrecords/` and `eval_tfrecords/`, and last a completion marker holding the SHA-256 of
every file; when the marker matches, it returns at once.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import sys
import sysconfig
import time
from collections.abc import Iterable, Iterator

from electra_tf.runtime.atomic_io import write_json, write_text

MARKER = "default_corpus.complete.json"
# 2: documents grouped by package (group_documents); a version-1 build is rebuilt.
_FORMAT_VERSION = 2
_PART_BYTES = 4_000_000
# About 2,000 WordPiece tokens (16 examples of 128): the tail of a document pads about half an
# example, so the tails cost ~3% of positions; the 5% short targets cost ~2.5% more.
_MIN_DOC_CHARS = 8_000
# Long files (whole manuals) split, so that no one document holds a large share of the held-out
# split, which is drawn by document.
_MAX_DOC_CHARS = 32_000
_COMMON = frozenset(
    "the of and to a in is for that this be it with as are on by or an if not from can "
    "which when will you at all must one has have".split()
)
_WORD = re.compile(r"[A-Za-z]+")
_CODE_HINTS = re.compile(r">>>|\.\.\.\s|[{};]|==|!=|\b(def|import|return|lambda|self)\b|::|\w\(\)")


def looks_like_english(paragraph: str) -> bool:
    """Heuristic prose filter: mostly letters, enough words, common English function words."""
    if len(paragraph) < 40 or len(paragraph) > 4000:
        return False
    letters = sum(c.isalpha() or c == " " for c in paragraph)
    if not paragraph.isascii() or letters < 0.8 * len(paragraph):
        return False
    words = _WORD.findall(paragraph.lower())
    if len(words) < 8:
        return False
    if sum(w in _COMMON for w in words) < 0.1 * len(words):
        return False
    return len(_CODE_HINTS.findall(paragraph)) <= len(words) // 40


def _paragraphs(text: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        # Indented blocks in docstrings/rst are examples or literal code.
        if any(line.startswith(("    ", "\t", ".. ", ">>>", "|", "#")) for line in lines[1:]):
            continue
        paragraph = " ".join(line.strip() for line in lines if line.strip())
        if looks_like_english(paragraph):
            out.append(paragraph)
    return out


_TRIPLE_QUOTED = re.compile(r'"""(.*?)"""' + "|" + r"'''(.*?)'''", re.DOTALL)


def _docstrings(path: str) -> Iterator[str]:
    # Triple-quoted strings are docstrings almost always; a regular expression reads them
    # ~20x faster than `ast`, which made the corpus take many minutes on 2 cores.
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            source = f.read()
    except OSError:
        return
    for match in _TRIPLE_QUOTED.finditer(source):
        text = match.group(1) or match.group(2) or ""
        if text.strip():
            yield inspect.cleandoc(text)


def source_roots() -> list[str]:
    paths = sysconfig.get_paths()
    roots = [paths["stdlib"], paths["purelib"]]
    return sorted({os.path.realpath(r) for r in roots if os.path.isdir(r)})


def source_files(roots: list[str]) -> list[tuple[str, int]]:
    """(path, size) of every file the corpus reads, in sorted traversal order."""
    files = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(
                d for d in dirnames if d not in ("__pycache__", "site-packages", "test", "tests")
            )
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if not name.endswith((".py", ".rst", ".md", ".txt")):
                    continue
                try:
                    size = os.path.getsize(path)
                except OSError:
                    continue
                if name.endswith(".py") or size < 2_000_000:
                    files.append((path, size))
    return files


class ScanProgress:
    """Says what the scan does and how long it will take: a line every `every` seconds with
    files and MB done, the corpus so far and an ETA from the rate so far."""

    def __init__(
        self, files: list[tuple[str, int]], log, every: float = 10.0, clock=time.monotonic
    ):
        self.total_files = len(files)
        self.total_bytes = sum(size for _, size in files)
        self.log, self.every, self.clock = log, every, clock
        self.start = self.last = clock()
        self.files = self.bytes = 0

    def update(self, size: int, corpus_bytes: int) -> None:
        self.files += 1
        self.bytes += size
        now = self.clock()
        if now - self.last < self.every:
            return
        self.last = now
        rate = self.bytes / max(now - self.start, 1e-9)
        eta = (self.total_bytes - self.bytes) / max(rate, 1e-9)
        self.log(
            f"  scanned {self.files:,}/{self.total_files:,} files "
            f"({self.bytes / 1e6:,.0f}/{self.total_bytes / 1e6:,.0f} MB), corpus "
            f"{corpus_bytes / 1e6:,.1f} MB, about {eta:,.0f} s left (the corpus stops at "
            "--max-corpus-mb)"
        )


def package_key(path: str, roots: list[str]) -> str:
    """The package a file belongs to: its root joined with the first folder under it, or the
    root itself for a module directly under it (the longest matching root wins)."""
    root = max((r for r in roots if path.startswith(r + os.sep)), key=len, default="")
    rel = os.path.relpath(path, root) if root else path
    parts = rel.split(os.sep)
    return os.path.join(root, parts[0]) if len(parts) > 1 else root


def iter_file_paragraphs(
    roots: list[str], progress: ScanProgress | None = None, counts: dict | None = None
) -> Iterator[tuple[str, list[str]]]:
    """(package key, English paragraphs) per source file, in sorted traversal order; a module's
    docstrings are one list. Files without any such paragraph are left out."""
    for path, size in source_files(roots):
        if path.endswith(".py"):
            texts = list(_docstrings(path))
        else:
            with open(path, encoding="utf-8", errors="replace") as f:
                texts = [f.read()]
        paragraphs = [p for text in texts for p in _paragraphs(text)]
        if paragraphs:
            yield package_key(path, roots), paragraphs
        if progress is not None:
            progress.update(size, (counts or {}).get("bytes", 0))


def group_documents(
    files: Iterable[tuple[str, list[str]]],
    min_chars: int = _MIN_DOC_CHARS,
    max_chars: int = _MAX_DOC_CHARS,
) -> Iterator[list[str]]:
    """Documents (lists of paragraphs) from the paragraphs of consecutive files.

    Args:
      files: (package key, paragraphs) per file, in order (`iter_file_paragraphs`).
      min_chars: a document closes at the next file boundary once it holds this many characters
        (a paragraph counts its length + 1, its line break).
      max_chars: a document closes before the paragraph that would take it past this, so a
        long file goes on in the next document. A single longer paragraph is one document.

    A document never spans two packages, so a package's last document may be shorter.
    """
    doc: list[str] = []
    size, key = 0, None
    for file_key, paragraphs in files:
        if doc and (file_key != key or size >= min_chars):
            yield doc
            doc, size = [], 0
        key = file_key
        for paragraph in paragraphs:
            if doc and size + len(paragraph) + 1 > max_chars:
                yield doc
                doc, size = [], 0
            doc.append(paragraph)
            size += len(paragraph) + 1
    if doc:
        yield doc


def iter_documents(
    roots: list[str], progress: ScanProgress | None = None, counts: dict | None = None
) -> Iterator[list[str]]:
    """Documents (lists of paragraphs), in sorted traversal order, before de-duplication."""
    return group_documents(iter_file_paragraphs(roots, progress, counts))


def _unique_paragraphs(
    files: Iterable[tuple[str, list[str]]], seen: set[bytes]
) -> Iterator[tuple[str, list[str]]]:
    """Each file's paragraphs not seen before (case-insensitive); files left empty are dropped."""
    for key, paragraphs in files:
        kept = []
        for p in paragraphs:
            digest = hashlib.sha1(p.lower().encode()).digest()
            if digest not in seen:
                seen.add(digest)
                kept.append(p)
        if kept:
            yield key, kept


def _hold_one_out(writers: dict[str, tuple[list, list]], counts: dict) -> None:
    """When no document was drawn for evaluation (a small --max-corpus-mb: documents are few and
    long), the training document with the smallest hash is moved there, if one is left behind;
    the evaluation TFRecords cannot be built from nothing."""
    train, eval_ = writers["corpus"][0], writers["eval_corpus"][0]
    if counts["eval_documents"] == 0 and len(train) >= 2:
        eval_.append(train.pop(min(range(len(train)), key=lambda i: _doc_hash(train[i]))))
        counts["documents"] -= 1
        counts["eval_documents"] += 1


def _doc_hash(doc: str) -> bytes:
    return hashlib.sha1(doc.encode()).digest()


def write_corpus(data_dir: str, max_bytes: int, log=None) -> dict:
    """Writes de-duplicated, grouped documents to corpus/part-*.txt and eval_corpus/part-*.txt."""
    seen: set[bytes] = set()
    counts = {"documents": 0, "eval_documents": 0, "paragraphs": 0, "bytes": 0}
    writers: dict[str, tuple[list, list]] = {"corpus": ([], [0]), "eval_corpus": ([], [0])}
    for split in writers:
        os.makedirs(os.path.join(data_dir, split), exist_ok=True)

    def flush(split: str, final: bool = False) -> None:
        buffer, part = writers[split]
        if buffer and (final or sum(map(len, buffer)) >= _PART_BYTES):
            path = os.path.join(data_dir, split, f"part-{part[0]:05d}.txt")
            write_text(path, "\n\n".join(buffer) + "\n")
            buffer.clear()
            part[0] += 1

    roots = source_roots()
    progress = None
    if log is not None:
        files = source_files(roots)
        progress = ScanProgress(files, log)
        log(
            f"scanning {len(files):,} files ({progress.total_bytes / 1e6:,.0f} MB) of docstrings "
            f"and documents under {', '.join(roots)}: a few minutes on 2 cores, once (the "
            "result is kept and reused)"
        )
    # De-duplicated per file before grouping, so that dropped licences do not leave documents
    # short.
    files = _unique_paragraphs(iter_file_paragraphs(roots, progress, counts), seen)
    for kept in group_documents(files):
        doc = "\n".join(kept)
        split = "eval_corpus" if _doc_hash(doc)[0] % 50 == 0 else "corpus"
        writers[split][0].append(doc)
        counts["documents" if split == "corpus" else "eval_documents"] += 1
        counts["paragraphs"] += len(kept)
        counts["bytes"] += len(doc) + 2
        flush(split)
        if counts["bytes"] >= max_bytes:
            break
    _hold_one_out(writers, counts)
    for split in writers:
        flush(split, final=True)
    return counts


def _file_hashes(data_dir: str) -> dict[str, str]:
    hashes = {}
    for sub in ("corpus", "eval_corpus", "pretrain_tfrecords", "eval_tfrecords"):
        for name in sorted(os.listdir(os.path.join(data_dir, sub))):
            path = os.path.join(data_dir, sub, name)
            with open(path, "rb") as f:
                hashes[f"{sub}/{name}"] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(data_dir, "vocab.txt"), "rb") as f:
        hashes["vocab.txt"] = hashlib.sha256(f.read()).hexdigest()
    return hashes


def is_complete(data_dir: str, settings: dict) -> bool:
    path = os.path.join(data_dir, MARKER)
    try:
        with open(path, encoding="utf-8") as f:
            marker = json.load(f)
        return marker["settings"] == settings and marker["files"] == _file_hashes(data_dir)
    except (OSError, ValueError, KeyError):
        return False


def _remove_ours(directory: str, pattern: str) -> None:
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            if re.fullmatch(pattern, name):
                os.remove(os.path.join(directory, name))


def _write_vocab(data_dir: str, vocab_file: str, vocab_size: int) -> list[str]:
    """The vocabulary of `<data_dir>/corpus`, by word frequency; returns its tokens."""
    from electra_tf.data import vocab_learning

    word_counts = vocab_learning.count_words(
        vocab_learning.corpus_lines(os.path.join(data_dir, "corpus"))
    )
    # The tensorflow-text learner needs many minutes here; see frequency_vocab.
    tokens = vocab_learning.frequency_vocab(word_counts, vocab_size)
    vocab_learning.write_vocab(tokens, vocab_file)
    return tokens


def _write_tfrecords(
    data_dir: str, vocab_file: str, max_seq_length: int, num_processes: int, log
) -> dict:
    """The training and evaluation TFRecords; returns their document / token / example counts."""
    from electra_tf.data.tfrecord_builder import BuildOptions, build_pretraining_tfrecords

    stats = {}
    for split, out, shards in (
        ("corpus", "pretrain_tfrecords", 32),
        ("eval_corpus", "eval_tfrecords", 1),
    ):
        result = build_pretraining_tfrecords(
            BuildOptions(
                corpus_dir=os.path.join(data_dir, split),
                vocab_file=vocab_file,
                output_dir=os.path.join(data_dir, out),
                max_seq_length=max_seq_length,
                num_processes=num_processes,
                num_out_files=shards,
                overwrite=True,  # a partial earlier run of ours; other files are kept
            )
        )
        log(f"{out}:\n{result.summary()}")
        stats[out] = {k: getattr(result, k) for k in ("documents", "tokens", "examples")}
        slots = result.example_tokens + result.padding
        stats[out]["padding_percent"] = round(100.0 * result.padding / max(1, slots), 1)
    return stats


def _describe(marker: dict) -> str:
    """The training records' counts in a finished build's marker, as its build printed them."""
    train = marker.get("tfrecords", {}).get("pretrain_tfrecords", {})
    counts = f"{train.get('examples', 0):,} examples, {train.get('tokens', 0):,} tokens"
    if "padding_percent" in train:  # markers written before it was kept do not have it
        counts += f", padding {train['padding_percent']:.1f}%"
    return counts


def build_default_data(
    data_dir: str,
    max_corpus_mb: float = 40.0,
    vocab_size: int = 30522,
    max_seq_length: int = 128,
    num_processes: int = 2,
    log=print,
) -> dict:
    """Builds (or confirms) the default corpus, vocabulary and TFRecords under `data_dir`."""
    settings = {
        "version": _FORMAT_VERSION,
        "max_corpus_mb": max_corpus_mb,
        "vocab_size": vocab_size,
        "max_seq_length": max_seq_length,
        "python": sys.version.split()[0],
    }
    if is_complete(data_dir, settings):
        with open(os.path.join(data_dir, MARKER), encoding="utf-8") as f:
            marker = json.load(f)
        log(
            f"default corpus already built in {data_dir} (marker {MARKER} matches); nothing to "
            f"do: {_describe(marker)}"
        )
        return marker
    start = time.perf_counter()
    os.makedirs(data_dir, exist_ok=True)
    # Only files this builder writes are ever removed (a stale marker first).
    _remove_ours(data_dir, re.escape(MARKER))
    for split in ("corpus", "eval_corpus"):
        _remove_ours(os.path.join(data_dir, split), r"part-\d{5}\.txt")
    counts = write_corpus(data_dir, int(max_corpus_mb * 1e6), log)
    log(f"corpus: {counts} ({time.perf_counter() - start:.0f} s)")

    vocab_file = os.path.join(data_dir, "vocab.txt")
    tokens = _write_vocab(data_dir, vocab_file, vocab_size)
    log(f"vocab: {len(tokens)} entries ({time.perf_counter() - start:.0f} s)")
    stats = _write_tfrecords(data_dir, vocab_file, max_seq_length, num_processes, log)
    marker = {
        "settings": settings,
        "corpus": counts,
        "vocab_size": len(tokens),
        "tfrecords": stats,
        "seconds": round(time.perf_counter() - start, 1),
        "files": _file_hashes(data_dir),
    }
    path = os.path.join(data_dir, MARKER)
    write_json(path, marker, indent=1)
    log(f"default corpus complete in {marker['seconds']} s: {data_dir}")
    return marker
