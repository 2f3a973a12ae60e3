"""Checkpoints as people have them: a bare `ElectraModel` folder (keys without `electra.`), a
discriminator-only or encoder-only model, an encoder saved natively; and conversions that
would write a partial or empty checkpoint, which must fail and write nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_checkpoints import original_shapes, write_tf1_checkpoint

from electra_tf import checkpoints
from electra_tf.checkpoints import CheckpointError, safetensors_io
from electra_tf.cli import convert

SMALL = dict(vocab=40, emb=16, hidden=64, layers=1, gen_hidden=16, gen_layers=1, positions=32)


def _original(directory, **kwargs):
    shapes = original_shapes(**{**SMALL, **kwargs})
    return write_tf1_checkpoint(str(directory), shapes, step=7)


def _convert(capsys, src, dst, fmt, *extra):
    code = convert.main(["--input", str(src), "--output", str(dst), "--to", fmt, *extra])
    return code, capsys.readouterr()


def _assert_same(values, weights):
    assert sorted(weights) == sorted(values)
    for name, value in values.items():
        np.testing.assert_array_equal(weights[name], value)


def _strip_prefix(folder):
    """What `ElectraModel.save_pretrained` writes: the same tensors, no `electra.` prefix."""
    path = folder / "model.safetensors"
    tensors = safetensors_io.load_file(str(path))
    bare = {k.removeprefix("electra."): v for k, v in tensors.items()}
    assert all(not k.startswith("electra.") for k in bare)
    safetensors_io.save_file(bare, str(path), {"format": "pt"})


@pytest.mark.parametrize("disc_head", [False, True])
def test_bare_electra_model_folder_round_trips(tmp_path, capsys, disc_head):
    values = _original(tmp_path / "tf1", generator=False, disc_head=disc_head)
    assert _convert(capsys, tmp_path / "tf1", tmp_path / "hf", "hf")[0] == 0
    if not disc_head:
        _strip_prefix(tmp_path / "hf/discriminator")
    kind = "discriminator" if disc_head else "encoder"
    # hf -> native (a discriminator-only or encoder-only checkpoint) -> original -> hf
    assert _convert(capsys, tmp_path / "hf", tmp_path / "native", "native")[0] == 0
    native = checkpoints.read_weights(str(tmp_path / "native"))
    _assert_same(values, native.weights)
    assert checkpoints.formats.check_complete(native)[0] == kind
    assert _convert(capsys, tmp_path / "native", tmp_path / "back", "original")[0] == 0
    _assert_same(values, checkpoints.read_weights(str(tmp_path / "back")).weights)
    assert _convert(capsys, tmp_path / "back", tmp_path / "hf2", "hf")[0] == 0
    _assert_same(values, checkpoints.read_weights(str(tmp_path / "hf2")).weights)
    config = json.loads((tmp_path / "hf2/discriminator/config.json").read_text())
    assert config["architectures"] == ["ElectraForPreTraining" if disc_head else "ElectraModel"]


def test_a_conversion_that_reads_no_weights_fails_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf/config.json").write_text(json.dumps({"model_type": "electra"}))
    tensors = {"pooler.dense.weight": np.ones((4, 4), np.float32)}  # nothing of ELECTRA
    safetensors_io.save_file(tensors, str(tmp_path / "hf/model.safetensors"))
    for fmt in ("original", "hf", "native"):
        code, out = _convert(capsys, tmp_path / "hf", tmp_path / f"out_{fmt}", fmt)
        assert code == 2 and "read no ELECTRA weights" in out.err, out.err
        assert "pooler.dense.weight" in out.err
        assert not (tmp_path / f"out_{fmt}").exists()


def test_a_conversion_missing_one_tensor_fails_and_writes_nothing(tmp_path, capsys):
    _original(tmp_path / "tf1", generator=False)
    assert _convert(capsys, tmp_path / "tf1", tmp_path / "hf", "hf")[0] == 0
    path = tmp_path / "hf/discriminator/model.safetensors"
    tensors = safetensors_io.load_file(str(path))
    del tensors["electra.encoder.layer.0.output.dense.bias"]
    safetensors_io.save_file(tensors, str(path), {"format": "pt"})
    for fmt in ("original", "hf", "native"):
        code, out = _convert(capsys, tmp_path / "hf", tmp_path / f"out_{fmt}", fmt)
        assert code == 2 and "electra/encoder/layer_0/output/dense/bias" in out.err, out.err
        assert not (tmp_path / f"out_{fmt}").exists()


def test_an_encoder_saved_natively_reads_back(tmp_path):
    from test_checkpoints import _batch, _encoder

    config = checkpoints.infer_config(original_shapes(**SMALL, generator=False))
    encoder = _encoder(config.discriminator_config())
    encoder(_batch(40))
    checkpoints.save_weights(encoder, str(tmp_path / "enc"), "native")
    source = checkpoints.read_weights(str(tmp_path / "enc"))
    _assert_same(checkpoints.model_weights(encoder), source.weights)
    target = _encoder(config.discriminator_config())
    target(_batch(40))
    checkpoints.load_weights(target, str(tmp_path / "enc"))
    np.testing.assert_array_equal(
        target(_batch(40))["sequence_output"].numpy(),
        encoder(_batch(40))["sequence_output"].numpy(),
    )


def test_a_native_checkpoint_of_another_shape_is_a_short_error(tmp_path):
    from test_checkpoints import _encoder

    config = checkpoints.infer_config(original_shapes(**SMALL, generator=False))
    encoder = _encoder(config.discriminator_config())
    checkpoints.save_weights(encoder, str(tmp_path / "enc"), "native")
    other = checkpoints.infer_config(original_shapes(**{**SMALL, "hidden": 128}, generator=False))
    with pytest.raises(CheckpointError) as info:
        checkpoints.read_weights(str(tmp_path / "enc"), config=other)
    message = str(info.value)
    assert "does not match the encoder" in message
    assert "\n" not in message and len(message) < 600  # no arrays printed


# ------------------------------------------------------------------ one-line errors (#13 item 9)
@pytest.mark.parametrize("damaged", ["data", "index"])
def test_a_truncated_checkpoint_is_a_one_line_error_naming_it(tmp_path, capsys, damaged):
    _original(tmp_path / "tf1", generator=False)
    suffix = ".index" if damaged == "index" else ".data-00000-of-00001"
    path = tmp_path / f"tf1/model.ckpt-7{suffix}"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    code, out = _convert(capsys, tmp_path / "tf1", tmp_path / "out", "hf")
    assert code == 2 and not (tmp_path / "out").exists()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "model.ckpt-7" in lines[0], out.err
    assert "Traceback" not in out.err


def test_a_shape_mismatch_is_not_buried_under_tf_warnings(tmp_path, capsys):
    _original(tmp_path / "tf1")
    assert _convert(capsys, tmp_path / "tf1", tmp_path / "native", "native")[0] == 0
    values = json.loads((tmp_path / "native/config.json").read_text())
    values["model_hparam_overrides"]["hidden_size"] = 128
    (tmp_path / "bad.json").write_text(json.dumps(values))
    args = ("--config", str(tmp_path / "bad.json"))
    code, out = _convert(capsys, tmp_path / "native", tmp_path / "out", "original", *args)
    assert code == 2 and "incompatible tensor with shape" in out.err, out.err
    assert len(out.err.strip().splitlines()) == 1, out.err


def test_a_binary_vocabulary_is_an_error_naming_the_file(tmp_path):
    from electra_tf.data.tokenization import VocabError, load_vocab

    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\n\xff\xfe\x00binary\n")
    with pytest.raises(VocabError, match=str(path)):
        load_vocab(str(path))


def test_untied_generator_embeddings_convert_through_every_format(tmp_path, capsys):
    from helpers_pretrainer import SPECIAL_IDS, tiny_config

    from electra_tf.pretraining.pretrainer import ElectraPretrainer

    config = tiny_config(untied_generator_embeddings=True, generator_hidden_size=1.0)
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    values = checkpoints.model_weights(model)
    checkpoints.save_weights(model, str(tmp_path / "tf1"), "original")
    assert _convert(capsys, tmp_path / "tf1", tmp_path / "hf", "hf")[0] == 0
    gen = json.loads((tmp_path / "hf/generator/config.json").read_text())
    assert gen["embedding_size"] == gen["hidden_size"] == 32
    assert _convert(capsys, tmp_path / "hf", tmp_path / "native", "native")[0] == 0
    native = checkpoints.read_weights(str(tmp_path / "native"))
    assert native.config.untied_generator_embeddings
    _assert_same(values, native.weights)


def test_a_generator_folder_alone_round_trips_as_a_masked_lm(tmp_path, capsys):
    import shutil

    from helpers_pretrainer import SPECIAL_IDS, tiny_config

    from electra_tf.pretraining.pretrainer import ElectraPretrainer

    model = ElectraPretrainer(tiny_config(generator_hidden_size=1.0), **SPECIAL_IDS)
    checkpoints.save_weights(model, str(tmp_path / "both"), "hf")
    shutil.copytree(tmp_path / "both/generator", tmp_path / "gen")  # an ElectraForMaskedLM
    before = safetensors_io.load_file(str(tmp_path / "gen/model.safetensors"))
    # hf -> native -> original -> hf, no --config: the original's BERT-objective layout.
    assert _convert(capsys, tmp_path / "gen", tmp_path / "native", "native")[0] == 0
    native = checkpoints.read_weights(str(tmp_path / "native"))
    assert not native.config.electra_objective
    assert "electra/encoder/layer_0/output/dense/kernel" in native.weights
    assert _convert(capsys, tmp_path / "native", tmp_path / "tf1", "original")[0] == 0
    assert _convert(capsys, tmp_path / "tf1", tmp_path / "back", "hf")[0] == 0
    assert not (tmp_path / "back/discriminator").exists()
    after = safetensors_io.load_file(str(tmp_path / "back/generator/model.safetensors"))
    _assert_same(before, after)
    config = json.loads((tmp_path / "back/generator/config.json").read_text())
    assert config["architectures"] == ["ElectraForMaskedLM"]


def test_dry_run_accepts_what_the_conversion_accepts(tmp_path, capsys):
    _original(tmp_path / "tf1", generator=False)  # a discriminator without a generator
    assert _convert(capsys, tmp_path / "tf1", tmp_path / "hf", "hf")[0] == 0
    code, out = _convert(capsys, tmp_path / "hf", tmp_path / "n", "native", "--dry-run")
    assert code == 0 and "-> model:" in out.out and not (tmp_path / "n").exists()
