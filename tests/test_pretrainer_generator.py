"""ElectraPretrainer's generator settings: untied generator embeddings (the original's own
tables), `generator_lr_multiplier` and `generator_initializer_range`."""

import numpy as np
import pytest
import tensorflow as tf
from helpers_pretrainer import SPECIAL_IDS, one_layer_config, tiny_batch, tiny_config

from electra_tf.pretraining.pretrainer import ElectraPretrainer


def test_untied_generator_embeddings_build_the_originals_generator():
    # run_pretraining.py: the generator gets embedding_size=None, so BertModel makes its own
    # tables Hg wide under generator/embeddings and no embeddings_project; its MLM head is tied
    # to that table. Here E = 16, Hg = 32 (generator_hidden_size 1.0), H = 32.
    model = ElectraPretrainer(
        tiny_config(untied_generator_embeddings=True, generator_hidden_size=1.0), **SPECIAL_IDS
    )
    shapes = {k: v.shape.as_list() for k, v in model.variable_map().items()}
    assert shapes["electra/embeddings/word_embeddings"] == [60, 16]
    assert shapes["electra/embeddings_project/kernel"] == [16, 32]
    assert shapes["generator/embeddings/word_embeddings"] == [60, 32]
    assert shapes["generator/embeddings/position_embeddings"] == [16, 32]
    assert shapes["generator/embeddings/LayerNorm/gamma"] == [32]
    assert not any(n.startswith("generator/embeddings_project") for n in shapes)
    assert shapes["generator_predictions/dense/kernel"] == [32, 32]
    assert model.generator_head.embeddings is model.generator.embeddings
    # An original checkpoint with this layout is recognised from its shapes alone.
    from electra_tf.checkpoints import infer_config

    inferred = infer_config(shapes)
    assert inferred.untied_generator_embeddings
    assert inferred.generator_config().embedding_width == 32


@pytest.mark.parametrize(
    "objective, own_scopes",
    [
        ({}, ("generator/", "generator_predictions/")),
        (
            {"electric_objective": True},
            ("generator_ltr/", "generator_rtl/", "cloze_predictions/"),
        ),
    ],
    ids=["electra", "electric"],
)
def test_generator_lr_multiplier_scales_only_the_generators_own_step(objective, own_scopes):
    """`generator_lr_multiplier` k: from the same weights and gradients, every generator-only
    variable (Electric's: both cloze towers and the cloze head) moves k times as far as at 1.0
    (the original); everything else, shared embeddings included, moves exactly as at 1.0."""
    from electra_tf.runs.pretraining_model import build_optimizer

    model = ElectraPretrainer(one_layer_config(**objective), **SPECIAL_IDS)
    with tf.GradientTape() as tape:
        loss = model(tiny_batch())["loss"]
    grads = tape.gradient(loss, model.trainable_variables)
    start = [v.numpy() for v in model.trainable_variables]

    names = {id(v): n for n, v in model.variable_map().items()}

    def step(multiplier):
        for var, value in zip(model.trainable_variables, start, strict=True):
            var.assign(value)
        config = one_layer_config(
            generator_lr_multiplier=multiplier, num_warmup_steps=0, **objective
        )
        optimizer = build_optimizer(config, model)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return {
            names[id(var)]: var.numpy() - value
            for var, value in zip(model.trainable_variables, start, strict=True)
        }

    base, tripled = step(1.0), step(3.0)
    # Float32 rounding of `new - old` near 1.0 (LayerNorm gammas) is ~1.2e-7, far below the
    # ~1e-3 steps compared here.
    generator_only = [n for n in base if n.startswith(own_scopes)]
    assert {n.split("/")[0] + "/" for n in generator_only} == set(own_scopes)
    assert "electra/embeddings/word_embeddings" in base
    for name, delta in base.items():
        assert np.abs(delta).max() > 0, name
        factor = 3.0 if name in generator_only else 1.0
        np.testing.assert_allclose(
            tripled[name], factor * delta, rtol=1e-3, atol=3e-7, err_msg=name
        )


def test_generator_lr_multiplier_must_not_be_negative():
    from electra_tf.config import ConfigError

    with pytest.raises(ConfigError, match="generator_lr_multiplier"):
        one_layer_config(generator_lr_multiplier=-1.0)


def test_generator_initializer_range_sets_only_the_generators_own_weights():
    """`generator_initializer_range` (ours): the generator's own kernels start at that stddev;
    the discriminator and the shared embedding table keep `initializer_range`."""
    tf.random.set_seed(0)
    model = ElectraPretrainer(one_layer_config(generator_initializer_range=0.5), **SPECIAL_IDS)
    model(tiny_batch())
    variables = model.variable_map()
    # A truncated normal cut at 2 stddevs has 0.88 of the stddev.
    spread = {
        name: float(np.std(variables[name].numpy()))
        for name in (
            "generator/encoder/layer_0/intermediate/dense/kernel",
            "electra/encoder/layer_0/intermediate/dense/kernel",
            "electra/embeddings/word_embeddings",
        )
    }
    assert 0.38 < spread["generator/encoder/layer_0/intermediate/dense/kernel"] < 0.5, spread
    assert 0.015 < spread["electra/encoder/layer_0/intermediate/dense/kernel"] < 0.02, spread
    assert 0.015 < spread["electra/embeddings/word_embeddings"] < 0.02, spread


def test_generator_initializer_range_must_be_positive():
    from electra_tf.config import ConfigError

    with pytest.raises(ConfigError, match="generator_initializer_range"):
        one_layer_config(generator_initializer_range=0.0)
