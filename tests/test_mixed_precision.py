"""Mixed precision: bf16 and fp16 train steps agree with fp32; fp16 scales and unscales the loss."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from pretrainer_fixtures import TINY_RUN_HPARAMS, write_bert_layout_vocab

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
