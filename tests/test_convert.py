"""The `python -m electra_tf.convert` CLI: dry runs, conversions, refusals."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import tensorflow as tf
from test_checkpoints import original_shapes, write_tf1_checkpoint

from electra_tf.cli import convert

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tf1_checkpoint(directory, **kwargs):
    shapes = original_shapes(layers=1, gen_layers=1, **kwargs)
    return shapes, write_tf1_checkpoint(str(directory), shapes, step=42)


def test_dry_run_prints_every_mapping_and_writes_nothing(tmp_path, capsys):
    shapes, _ = _tf1_checkpoint(tmp_path / "orig")
    out = tmp_path / "hf"
    rc = convert.main(
        ["--from", "original", "--to", "hf", "--input", str(tmp_path / "orig"),
         "--output", str(out), "--dry-run"]
    )  # fmt: skip
    printed = capsys.readouterr().out.splitlines()
    assert rc == 0 and not out.exists()
    assert (
        "electra/encoder/layer_0/intermediate/dense/kernel [256, 1024] -> "
        "discriminator/electra.encoder.layer.0.intermediate.dense.weight [1024, 256]" in printed
    )
    assert (
        "discriminator_predictions/dense_1/kernel [256, 1] -> "
        "discriminator/discriminator_predictions.dense_prediction.weight [1, 256]" in printed
    )
    assert "generator_predictions/output_bias [50] -> generator/generator_lm_head.bias [50]" in (
        printed
    )
    # The shared embedding table goes to both folders.
    assert sum(line.startswith("electra/embeddings/word_embeddings ") for line in printed) == 2
    assert "global_step -> (skipped: optimizer slot / step)" in printed
    mapped = {line.split(" ")[0] for line in printed if " -> " in line}
    assert set(shapes) <= mapped


def test_original_to_hf_to_original_via_cli(tmp_path, capsys):
    _, values = _tf1_checkpoint(tmp_path / "orig")
    args = ["--input", str(tmp_path / "orig"), "--output", str(tmp_path / "hf")]
    assert convert.main(["--to", "hf", *args]) == 0  # --from auto detects "original"
    assert sorted(os.listdir(tmp_path / "hf")) == ["discriminator", "generator"]
    back = ["--input", str(tmp_path / "hf"), "--output", str(tmp_path / "orig2")]
    assert convert.main(["--from", "hf", "--to", "original", *back]) == 0
    reader = tf.train.load_checkpoint(str(tmp_path / "orig2"))
    stored = reader.get_variable_to_shape_map()
    assert sorted(stored) == sorted([*values, "global_step"])
    for name, value in values.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value)
    assert reader.get_tensor("global_step").dtype == np.int64


def test_existing_output_is_refused_without_overwrite(tmp_path, capsys):
    _tf1_checkpoint(tmp_path / "orig")
    out = tmp_path / "out"
    out.mkdir()
    (out / "checkpoint").write_text("keep me")
    args = ["--to", "original", "--input", str(tmp_path / "orig"), "--output", str(out)]
    assert convert.main(args) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (out / "checkpoint").read_text() == "keep me"
    assert convert.main([*args, "--overwrite"]) == 0
    assert tf.train.load_checkpoint(str(out)).get_tensor("global_step") == 42


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "nothing-here"
    rc = convert.main(["--to", "hf", "--input", str(missing), "--output", str(tmp_path / "o")])
    assert rc == 2
    assert str(missing) in capsys.readouterr().err


def test_a_serving_export_as_input_is_named_as_one(tmp_path, capsys):
    """A SavedModel folder given as --input is not a checkpoint: the error says what it is and
    where the weights it was made from are named."""
    export = tmp_path / "serving" / "m_discriminator" / "1"
    export.mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"")
    rc = convert.main(["--to", "hf", "--input", str(export), "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"{export} is a SavedModel (a serving export), not a checkpoint" in err
    assert "`source`" in err and not (tmp_path / "o").exists()


def test_module_entry_point_runs(tmp_path):
    _tf1_checkpoint(tmp_path / "orig", generator=False)
    result = subprocess.run(
        [sys.executable, "-m", "electra_tf.convert", "--to", "hf", "--dry-run",
         "--input", str(tmp_path / "orig"), "--output", str(tmp_path / "hf")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "original -> hf, global_step 42; nothing written" in result.stdout
    assert not (tmp_path / "hf").exists()


def test_float16_discriminator_only_hf_loads_back_into_a_float32_model(tmp_path, capsys):
    from electra_tf import ElectraDiscriminator, load_weights, read_weights
    from electra_tf.checkpoints.safetensors_io import load_file_with_metadata
    from electra_tf.modeling.discriminator import dummy_inputs

    _, values = _tf1_checkpoint(tmp_path / "orig")
    args = ["--input", str(tmp_path / "orig"), "--output", str(tmp_path / "hf")]
    assert convert.main(["--to", "original", "--float16", *args]) == 2  # hf only
    capsys.readouterr()
    assert convert.main(["--to", "hf", "--float16", "--discriminator-only", *args]) == 0
    assert os.listdir(tmp_path / "hf") == ["discriminator"]
    tensors, _ = load_file_with_metadata(
        str(tmp_path / "hf" / "discriminator" / "model.safetensors")
    )
    assert {a.dtype for a in tensors.values()} == {np.dtype(np.float16)}
    source = read_weights(str(tmp_path / "hf"))
    model = ElectraDiscriminator(source.config.discriminator_config())
    model(dummy_inputs())
    load_weights(model, str(tmp_path / "hf"))
    loaded = {n: v.numpy() for n, v in model.variable_map().items()}
    assert {v.dtype for v in loaded.values()} == {np.dtype(np.float32)}
    assert sorted(loaded) == sorted(n for n in values if n.startswith(("electra/", "discrim")))
    for name, value in loaded.items():
        np.testing.assert_array_equal(value, values[name].astype(np.float16).astype(np.float32))


def test_dry_run_to_modelgarden_and_kerashub_names_every_tensor(tmp_path, capsys):
    """Hidden 256 = 4 heads of 64: Model Garden's and KerasHub's attention kernels are
    [H, heads, 64] and [heads, 64, H]; the shared embeddings go to both networks."""
    shapes, _ = _tf1_checkpoint(tmp_path / "orig")
    base = ["--input", str(tmp_path / "orig"), "--output", str(tmp_path / "o"), "--dry-run"]
    assert convert.main(["--to", "modelgarden", *base]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert (
        "electra/encoder/layer_0/attention/self/query/kernel [256, 256] -> "
        "encoder/_transformer_layers/0/_attention_layer/_query_dense/kernel [256, 4, 64]" in printed
    )
    assert (
        "generator/encoder/layer_0/attention/output/dense/kernel [64, 64] -> model/generator_"
        "network/_transformer_layers/0/_attention_layer/_output_dense/kernel [1, 64, 64]" in printed
    )
    assert "electra/embeddings/word_embeddings [50, 128] -> model/generator_network/" \
        "_embedding_layer/embeddings [50, 128]" in printed  # fmt: skip
    assert "generator_predictions/output_bias [50] -> model/masked_lm/output_bias.Sbias [50]" in (
        printed
    )
    assert set(shapes) <= {line.split(" ")[0] for line in printed if " -> " in line}
    assert not [line for line in printed if "no place" in line]
    assert convert.main(["--to", "kerashub", *base]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert (
        "electra/encoder/layer_0/attention/output/dense/kernel [256, 256] -> "
        "transformer_layer_0/self_attention_layer/attention_output/kernel [4, 64, 256]" in printed
    )
    assert "electra/embeddings/token_type_embeddings [2, 128] -> " \
        "generator/segment_embedding/embeddings [2, 128]" in printed  # fmt: skip
    assert (
        "discriminator_predictions/dense_1/kernel [256, 1] -> "
        "electra_heads.safetensors:discriminator_predictions/dense_1/kernel [256, 1]" in printed
    )
    assert not [line for line in printed if "no place" in line]
    assert not (tmp_path / "o").exists()


def test_partial_kerashub_preset_is_a_clear_cli_error(tmp_path, capsys):
    """A folder that is a KerasHub preset by its config.json but lacks the weights file."""
    preset = tmp_path / "preset"
    preset.mkdir()
    (preset / "config.json").write_text(
        '{"module": "keras_hub.src.models.electra.electra_backbone", "class_name": '
        '"ElectraBackbone", "config": {}, "registered_name": "keras_hub>ElectraBackbone"}'
    )
    rc = convert.main(["--to", "native", "--input", str(preset), "--output", str(tmp_path / "o")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "a KerasHub preset" in err and "model.weights.h5" in err
    assert not (tmp_path / "o").exists()


def test_the_vocabulary_goes_with_the_weights(tmp_path, capsys):
    """vocab.txt beside the input (or --vocab-file) is written beside the converted weights."""
    _tf1_checkpoint(tmp_path / "orig")  # 50 embedding rows: vocabularies of 50 tokens
    beside = "".join(f"beside{i}\n" for i in range(50))
    given_text = "".join(f"given{i}\n" for i in range(50))
    (tmp_path / "orig" / "vocab.txt").write_text(beside)
    (tmp_path / "other.txt").write_text(given_text)
    args = ["--input", str(tmp_path / "orig")]
    assert convert.main(["--to", "original", *args, "--output", str(tmp_path / "o1")]) == 0
    assert (tmp_path / "o1" / "vocab.txt").read_text() == beside
    given = ["--vocab-file", str(tmp_path / "other.txt")]
    assert convert.main(["--to", "hf", *args, *given, "--output", str(tmp_path / "o2")]) == 0
    assert (tmp_path / "o2" / "vocab.txt").read_text() == given_text
    missing = ["--vocab-file", str(tmp_path / "nope.txt")]
    assert convert.main(["--to", "hf", *args, *missing, "--output", str(tmp_path / "o3")]) == 2
    assert "nope.txt" in capsys.readouterr().err and not (tmp_path / "o3").exists()
