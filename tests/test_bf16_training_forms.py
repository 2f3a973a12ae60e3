"""The bfloat16 training forms that keep oneDNN on AMX: a dense layer's product apart from its
bias (`modeling.utils.dense_rows`), the GELU with the bias inside its cluster, and the
generator's vocabulary logits in float32.

Each is checked against float64 automatic differentiation of the plain formula on the same
bf16-rounded inputs (`helpers_precision.bf16_values_and_gradients` and its tolerance rule: a few
bf16 units of the largest reference value), and the product's separation is checked in the
graph Grappler actually runs, beside the inference form, which keeps the fused kernel (so the check can fail).
"""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from helpers_precision import BF16_UNIT, bf16_values_and_gradients, max_error

from electra_tf.modeling.utils import dense_rows


def _gelu64(x):
    return x * 0.5 * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


def _dense(units: int, width: int, seed: int) -> keras.layers.Dense:
    rng = np.random.default_rng(seed)
    # A name no other test's graphs carry (the graph counts filter by it).
    name = f"bf16_probe_{seed}_{np.random.default_rng().integers(1 << 30)}"
    layer = keras.layers.Dense(units, dtype="mixed_bfloat16", name=name)
    layer.build([None, width])
    layer.kernel.assign(rng.normal(0.0, 0.3, (width, units)).astype(np.float32))
    layer.bias.assign(rng.normal(0.0, 0.5, units).astype(np.float32))
    return layer


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_dense_rows_under_mixed_bfloat16_matches_float64(activation):
    layer = _dense(24, 16, seed=3)
    rng = np.random.default_rng(4)
    rows = tf.cast(rng.normal(0.0, 1.0, (32, 16)).astype(np.float32), tf.bfloat16)
    upstream = rng.normal(size=(32, 24))

    def plain(values):
        rows64, kernel64, bias64 = values
        y64 = rows64 @ kernel64 + bias64
        return _gelu64(y64) if activation == "gelu" else y64

    checks = bf16_values_and_gradients(
        lambda: dense_rows(layer, rows, training=True, activation=activation), plain, [rows],
        [layer.kernel, layer.bias], upstream,
    )  # fmt: skip
    for name, (actual, reference) in zip(("y", "drows", "dkernel", "dbias"), checks, strict=True):
        assert max_error(actual, reference) < 8 * BF16_UNIT, name


def _fused_products(training: bool) -> collections.Counter:
    """Op types containing 'MatMul' in the graph Grappler runs for a bf16 dense layer with
    GELU, forward and gradients: the ops under the layer's own (unique) name, so that graphs
    other tests instantiated in this process are not counted."""
    from tensorflow.python.eager import context

    from bench.serving_graph import op_key

    layer = _dense(64, 32, seed=5)

    @tf.function
    def step(rows):
        with tf.GradientTape() as tape:
            y = dense_rows(layer, rows, training=training, activation="gelu")
            loss = tf.reduce_sum(tf.cast(y, tf.float32))
        return tape.gradient(loss, [layer.kernel, layer.bias])

    rows = tf.cast(tf.random.stateless_normal([128, 32], [1, 2]), tf.bfloat16)
    concrete = step.get_concrete_function(tf.TensorSpec([128, 32], tf.bfloat16))
    context.enable_run_metadata()
    try:
        concrete(rows)  # the first call instantiates the function: its graphs are recorded
        metadata = context.export_run_metadata()
    finally:
        context.disable_run_metadata()
    nodes = [
        node for function in metadata.function_graphs for graph in function.partition_graphs
        for node in graph.node if f"{layer.name}/" in node.name
    ]  # fmt: skip
    assert nodes, "no graph of the step was recorded"
    return collections.Counter(op for op in map(op_key, nodes) if "MatMul" in op)


def test_bfloat16_training_products_are_not_fused_with_their_bias():
    trained = _fused_products(training=True)
    assert trained and not [op for op in trained if "Fused" in op], trained
    # The inference form of the same layer keeps the fused kernel: the check can see one.
    assert [op for op in _fused_products(training=False) if "Fused" in op]


def test_generator_logits_leave_in_float32_under_mixed_bfloat16():
    from electra_tf.config import ModelConfig
    from electra_tf.modeling.embeddings import Embeddings
    from electra_tf.modeling.heads import GeneratorHead

    config = ModelConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, embedding_size=8,
    )  # fmt: skip
    embeddings = Embeddings(config, dtype="mixed_bfloat16")
    embeddings.build(None)
    head = GeneratorHead(config, embeddings, dtype="mixed_bfloat16")
    head.output_bias.assign(np.linspace(-1.0, 1.0, 50).astype(np.float32))
    hidden = tf.cast(tf.random.stateless_normal([2, 4, 16], [3, 4]), tf.bfloat16)
    with tf.GradientTape() as tape:
        logits = head(hidden)
        loss = tf.reduce_sum(logits * tf.range(50, dtype=tf.float32))
    dbias = tape.gradient(loss, head.output_bias)
    assert logits.dtype == tf.float32 and dbias.dtype == tf.float32
    # The bias is added in float32: the logits minus the bias are the bf16 product's values.
    product = np.asarray(logits) - head.output_bias.numpy()
    rounded = np.asarray(tf.cast(tf.cast(product, tf.bfloat16), tf.float32))
    np.testing.assert_allclose(product, rounded, rtol=0, atol=1e-6)
    np.testing.assert_allclose(dbias.numpy(), 8.0 * np.arange(50), rtol=1e-6)
