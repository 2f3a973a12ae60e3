"""Reading a pre-training corpus: plain, .gz and .xz text files and tar archives of them.

A corpus directory is walked recursively in sorted order. Each regular file is one *input*;
a tar archive (plain, gzip or xz, recognised by content, so OpenWebText's `*_data.xz`
sub-archives count) is one input whose member files are read in archive order, each as a file.
Lines are split on "\\n" only, as the original's `GFile` iteration did.

Bad bytes never stop a build: non-UTF-8 sequences become U+FFFD (which the tokenizer drops, as
the original's `_clean_text`) and are counted; empty files and binary files (a NUL byte in the
first 8 KiB) are skipped and reported by name.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import lzma
import os
import tarfile
from collections.abc import Iterator
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


def list_inputs(corpus_dir: str, exclude: str | None = None) -> list[CorpusInput]:
    """Every regular, non-hidden file under `corpus_dir`, sorted by relative path, outside the
    folder `exclude` (a build's output folder placed inside its corpus: its own records and
    summary are not text to read on the next build)."""
    if not os.path.isdir(corpus_dir):
        raise CorpusError(f"corpus directory not found: {corpus_dir}")
    skip = os.path.realpath(exclude) if exclude else None
    found = []
    for root, dirs, files in os.walk(corpus_dir):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".") and os.path.realpath(os.path.join(root, d)) != skip
        )
        for fname in sorted(files):
            if fname.startswith("."):
                continue
            path = os.path.abspath(os.path.join(root, fname))
            if not os.path.isfile(path):
                continue
            name = os.path.relpath(path, os.path.abspath(corpus_dir)).replace(os.sep, "/")
            maybe_tar = fname.endswith((".tar", ".tgz", ".txz", ".gz", ".xz", ".bz2"))
            found.append(
                CorpusInput(path, name, os.path.getsize(path), maybe_tar and _is_tar(path))
            )
    found.sort(key=lambda item: item.name)
    return found


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
