"""One writer per output: an exclusive lock file holding the writer's pid and host.

Two `pretrain` processes on one model dir (or two builds into one TFRecord dir, two exports
into one folder) used to both run and interleave their files. Every writing command now takes
`RunLock(directory, name)` first; a second one is refused with the holder's pid, host and
command, before it writes anything.

The lock is `flock` on the file (released by the kernel when the process dies, `kill -9`
included) plus the holder's identity written inside it, for the message. A lock file left by a
dead process is therefore not held: the next run takes it over and says whose it was. The file
is removed on a clean exit. `flock` is advisory and local to a kernel on some network file
systems; the host in the file is there so that a refusal can name a holder on another machine.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any, TextIO


class LockError(RuntimeError):
    """Another live process holds the lock (the message names it), or the directory cannot be
    written at all."""


class Terminated(Exception):
    """SIGTERM, raised inside `sigterm_raises()`. Python's default SIGTERM ends the process on
    the spot: no `finally`, no `with` exit, so a lock file and scratch output stay behind
    (`timeout`, `kill` and job schedulers all send SIGTERM)."""


def report_stop(stop: BaseException, what: str) -> int:
    """For a run stopped by `Terminated` (SIGTERM inside `sigterm_raises`) or KeyboardInterrupt
    (Ctrl-C): prints `stopped (SIGTERM|SIGINT): <what>` on stderr and returns the exit status,
    128 + the signal."""
    signum = signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT
    print(f"stopped ({signal.Signals(signum).name}): {what}", file=sys.stderr)
    return 128 + signum


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Inside the block, SIGTERM raises `Terminated`, so the clean-up of the `with RunLock`
    blocks and `finally`s it passes through runs on the way out; the caller reports the stop.
    Off the main thread signals cannot be handled: the block runs unchanged."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: the caller handles its signals
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "another process (its lock file is empty)"
    since = holder.get("since")
    when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(since)) if since else ""
    return (
        f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}{when} "
        f"({holder.get('command', '?')})"
    )


def ensure_writable(directory: str, what: str = "directory") -> None:
    """Creates `directory` if needed and writes a scratch file there; LockError if it cannot
    (a read-only or full file system), so a run fails before its work, not after it."""
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise LockError(f"cannot write to {what} {directory}: {e.strerror}") from e


class RunLock:
    """Context manager: holds `<directory>/<name>` exclusively for the `with` block.

    Args:
      directory: the output the lock protects (created if missing).
      name: the lock file's name; different names let unrelated writers share a directory.
      what: how the refusal names the output ("model dir", "output directory", ...).
      stream: where a take-over of a dead process's lock is reported (stderr by default).
    """

    def __init__(
        self,
        directory: str,
        name: str = ".electra.lock",
        what: str = "directory",
        stream: TextIO | None = None,
    ):
        self.directory = directory
        self.path = os.path.join(directory, name)
        self.what = what
        self.stream = stream or sys.stderr
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        while True:
            try:
                os.makedirs(self.directory, exist_ok=True)
                # O_NOFOLLOW: a lock file planted as a link must not make us write the lock's
                # JSON into whatever it points at.
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise LockError(
                        f"lock file {self.path} is a symbolic link; refusing to write through "
                        "it (remove the link)"
                    ) from None
                # A read-only or full file system: say so before any work starts.
                raise LockError(
                    f"cannot write to {self.what} {self.directory}: {e.strerror}"
                ) from e
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = self._read(fd)
                os.close(fd)
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                raise LockError(
                    f"{self.what} {self.directory} is in use by {_describe(holder)}; "
                    f"wait for it to finish or stop it (lock file {self.path})"
                ) from None
            # The holder may have removed the file between our open and our flock: then we
            # locked an unlinked inode, and must lock the file now at that path instead.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        previous = self._read(fd)
        if previous.get("pid") is not None and previous.get("pid") != os.getpid():
            print(
                f"Taking over the lock of {self.directory} from {_describe(previous)}: that "
                "process is gone (its lock file was left behind)",
                file=self.stream,
                flush=True,
            )
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": " ".join([os.path.basename(sys.argv[0] or "python")] + sys.argv[1:])[:200],
            "since": time.time(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode("utf-8"), 0)
        self._fd = fd
        return self

    @staticmethod
    def _read(fd: int) -> dict[str, Any]:
        try:
            data = os.pread(fd, 4096, 0)
            holder = json.loads(data.decode("utf-8")) if data.strip() else {}
        except (OSError, ValueError):
            return {}
        return holder if isinstance(holder, dict) else {}

    def release(self) -> None:
        if self._fd is None:
            return
        # Unlink while still holding the lock, so nobody can lock this inode after we leave.
        try:
            os.remove(self.path)
        except OSError:
            pass  # a read-only or vanished directory: the flock still goes with the fd
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()
