"""The whole ELECTRA forward pass and loss against the NumPy re-derivation (helpers_reference_numpy)."""

import helpers_reference_numpy as ref
import numpy as np
import pytest
import tensorflow as tf
from helpers_pretrainer import SPECIAL_IDS, tiny_batch, tiny_config

from electra_tf.pretraining.losses import electra_loss, masked_lm_losses
from electra_tf.pretraining.pretrainer import ElectraPretrainer


def test_total_loss_on_a_hand_built_batch():
    # Uniform generator over 4 tokens: every slot costs log 4; zero discriminator logits cost
    # log 2 per real token; weights/padding must be respected by both means.
    out = electra_loss(
        mlm_logits=np.zeros([2, 3, 4], np.float32),
        masked_lm_ids=np.array([[1, 2, 0], [3, 0, 0]]),
        masked_lm_weights=np.array([[1, 1, 0], [1, 0, 0]], np.float32),
        disc_logits=np.zeros([2, 5], np.float32),
        disc_labels=np.array([[0, 1, 0, 1, 0], [0, 0, 1, 0, 0]]),
        input_mask=np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]),
        gen_weight=2.0,
        disc_weight=50.0,
    )
    np.testing.assert_allclose(out["masked_lm_loss"], np.log(4.0) * 3 / (3 + 1e-6), rtol=1e-6)
    np.testing.assert_allclose(out["disc_loss"], np.log(2.0) * 8 / (8 + 1e-6), rtol=1e-6)
    np.testing.assert_allclose(
        out["loss"], 2.0 * out["masked_lm_loss"] + 50.0 * out["disc_loss"], rtol=1e-6
    )
    # A confident, correct discriminator at real tokens; padding logits do not count.
    logits = np.array([[-20.0, 20.0, -20.0, 20.0, -20.0], [-20.0, -20.0, 20.0, 99.0, 99.0]])
    out = electra_loss(
        np.zeros([2, 3, 4], np.float32),
        np.zeros([2, 3], np.int32),
        np.ones([2, 3], np.float32),
        logits.astype(np.float32),
        np.array([[0, 1, 0, 1, 0], [0, 0, 1, 0, 0]]),
        np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]),
    )
    assert float(out["disc_loss"]) < 1e-8


def test_masked_lm_losses_and_gradient_match_float64_log_softmax():
    # The loss is computed around one softmax with a written-out gradient (issue #16): check
    # values and d loss / d logits against a float64 log-softmax, on [batch, N, V] logits with
    # one row whose spread (400) underflows every float32 probability but the largest, and
    # targets at the smallest logit there (a loss of about 400, which must stay finite).
    rng = np.random.default_rng(3)
    logits = rng.normal(0.0, 3.0, size=(2, 3, 50)).astype(np.float32)
    logits[1, 2] = np.linspace(-200.0, 200.0, 50, dtype=np.float32)
    ids = rng.integers(0, 50, size=(2, 3)).astype(np.int32)
    ids[1, 2] = 0
    upstream = rng.normal(size=(2, 3)).astype(np.float32)
    x = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(x)
        losses = masked_lm_losses(x, ids)
        total = tf.reduce_sum(losses * upstream)
    grad = tape.gradient(total, x).numpy()

    z = logits.astype(np.float64)
    shifted = z - z.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    expected = -np.take_along_axis(log_probs, ids[..., None].astype(np.int64), -1)[..., 0]
    np.testing.assert_allclose(losses.numpy(), expected, rtol=1e-6, atol=1e-5)
    assert abs(float(losses[1, 2]) - 400.0) < 1e-3
    one_hot = np.eye(50)[ids]
    expected_grad = (np.exp(log_probs) - one_hot) * upstream[..., None]
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)
    # And the same numbers as TensorFlow's sparse cross-entropy kernel.
    sparse = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=logits)
    np.testing.assert_allclose(losses.numpy(), sparse.numpy(), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"untied_generator_embeddings": True}, {"disallow_correct": True, "temperature": 0.7}],
    ids=["shared-embeddings", "untied-embeddings", "disallow-correct"],
)
def test_pretrainer_matches_numpy(overrides):
    config = tiny_config(**overrides)
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    ref.perturb(model.variable_map().values())
    batch = tiny_batch()
    out = {k: v.numpy() for k, v in model(batch, training=False).items()}
    w = {name: v.numpy().astype(np.float64) for name, v in model.variable_map().items()}
    embeddings_scope = "generator" if config.untied_generator_embeddings else "electra"
    # Every variable the config's structure implies, and no other (not "whatever exists").
    expected_generator_embeddings = {
        f"{embeddings_scope}/embeddings/word_embeddings": [
            config.vocab_size,
            config.generator_config().embedding_width,
        ]
    }
    for name, shape in expected_generator_embeddings.items():
        assert list(w[name].shape) == shape, name

    # Generator on the masked inputs, logits at the masked slots.
    gen_seq = ref.encoder(
        w,
        out["masked_input_ids"],
        batch["input_mask"],
        batch["segment_ids"],
        **ref.structure(config.generator_config()),
        scope="generator",
        embeddings_scope=embeddings_scope,
    )
    positions = out["masked_lm_positions"]
    mlm_logits = ref.generator_logits(w, gen_seq, positions, embeddings_scope)
    np.testing.assert_allclose(out["mlm_logits"], mlm_logits, atol=1e-5, rtol=1e-5)
    mlm_loss = ref.mlm_loss(mlm_logits, out["masked_lm_ids"], out["masked_lm_weights"])

    # The same sampled ids, scattered with the original's semantics, labelled, discriminated.
    fake, updated = ref.scatter_update(batch["input_ids"], out["sampled_ids"], positions)
    np.testing.assert_array_equal(out["fake_input_ids"], fake)
    labels = updated * (fake != batch["input_ids"])
    np.testing.assert_array_equal(out["disc_labels"], labels)
    disc_seq = ref.encoder(
        w,
        fake,
        batch["input_mask"],
        batch["segment_ids"],
        **ref.structure(config.discriminator_config()),
        scope="electra",
    )
    disc_logits = ref.discriminator_logits(w, disc_seq)
    np.testing.assert_allclose(out["disc_logits"], disc_logits, atol=1e-5, rtol=1e-5)
    disc_loss = ref.disc_loss(disc_logits, labels, batch["input_mask"])

    total = config.gen_weight * mlm_loss + config.disc_weight * disc_loss
    np.testing.assert_allclose(out["masked_lm_loss"], mlm_loss, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(out["disc_loss"], disc_loss, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(out["loss"], total, atol=1e-5, rtol=1e-5)
    if config.disallow_correct:
        active = out["masked_lm_weights"] == 1
        assert not np.any(out["sampled_ids"][active] == out["masked_lm_ids"][active])


def test_bert_baseline_matches_numpy():
    config = tiny_config(electra_objective=False)
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    ref.perturb(model.variable_map().values())
    batch = tiny_batch()
    out = {k: v.numpy() for k, v in model(batch, training=False).items()}
    assert "disc_logits" not in out
    w = {name: v.numpy().astype(np.float64) for name, v in model.variable_map().items()}
    seq = ref.encoder(
        w,
        out["masked_input_ids"],
        batch["input_mask"],
        batch["segment_ids"],
        **ref.structure(config.discriminator_config()),
    )
    logits = ref.generator_logits(w, seq, out["masked_lm_positions"])
    loss = ref.mlm_loss(logits, out["masked_lm_ids"], out["masked_lm_weights"])
    np.testing.assert_allclose(out["loss"], config.gen_weight * loss, atol=1e-5, rtol=1e-5)


_REPLICA_SCRIPT = r"""
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from electra_tf.pretraining.losses import electra_loss
rng = np.random.default_rng(0)
args = [
    rng.normal(size=[4, 3, 7]).astype(np.float32),
    rng.integers(0, 7, [4, 3]).astype(np.int32),
    np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], np.float32),
    rng.normal(size=[4, 5]).astype(np.float32),
    rng.integers(0, 2, [4, 5]).astype(np.int32),
    np.array([[1] * 5, [1, 1, 0, 0, 0], [1] * 5, [1, 1, 1, 0, 0]], np.int32),
]
single = float(electra_loss(*args)["loss"])
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
halves = strategy.experimental_distribute_values_from_function(
    lambda ctx: [a[2 * ctx.replica_id_in_sync_group : 2 * ctx.replica_id_in_sync_group + 2]
                 for a in args])
per_replica = strategy.run(lambda xs: electra_loss(*xs)["loss"], args=(halves,))
summed = float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None))
print(strategy.num_replicas_in_sync, single, summed)
"""


def test_replica_losses_sum_to_the_global_batch_loss():
    # Two replicas, each half of a batch whose halves have different numbers of masked slots
    # and real tokens: with global denominators the SUM over replicas (what the optimizer
    # applies to gradients) equals the single-device loss. A fresh process because logical
    # devices must be configured before TensorFlow starts.
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", _REPLICA_SCRIPT], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    replicas, single, summed = result.stdout.split()[-3:]
    assert int(replicas) == 2
    np.testing.assert_allclose(float(summed), float(single), rtol=1e-6)


def test_samples_follow_the_generator_logits_not_the_reference():
    # The reference above consumes the model's own samples; here the expected samples are
    # derived independently: an output bias of +1000 on one token outweighs any Gumbel noise,
    # so every active slot must sample it, and the discriminator input and labels follow.
    config = tiny_config()
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    ref.perturb(model.variable_map().values())
    bias = np.zeros(config.vocab_size, np.float32)
    bias[7] = 1000.0
    model.variable_map()["generator_predictions/output_bias"].assign(bias)
    batch = tiny_batch()
    out = {k: v.numpy() for k, v in model(batch, training=False).items()}
    active = out["masked_lm_weights"] == 1
    assert active.sum() > 0 and np.all(out["sampled_ids"][active] == 7)
    rows = np.nonzero(active)[0]
    positions = out["masked_lm_positions"][active]
    expected = batch["input_ids"].copy()
    expected[rows, positions] = 7
    np.testing.assert_array_equal(out["fake_input_ids"], expected)
    np.testing.assert_array_equal(out["disc_labels"], (expected != batch["input_ids"]).astype(int))
