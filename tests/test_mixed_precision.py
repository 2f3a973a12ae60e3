"""Mixed precision: bf16 and fp16 train steps agree with fp32; fp16 scales and unscales the loss."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from helpers_precision import BF16_UNIT, bf16_values_and_gradients, max_error
from helpers_pretrainer import TINY_RUN_HPARAMS, write_bert_layout_vocab

from electra_tf.config import pretraining_config
from electra_tf.runs.pretraining_model import build_model, build_optimizer

SEQ_LEN, BATCH = TINY_RUN_HPARAMS["max_seq_length"], 4
HPARAMS = dict(TINY_RUN_HPARAMS, train_batch_size=BATCH)


@pytest.fixture
def data_dir(tmp_path):
    write_bert_layout_vocab(tmp_path)
    yield str(tmp_path)
    keras.mixed_precision.set_global_policy("float32")


def make_batch() -> dict[str, tf.Tensor]:
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 100, size=(BATCH, SEQ_LEN)).astype(np.int32)
    ids[:, 0], ids[:, SEQ_LEN // 2], ids[:, -1] = 101, 102, 102
    mask = np.ones_like(ids)
    mask[0, 20:] = 0  # one padded example
    ids *= mask
    return {
        "input_ids": tf.constant(ids),
        "input_mask": tf.constant(mask),
        "segment_ids": tf.zeros_like(tf.constant(ids)),
    }


def build(data_dir: str, precision: str, weights=None, initial_scale: float | None = None):
    """The pretrainer and optimizer as the training loop builds them (fp16: loss-scaled)."""
    config = pretraining_config("mp", data_dir, hparams={**HPARAMS, "precision": precision})
    keras.mixed_precision.set_global_policy(config.precision)
    tf.random.set_seed(0)
    model = build_model(config)
    if weights is not None:
        model.set_weights(weights)
    # The run's optimizer; fp16's loss scale starts at `initial_scale` when given.
    optimizer = build_optimizer(config, model, initial_scale=initial_scale)
    model.compile(optimizer=optimizer)
    return model, optimizer


def record_gradients(optimizer) -> list:
    """Keeps the gradients the train step hands to `apply_gradients` (eager run)."""
    seen = []
    apply = optimizer.apply_gradients

    def recording(grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        seen.append([g for g, _ in grads_and_vars])
        return apply(grads_and_vars, *args, **kwargs)

    optimizer.apply_gradients = recording
    return seen


def global_norm(gradients) -> float:
    dense = [tf.convert_to_tensor(g) for g in gradients if g is not None]
    return float(tf.linalg.global_norm([tf.cast(g, tf.float32) for g in dense]))


def test_bf16_and_fp16_steps_match_fp32(data_dir):
    batch = make_batch()
    reference, optimizer = build(data_dir, "float32")
    weights = reference.get_weights()  # includes the sampling RNG's state: same masks
    fp32_gradients = record_gradients(optimizer)
    fp32 = {k: float(v) for k, v in reference.train_step(batch).items()}
    assert np.isfinite(fp32["loss"]) and fp32["loss"] > 0
    for precision, tolerance in (("mixed_bfloat16", 0.05), ("mixed_float16", 0.01)):
        # fp16 starts at 2^10, not Keras's 2^15: with the 50x discriminator weight, 2^15
        # overflows this model's first gradients and the step is (correctly) skipped.
        scale = 2.0**10 if precision == "mixed_float16" else None
        model, optimizer = build(data_dir, precision, weights, initial_scale=scale)
        assert model.discriminator.transformer_layers[0].query.compute_dtype != "float32"
        gradients = record_gradients(optimizer)
        metrics = {k: float(v) for k, v in model.train_step(batch).items()}
        # Losses and metrics come out in float32 whatever the compute dtype.
        outputs = model(batch, training=False)
        for key in ("loss", "mlm_logits", "disc_logits"):
            assert outputs[key].dtype == tf.float32, (precision, key)
        for key in ("loss", "masked_lm_loss", "disc_loss"):
            assert np.isfinite(metrics[key]), (precision, key)
            assert metrics[key] == pytest.approx(fp32[key], rel=tolerance), (precision, key)
        # The optimizer sees true-size gradients: fp16's loss scale is divided out again.
        assert global_norm(gradients[0]) == pytest.approx(
            global_norm(fp32_gradients[0]), rel=5 * tolerance
        ), precision
        # Master weights stay float32.
        assert all(v.dtype == tf.float32 for v in model.trainable_variables)


def test_fp16_uses_dynamic_loss_scaling(data_dir):
    batch = make_batch()
    reference, _ = build(data_dir, "float32")
    weights = reference.get_weights()
    model, optimizer = build(data_dir, "mixed_float16", weights)
    # The training loop wraps the optimizer for float16 (and only then).
    assert isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)
    model, optimizer = build(data_dir, "mixed_float16", weights, initial_scale=2.0**10)
    before = [v.numpy() for v in model.trainable_variables]
    model.train_step(batch)
    assert float(optimizer.loss_scale) == 2.0**10  # finite gradients keep the scale...
    changed = [
        not np.array_equal(v.numpy(), b)
        for v, b in zip(model.trainable_variables, before, strict=True)
    ]
    assert all(changed)  # ...and the update is applied to every variable

    # A scale of 2^40 overflows float16 gradients: the step must be skipped and the scale
    # halved, which only happens if the train step really multiplies the loss by the scale.
    model, overflow = build(data_dir, "mixed_float16", weights, initial_scale=2.0**40)
    before = [v.numpy() for v in model.trainable_variables]
    model.train_step(batch)
    assert float(overflow.loss_scale) == 2.0**39
    for variable, value in zip(model.trainable_variables, before, strict=True):
        np.testing.assert_array_equal(variable.numpy(), value)


# ------------------------------------------------------------------ the fused paths in bf16
# The tolerance rule is helpers_precision's: 4 units (LayerNorm, softmax, computed in float32)
# or 8 (GELU, computed in bf16) of the largest reference value.


def test_layer_norm_training_form_under_mixed_bfloat16():
    from electra_tf.modeling.utils import apply_layer_norm, layer_norm

    rng = np.random.default_rng(1)
    norm = layer_norm(dtype="mixed_bfloat16")
    norm.build([None, 64])
    norm.gamma.assign(rng.normal(1.0, 0.3, 64).astype(np.float32))
    norm.beta.assign(rng.normal(0.0, 0.3, 64).astype(np.float32))
    x = tf.cast(rng.normal(1.0, 3.0, (16, 64)).astype(np.float32), tf.bfloat16)
    upstream = rng.normal(size=(16, 64))

    def plain(values):
        x64, gamma64, beta64 = values
        mean, variance = tf.nn.moments(x64, [-1], keepdims=True)
        return (x64 - mean) * tf.math.rsqrt(variance + 1e-12) * gamma64 + beta64

    checks = bf16_values_and_gradients(
        lambda: apply_layer_norm(norm, x, training=True), plain, [x], [norm.gamma, norm.beta],
        upstream,
    )  # fmt: skip
    for name, (actual, reference) in zip(("y", "dx", "dgamma", "dbeta"), checks, strict=True):
        assert max_error(actual, reference) < 4 * BF16_UNIT, name


def test_gelu_training_form_in_bfloat16():
    import math

    from electra_tf.modeling.utils import apply_activation

    erf = np.vectorize(math.erf)

    x = tf.cast(tf.linspace(-6.0, 6.0, 1201), tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = apply_activation("gelu", x, training=True)
    dx = tape.gradient(y, x)
    assert (y.dtype, dx.dtype) == (tf.bfloat16, tf.bfloat16)
    x64 = np.asarray(tf.cast(x, tf.float64))
    cdf = 0.5 * (1.0 + erf(x64 / np.sqrt(2.0)))
    density = np.exp(-0.5 * x64**2) / np.sqrt(2.0 * np.pi)
    assert max_error(y, x64 * cdf) < 8 * BF16_UNIT
    assert max_error(dx, cdf + x64 * density) < 8 * BF16_UNIT


def test_dropout_in_bfloat16_keeps_the_float32_mask_and_the_original_rate():
    from electra_tf.modeling.dropout import Dropout

    shape, rate = (1000, 1000), 0.1
    ones = tf.ones(shape)
    # The global seed reset before each: eager stateful draws advance per call.
    tf.random.set_seed(0)
    fp32 = Dropout(rate, seed=5)(ones, training=True)
    tf.random.set_seed(0)
    bf16 = Dropout(rate, seed=5, dtype="mixed_bfloat16")(tf.cast(ones, tf.bfloat16), training=True)
    assert bf16.dtype == tf.bfloat16
    # The same elements dropped: the mask does not depend on the dtype.
    np.testing.assert_array_equal(fp32.numpy() > 0, tf.cast(bf16, tf.float32).numpy() > 0)
    kept = float(tf.reduce_mean(tf.cast(bf16 > 0, tf.float32)))
    assert abs(kept - (1 - rate)) < 0.0015  # 5 standard deviations of 10^6 draws
    # tf.nn.dropout's scale, rounded to bf16.
    scale = float(tf.cast(tf.constant(1 / (1 - rate), tf.bfloat16), tf.float32))
    assert set(np.unique(tf.cast(bf16, tf.float32).numpy())) == {0.0, scale}
    # Keras's own bf16 path (what this replaces) keeps 115/128 = 0.898: its uniforms have 7
    # random bits in bf16.
    keras_dropout = keras.layers.Dropout(rate, seed=5, dtype="mixed_bfloat16")
    keras_bf16 = keras_dropout(tf.cast(ones, tf.bfloat16), training=True)
    assert keras_bf16.dtype == tf.bfloat16
    assert abs(float(tf.reduce_mean(tf.cast(keras_bf16 > 0, tf.float32))) - 115 / 128) < 0.0015
    # The gradient is the mask times the scale, in bf16.
    x = tf.cast(ones, tf.bfloat16)
    layer = Dropout(rate, seed=5, dtype="mixed_bfloat16")
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer(x, training=True)
    grad = tape.gradient(out, x)
    assert grad.dtype == tf.bfloat16
    np.testing.assert_array_equal(grad.numpy(), out.numpy())


def test_vocabulary_softmax_loss_with_bfloat16_logits():
    from electra_tf.pretraining.losses import masked_lm_losses

    rng = np.random.default_rng(2)
    logits = tf.cast(rng.normal(0.0, 4.0, (4, 5, 50)).astype(np.float32), tf.bfloat16)
    targets = tf.constant(rng.integers(0, 50, (4, 5)), tf.int32)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        losses = masked_lm_losses(logits, targets)
        total = tf.reduce_sum(losses)
    grad = tape.gradient(total, logits)
    assert (losses.dtype, grad.dtype) == (tf.float32, tf.bfloat16)
    z = np.asarray(tf.cast(logits, tf.float64))
    log_probs = z - z.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    one_hot = np.eye(50)[targets.numpy()]
    np.testing.assert_allclose(losses.numpy(), -(log_probs * one_hot).sum(-1), rtol=1e-5, atol=1e-5)
    assert max_error(grad, np.exp(log_probs) - one_hot) < 4 * BF16_UNIT


def test_emulated_bfloat16_is_announced_with_a_measured_slowdown():
    import io
    import time

    from electra_tf.runtime import device_defaults
    from electra_tf.runtime.device_defaults import Machine

    emulated = Machine(accelerator="cpu", cpu_count=2, native_bf16=False)
    note = device_defaults.emulated_bf16_note("mixed_bfloat16", emulated, 1.234)
    assert "emulates bfloat16" in note and "1.23x" in note
    for precision, machine in (
        ("float32", emulated),
        ("mixed_bfloat16", Machine(accelerator="cpu", cpu_count=2, native_bf16=True)),
        ("mixed_bfloat16", Machine(accelerator="gpu", compute_capability=(8, 0))),
    ):
        assert device_defaults.emulated_bf16_note(precision, machine) is None
        assert device_defaults.warn_if_emulated_bf16(precision, machine, io.StringIO()) is None
    stream = io.StringIO()
    start = time.process_time()
    printed = device_defaults.warn_if_emulated_bf16("mixed_bfloat16", emulated, stream)
    assert time.process_time() - start < 2.0  # CPU seconds, both threads together
    assert printed and stream.getvalue().strip() == printed
    ratio = float(printed.split("took ")[-1].split("x its float32")[0])
    assert 0.05 < ratio < 50


def test_the_training_run_announces_emulated_bfloat16_first(data_dir, monkeypatch):
    # The run's first act after resolving its config: before any model or file is made.
    from electra_tf.runs import pretraining
    from electra_tf.runtime.device_defaults import Machine

    seen = []

    def announce(precision, machine, stream):
        seen.append((precision, machine.native_bf16))
        raise KeyboardInterrupt  # stop the run here

    monkeypatch.setattr(pretraining, "warn_if_emulated_bf16", announce)
    hparams = {**HPARAMS, "precision": "mixed_bfloat16"}
    config = pretraining_config("mp", data_dir, hparams=hparams)
    machine = Machine(accelerator="cpu", cpu_count=2, native_bf16=False)
    with pytest.raises(KeyboardInterrupt):
        pretraining.train(config, machine=machine)
    assert seen == [("mixed_bfloat16", False)]
    assert not os.path.exists(config.resolved_model_dir())  # nothing made before it
