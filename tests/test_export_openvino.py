"""`python -m electra_tf.export_openvino`: the float32 export's `encode_ids` as an OpenVINO model,
against the export's own answers in TensorFlow (an independent runtime, compiled from the same
graph).

The model is the shipped `pretrained/electra-tiny-gutenberg` (trained weights, 4 layers of 256),
exported by the export command. Bounds: OpenVINO at f32 must agree with TensorFlow to float32's
rounding (1e-4 on probabilities; a conversion error, a layer left out or a wrong weight, moves
them by 1e-2 or more). At this CPU's default precision (bf16 where the CPU has AVX512_BF16 or
AMX, f32 elsewhere) the probabilities differ by the bfloat16 rounding of every product's inputs:
measured at most 0.0028 on an AMX Xeon; the bound is 0.01, above three times that for other
CPUs' accumulation orders, and the verdict (replaced or not, the probability against 0.5) must
agree wherever TensorFlow's probability is more than that bound away from 0.5.

Everything that compiles or runs an OpenVINO model does so in a fresh interpreter
(`_in_a_fresh_process`): in a process that had compiled two OpenVINO models and run them, a later
SIGTERM crashed the process (exit 139) instead of reaching Python's handler, and a pytest
worker is such a process (the export's SIGTERM test runs in it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("openvino")

from electra_tf.cli import export, export_openvino  # noqa: E402
from electra_tf.serving import openvino_runtime  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRETRAINED = os.path.join(REPO, "pretrained", "electra-tiny-gutenberg")
LOW_PRECISION_BOUND = 0.01

# Runs in a fresh interpreter: argv = the model file, a precision ("" = the CPU's default), the
# features (.npz), the output (.npz); writes every output and the precision OpenVINO used.
INFER = r"""
import sys
import numpy as np
from electra_tf.serving import openvino_runtime
model_file, precision, features, out = sys.argv[1:]
compiled = openvino_runtime.compile_model(model_file, precision or None)
got = openvino_runtime.infer(compiled, dict(np.load(features)))
hint = compiled.get_property("INFERENCE_PRECISION_HINT")
np.savez(out, precision=str(hint.get_type_name() if hasattr(hint, "get_type_name") else hint), **got)
"""


def _in_a_fresh_process(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True, check=False
    )


def _openvino_outputs(model_file: str, precision: str, features: dict, tmp_path) -> dict:
    np.savez(tmp_path / "features.npz", **features)
    out = tmp_path / f"out_{precision or 'default'}.npz"
    run = _in_a_fresh_process(
        ["-c", INFER, model_file, precision, str(tmp_path / "features.npz"), str(out)]
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return dict(np.load(out))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("openvino")
    serving = root / "serving"
    args = ["--data-dir", str(root), "--model-name", "tiny", "--pretrained", PRETRAINED,
            "--kind", "discriminator", "--output-dir", str(serving), "--max-seq-length", "64"]  # fmt: skip
    assert export.main(args) == 0
    saved_model = serving / "tiny_discriminator" / "1"
    output = root / "openvino" / "tiny_discriminator" / "1"
    run = _in_a_fresh_process(
        ["-m", "electra_tf.export_openvino", "--saved-model", str(saved_model),
         "--output-dir", str(output), "--check-length", "64"]
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "OpenVINO f32 against TensorFlow, largest difference" in run.stdout, run.stdout
    return str(saved_model), str(output)


def _features(saved_model: str, batch: int = 8, length: int = 64) -> dict:
    features = export_openvino.check_ids(batch, length, export_openvino.vocab_size(saved_model))
    features["input_mask"][1, 40:] = 0  # one padded row
    features["input_ids"][1, 40:] = 0
    return features


def test_the_f32_model_answers_as_the_export_does(converted, tmp_path):
    saved_model, output = converted
    model_file = os.path.join(output, openvino_runtime.MODEL_FILE)
    assert sorted(os.listdir(output)) == ["model.bin", "model.xml"]  # no partial files left
    features = _features(saved_model)
    expected = tf.saved_model.load(saved_model).signatures["encode_ids"](
        **{k: tf.constant(v) for k, v in features.items()}
    )
    got = _openvino_outputs(model_file, "f32", features, tmp_path)
    assert str(got.pop("precision")) == "f32"
    # Every numeric output of the signature, under its own name; the string tokens left out.
    assert set(got) == {k for k, v in expected.items() if v.dtype != tf.string}
    for key, value in got.items():
        np.testing.assert_allclose(value, expected[key].numpy(), rtol=0, atol=1e-4, err_msg=key)
    # The padded row's probabilities are those of its real tokens only (0 past them).
    assert np.all(got["replaced_probability"][1, 40:] == 0)


def test_the_layer_norms_reach_openvino_in_the_plain_form(converted):
    """The export's fusable LayerNorm (a FusedBatchNormV3 over NCHW channels, for oneDNN) is
    rewritten as the plain formula before conversion: OpenVINO made element-wise ops over the
    channel layout of it, three quarters of a batch-32 call."""
    saved_model, _ = converted
    graph, outputs = openvino_runtime.numeric_graph(saved_model)
    ops = [node.op for node in graph.node]
    blocks = export_openvino.query_blocks(saved_model)  # the export's default, 2
    # Two per layer (4 layers) and query block, and the embeddings'.
    assert "FusedBatchNormV3" not in ops and ops.count("Rsqrt") == 2 * 4 * blocks + 1
    assert [key for key, _ in outputs] == [
        "input_mask", "max_replaced_probability", "mean_replaced_probability",
        "replaced_probability",
    ]  # fmt: skip


def test_the_default_precision_agrees_within_the_bf16_bound(converted, tmp_path):
    saved_model, output = converted
    model_file = os.path.join(output, openvino_runtime.MODEL_FILE)
    features = _features(saved_model)
    expected = (
        tf.saved_model.load(saved_model)
        .signatures["encode_ids"](**{k: tf.constant(v) for k, v in features.items()})[
            "replaced_probability"
        ]
        .numpy()
    )
    outputs = _openvino_outputs(model_file, "", features, tmp_path)  # the CPU's default
    got = outputs["replaced_probability"]
    error = float(np.max(np.abs(got - expected)))
    print(f"default precision {outputs['precision']}: {error:.4f}")
    assert error < LOW_PRECISION_BOUND
    decisive = np.abs(expected - 0.5) > LOW_PRECISION_BOUND
    assert decisive.mean() > 0.5  # most tokens are decided: the verdict check has substance
    np.testing.assert_array_equal((got > 0.5)[decisive], (expected > 0.5)[decisive])


def test_refusals_write_nothing(converted, tmp_path, capsys):
    saved_model, output = converted
    model_file = os.path.join(output, openvino_runtime.MODEL_FILE)
    before = os.path.getmtime(model_file), os.path.getsize(model_file)
    # An existing model is not overwritten.
    args = ["--saved-model", saved_model, "--output-dir", output]
    assert export_openvino.main(args) == 2
    assert "exists" in capsys.readouterr().err
    assert (os.path.getmtime(model_file), os.path.getsize(model_file)) == before
    # Not a SavedModel; no such signature.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (
        export_openvino.main(["--saved-model", str(empty), "--output-dir", str(tmp_path / "a")])
        == 2
    )
    assert "no saved_model.pb" in capsys.readouterr().err
    args = ["--saved-model", saved_model, "--output-dir", str(tmp_path / "b"), "--signature", "x"]
    assert export_openvino.main(args) == 2
    assert "no 'x' signature" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_bfloat16_export_is_refused_naming_the_float32_one(converted, tmp_path, capsys):
    """OpenVINO's TensorFlow reader cannot convert the bfloat16 export's constants (it failed
    with a traceback: "No conversion rule found for operations: Const of unknown type"): the
    export's `export.json` says bfloat16, and the refusal says which export to convert."""
    saved_model, _ = converted
    copy = tmp_path / "bf16" / "1"
    shutil.copytree(saved_model, copy)
    info_file = copy / "assets" / "export.json"
    info_file.write_text(json.dumps({**json.loads(info_file.read_text()), "precision": "bfloat16"}))
    args = ["--saved-model", str(copy), "--output-dir", str(tmp_path / "out")]
    assert export_openvino.main(args) == 2
    err = capsys.readouterr().err
    assert "is a --precision bfloat16 export" in err and "Convert the float32 export" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_conversion_openvino_refuses_is_one_line(converted, tmp_path, capsys, monkeypatch):
    """Whatever OpenVINO cannot convert is one line naming the export and OpenVINO's reason
    (its summary line), not its traceback; nothing is written."""
    saved_model, _ = converted

    class Refusing:
        @staticmethod
        def convert_model(graph):
            raise RuntimeError(
                "Check 'false' failed at src/frontends/common/unconverted_ops_report.cpp:151:\n"
                "FrontEnd API failed with OpConversionFailure:\nModel wasn't fully converted.\n"
                "Summary:\n-- No conversion rule found for operations: Const of unknown type\n"
            )

    monkeypatch.setattr(openvino_runtime, "import_openvino", lambda: Refusing)
    args = ["--saved-model", saved_model, "--output-dir", str(tmp_path / "out")]
    assert export_openvino.main(args) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"error: OpenVINO cannot convert {saved_model} (encode_ids): -- No conversion rule found "
        "for operations: Const of unknown type (nothing was written)"
    ), err
    assert not (tmp_path / "out").exists()


def test_bench_serve_times_the_export_via_openvino(converted, tmp_path, monkeypatch):
    """`make bench-serve`'s "export via OpenVINO" rows: the float32 export converted as the
    command converts it, both precisions timed on the export's own tokenized ids; without
    OpenVINO the rows are reported skipped, not failed."""
    import argparse
    import shutil

    from bench import bench_serve, serve_table

    saved_model, _ = converted
    export_dir = str(tmp_path / "export")
    shutil.copytree(saved_model, export_dir)
    vocab_file = os.path.join(export_dir, "assets", "vocab.txt")
    script = (
        "import argparse, json, sys\n"
        "from bench import bench_serve\n"
        "args = argparse.Namespace(batches=[1, 2], seq=16, warmup=0, calls=2, threads=(1, 2))\n"
        "rows, note = bench_serve.bench_export_via_openvino(sys.argv[1], sys.argv[2], args)\n"
        "print(json.dumps({'note': note, 'rows': {name: {str(b): len(s) for b, s in "
        "row['encode_ids'].items()} for name, row in rows.items()}}))\n"
    )
    run = _in_a_fresh_process(["-c", script, export_dir, vocab_file])
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    rows, note = result["rows"], result["note"]
    assert set(rows) == set(bench_serve.EXPORT_VIA_OPENVINO) and "2 threads" in note
    for row in rows.values():
        assert row == {"1": 2, "2": 2}
    assert all(name in serve_table.PEERS for name in rows)  # ratios are taken against them
    args = argparse.Namespace(batches=[1, 2], seq=16, warmup=0, calls=2, threads=(1, 2))

    def missing():
        raise openvino_runtime.ExportError(openvino_runtime.MISSING)

    monkeypatch.setattr(openvino_runtime, "import_openvino", missing)
    rows, note = bench_serve.bench_export_via_openvino(export_dir, vocab_file, args)
    assert rows == {} and note.startswith("export via OpenVINO: skipped (OpenVINO is not")
