"""Replays the reliability cases against this build and prints one line per case.

    make reliability        # = .venv/bin/python -m tools.reliability_replay

Every case is a test (tests/test_reliability.py, test_reliability_inputs.py,
test_reliability_export.py, test_checkpoint_recovery.py, and the serving cases of tests/test_export_models.py) that records what it expected and what it got before it asserts;
this runs them and prints the table: item, case, expected, got, OK/BAD. A case whose test
failed is BAD, as is a test that recorded nothing (its line says how it ended). Cases that
need a tmpfs are listed as SKIP where the machine cannot mount one. Exit status: 0 when every
case is OK (or skipped), 1 otherwise.
"""

from __future__ import annotations

if (
    __name__ == "__main__" and not __package__
):  # `python tools/reliability_replay.py`: tools is a package
    raise SystemExit("run it from the repository root as: python -m tools.reliability_replay")

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = [
    "tests/test_reliability.py",
    "tests/test_reliability_inputs.py",
    "tests/test_reliability_export.py",
    "tests/test_reliability_convert.py",
    "tests/test_reliability_runs.py",
    "tests/test_checkpoint_recovery.py",
    "tests/test_export_models.py::test_bad_batches_are_refused_and_an_empty_batch_answers",
    "tests/test_export_models.py::test_export_json_lists_every_signature_input",
]


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        log, report = os.path.join(scratch, "cases.jsonl"), os.path.join(scratch, "junit.xml")
        env = dict(os.environ, RELIABILITY_LOG=log)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += [f"--junitxml={report}", *TESTS]
        print(f"running {len(TESTS)} test targets (a few minutes on 2 cores)...", flush=True)
        subprocess.run(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL)
        rows = []
        if os.path.exists(log):
            with open(log, encoding="utf-8") as f:
                rows = [json.loads(line) for line in f]
        outcomes = _outcomes(report)
    bad = 0
    print(f"{'item':<5}| {'case':<58}| {'expected':<52}| {'got':<90}| result")
    for row in rows:
        test = row.get("test", "")
        status = "OK" if outcomes.get(test, "passed") == "passed" else "BAD"
        if not test:
            status = "OK" if all(v in ("passed", "skipped") for v in outcomes.values()) else "?"
        print(
            f"{row['item']:<5}| {row['case'][:57]:<58}| {row['expected'][:51]:<52}| "
            f"{row['got'][:89]:<90}| {status}"
        )
        bad += status != "OK"
    recorded = {row.get("test") for row in rows}
    for test, outcome in sorted(outcomes.items()):
        if outcome == "skipped":
            print(f"{'-':<5}| {test[:57]:<58}| {'':<52}| {'(skipped: see pytest -rs)':<90}| SKIP")
        elif outcome != "passed" and test not in recorded:
            print(f"{'-':<5}| {test[:57]:<58}| {'':<52}| {outcome:<90}| BAD")
            bad += 1
    print(f"{len(rows)} cases, {bad} BAD")
    return 1 if bad else 0


def _outcomes(report: str) -> dict[str, str]:
    """pytest's junit report: test id -> passed / failed / error / skipped."""
    if not os.path.exists(report):
        return {"pytest": "did not run"}
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcomes[name] = next(
            (k for k in ("failure", "error", "skipped") if k in kinds), "passed"
        ).replace("failure", "failed")
    return outcomes


if __name__ == "__main__":
    sys.exit(main())
