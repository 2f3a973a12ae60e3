"""Issue #13's cases as rows of a table: each test records (item, case, expected, got) before
it asserts, so `tools/reliability_replay.py` (`make reliability`) can print what every case
did on this build. Without RELIABILITY_LOG set, `record` only returns."""

import json
import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def record(item: str, case: str, expected: str, got: str) -> None:
    path = os.environ.get("RELIABILITY_LOG")
    if not path:
        return
    current = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]  # file.py::name[param]
    module, _, name = current.partition("::")
    test = f"{os.path.basename(module)[: -len('.py')]}::{name}" if name else ""
    row = {
        "item": item,
        "case": case,
        "expected": expected,
        # pytest's scratch folders say nothing about the case and fill the column.
        "got": re.sub(
            r"/\S*/pytest-of-[^/\s]+/pytest-\d+/[^/\s]+", "<tmp>", " ".join(str(got).split())
        ),
        "test": test,
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(nothing)"


HOLDER = """
import sys, time
from electra_tf.runtime.run_lock import RunLock
RunLock(sys.argv[1], sys.argv[2]).acquire()
print("held", flush=True)
time.sleep(120)
"""


@contextmanager
def lock_held_by_another_process(directory, name):
    """A real second process holding `<directory>/<name>`; yields its pid."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory), name],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def wait_for(predicate, timeout: float, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited early with {proc.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.2)
