"""ElectraPretrainer: variants, variable_map, labels, gradients, fit, save/load, precision, XLA."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from helpers_pretrainer import CLS, SEP, SPECIAL_IDS, one_layer_config, tiny_batch, tiny_config

from electra_tf.pretraining.networks import build_networks
from electra_tf.pretraining.pretrainer import ElectraPretrainer
from electra_tf.runs.pretraining_model import build_optimizer

EXPECTED_METRICS = {
    "loss",
    "masked_lm_loss",
    "masked_lm_accuracy",
    "sampled_masked_lm_accuracy",
    "disc_loss",
    "disc_auc",
    "disc_accuracy",
    "disc_precision",
    "disc_recall",
}


def scopes(names):
    return {
        name.split("/")[0] + ("/embeddings" if "/embeddings/" in name else "") for name in names
    }


@pytest.mark.parametrize(
    "overrides,expected_scopes",
    [
        (
            {},
            {
                "electra",
                "electra/embeddings",
                "generator",
                "generator_predictions",
                "discriminator_predictions",
            },
        ),
        (
            {"untied_generator_embeddings": True},
            {
                "electra",
                "electra/embeddings",
                "generator",
                "generator/embeddings",
                "generator_predictions",
                "discriminator_predictions",
            },
        ),
        (
            {"untied_generator": False},
            {"electra", "electra/embeddings", "generator_predictions", "discriminator_predictions"},
        ),
        ({"electra_objective": False}, {"electra", "electra/embeddings", "generator_predictions"}),
        (
            {"uniform_generator": True},
            {"electra", "electra/embeddings", "discriminator_predictions"},
        ),
    ],
)
def test_variable_map_covers_every_trainable_variable_once(overrides, expected_scopes):
    model = ElectraPretrainer(tiny_config(**overrides), **SPECIAL_IDS)
    names = model.variable_map()
    assert scopes(names) == expected_scopes
    ids = [id(v) for v in names.values()]
    assert len(set(ids)) == len(ids)
    assert set(ids) == {id(v) for v in model.trainable_variables}


EMBEDDINGS = [("electra/embeddings", 5), ("electra/embeddings_project", 2)]
DISCRIMINATOR = [*EMBEDDINGS, ("electra/encoder/layer_0", 16)]
GENERATOR_HEAD = [
    ("generator_predictions/output_bias", 1),
    ("generator_predictions/dense", 2),
    ("generator_predictions/LayerNorm", 2),
]
RTD_HEAD = [("discriminator_predictions/dense", 2), ("discriminator_predictions/dense_1", 2)]
MLM_HEAD = [
    ("mlm_predictions/output_bias", 1),
    ("mlm_predictions/dense", 2),
    ("mlm_predictions/LayerNorm", 2),
]


def original_scope_runs(model) -> list[tuple[str, int]]:
    """`model.trainable_variables`' order (the optimizer's slot order, the order of a
    checkpoint's optimizer state) as runs of original scopes: [(scope, count), ...]."""
    original = {id(v): name for name, v in model.variable_map().items()}
    runs: list[tuple[str, int]] = []
    for variable in model.trainable_variables:
        parts = original[id(variable)].split("/")
        scope = "/".join(parts[:3] if parts[1] == "encoder" else parts[:2])
        if runs and runs[-1][0] == scope:
            runs[-1] = (scope, runs[-1][1] + 1)
        else:
            runs.append((scope, 1))
    return runs


# Pinned from the pretrainer that built its own networks (commit c6c22a0): the factory must
# keep the order in which the layers reach the model.
@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({}, [*DISCRIMINATOR, ("generator/encoder/layer_0", 16), *GENERATOR_HEAD, *RTD_HEAD]),
        (
            {"untied_generator_embeddings": True},
            [
                *DISCRIMINATOR,
                ("generator/embeddings", 5),
                ("generator/encoder/layer_0", 16),
                *GENERATOR_HEAD,
                *RTD_HEAD,
            ],
        ),
        (
            {"untied_generator": False, "generator_hidden_size": 1.0},
            [*DISCRIMINATOR, *GENERATOR_HEAD, *RTD_HEAD],
        ),
        ({"uniform_generator": True}, [*DISCRIMINATOR, *RTD_HEAD]),
        (
            {"electric_objective": True},
            [
                *DISCRIMINATOR,
                ("generator_ltr/encoder/layer_0", 16),
                ("generator_rtl/encoder/layer_0", 16),
                ("cloze_predictions/output_bias", 1),
                ("cloze_predictions/dense", 2),
                ("cloze_predictions/LayerNorm", 2),
                *RTD_HEAD,
            ],
        ),
        (
            {"electra_objective": False, "generator_hidden_size": 1.0},
            [*DISCRIMINATOR, *GENERATOR_HEAD],
        ),
        (
            {"objective_variant": "replace_mlm"},
            [*DISCRIMINATOR, ("generator/encoder/layer_0", 16), *GENERATOR_HEAD, *MLM_HEAD],
        ),
        (
            {"objective_variant": "all_tokens_mlm"},
            [
                *DISCRIMINATOR,
                ("generator/encoder/layer_0", 16),
                *GENERATOR_HEAD,
                *MLM_HEAD,
                ("copy_predictions/dense", 2),
                ("copy_predictions/dense_1", 2),
            ],
        ),
    ],
)
def test_trainable_variable_order_is_pinned(overrides, expected):
    config = one_layer_config(generator_layers=1.0, **overrides)
    assert original_scope_runs(ElectraPretrainer(config, **SPECIAL_IDS)) == expected


def test_pretrainer_receives_the_networks_it_trains():
    config = tiny_config(electric_objective=True)
    networks = build_networks(config)
    model = ElectraPretrainer(config, networks, **SPECIAL_IDS)
    assert model.discriminator is networks.discriminator
    assert model.generator is networks.generator and model.cloze_head is networks.cloze_head
    assert model.generator_head is None and model.corrupted_mlm_head is None
    assert model.two_tower and not model.separate_generator
    expected = [v.name for v in ElectraPretrainer(config, **SPECIAL_IDS).trainable_variables]
    assert [v.name for v in model.trainable_variables] == expected
    assert list(model.variable_map()) == list(
        ElectraPretrainer(config, **SPECIAL_IDS).variable_map()
    )


def test_networks_that_do_not_fit_the_config_are_a_clear_error():
    uniform = build_networks(tiny_config(uniform_generator=True))
    with pytest.raises(ValueError, match="no generator network"):
        ElectraPretrainer(tiny_config(), networks=uniform, **SPECIAL_IDS)
    with pytest.raises(TypeError, match="PretrainingNetworks"):
        ElectraPretrainer(tiny_config(), 1, 2, 3)  # special ids where the networks go
    assert uniform.generator is None  # the networks refused above have no generator


@pytest.mark.parametrize("precision", ["float32", "mixed_float16"])
def test_learning_rate_metric_reads_the_schedule_through_a_loss_scale_wrapper(precision):
    config = one_layer_config(
        precision=precision, num_train_steps=10, num_warmup_steps=0, learning_rate=1e-3
    )
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    optimizer = build_optimizer(config, model)  # fp16: wrapped in a LossScaleOptimizer
    scaled = isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert scaled == (precision == "mixed_float16")
    model.compile(optimizer=optimizer)
    optimizer.iterations.assign(4)
    model.train_update(tiny_batch())
    # The rate of the step just applied: 1e-3 * (1 - 4 / 10).
    values = {metric.name: float(metric.result()) for metric in model.metrics}
    np.testing.assert_allclose(values["learning_rate"], 6e-4, rtol=1e-6)


def test_default_generator_shapes():
    model = ElectraPretrainer(tiny_config(), **SPECIAL_IDS)
    shapes = {k: v.shape.as_list() for k, v in model.variable_map().items()}
    # The generator is 16 wide like the embeddings: no projection (as the original, E == Hg).
    assert not any(name.startswith("generator/embeddings_project") for name in shapes)
    assert shapes["generator/encoder/layer_1/intermediate/dense/kernel"] == [16, 64]
    assert shapes["generator_predictions/dense/kernel"] == [16, 16]
    assert shapes["generator_predictions/output_bias"] == [60]
    assert shapes["electra/embeddings_project/kernel"] == [16, 32]
    assert shapes["discriminator_predictions/dense/kernel"] == [32, 32]
    assert shapes["discriminator_predictions/dense_1/kernel"] == [32, 1]
    assert model.generator.embeddings is model.discriminator.embeddings


def test_outputs_are_consistent():
    model = ElectraPretrainer(tiny_config(), **SPECIAL_IDS)
    batch = tiny_batch()
    out = {k: v.numpy() for k, v in model(batch).items()}
    assert out["mlm_logits"].shape == (4, 4, 60) and out["disc_logits"].shape == (4, 16)
    rows = np.arange(4)[:, None]
    active = out["masked_lm_weights"] == 1
    np.testing.assert_array_equal(
        out["masked_lm_ids"][active], batch["input_ids"][rows, out["masked_lm_positions"]][active]
    )
    assert not np.isin(out["masked_lm_ids"][active], [CLS, SEP, 0]).any()
    changed = out["fake_input_ids"] != batch["input_ids"]
    np.testing.assert_array_equal(out["disc_labels"], changed.astype(np.int32))
    np.testing.assert_allclose(
        out["loss"], out["masked_lm_loss"] + 50.0 * out["disc_loss"], rtol=1e-6
    )


def _confident_generator(model, token):
    """Makes the generator predict `token` everywhere with near certainty."""
    bias = np.zeros([60], np.float32)
    bias[token] = 100.0
    model.generator_head.output_bias.assign(bias)


@pytest.mark.parametrize("disallow_correct", [False, True])
def test_labels_are_zero_where_the_sample_equals_the_original(disallow_correct):
    model = ElectraPretrainer(tiny_config(disallow_correct=disallow_correct), **SPECIAL_IDS)
    _confident_generator(model, token=7)
    batch = tiny_batch()
    words = ~np.isin(batch["input_ids"], [0, CLS, SEP])
    batch["input_ids"] = np.where(words, 7, batch["input_ids"])
    out = {k: v.numpy() for k, v in model(batch).items()}
    active = out["masked_lm_weights"] == 1
    if disallow_correct:
        # The original token is never sampled, so every masked position is a replacement.
        assert not (out["sampled_ids"][active] == 7).any()
        rows = np.arange(4)[:, None].repeat(4, 1)
        assert (out["disc_labels"][rows[active], out["masked_lm_positions"][active]] == 1).all()
    else:
        np.testing.assert_array_equal(out["sampled_ids"][active], 7)
        np.testing.assert_array_equal(out["disc_labels"], 0)
        np.testing.assert_array_equal(out["fake_input_ids"], batch["input_ids"])


def test_shared_embeddings_get_gradients_from_both_losses():
    model = ElectraPretrainer(tiny_config(), **SPECIAL_IDS)
    table = model.discriminator.embeddings.word_embeddings
    with tf.GradientTape(persistent=True) as tape:
        out = model(tiny_batch())
    for loss in ("masked_lm_loss", "disc_loss"):
        grad = tf.convert_to_tensor(tape.gradient(out[loss], table))
        assert float(tf.norm(grad)) > 0, loss
    # Sampling is outside the gradient path: the disc loss does not reach the generator body.
    generator_kernel = model.variable_map()["generator/encoder/layer_0/output/dense/kernel"]
    assert tape.gradient(out["disc_loss"], generator_kernel) is None


def test_seeded_randomness():
    batch = tiny_batch()
    a = ElectraPretrainer(tiny_config(seed=3), **SPECIAL_IDS)
    b = ElectraPretrainer(tiny_config(seed=3), **SPECIAL_IDS)
    c = ElectraPretrainer(tiny_config(seed=4), **SPECIAL_IDS)
    pa, pb, pc = (m(batch)["masked_lm_positions"].numpy() for m in (a, b, c))
    np.testing.assert_array_equal(pa, pb)
    assert not np.array_equal(pa, pc)
    # The stream advances: the next batch is masked differently.
    assert not np.array_equal(pa, a(batch)["masked_lm_positions"].numpy())


def test_compile_and_fit_from_user_code():
    model = ElectraPretrainer(one_layer_config(), **SPECIAL_IDS)
    dataset = tf.data.Dataset.from_tensor_slices(tiny_batch(batch=8)).repeat().batch(4)
    schedule = keras.optimizers.schedules.PolynomialDecay(1e-3, 10, end_learning_rate=0.0)
    model.compile(optimizer=keras.optimizers.Adam(schedule))
    before = model.variable_map()["discriminator_predictions/dense/kernel"].numpy()
    history = model.fit(dataset, steps_per_epoch=2, epochs=2, verbose=0).history
    assert set(history) == EXPECTED_METRICS | {"learning_rate"}
    assert all(np.isfinite(v).all() for v in history.values())
    # The rate each epoch's last step used: steps 1 and 3 of a linear decay over 10.
    np.testing.assert_allclose(history["learning_rate"], [9e-4, 7e-4], rtol=1e-5)
    assert int(model.optimizer.iterations) == 4
    after = model.variable_map()["discriminator_predictions/dense/kernel"].numpy()
    assert not np.allclose(before, after)
    # test_step eagerly (a traced evaluate() would double this test's time): no update.
    logs = model.test_step(tiny_batch())
    assert EXPECTED_METRICS <= set(logs) and int(model.optimizer.iterations) == 4


def test_checkpoint_restores_weights_and_random_stream(tmp_path):
    batch = tiny_batch()
    model = ElectraPretrainer(tiny_config(), **SPECIAL_IDS)
    model(batch)  # advance the random stream before saving
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    expected = {k: v.numpy() for k, v in model(batch).items()}
    restored = ElectraPretrainer(tiny_config(seed=99), **SPECIAL_IDS)
    tf.train.Checkpoint(model=restored).read(path).assert_existing_objects_matched()
    got = {k: v.numpy() for k, v in restored(batch).items()}
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_train_step(precision):
    model = ElectraPretrainer(tiny_config(precision=precision), **SPECIAL_IDS)
    assert model.discriminator.transformer_layers[0].query.compute_dtype != "float32"
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    scaled = isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert scaled == (precision == "mixed_float16")
    logs = model.train_step(tiny_batch())
    assert np.isfinite(float(logs["loss"]))
    assert model.variable_map()["electra/embeddings/word_embeddings"].dtype == tf.float32
    assert int(model.optimizer.iterations) == 1


@pytest.mark.slow
def test_train_step_compiles_with_xla():
    model = ElectraPretrainer(one_layer_config(), **SPECIAL_IDS)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    step = tf.function(model.train_step, jit_compile=True)
    batch = {k: tf.constant(v) for k, v in tiny_batch().items()}
    first = float(step(batch)["loss"])
    for metric in model.metrics:
        metric.reset_state()
    second = float(step(batch)["loss"])
    assert np.isfinite(first) and np.isfinite(second) and first != second
    assert int(model.optimizer.iterations) == 2


def test_bad_special_ids_are_a_clear_error():
    with pytest.raises(ValueError, match="mask_id 103"):
        ElectraPretrainer(tiny_config(), cls_id=1, sep_id=2, mask_id=103)


def test_disc_loss_metric_is_the_mean_of_per_sequence_means():
    # The original's eval metric_fn: tf.metrics.mean(per_example_loss), where each sequence's
    # loss is its mean over real tokens. Rows of 4 and 1 real tokens tell it from the per-token
    # mean (which the training loss uses).
    from electra_tf.pretraining.metrics import PretrainingMetrics

    metrics = PretrainingMetrics(electra_objective=True)
    losses = np.array([[1.0, 1.0, 1.0, 1.0], [4.0, 9.0, 9.0, 9.0]], np.float32)
    mask = np.array([[1, 1, 1, 1], [1, 0, 0, 0]], np.int32)
    outputs = {
        "loss": tf.constant(0.0),
        "masked_lm_weights": tf.ones([2, 1]),
        "masked_lm_ids": tf.zeros([2, 1], tf.int32),
        "masked_lm_losses": tf.zeros([2, 1]),
        "mlm_logits": tf.zeros([2, 1, 3]),
        "sampled_ids": tf.zeros([2, 1], tf.int32),
        "disc_labels": tf.zeros([2, 4], tf.int32),
        "disc_logits": tf.zeros([2, 4]),
        "disc_losses": tf.constant(losses),
    }
    metrics.update(outputs, tf.constant(mask), num_parts=1)
    value = float(metrics.trackers["disc_loss"].result())
    np.testing.assert_allclose(value, (1.0 + 4.0) / 2, rtol=1e-5)  # not 8 / 5 per token
