"""Files written atomically: a temporary file in the same folder, renamed over the target.

A reader (another worker, TF Serving, a resumed run) sees the old file or the new one, never a
torn one, and a process killed mid-write leaves the old file in place. The temporary name
carries the process id, so workers writing the same path do not trample each other's halves.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from typing import Any


def _exclusive_no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_EXCL | os.O_NOFOLLOW, 0o644)


def write_bytes(path: str, data: bytes, sync: bool = False) -> None:
    """Writes `data` to `path` atomically; `sync` also flushes it to disk before the rename."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    if os.path.islink(tmp):
        raise OSError(errno.ELOOP, "a symbolic link stands at the temporary name", tmp)
    if os.path.lexists(tmp):
        os.remove(tmp)  # left by a killed process that had our pid
    try:
        # O_EXCL | O_NOFOLLOW: a file or link planted at the temporary name is never written
        # through (the rename then replaces only `path` itself, never a link's target).
        with open(tmp, "wb", opener=_exclusive_no_follow) as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if not isinstance(e, FileExistsError) and os.path.lexists(tmp):
            os.remove(tmp)
        if isinstance(e, OSError) and e.errno is not None and not e.filename:
            # A full disk fails in write() or close(), whose errors name no file.
            raise OSError(e.errno, e.strerror, path) from e
        raise


def write_text(path: str, text: str, sync: bool = False) -> None:
    """Writes `text` (UTF-8) to `path` atomically."""
    write_bytes(path, text.encode("utf-8"), sync)


def write_json(path: str, obj: Any, **dump_kwargs: Any) -> None:
    """Writes `obj` as JSON to `path` atomically; `dump_kwargs` go to `json.dumps`."""
    write_text(path, json.dumps(obj, **dump_kwargs))


def make_parents(*paths: str | None) -> str | None:
    """Creates the folders that `paths` (None ones skipped) will be written into; returns why
    one cannot be (None when all can). For a command's output flags, called when it starts,
    so that a long run does not end on a missing folder."""
    for path in paths:
        if not path:
            continue
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        except FileExistsError:
            return f"{path}: cannot create its folder (a file is in the way)"
        except OSError as e:
            return f"{path}: cannot create its folder ({e.strerror or e})"
    return None


def replace_dir(new: str, path: str) -> None:
    """Moves the finished directory `new` to `path`, replacing what is there.

    The old directory is renamed aside before the new one takes its name and is deleted only
    after, so `path` never holds a mix of the two; a reader sees the old or the new version.
    """
    if os.path.exists(path):
        old = f"{path}.old-{os.getpid()}"
        os.replace(path, old)
        os.replace(new, path)
        shutil.rmtree(old)
    else:
        os.replace(new, path)


def _matches(relative: str, pattern: str) -> bool:
    parts, wanted = relative.split(os.sep), pattern.split("/")
    return len(parts) == len(wanted) and all(map(fnmatch.fnmatchcase, parts, wanted))


def unexpected_files(directory: str, patterns: Iterable[str]) -> list[str]:
    """Everything below `directory` that is not a folder (files, links, a folder that cannot be
    read) and matches none of `patterns`, as sorted paths relative to `directory`.

    A pattern is a "/"-separated relative path whose parts are `fnmatch` patterns, so `*` never
    crosses a folder ("ckpt-*.index" matches at the top only). A link is never followed: a
    link to a folder is itself an entry, and what it points at is not the output's.
    """
    patterns = tuple(patterns)
    found: list[str] = []

    def unreadable(error: OSError) -> None:
        found.append(os.path.relpath(error.filename, directory))

    for root, dirs, files in os.walk(directory, onerror=unreadable):
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        dirs[:] = [d for d in dirs if d not in links]
        for name in files + links:
            relative = os.path.relpath(os.path.join(root, name), directory)
            if not any(_matches(relative, p) for p in patterns):
                found.append(relative)
    return sorted(found)


def describe_files(names: list[str], shown: int = 4) -> str:
    """ "a, b, c, d and 7 more": a few names of a list that may be long, and the count."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def file_sha1(path: str) -> str | None:
    """The file's SHA-1 in hex; None when there is no such file."""
    if not os.path.exists(path):
        return None
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
