"""bench/fusion_micro.py: every form it times computes what the Keras form does (values and
gradients), and both optimizer updates the same weights, on small shapes."""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import fusion_micro  # noqa: E402


def test_every_form_matches_the_keras_form(capsys):
    argv = ["--rows", "64", "--hidden", "32", "--ffn", "48", "--calls", "1", "--rounds", "1"]
    argv += [
        "--layers",
        "2",
        "--vocab",
        "50",
        "--embedding",
        "16",
        "--slots",
        "12",
        "--per-seq",
        "3",
    ]
    assert fusion_micro.main(argv) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^  (.+?)\s+([0-9.]+) ms\s+([0-9.e+-]+)$", out, flags=re.M)
    assert [name for name, _, _ in rows] == 2 * [
        "keras",
        "hand-written gradient",
        "keras, XLA",
        "hand-written gradient, XLA",
    ] + [
        "einsum",
        "MatMul + BiasAdd",
        "sparse cross-entropy",
        "softmax, written gradient",
        "written out",
        "ApplyAdam kernel",
    ]
    for name, _, diff in rows:
        assert float(diff) < 1e-5, (name, diff)
