"""Encoder, embeddings and heads: names/shapes, numerics vs NumPy, padding, dropout, save/load."""

import dataclasses
import math

import helpers_reference_numpy as ref
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import ModelConfig, pretraining_config
from electra_tf.modeling import (
    DiscriminatorHead,
    Embeddings,
    GeneratorHead,
    TransformerEncoder,
    TransformerLayer,
)

# E != H, two heads, tiny vocabulary: exercises embeddings_project and head splitting.
TINY = ModelConfig(
    vocab_size=40,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=24,
    max_position_embeddings=12,
    embedding_size=8,
)


def random_inputs(batch=3, seq_len=7, vocab=40, seed=0, lengths=(7, 4, 2)):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, size=(batch, seq_len)).astype(np.int32)
    mask = (np.arange(seq_len)[None] < np.array(lengths)[:, None]).astype(np.int32)
    segments = (np.arange(seq_len)[None] >= np.array(lengths)[:, None] // 2).astype(np.int32)
    return {"input_ids": ids * mask, "input_mask": mask, "segment_ids": segments * mask}


def numpy_weights(variable_map):
    return {name: v.numpy().astype(np.float64) for name, v in variable_map.items()}


def layer_names(prefix, hidden, ffn):
    shapes = {}
    for part in ("query", "key", "value"):
        shapes[f"{prefix}/attention/self/{part}/kernel"] = [hidden, hidden]
        shapes[f"{prefix}/attention/self/{part}/bias"] = [hidden]
    shapes[f"{prefix}/attention/output/dense/kernel"] = [hidden, hidden]
    shapes[f"{prefix}/attention/output/dense/bias"] = [hidden]
    for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
        shapes[f"{prefix}/{norm}/gamma"] = [hidden]
        shapes[f"{prefix}/{norm}/beta"] = [hidden]
    shapes[f"{prefix}/intermediate/dense/kernel"] = [hidden, ffn]
    shapes[f"{prefix}/intermediate/dense/bias"] = [ffn]
    shapes[f"{prefix}/output/dense/kernel"] = [ffn, hidden]
    shapes[f"{prefix}/output/dense/bias"] = [hidden]
    return shapes


def test_variable_map_has_the_original_names_and_shapes():
    encoder = TransformerEncoder(TINY)
    expected = {
        "electra/embeddings/word_embeddings": [40, 8],
        "electra/embeddings/position_embeddings": [12, 8],
        "electra/embeddings/token_type_embeddings": [2, 8],
        "electra/embeddings/LayerNorm/gamma": [8],
        "electra/embeddings/LayerNorm/beta": [8],
        "electra/embeddings_project/kernel": [8, 16],
        "electra/embeddings_project/bias": [16],
    }
    for i in range(2):
        expected.update(layer_names(f"electra/encoder/layer_{i}", 16, 24))
    names = encoder.variable_map()
    assert {k: v.shape.as_list() for k, v in names.items()} == expected
    # Every trainable variable exactly once.
    assert len({id(v) for v in names.values()}) == len(names)
    assert {id(v) for v in encoder.trainable_variables} == {id(v) for v in names.values()}


def test_no_projection_when_embedding_width_equals_hidden():
    encoder = TransformerEncoder(dataclasses.replace(TINY, embedding_size=None))
    assert encoder.embeddings_project is None
    assert not any("embeddings_project" in name for name in encoder.variable_map())


# The standard deviation of a normal(0, 0.02) cut at +-2 standard deviations.
TRUNCATED_STD = 0.02 * np.sqrt(1 - 4 * np.exp(-2) / np.sqrt(2 * np.pi) / math.erf(np.sqrt(2)))


def test_initializers_match_the_original():
    encoder = TransformerEncoder(dataclasses.replace(TINY, hidden_size=64, intermediate_size=64))
    names = encoder.variable_map()
    truncated = []
    for name, var in names.items():
        values = var.numpy()
        if name.endswith("/bias") or name.endswith("/beta"):
            np.testing.assert_array_equal(values, 0.0, err_msg=name)
        elif name.endswith("/gamma"):
            np.testing.assert_array_equal(values, 1.0, err_msg=name)
        elif "embeddings_project" in name:
            # Glorot uniform: limit sqrt(6 / (fan_in + fan_out)).
            limit = np.sqrt(6.0 / sum(values.shape))
            assert np.abs(values).max() <= limit and values.std() > limit / 3, name
        else:
            # Truncated normal(0.02) is cut at 2 standard deviations, which leaves a standard
            # deviation of 0.02 * 0.8796. A table's sample std strays from it by about
            # std / sqrt(2n): the 16 values of token_type_embeddings by 0.003, so each table gets
            # 6 of those, and all tables pooled (~50k values, 0.3%) within 2%.
            assert np.abs(values).max() <= 0.04 + 1e-7, name
            slack = 6 * TRUNCATED_STD / np.sqrt(2 * values.size)
            assert abs(values.std() - TRUNCATED_STD) < slack, (name, values.std())
            truncated.append(values.ravel())
    pooled = np.concatenate(truncated)
    assert abs(pooled.std() - TRUNCATED_STD) < 0.02 * TRUNCATED_STD, (pooled.size, pooled.std())
    query0 = names["electra/encoder/layer_0/attention/self/query/kernel"].numpy()
    key0 = names["electra/encoder/layer_0/attention/self/key/kernel"].numpy()
    assert not np.allclose(query0, key0), "each kernel must get its own random draw"


def test_forward_matches_numpy_reference():
    encoder = TransformerEncoder(TINY)
    ref.perturb(encoder.variable_map().values())
    inputs = random_inputs()
    out = encoder(inputs, training=False)
    weights = numpy_weights(encoder.variable_map())
    expected = ref.encoder(
        weights,
        inputs["input_ids"],
        inputs["input_mask"],
        inputs["segment_ids"],
        **ref.structure(TINY),
    )
    assert out["sequence_output"].shape == (3, 7, 16)
    np.testing.assert_allclose(out["sequence_output"].numpy(), expected, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(out["cls_output"].numpy(), expected[:, 0], atol=1e-5, rtol=1e-5)


def test_attention_probs_match_numpy_reference():
    encoder = TransformerEncoder(TINY)
    ref.perturb(encoder.variable_map().values())
    inputs = random_inputs()
    expected = []
    ref.encoder(
        numpy_weights(encoder.variable_map()),
        inputs["input_ids"],
        inputs["input_mask"],
        inputs["segment_ids"],
        **ref.structure(TINY),
        attention_probs=expected,
    )
    probs = encoder.attention_probs(inputs)
    assert len(probs) == len(expected) == TINY.num_hidden_layers
    for got, want in zip(probs, expected, strict=True):
        assert got.shape == (3, 2, 7, 7)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-6)
    # Padded keys get no weight (the third sequence has 2 real tokens).
    assert float(np.max(probs[0].numpy()[2, :, :, 2:])) < 1e-6


def test_heads_match_numpy_reference():
    encoder = TransformerEncoder(TINY)
    generator_head = GeneratorHead(TINY, encoder.embeddings)
    discriminator_head = DiscriminatorHead(TINY)
    # Non-zero biases so that the reference checks they are added.
    for var in generator_head.trainable_variables + discriminator_head.trainable_variables:
        var.assign(tf.random.normal(var.shape, stddev=0.1))
    inputs = random_inputs()
    sequence = encoder(inputs)["sequence_output"]
    positions = np.array([[1, 3], [2, 2], [1, 0]], np.int32)
    weights = numpy_weights(
        {
            **encoder.variable_map(),
            **generator_head.variable_map(),
            **discriminator_head.variable_map(),
        }
    )
    seq = sequence.numpy().astype(np.float64)
    np.testing.assert_allclose(
        generator_head(sequence, positions).numpy(),
        ref.generator_logits(weights, seq, positions),
        atol=1e-5,
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        discriminator_head(sequence).numpy(),
        ref.discriminator_logits(weights, seq),
        atol=1e-5,
        rtol=1e-5,
    )
    assert set(generator_head.variable_map()) == {
        "generator_predictions/dense/kernel",
        "generator_predictions/dense/bias",
        "generator_predictions/LayerNorm/gamma",
        "generator_predictions/LayerNorm/beta",
        "generator_predictions/output_bias",
    }
    assert generator_head.variable_map()["generator_predictions/dense/kernel"].shape == (16, 8)
    assert discriminator_head.variable_map()["discriminator_predictions/dense_1/kernel"].shape == (
        16,
        1,
    )


def test_padding_invariance():
    encoder = TransformerEncoder(TINY)
    inputs = random_inputs()
    changed = {k: v.copy() for k, v in inputs.items()}
    pad = inputs["input_mask"] == 0
    changed["input_ids"][pad] = 39
    changed["segment_ids"][pad] = 1
    a = encoder(inputs)["sequence_output"].numpy()
    b = encoder(changed)["sequence_output"].numpy()
    np.testing.assert_allclose(a[~pad], b[~pad], atol=1e-6)
    assert not np.allclose(a[pad], b[pad]), "padded positions themselves should change"


def test_dropout_only_when_training():
    encoder = TransformerEncoder(TINY)
    inputs = random_inputs()
    eval_a = encoder(inputs, training=False)["sequence_output"].numpy()
    eval_b = encoder(inputs, training=False)["sequence_output"].numpy()
    train = encoder(inputs, training=True)["sequence_output"].numpy()
    np.testing.assert_array_equal(eval_a, eval_b)
    assert not np.allclose(eval_a, train, atol=1e-3)


def test_generator_shares_the_whole_embedding_block():
    discriminator = TransformerEncoder(TINY, name="discriminator")
    generator_config = dataclasses.replace(TINY, hidden_size=4, num_attention_heads=1)
    generator = TransformerEncoder(
        generator_config, embeddings=discriminator.embeddings, name="generator"
    )
    disc_names = discriminator.variable_map("electra")
    gen_names = generator.variable_map("generator")
    shared = [n for n in gen_names if "/embeddings/" in n]
    assert len(shared) == 5 and all(n.startswith("electra/embeddings/") for n in shared)
    for name in shared:
        assert gen_names[name] is disc_names[name]
    assert gen_names["generator/embeddings_project/kernel"].shape == (8, 4)
    assert "generator/encoder/layer_1/output/LayerNorm/beta" in gen_names
    without = generator.variable_map("generator", include_embeddings=False)
    assert set(without) == set(gen_names) - set(shared)
    # Untied embeddings live under the generator's own scope.
    untied = TransformerEncoder(generator_config, name="generator")
    assert "generator/embeddings/word_embeddings" in untied.variable_map("generator")
    with pytest.raises(ValueError, match="wide"):
        TransformerEncoder(
            dataclasses.replace(TINY, embedding_size=6), embeddings=discriminator.embeddings
        )


def test_get_config_round_trip():
    for layer in (
        TransformerEncoder(TINY, name="disc"),
        TransformerLayer(TINY, name="layer_0"),
        Embeddings(TINY),
        DiscriminatorHead(TINY),
    ):
        config = layer.get_config()
        clone = type(layer).from_config(config)
        assert clone.get_config() == config
        assert clone.config == TINY and clone.name == layer.name
    encoder = TransformerEncoder(TINY)
    clone = TransformerEncoder.from_config(encoder.get_config())
    for name, var in clone.variable_map().items():
        var.assign(encoder.variable_map()[name])
    inputs = random_inputs()
    np.testing.assert_array_equal(
        encoder(inputs)["sequence_output"].numpy(), clone(inputs)["sequence_output"].numpy()
    )


def test_checkpoint_round_trip(tmp_path):
    encoder = TransformerEncoder(TINY)
    inputs = random_inputs()
    expected = encoder(inputs)["sequence_output"].numpy()
    path = tf.train.Checkpoint(encoder=encoder).write(str(tmp_path / "ckpt"))
    restored = TransformerEncoder(TINY)
    assert not np.allclose(restored(inputs)["sequence_output"].numpy(), expected)
    tf.train.Checkpoint(encoder=restored).read(path).assert_consumed()
    np.testing.assert_array_equal(restored(inputs)["sequence_output"].numpy(), expected)


def test_variable_map_before_build_is_a_clear_error():
    with pytest.raises(ValueError, match="build"):
        Embeddings(TINY).variable_map()


def _count(variable_map):
    return sum(v.shape.num_elements() for v in variable_map.values())


@pytest.mark.parametrize(
    "preset,generator_fraction,body,head,generator_only",
    [
        ("small", 0.25, 13_483_008, 66_049, 647_162),
        ("small", 1.0, 13_483_008, 66_049, 9_573_818),
        ("base", 1.0 / 3.0, 108_891_648, 591_361, 9_903_418),
        ("large", 0.25, 334_092_288, 1_050_625, 19_512_378),
    ],
)
def test_parameter_counts_equal_the_released_checkpoints(
    preset, generator_fraction, body, head, generator_only
):
    config = pretraining_config(
        preset=preset, hparams={"generator_hidden_size": generator_fraction}
    )
    # Built in a throwaway graph: the variables exist with their shapes, but no initializer
    # runs, so even Large takes seconds and no memory.
    with tf.Graph().as_default():
        discriminator = TransformerEncoder(config.discriminator_config())
        generator = TransformerEncoder(
            config.generator_config(), embeddings=discriminator.embeddings
        )
        generator_head = GeneratorHead(config.generator_config(), discriminator.embeddings)
        assert _count(discriminator.variable_map()) == body
        assert _count(DiscriminatorHead(config.discriminator_config()).variable_map()) == head
        generator_params = _count(generator.variable_map("generator", include_embeddings=False))
        assert generator_params + _count(generator_head.variable_map()) == generator_only


def test_dropout_placement_matches_numpy_reference(monkeypatch):
    # Dropout ON, with the same masks on both sides: every Dropout call draws its mask
    # from a NumPy generator seeded by the call's index, and the reference draws the same
    # masks at the original's dropout sites, in the original's order. A dropout moved, added,
    # dropped or given the other rate changes the output.
    import dataclasses

    from electra_tf.modeling.dropout import Dropout

    config = dataclasses.replace(TINY, hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.2)
    rates = {"hidden": 0.3, "attention": 0.2}

    def mask(index, shape, rate):
        keep = np.random.default_rng(index).random(shape) >= rate
        return keep / (1.0 - rate)

    calls = []

    def fake_dropout(self, inputs, training=None):
        if not training:
            return inputs
        calls.append(self.rate)
        m = mask(len(calls), inputs.shape.as_list(), self.rate)
        return inputs * tf.constant(m, inputs.dtype)

    monkeypatch.setattr(Dropout, "call", fake_dropout)
    encoder = TransformerEncoder(config)
    ref.perturb(encoder.variable_map().values())
    inputs = random_inputs()
    out = encoder(inputs, training=True)["sequence_output"].numpy()
    assert len(calls) == 1 + 3 * config.num_hidden_layers

    drawn = []

    def dropout(x, kind):
        drawn.append(kind)
        return x * mask(len(drawn), list(x.shape), rates[kind])

    expected = ref.encoder(
        numpy_weights(encoder.variable_map()),
        inputs["input_ids"],
        inputs["input_mask"],
        inputs["segment_ids"],
        **ref.structure(config),
        dropout=dropout,
    )
    assert calls == [rates[k] for k in drawn]
    np.testing.assert_allclose(out, expected, atol=1e-5, rtol=1e-5)


def test_training_layer_norm_and_gelu_match_automatic_differentiation():
    # The hand-written gradients of the training forms (issue #16) against tf's automatic
    # differentiation of the Keras layer and activation, on 3-D input whose rows have a large
    # mean next to their spread (the case where a one-pass variance would lose digits).
    import tf_keras as keras

    from electra_tf.modeling.utils import _gelu_train, _layer_norm_train, layer_norm

    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(3.0, 0.5, size=(2, 5, 16)), tf.float32)
    dy = tf.constant(rng.normal(size=(2, 5, 16)), tf.float32)
    norm = layer_norm()
    norm.build([None, None, 16])
    norm.gamma.assign(rng.normal(1.0, 0.3, size=16))
    norm.beta.assign(rng.normal(0.0, 0.3, size=16))

    def values_and_grads(f):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
            loss = tf.reduce_sum(y * dy)
        return [y, *tape.gradient(loss, [x, norm.gamma, norm.beta])]

    expected = values_and_grads(norm)
    got = values_and_grads(lambda t: _layer_norm_train(t, norm.gamma, norm.beta, norm.epsilon))
    for name, a, b in zip(["y", "dx", "dgamma", "dbeta"], got, expected, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)

    z = tf.constant(rng.normal(0.0, 2.0, size=(3, 64)), tf.float32)

    def gelu_and_grad(f):
        with tf.GradientTape() as tape:
            tape.watch(z)
            y = f(z)
        return y.numpy(), tape.gradient(y, z).numpy()

    keras_y, keras_grad = gelu_and_grad(keras.activations.gelu)
    train_y, train_grad = gelu_and_grad(_gelu_train)
    # The training form is the original's, 0.5 * (1 + erf(z / sqrt(2))); the Keras form uses
    # erfc. Where erf is near -1 the float32 sum 1 + erf keeps an absolute error of up to one
    # ulp of 1 (1.2e-7), so y may differ by |z| * 1.2e-7 from the exact value there.
    z64 = z.numpy().astype(np.float64)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(z64 / np.sqrt(2)))
    slack = 1.2e-7 * np.abs(z64).max()
    np.testing.assert_allclose(train_y, z64 * cdf, rtol=1e-6, atol=slack)
    np.testing.assert_allclose(train_y, keras_y, rtol=1e-6, atol=slack)
    np.testing.assert_allclose(train_grad, keras_grad, rtol=1e-5, atol=1e-6)
    # Against the closed form in float64: Phi(z) + z * phi(z).
    phi = np.exp(-0.5 * z64**2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(train_grad, cdf + z64 * phi, rtol=1e-5, atol=1e-6)


def test_training_graph_computes_what_the_inference_graph_does():
    # Without dropout, training=True differs from training=False only in the forms of GELU and
    # LayerNorm (hand-written gradients): the outputs and every variable's gradient must agree.
    config = dataclasses.replace(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    encoder = TransformerEncoder(config)
    ref.perturb(encoder.variable_map().values())
    inputs = random_inputs()
    weights = list(encoder.variable_map().values())
    results = []
    for training in (False, True):
        with tf.GradientTape() as tape:
            out = encoder(inputs, training=training)["sequence_output"]
            loss = tf.reduce_sum(out * tf.sin(tf.range(16, dtype=tf.float32)))
        grads = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, weights)]
        results.append((out.numpy(), grads))
    (out_eval, grads_eval), (out_train, grads_train) = results
    np.testing.assert_allclose(out_train, out_eval, rtol=1e-5, atol=1e-5)
    # float32 sums in another order: an absolute slack of 1e-5 of the largest gradient (the key
    # bias's true gradient is 0, so its entries are rounding noise on either side).
    scale = max(np.abs(g).max() for g in grads_eval)
    for name, a, b in zip(encoder.variable_map(), grads_train, grads_eval, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * scale, err_msg=name)


def test_training_forms_under_mixed_bfloat16_match_the_keras_layers():
    # Under mixed_bfloat16 the training forms replace the Keras layer and activation too: the
    # LayerNorm in float32 (as the layer computes it, from bf16 inputs, back to bf16), GELU in
    # bf16. Values and gradients agree to bf16's precision; the graph holds the hand-written
    # forms (their name scopes), not the Keras ops.
    from electra_tf.modeling.utils import apply_activation, apply_layer_norm, layer_norm

    rng = np.random.default_rng(1)
    norm = layer_norm(dtype="mixed_bfloat16")
    norm.build([None, None, 32])
    norm.gamma.assign(rng.normal(1.0, 0.3, size=32))
    norm.beta.assign(rng.normal(0.0, 0.3, size=32))
    x = tf.constant(rng.normal(2.0, 1.0, size=(2, 6, 32)), tf.bfloat16)
    dy = tf.constant(rng.normal(size=(2, 6, 32)), tf.bfloat16)

    def values_and_grads(f):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.cast(dy, tf.float32))
        grads = tape.gradient(loss, [x, norm.gamma, norm.beta])
        return [tf.cast(t, tf.float32).numpy() for t in [y, *grads]], y.dtype

    expected, keras_dtype = values_and_grads(
        lambda t: apply_activation("gelu", norm(t), training=False)
    )
    got, dtype = values_and_grads(
        lambda t: apply_activation("gelu", apply_layer_norm(norm, t, training=True), True)
    )
    assert dtype == keras_dtype == tf.bfloat16
    for name, a, b in zip(["y", "dx", "dgamma", "dbeta"], got, expected, strict=True):
        scale = np.abs(b).max()
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-2 * scale, err_msg=name)

    graph = (
        tf.function(
            lambda t: apply_activation("gelu", apply_layer_norm(norm, t, training=True), True)
        )
        .get_concrete_function(tf.TensorSpec([None, None, 32], tf.bfloat16))
        .graph
    )
    names = [op.name for op in graph.get_operations()]
    assert any("layer_norm_train" in n for n in names) and any("gelu_train" in n for n in names)
