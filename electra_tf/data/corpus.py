"""Reading a pre-training corpus: plain, .gz and .xz text files and tar archives of them.

A corpus directory is walked recursively in sorted order. Each regular file is one *input*;
a tar archive (plain, gzip or xz, recognised by content, so OpenWebText's `*_data.xz`
sub-archives count) is one input whose member files are read in archive order, each as a file.
Lines are split on "\\n" only, as the original's `GFile` iteration did.

Bad bytes never stop a build: non-UTF-8 sequences become U+FFFD (which the tokenizer drops, as
the original's `_clean_text`) and are counted; empty files and binary files (a NUL byte in the
first 8 KiB) are skipped and reported by name, as are FIFOs, devices, broken links and a
build's own output files (`scan_corpus`).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import lzma
import os
import stat
import tarfile
from collections.abc import Iterator
from re import Pattern
from typing import IO

_SNIFF_BYTES = 8192
# Project Gutenberg plain-text files wrap the book in a licence header and footer between
# marker lines such as "*** START OF THE PROJECT GUTENBERG EBOOK ... ***".
_PG_START = ("*** START OF THE PROJECT GUTENBERG", "*** START OF THIS PROJECT GUTENBERG")
_PG_END = ("*** END OF THE PROJECT GUTENBERG", "*** END OF THIS PROJECT GUTENBERG")
_PG_HEADER_MAX_LINES = 1000


class CorpusError(ValueError):
    """A corpus directory that cannot be read; the message names the path."""


@dataclasses.dataclass(frozen=True)
class CorpusInput:
    """One input of the corpus: a text file (maybe compressed) or a tar archive."""

    path: str  # absolute path
    name: str  # path relative to the corpus directory; seeds the per-file random draws
    size: int  # bytes on disk (progress is reported in these)
    is_tar: bool


def _is_tar(path: str) -> bool:
    try:
        with tarfile.open(path, mode="r:*") as archive:
            return archive.next() is not None
    except (tarfile.TarError, OSError, EOFError, lzma.LZMAError, gzip.BadGzipFile):
        return False


@dataclasses.dataclass
class CorpusScan:
    """A corpus directory's inputs, and the entries left out with their reasons
    ("name: reason"), which a build lists among its skipped files."""

    inputs: list[CorpusInput]
    skipped: list[str]


_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(path: str) -> str | None:
    """Why `path` (followed if a link) is not a file to read, or None. `stat` only: a FIFO is
    never opened, so the listing cannot block on one."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        return f"{'a broken link' if os.path.islink(path) else 'unreadable'} ({err.strerror})"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a file")
    return f"not a regular file ({kind})"


def scan_corpus(
    corpus_dir: str, output_dir: str | None = None, output_name: Pattern[str] | None = None
) -> CorpusScan:
    """Every regular, non-hidden file under `corpus_dir`, sorted by relative path; links are
    followed to files, not to folders.

    A build's own outputs are never read as text: the folder `output_dir` where it lies
    inside the corpus, and any file whose name `output_name` matches (a build into the corpus
    folder itself, or an earlier build's folder inside it). Those, FIFOs, devices, broken
    links and linked folders are listed in `skipped` with the reason; hidden entries are
    left out silently."""
    if not os.path.isdir(corpus_dir):
        raise CorpusError(f"corpus directory not found: {corpus_dir}")
    top = os.path.abspath(corpus_dir)
    output = os.path.realpath(output_dir) if output_dir else None
    found, skipped = [], []
    for root, dirs, files in os.walk(corpus_dir):
        kept = []
        for d in sorted(d for d in dirs if not d.startswith(".")):
            path = os.path.join(root, d)
            name = os.path.relpath(path, top).replace(os.sep, "/")
            if os.path.realpath(path) == output:
                skipped.append(f"{name}/: the build's output folder")
            elif os.path.islink(path):
                skipped.append(f"{name}/: a link to a folder (not followed)")
            else:
                kept.append(d)
        dirs[:] = kept
        for fname in sorted(files):
            path = os.path.abspath(os.path.join(root, fname))
            name = os.path.relpath(path, top).replace(os.sep, "/")
            if output_name is not None and output_name.match(fname):
                reason = "a TFRecord build's own output, not text"
            elif fname.startswith("."):
                continue
            else:
                reason = _not_regular(path)
            if reason:
                skipped.append(f"{name}: {reason}")
                continue
            maybe_tar = fname.endswith((".tar", ".tgz", ".txz", ".gz", ".xz", ".bz2"))
            found.append(
                CorpusInput(path, name, os.path.getsize(path), maybe_tar and _is_tar(path))
            )
    found.sort(key=lambda item: item.name)
    return CorpusScan(found, sorted(skipped))


def list_inputs(corpus_dir: str) -> list[CorpusInput]:
    """The inputs of `scan_corpus(corpus_dir)` (the vocabulary learner's reading)."""
    return scan_corpus(corpus_dir).inputs


def _decompressed(raw: IO[bytes], name: str) -> IO[bytes]:
    if name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)
    if name.endswith(".xz"):
        return lzma.LZMAFile(raw)
    return raw


@dataclasses.dataclass
class TextFile:
    """One file's lines, decoded lazily. `skip_reason` is set for empty and binary files."""

    name: str
    stream: IO[bytes]
    skip_reason: str | None = None
    replaced_chars: int = 0
    bytes_read: int = 0

    def lines(self, strip_gutenberg: bool = False) -> Iterator[str]:
        """Decoded lines, each with its trailing newline; with `strip_gutenberg`, only those
        between the file's Project Gutenberg START and END lines (`gutenberg_body`)."""
        decoded = self._decoded_lines()
        return gutenberg_body(decoded) if strip_gutenberg else decoded

    def _decoded_lines(self) -> Iterator[str]:
        for raw in self.stream:
            self.bytes_read += len(raw)
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                self.replaced_chars += line.count("\ufffd") - raw.count(b"\xef\xbf\xbd")
                yield line


def gutenberg_body(lines: Iterator[str]) -> Iterator[str]:
    """The lines between a Project Gutenberg file's START and END marker lines.

    A file whose first 1,000 lines hold no START marker is passed through whole (it is not a
    Gutenberg file, or its header was already removed); text after an END marker is dropped.
    Matching is case-insensitive and ignores leading spaces or a byte-order mark.
    """
    header: list[str] | None = []
    for line in lines:
        key = line.lstrip("\ufeff ").upper()
        if header is not None:
            if key.startswith(_PG_START):
                header = None
                continue
            header.append(line)
            if len(header) < _PG_HEADER_MAX_LINES:
                continue
            yield from header
            header = None
            continue
        if key.startswith(_PG_END):
            return
        yield line
    if header:
        yield from header


def _open_text(stream: IO[bytes], name: str) -> TextFile:
    buffered = io.BufferedReader(stream) if not hasattr(stream, "peek") else stream
    try:
        head = buffered.peek(_SNIFF_BYTES)[:_SNIFF_BYTES]
    except (OSError, EOFError, lzma.LZMAError) as err:
        return TextFile(name, io.BytesIO(), skip_reason=f"unreadable ({err})")
    if not head:
        return TextFile(name, buffered, skip_reason="empty")
    if b"\x00" in head:
        return TextFile(name, buffered, skip_reason="binary (NUL bytes)")
    return TextFile(name, buffered)


def iter_text_files(item: CorpusInput) -> Iterator[TextFile]:
    """The text files of one input: itself, or each regular member of a tar archive."""
    if not item.is_tar:
        try:
            raw = open(item.path, "rb")  # noqa: SIM115 - closed below
        except OSError as err:  # permissions, a file removed since the listing
            yield TextFile(item.name, io.BytesIO(), skip_reason=f"unreadable ({err.strerror})")
            return
        with raw:
            yield _open_text(_decompressed(raw, item.name), item.name)
        return
    # Stream mode ("r|*"): compressed archives are read once, front to back.
    with tarfile.open(item.path, mode="r|*") as archive:
        for member in archive:
            if not member.isfile():
                continue
            extracted = archive.extractfile(member)
            if extracted is None:
                continue
            member_name = f"{item.name}/{member.name}"
            yield _open_text(_decompressed(extracted, member.name), member_name)
