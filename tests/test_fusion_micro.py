"""bench/fusion_micro.py: every form it times computes what the Keras form does (values and
gradients), and both optimizer updates the same weights, on small shapes; the two bfloat16
attention softmax forms agree within bf16's rounding."""

import re

from bench import fusion_micro


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
    # The dropout rows end in the fraction kept (rate 0.1), not a difference.
    dropout = [(name, float(kept)) for name, _, kept in rows if "[" in name]
    rows = [row for row in rows if "[" not in row[0]]
    assert [name for name, _ in dropout] == [
        "Keras [1, 1, 32, 32]",
        "in-kernel masks [1, 1, 32, 32]",
        "Keras [32, 32]",
        "in-kernel masks [32, 32]",
    ]
    for name, kept in dropout:
        assert 0.8 < kept < 0.97, (name, kept)
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
        "float32 softmax, casts",
        "attention_softmax",
    ]
    # The attention rows are bfloat16 forms: they differ by bf16 roundings (a few units of
    # 2^-8 of the largest value), the others by float32's.
    attention = {"float32 softmax, casts", "attention_softmax"}
    for name, _, diff in rows:
        assert float(diff) < (4 * 2.0**-8 if name in attention else 1e-5), (name, diff)
