"""Mutation check: does the test suite catch the bugs a port of ELECTRA is likely to have?

    nice -n 19 .venv/bin/python tools/mutation_check.py [NAME ...] [--files tests/a.py ...]

For each bug of `tools/mutation_plugin.py` (tanh GELU, weight decay on LayerNorm/bias, the
learning rate of step k+1, no floor-average at duplicate positions, no clipping, generator
embeddings not shared, disc_weight 1), runs the numerics tests in a fresh pytest process with
the bug injected, stops at the first failure and prints the test that caught it. Exit 0 iff
every bug was caught. docs/faithfulness.md lists the result.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

from tools.mutation_plugin import MUTATIONS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Fast files first: the first failure ends a run.
DEFAULT_FILES = [
    "tests/test_sampling.py",
    "tests/test_optimization.py",
    "tests/test_numerics.py",
    "tests/test_pretrainer.py",
    "tests/test_modeling.py",
]


def run_one(name: str, files: list[str]) -> tuple[bool, str, float]:
    env = {**os.environ, "ELECTRA_MUTATION": name, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-p", "tools.mutation_plugin"]
    start = time.time()
    result = subprocess.run(
        [*command, *files], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    failed = re.findall(r"^FAILED (\S+)", result.stdout, flags=re.M)
    if result.returncode == 0:
        return False, "NOT CAUGHT: every test passed", time.time() - start
    if not failed:  # an error at collection or in the plugin: not a catch
        return False, f"ERROR (exit {result.returncode}): {result.stdout[-300:]}", 0.0
    return True, failed[0], time.time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"default: all of {', '.join(MUTATIONS)}")
    parser.add_argument("--files", nargs="+", default=DEFAULT_FILES)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(MUTATIONS))
    if unknown:
        parser.error(f"unknown mutation(s) {unknown}; known: {', '.join(MUTATIONS)}")
    all_caught = True
    print("| injected bug | caught by |\n| --- | --- |")
    for name in args.names or list(MUTATIONS):
        caught, where, seconds = run_one(name, args.files)
        all_caught &= caught
        print(f"| {MUTATIONS[name]} (`{name}`) | `{where}` |", flush=True)
        print(f"  ({seconds:.0f}s)", file=sys.stderr, flush=True)
    return 0 if all_caught else 1


if __name__ == "__main__":
    sys.exit(main())
