"""How the benchmarks run code elsewhere, and time it.

- `harness_command`: a bench module's `main` from this checkout, with the `electra_tf` package
  of another checkout (a `--baseline`) or of this one, in a fresh process;
- `run_peer` and `default_peer_python`: bench/peer_torch.py (the Hugging Face PyTorch and ONNX
  Runtime peers) under another interpreter, one with torch and transformers;
- `run_extra`: another bench module, as its own command;
- `checkout_revision`: the commit a checkout is at, for a row's label;
- `timed`: the timing loop the training and serving benchmarks share.

Imports nothing of the project: a worker of another checkout binds its own `electra_tf` after
importing its bench module (`HARNESS_CODE`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_TORCH = os.path.join(ROOT, "bench", "peer_torch.py")


def default_peer_python() -> str:
    """$ELECTRA_PEER_PYTHON, else /tmp/hfenv/bin/python where it exists, else none."""
    for path in (os.environ.get("ELECTRA_PEER_PYTHON", ""), "/tmp/hfenv/bin/python"):
        if path and os.path.exists(path):
            return path
    return ""


def checkout_revision(directory: str) -> str:
    """The commit a checkout is at (or why not), for a baseline row's label (also bench_serve's)."""
    try:
        proc = subprocess.run(
            ["git", "-C", directory, "log", "-1", "--format=%h %s"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no git: {e}"
    return proc.stdout.strip()[:70] or "no git"


# A child's entry point: `bench` from the harness checkout, imported first, then `electra_tf`
# from the package checkout (put first on sys.path after `bench` is bound to the harness's).
HARNESS_CODE = """import importlib, sys
harness, package, module = sys.argv[1:4]
sys.path.insert(0, harness)
main = importlib.import_module("bench." + module).main
sys.path.insert(0, package)
sys.exit(main(sys.argv[4:]))
"""


def harness_command(harness: str, package: str, module: str) -> list[str]:
    """The command line that runs `bench.<module>`'s `main` from the checkout `harness` with
    the `electra_tf` package of the checkout `package` (the same, or a --baseline's)."""
    return [sys.executable, "-c", HARNESS_CODE, harness, package, module]


def run_extra(module: str, timeout: float) -> str:
    """Runs another bench module (data prep, serving) and returns its output."""
    if not os.path.exists(os.path.join(ROOT, "bench", f"{module}.py")):
        return f"{module}: not present"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    command = [sys.executable, "-m", f"bench.{module}"]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        return f"{module}: timed out after {timeout:.0f} s"
    if proc.returncode:
        return f"{module}: failed (exit {proc.returncode})\n{proc.stderr[-1500:]}"
    return proc.stdout.strip()


def run_peer(python: str, command: list[str], what: str) -> tuple[list[dict], str]:
    """bench/peer_torch.py under `python`: (its JSON records, "" or why there are none)."""
    if not python or not os.path.exists(python):
        return [], f"skipped (no {what} interpreter; bench/README.md says how to make one)"
    run = subprocess.run([python, PEER_TORCH, *command], capture_output=True, text=True)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["?"])[-1]
        return [], f"skipped ({python} failed: {last})"
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")], ""


def timed(fn: Callable[[], object], warmup: int, calls: int) -> list[float]:
    """Seconds of each of `calls` calls of `fn`, after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times
