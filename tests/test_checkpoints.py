"""Checkpoint interop: original TF1 checkpoints written from scratch with tf.compat.v1, config
inference, loading into models, and round trips through every format."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import checkpoints
from electra_tf.checkpoints import CheckpointError, safetensors_io


# ------------------------------------------------------------------------------ original layout
def original_shapes(
    vocab=50, emb=128, hidden=256, layers=2, gen_hidden=64, gen_layers=2, positions=64,
    generator=True, disc_head=True,
):  # fmt: skip
    """Every variable of docs/faithfulness.md, section 9 (checkpoint variable names) with its
    shape, written out independently of the code under test."""
    shapes = {
        "electra/embeddings/word_embeddings": [vocab, emb],
        "electra/embeddings/position_embeddings": [positions, emb],
        "electra/embeddings/token_type_embeddings": [2, emb],
        "electra/embeddings/LayerNorm/gamma": [emb],
        "electra/embeddings/LayerNorm/beta": [emb],
    }

    def encoder(scope, h, n):
        if emb != h:
            shapes[f"{scope}/embeddings_project/kernel"] = [emb, h]
            shapes[f"{scope}/embeddings_project/bias"] = [h]
        for i in range(n):
            p = f"{scope}/encoder/layer_{i}"
            for d in ("attention/self/query", "attention/self/key", "attention/self/value"):
                shapes[f"{p}/{d}/kernel"], shapes[f"{p}/{d}/bias"] = [h, h], [h]
            shapes[f"{p}/attention/output/dense/kernel"] = [h, h]
            shapes[f"{p}/attention/output/dense/bias"] = [h]
            shapes[f"{p}/intermediate/dense/kernel"] = [h, 4 * h]
            shapes[f"{p}/intermediate/dense/bias"] = [4 * h]
            shapes[f"{p}/output/dense/kernel"] = [4 * h, h]
            shapes[f"{p}/output/dense/bias"] = [h]
            for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
                shapes[f"{p}/{norm}/gamma"], shapes[f"{p}/{norm}/beta"] = [h], [h]

    encoder("electra", hidden, layers)
    if disc_head:
        shapes["discriminator_predictions/dense/kernel"] = [hidden, hidden]
        shapes["discriminator_predictions/dense/bias"] = [hidden]
        shapes["discriminator_predictions/dense_1/kernel"] = [hidden, 1]
        shapes["discriminator_predictions/dense_1/bias"] = [1]
    if generator:
        encoder("generator", gen_hidden, gen_layers)
        shapes["generator_predictions/dense/kernel"] = [gen_hidden, emb]
        shapes["generator_predictions/dense/bias"] = [emb]
        shapes["generator_predictions/LayerNorm/gamma"] = [emb]
        shapes["generator_predictions/LayerNorm/beta"] = [emb]
        shapes["generator_predictions/output_bias"] = [vocab]
    return shapes


def write_tf1_checkpoint(directory, shapes, step=1234, adam_slots=False, seed=0):
    """What run_pretraining's Estimator writes: tf.compat.v1 variables saved by a Saver."""
    rng = np.random.default_rng(seed)
    values = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    with tf.Graph().as_default():
        variables = [tf.compat.v1.Variable(v, name=n) for n, v in values.items()]
        if adam_slots:
            for name, shape in shapes.items():
                for slot in ("adam_m", "adam_v"):
                    variables.append(
                        tf.compat.v1.get_variable(
                            f"{name}/{slot}", shape, initializer=tf.zeros_initializer()
                        )
                    )
        global_step = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(global_step.assign(step))
            saver = tf.compat.v1.train.Saver(variables + [global_step])
            saver.save(sess, os.path.join(directory, "model.ckpt"), global_step=step)
    return values


@pytest.mark.parametrize(
    "size, kwargs",
    [
        ("small", dict(emb=128, hidden=256, layers=1, gen_hidden=64, gen_layers=1)),
        ("base", dict(emb=768, hidden=768, layers=1, gen_hidden=256, gen_layers=1)),
    ],
)
@pytest.mark.parametrize("adam_slots", [False, True])
def test_import_original_checkpoint_infers_config(tmp_path, size, kwargs, adam_slots):
    shapes = original_shapes(**kwargs)
    values = write_tf1_checkpoint(str(tmp_path), shapes, step=77, adam_slots=adam_slots)
    source = checkpoints.read_weights(str(tmp_path))  # directory -> latest via `checkpoint`
    assert source.fmt == "original" and source.global_step == 77
    assert source.unused == []
    assert sorted(source.weights) == sorted(shapes)
    for name, value in values.items():
        np.testing.assert_array_equal(source.weights[name], value)
    assert len(source.skipped) == 1 + (2 * len(shapes) if adam_slots else 0)
    disc, gen = source.config.discriminator_config(), source.config.generator_config()
    assert (disc.embedding_width, disc.hidden_size) == (kwargs["emb"], kwargs["hidden"])
    assert disc.num_hidden_layers == kwargs["layers"]
    assert disc.num_attention_heads == kwargs["hidden"] // 64
    assert disc.intermediate_size == 4 * kwargs["hidden"]
    assert (disc.vocab_size, disc.max_position_embeddings) == (50, 64)
    assert (gen.hidden_size, gen.num_hidden_layers) == (kwargs["gen_hidden"], kwargs["layers"])
    assert gen.num_attention_heads == max(1, kwargs["gen_hidden"] // 64)


def test_discriminator_only_checkpoint_infers_config(tmp_path):
    shapes = original_shapes(generator=False, disc_head=False)
    write_tf1_checkpoint(str(tmp_path), shapes)
    source = checkpoints.read_weights(str(tmp_path), fmt="original")
    assert not source.has_generator
    assert source.config.discriminator_config().hidden_size == 256


def test_unknown_source_variables_are_reported(tmp_path):
    shapes = original_shapes(layers=1, gen_layers=1)
    shapes["electra/pooler/dense/kernel"] = [256, 256]
    write_tf1_checkpoint(str(tmp_path), shapes)
    source = checkpoints.read_weights(str(tmp_path))
    assert source.unused == ["electra/pooler/dense/kernel"]


def test_inference_refuses_a_generator_the_config_cannot_express(tmp_path):
    shapes = original_shapes(layers=1, gen_layers=1, gen_hidden=64)
    # The config derives the generator's FFN as 4 * hidden; a 100-wide FFN cannot be expressed.
    shapes["generator/encoder/layer_0/intermediate/dense/kernel"] = [64, 100]
    with pytest.raises(CheckpointError, match="FFN = 4 \\* hidden"):
        checkpoints.infer_config(shapes, where="test")


@pytest.mark.parametrize("disc_head", [True, False])
def test_inference_of_a_generator_without_its_own_encoder(disc_head):
    shapes = original_shapes(layers=1, generator=False, disc_head=disc_head)
    shapes.update(
        {
            "generator_predictions/dense/kernel": [256, 128],
            "generator_predictions/dense/bias": [128],
            "generator_predictions/LayerNorm/gamma": [128],
            "generator_predictions/LayerNorm/beta": [128],
            "generator_predictions/output_bias": [50],
        }
    )
    config = checkpoints.infer_config(shapes)
    # With a discriminator head the MLM head shares the discriminator's encoder (the original's
    # untied_generator=False); without one it is the BERT masked-LM baseline.
    assert config.untied_generator is not disc_head
    assert config.electra_objective is disc_head


# ------------------------------------------------------------------------------ HF layout
def test_original_to_hf_folder_layout_and_back(tmp_path):
    shapes = original_shapes(layers=1, gen_layers=1)
    write_tf1_checkpoint(str(tmp_path / "orig"), shapes)
    source = checkpoints.read_weights(str(tmp_path / "orig"))
    checkpoints.write_weights(source, str(tmp_path / "hf"), "hf")
    disc = safetensors_io.load_file(str(tmp_path / "hf/discriminator/model.safetensors"))
    gen = safetensors_io.load_file(str(tmp_path / "hf/generator/model.safetensors"))
    np.testing.assert_array_equal(
        disc["electra.encoder.layer.0.attention.self.query.weight"],
        source.weights["electra/encoder/layer_0/attention/self/query/kernel"].T,
    )
    assert disc["discriminator_predictions.dense_prediction.weight"].shape == (1, 256)
    np.testing.assert_array_equal(
        gen["electra.embeddings.word_embeddings.weight"],
        source.weights["electra/embeddings/word_embeddings"],
    )
    assert gen["electra.embeddings_project.weight"].shape == (64, 128)  # [out, in]
    assert "generator_lm_head.weight" not in gen  # tied: transformers re-ties it on load
    config = json.loads((tmp_path / "hf/generator/config.json").read_text())
    assert config["architectures"] == ["ElectraForMaskedLM"]
    assert (config["hidden_size"], config["embedding_size"], config["num_attention_heads"]) == (
        64,
        128,
        1,
    )
    assert config["layer_norm_eps"] == 1e-12 and config["hidden_act"] == "gelu"

    back = checkpoints.read_weights(str(tmp_path / "hf"))
    assert back.fmt == "hf" and back.unused == []
    assert sorted(back.weights) == sorted(source.weights)
    for name, value in source.weights.items():
        np.testing.assert_array_equal(back.weights[name], value)
    assert back.config.generator_config() == source.config.generator_config()

    checkpoints.write_weights(back, str(tmp_path / "orig2"), "original")
    again = checkpoints.read_weights(str(tmp_path / "orig2"))
    for name, value in source.weights.items():
        np.testing.assert_array_equal(again.weights[name], value)


def test_existing_output_needs_overwrite_and_foreign_files_are_kept(tmp_path):
    shapes = original_shapes(layers=1, gen_layers=1)
    write_tf1_checkpoint(str(tmp_path / "orig"), shapes)
    source = checkpoints.read_weights(str(tmp_path / "orig"))
    out = tmp_path / "out"
    checkpoints.write_weights(source, str(out), "original")
    with pytest.raises(CheckpointError, match="--overwrite"):
        checkpoints.write_weights(source, str(out), "original")
    checkpoints.write_weights(source, str(out), "original", overwrite=True)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="notes.txt"):
        checkpoints.write_weights(source, str(out), "hf", overwrite=True)
    assert (out / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------------------ into models
def _encoder(config):
    from electra_tf.modeling.encoder import TransformerEncoder

    return TransformerEncoder(config, name="electra")


def _batch(vocab, batch=2, length=12, seed=1):
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, length), np.int32)
    mask[-1, length // 2 :] = 0
    return {
        "input_ids": rng.integers(1, vocab, (batch, length)).astype(np.int32) * mask,
        "input_mask": mask,
        "segment_ids": (np.arange(length) >= length // 3).astype(np.int32)[None].repeat(batch, 0),
    }


def test_load_discriminator_only_checkpoint_into_encoder(tmp_path):
    shapes = original_shapes(layers=2, generator=False, disc_head=False)
    values = write_tf1_checkpoint(str(tmp_path), shapes, step=9)
    config = checkpoints.read_weights(str(tmp_path)).config
    encoder = _encoder(config.discriminator_config())
    result = checkpoints.load_weights(encoder, str(tmp_path))
    assert result.fmt == "original" and result.global_step == 9
    assert result.unused == [] and result.fresh == []
    assert sorted(result.loaded) == sorted(shapes)
    for name, var in encoder.variable_map().items():
        np.testing.assert_array_equal(var.numpy(), values[name])


def test_pretraining_checkpoint_into_encoder_reports_what_is_left(tmp_path):
    shapes = original_shapes(layers=1, gen_layers=1)
    write_tf1_checkpoint(str(tmp_path), shapes)
    config = checkpoints.read_weights(str(tmp_path)).config
    result = checkpoints.load_weights(_encoder(config.discriminator_config()), str(tmp_path))
    expected_unused = [n for n in shapes if not n.startswith("electra/")]
    assert sorted(result.unused) == sorted(expected_unused)
    assert checkpoints.summarize(result.unused) == (
        "discriminator_predictions/* (4), generator/* (18), generator_predictions/* (5)"
    )


def test_missing_and_misshaped_variables_are_all_listed(tmp_path):
    shapes = original_shapes(layers=2, generator=False, disc_head=False)
    del shapes["electra/encoder/layer_1/output/dense/bias"]
    del shapes["electra/embeddings/LayerNorm/beta"]
    shapes["electra/encoder/layer_0/attention/self/key/kernel"] = [256, 128]
    write_tf1_checkpoint(str(tmp_path), shapes)
    config = checkpoints.infer_config(original_shapes(layers=2, generator=False))
    encoder = _encoder(config.discriminator_config())
    before = {n: v.numpy() for n, v in encoder.variable_map().items()}
    with pytest.raises(CheckpointError) as info:
        checkpoints.load_weights(encoder, str(tmp_path), fmt="original", config=config)
    message = str(info.value)
    assert "2 missing" in message and "1 with the wrong shape" in message
    assert "electra/encoder/layer_1/output/dense/bias [256]" in message
    assert "electra/embeddings/LayerNorm/beta [128]" in message
    assert (
        "electra/encoder/layer_0/attention/self/key/kernel: expected [256, 256], found [256, 128]"
        in message
    )
    for name, var in encoder.variable_map().items():  # nothing half-loaded
        np.testing.assert_array_equal(var.numpy(), before[name])


def test_encoder_hf_round_trip_is_bit_identical(tmp_path):
    config = checkpoints.infer_config(original_shapes(layers=2, generator=False, vocab=60))
    source = _encoder(config.discriminator_config())
    checkpoints.save_weights(source, str(tmp_path / "hf"), "hf")
    saved = json.loads((tmp_path / "hf/discriminator/config.json").read_text())
    assert saved["architectures"] == ["ElectraModel"]  # no discriminator head to export
    assert not (tmp_path / "hf/generator").exists()
    target = _encoder(config.discriminator_config())
    result = checkpoints.load_weights(target, str(tmp_path / "hf"))
    assert result.fmt == "hf" and result.unused == []
    for name, var in target.variable_map().items():
        np.testing.assert_array_equal(var.numpy(), source.variable_map()[name].numpy())
    batch = _batch(60)
    np.testing.assert_array_equal(
        target(batch)["sequence_output"].numpy(), source(batch)["sequence_output"].numpy()
    )


# ------------------------------------------------------------------------------ pretrainer
SPECIAL_IDS = {"cls_id": 1, "sep_id": 2, "mask_id": 3}  # inside the tests' 50-word vocabulary


def _pretrainer(config, seed):
    from electra_tf.pretraining.pretrainer import ElectraPretrainer

    model = ElectraPretrainer(config, **SPECIAL_IDS)
    rng = np.random.default_rng(seed)
    for name, var in model.variable_map().items():
        # Every tensor random (LayerNorms and biases too) so a dropped tensor cannot go unseen.
        base = 1.0 if name.endswith("/gamma") else 0.0
        var.assign(base + 0.05 * rng.standard_normal(var.shape).astype(np.float32))
    return model


def _outputs(model, batch):
    model.rng.reset_from_seed(7)  # same masking and sampling draws for both models
    outputs = model(batch, training=False)
    return {k: v.numpy() for k, v in outputs.items()}


def _assert_same_model(a, b, batch):
    assert sorted(a.variable_map()) == sorted(b.variable_map())
    for name, var in a.variable_map().items():
        np.testing.assert_array_equal(b.variable_map()[name].numpy(), var.numpy(), err_msg=name)
    out_a, out_b = _outputs(a, batch), _outputs(b, batch)
    assert sorted(out_a) == sorted(out_b)
    for key, value in out_a.items():
        np.testing.assert_array_equal(out_b[key], value, err_msg=key)  # bit-identical


@pytest.mark.parametrize("via", ["original", "hf"])
def test_native_round_trip_is_bit_identical(tmp_path, via):
    config = checkpoints.infer_config(original_shapes(layers=1, gen_layers=1))
    model = _pretrainer(config, seed=3)
    checkpoints.save_weights(model, str(tmp_path / "native"), "native", global_step=5)
    source = checkpoints.read_weights(str(tmp_path / "native"))
    assert source.fmt == "native" and source.global_step == 5
    checkpoints.write_weights(source, str(tmp_path / via), via)
    foreign = checkpoints.read_weights(str(tmp_path / via))
    assert foreign.fmt == via and foreign.unused == []
    checkpoints.write_weights(foreign, str(tmp_path / "native2"), "native")

    restored = _pretrainer(config, seed=4)  # different weights until loaded
    result = checkpoints.load_weights(restored, str(tmp_path / "native2"))
    assert result.fmt == "native" and result.unused == [] and result.fresh == []
    assert result.global_step == (5 if via == "original" else None)  # HF stores no step
    _assert_same_model(model, restored, _batch(50, length=16))


def test_released_layout_loads_into_pretrainer(tmp_path):
    # Small++-like: generator as wide as the discriminator, with Adam slots as a training run
    # writes them.
    shapes = original_shapes(layers=1, gen_layers=1, gen_hidden=256)
    values = write_tf1_checkpoint(str(tmp_path), shapes, step=1000, adam_slots=True)
    config = checkpoints.read_weights(str(tmp_path)).config
    model = _pretrainer(config, seed=0)
    result = checkpoints.load_weights(model, str(tmp_path))
    assert result.global_step == 1000 and result.unused == []
    assert len(result.skipped) == 1 + 2 * len(shapes)
    assert sorted(model.variable_map()) == sorted(shapes)
    for name, var in model.variable_map().items():
        np.testing.assert_array_equal(var.numpy(), values[name])
    assert np.isfinite(_outputs(model, _batch(50, length=16))["loss"])


def test_discriminator_only_checkpoint_does_not_fill_a_pretrainer(tmp_path):
    shapes = original_shapes(layers=1, gen_layers=1)
    write_tf1_checkpoint(str(tmp_path), original_shapes(layers=1, generator=False))
    model = _pretrainer(checkpoints.infer_config(shapes), seed=0)
    with pytest.raises(CheckpointError) as info:
        checkpoints.load_weights(model, str(tmp_path))
    assert "23 missing" in str(info.value)  # the generator (18) and its head (5), all listed
    assert "generator_predictions/output_bias [50]" in str(info.value)


def test_original_export_restores_with_a_tf1_saver(tmp_path):
    # What the original code does with an init checkpoint: tf.compat.v1 variables of the
    # original names restored by name. Any name, shape or dtype difference fails here.
    shapes = original_shapes(layers=1, gen_layers=1)
    write_tf1_checkpoint(str(tmp_path / "orig"), shapes, step=3)
    source = checkpoints.read_weights(str(tmp_path / "orig"))
    source.weights = {k: v + 1.0 for k, v in source.weights.items()}  # distinguishable values
    checkpoints.write_weights(source, str(tmp_path / "export"), "original")
    with tf.Graph().as_default():
        variables = {
            n: tf.compat.v1.get_variable(n, shape=s, initializer=tf.zeros_initializer())
            for n, s in shapes.items()
        }
        global_step = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.Session() as sess:
            saver = tf.compat.v1.train.Saver([*variables.values(), global_step])
            saver.restore(sess, tf.train.latest_checkpoint(str(tmp_path / "export")))
            values = sess.run(variables)
            assert sess.run(global_step) == 3
    for name, value in values.items():
        np.testing.assert_array_equal(value, source.weights[name])


def test_native_checkpoint_with_another_config_is_refused(tmp_path):
    config = checkpoints.infer_config(original_shapes(layers=1, gen_layers=1))
    checkpoints.save_weights(_pretrainer(config, seed=0), str(tmp_path / "native"), "native")
    other = checkpoints.infer_config(original_shapes(layers=1, gen_layers=1, hidden=128))
    with pytest.raises(CheckpointError, match="does not match the pretrainer of its config"):
        checkpoints.read_weights(str(tmp_path / "native"), "native", config=other)
    (tmp_path / "native" / "config.json").unlink()
    with pytest.raises(CheckpointError, match="needs its config"):
        checkpoints.read_weights(str(tmp_path / "native"))
