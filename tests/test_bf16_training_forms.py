"""The bfloat16 training forms that keep oneDNN on AMX: a dense layer's product apart from its
bias (`modeling.dense_forms.dense_rows`), the GELU with the bias inside its cluster, and the
generator's vocabulary logits in float32.

Each is checked against float64 automatic differentiation of the plain formula on the same
bf16-rounded inputs (`helpers_precision.bf16_values_and_gradients` and its tolerance rule: a few
bf16 units of the largest reference value), and the product's separation is checked in the
graph Grappler actually runs, beside the inference form, which keeps the fused kernel (so the
check can fail). Every bias gradient of a bfloat16 step is summed in float32 (TensorFlow's
bfloat16 BiasAddGrad accumulates in bfloat16).
"""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from helpers_precision import (
    BF16_UNIT,
    NO_ONEDNN_BFLOAT16,
    bf16_values_and_gradients,
    max_error,
)

from electra_tf.modeling.dense_forms import dense_rows
from electra_tf.runtime.device_defaults import onednn_runs_bfloat16


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


def _bias_gradient_error(dbias, upstream) -> float:
    """max_error of a bias gradient against float64's sum over rows of the bf16-rounded
    upstream gradient (the values the step's other gradients use)."""
    rounded = np.asarray(tf.cast(tf.cast(upstream, tf.bfloat16), tf.float64))
    return max_error(dbias, rounded.reshape(-1, rounded.shape[-1]).sum(axis=0))


def test_bias_add_train_sums_its_gradient_in_float32():
    """Over 2,048 rows TensorFlow's bfloat16 BiasAddGrad (a bfloat16 accumulator) is off by
    several percent; `bias_add_train` sums the same bf16 gradient in float32 (the control
    below shows the check can see the difference)."""
    from electra_tf.modeling.dense_forms import bias_add_train

    rng = np.random.default_rng(9)
    product = tf.cast(rng.normal(size=(2048, 96)).astype(np.float32), tf.bfloat16)
    bias = tf.Variable(rng.normal(size=96).astype(np.float32))
    upstream = rng.normal(0.05, 1.0, (2048, 96)).astype(np.float32)
    with tf.GradientTape() as tape:
        tape.watch(product)
        out = bias_add_train(product, bias)
        loss = tf.reduce_sum(tf.cast(out, tf.float32) * upstream)
    dproduct, dbias = tape.gradient(loss, [product, bias])
    assert dproduct.dtype == tf.bfloat16 and dbias.dtype == tf.float32
    np.testing.assert_array_equal(
        np.asarray(tf.cast(dproduct, tf.float32)),
        np.asarray(tf.cast(tf.cast(upstream, tf.bfloat16), tf.float32)),
    )
    assert _bias_gradient_error(dbias, upstream) < 1e-6
    control = tf.raw_ops.BiasAddGrad(out_backprop=tf.cast(upstream, tf.bfloat16))
    assert _bias_gradient_error(control, upstream) > 4 * BF16_UNIT


def _graph_nodes(graph_def) -> list:
    """Every NodeDef of a GraphDef and of the functions in its library."""
    return [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]


def _bias_add_grads(graph_def) -> collections.Counter:
    """Counter of the dtype names of every BiasAddGrad in a GraphDef and its functions."""
    return collections.Counter(
        tf.dtypes.as_dtype(n.attr["T"].type).name
        for n in _graph_nodes(graph_def)
        if n.op == "BiasAddGrad"
    )


def test_bfloat16_pretraining_step_sums_no_bias_gradient_in_bfloat16(tmp_path):
    """Every bias gradient of a mixed_bfloat16 pre-training step (query/key/value, the
    embedding projection, both heads, Electric's cloze head aside) is summed in float32: the
    traced step holds no bfloat16 BiasAddGrad, where a Keras Dense differentiated under the
    same policy holds one."""
    from helpers_pretrainer import TINY_RUN_HPARAMS, write_bert_layout_vocab

    from electra_tf.config import pretraining_config
    from electra_tf.runs.pretraining_model import build_model, build_optimizer

    write_bert_layout_vocab(tmp_path)
    hparams = {**TINY_RUN_HPARAMS, "train_batch_size": 4, "precision": "mixed_bfloat16"}
    hparams["embedding_size"] = 24  # not the hidden size: the step has an embedding projection
    config = pretraining_config("bias_grads", str(tmp_path), hparams=hparams)
    seq = config.max_seq_length
    keras.mixed_precision.set_global_policy(config.precision)
    try:
        model = build_model(config)
        model.compile(optimizer=build_optimizer(config, model))
        spec = {
            k: tf.TensorSpec([4, seq], tf.int32) for k in ("input_ids", "input_mask", "segment_ids")
        }
        step = tf.function(model.train_step).get_concrete_function(spec)
        assert model.discriminator.embeddings_project is not None
        dense = _dense(8, 16, seed=12)

        @tf.function
        def keras_dense(rows):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.cast(dense(rows), tf.float32))
            return tape.gradient(loss, dense.bias)

        control = keras_dense.get_concrete_function(tf.TensorSpec([4, 16], tf.bfloat16))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    counts = _bias_add_grads(step.graph.as_graph_def())
    assert counts["float32"] > 0 and counts["bfloat16"] == 0, counts
    assert _bias_add_grads(control.graph.as_graph_def())["bfloat16"] == 1


@pytest.mark.parametrize("head", ["discriminator", "generator"])
def test_pretraining_heads_in_a_bfloat16_step_match_float64(head):
    """The heads' dense layers in a bfloat16 training step (`dense_train_rows`: the product
    apart, GELU and the bias in one cluster, the bias gradients in float32) on 2,048 rows,
    against float64."""
    from electra_tf.config import ModelConfig
    from electra_tf.modeling.embeddings import Embeddings
    from electra_tf.modeling.heads import DiscriminatorHead, GeneratorHead

    config = ModelConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, embedding_size=8,
    )  # fmt: skip
    rng = np.random.default_rng(13)
    hidden = tf.cast(rng.normal(0.0, 1.0, (16, 128, 16)).astype(np.float32), tf.bfloat16)
    if head == "discriminator":
        layer = DiscriminatorHead(config, dtype="mixed_bfloat16")
        dense, last = layer.dense, layer.dense_1
        upstream = rng.normal(0.1, 1.0, (16, 128))
        call = lambda: layer(hidden, training=True)  # noqa: E731
    else:
        embeddings = Embeddings(config, dtype="mixed_bfloat16")
        embeddings.build(None)
        layer = GeneratorHead(config, embeddings, dtype="mixed_bfloat16")
        dense, last = layer.dense, None
        upstream = rng.normal(0.1, 1.0, (16, 128, 40))
        call = lambda: tf.cast(layer(hidden, training=True), tf.bfloat16)  # noqa: E731
    for variable in (dense.kernel, dense.bias):
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype(np.float32))
    variables = [dense.kernel, dense.bias]

    def plain(values):
        x64, kernel64, bias64 = values[:3]
        h = _gelu64(tf.einsum("bsw,wu->bsu", x64, kernel64) + bias64)
        if head == "discriminator":
            return tf.einsum("bsu,uo->bso", h, values[3])[..., 0] + values[4][0]
        mean = tf.reduce_mean(h, -1, keepdims=True)
        var = tf.reduce_mean(tf.square(h - mean), -1, keepdims=True)
        normed = (h - mean) * tf.math.rsqrt(var + 1e-12) * tf.cast(
            layer.layer_norm.gamma, tf.float64
        ) + tf.cast(layer.layer_norm.beta, tf.float64)
        table = tf.cast(embeddings.word_embeddings, tf.float64)
        return tf.einsum("bse,ve->bsv", normed, table) + tf.cast(layer.output_bias, tf.float64)

    if last is not None:
        variables += [last.kernel, last.bias]
    checks = bf16_values_and_gradients(call, plain, [hidden], variables, upstream)
    names = ("y", "dhidden", "dkernel", "dbias", "dkernel_1", "dbias_1")
    for name, (actual, reference) in zip(names, checks, strict=False):
        assert max_error(actual, reference) < 8 * BF16_UNIT, (head, name)


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


@pytest.mark.skipif(not onednn_runs_bfloat16(), reason=NO_ONEDNN_BFLOAT16)
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


def _layer_norm64(x, gamma, beta):
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_residual_norm_cluster_matches_float64(rate):
    from electra_tf.modeling.dropout import keep_mask
    from electra_tf.modeling.residual_norm import residual_norm_train

    rng = np.random.default_rng(6)
    n, width = 48, 32
    product = tf.cast(rng.normal(0.0, 1.0, (n, width)).astype(np.float32), tf.bfloat16)
    residual = tf.cast(rng.normal(0.0, 2.0, (n, width)).astype(np.float32), tf.bfloat16)
    bias = tf.Variable(rng.normal(0.0, 0.5, width).astype(np.float32))
    gamma = tf.Variable(rng.normal(1.0, 0.2, width).astype(np.float32))
    beta = tf.Variable(rng.normal(0.0, 0.2, width).astype(np.float32))
    seed = tf.constant([11, 12]) if rate else None
    # The mask the cluster makes from the seed, as a Dropout call with that seed applies it.
    keep = keep_mask([n, width], rate, seed) if rate else None
    scale = 1.0 / (1.0 - rate)
    upstream = rng.normal(size=(n, width))

    def plain(values):
        product64, residual64, bias64, gamma64, beta64 = values
        pre = (product64 + bias64) * scale
        if keep is not None:
            pre = tf.where(keep, pre, tf.zeros_like(pre))
        return _layer_norm64(residual64 + pre, gamma64, beta64)

    checks = bf16_values_and_gradients(
        lambda: residual_norm_train(product, bias, seed, rate, residual, gamma, beta, 1e-12),
        plain, [product, residual], [bias, gamma, beta], upstream,
    )  # fmt: skip
    names = ("y", "dproduct", "dresidual", "dbias", "dgamma", "dbeta")
    for name, (actual, reference) in zip(names, checks, strict=True):
        assert max_error(actual, reference) < 4 * BF16_UNIT, name
    if keep is not None:  # dropped elements get no gradient
        assert not np.asarray(tf.cast(checks[1][0], tf.float32))[~keep.numpy()].any()


def test_bfloat16_training_layer_ends_each_sublayer_in_one_cluster():
    """A bfloat16 training step of a TransformerLayer (dropout off) against the same layer in
    float32: the residual clusters carry the two bias-free outputs (no BiasAdd left for them),
    query, key and value are one product, with the same outputs and gradients within bf16's
    error."""
    from electra_tf.config import ModelConfig
    from electra_tf.modeling.transformer import TransformerLayer

    config = ModelConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    layers = {p: TransformerLayer(config, dtype=p) for p in ("float32", "mixed_bfloat16")}
    for layer in layers.values():
        layer(tf.zeros([1, 4, 32]), tf.zeros([1, 1, 1, 4]))
    layers["mixed_bfloat16"].set_weights(layers["float32"].get_weights())
    hidden = tf.random.stateless_normal([2, 8, 32], [7, 8])
    bias = tf.zeros([2, 1, 1, 8])
    results = {}
    for precision, layer in layers.items():
        x = tf.cast(hidden, layer.compute_dtype)
        with tf.GradientTape() as tape:
            out = tf.cast(layer(x, bias, training=True), tf.float32)
            loss = tf.reduce_sum(out * tf.range(32, dtype=tf.float32) / 32.0)
        names = [v.name.split("/", 1)[1] for v in layer.trainable_variables]
        grads = dict(zip(names, tape.gradient(loss, layer.trainable_variables), strict=True))
        results[precision] = out, grads
    out32, grads32 = results["float32"]
    out16, grads16 = results["mixed_bfloat16"]
    assert max_error(out16, out32) < 8 * BF16_UNIT
    for name in ("output_dense/bias:0", "attention_output/bias:0", "output_layer_norm/gamma:0"):
        assert max_error(grads16[name], grads32[name]) < 16 * BF16_UNIT, name
    # Query, key and value from one joined product: each variable gets its own gradient (the
    # key's bias has none: it shifts a query's scores all alike, which the softmax ignores).
    for name in ("query/kernel:0", "key/kernel:0", "value/kernel:0", "query/bias:0",
                 "value/bias:0"):  # fmt: skip
        assert max_error(grads16[name], grads32[name]) < 16 * BF16_UNIT, name

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(
                tf.cast(layers["mixed_bfloat16"](x, bias, training=True), tf.float32)
            )
        return tape.gradient(loss, layers["mixed_bfloat16"].trainable_variables)

    graph = step.get_concrete_function(tf.TensorSpec([2, 8, 32], tf.bfloat16)).graph
    ops = [op.name for op in graph.get_operations() if op.type in ("BiasAdd", "BiasAddGrad")]
    assert not [name for name in ops if "output_dense" in name or "attention_output" in name], ops
    assert any("residual_norm_train" in op.name for op in graph.get_operations())
    products = [op.name for op in graph.get_operations() if op.type == "MatMul"]
    assert [name for name in products if "query_key_value" in name], products
    assert not [name for name in products if "/query/" in name or "/key/" in name], products
    # The attention weights' softmax and dropout: one form each way (`attention_softmax`).
    assert any("attention_softmax_train" in op.name for op in graph.get_operations())


def _scores_and_padding(rng, shape):
    """bf16 scores [batch, heads, seq, seq] with the last quarter of the keys padded (-10000)."""
    scores = rng.normal(0.0, 3.0, shape).astype(np.float32)
    scores[..., -shape[-1] // 4 :] -= 10000.0
    return tf.cast(scores, tf.bfloat16)


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_attention_softmax_cluster_matches_float64(rate):
    from electra_tf.modeling.attention_softmax import softmax_dropout_train
    from electra_tf.modeling.dropout import keep_mask

    rng = np.random.default_rng(9)
    shape = (2, 3, 8, 16)
    scores = _scores_and_padding(rng, shape)
    seed = tf.constant([5, 6]) if rate else None
    keep = keep_mask(shape, rate, seed) if rate else None
    # The forward's scale, rounded to bf16 as tf.nn.dropout rounds it.
    scale = float(tf.cast(tf.constant(1.0 / (1.0 - rate), tf.bfloat16), tf.float64))
    upstream = rng.normal(size=shape)

    def plain(values):
        probs = tf.nn.softmax(values[0], axis=-1)
        return probs if keep is None else tf.where(keep, probs * scale, tf.zeros_like(probs))

    checks = bf16_values_and_gradients(
        lambda: softmax_dropout_train(scores, seed, rate), plain, [scores], [], upstream
    )
    for name, (actual, reference) in zip(("probs", "dscores"), checks, strict=True):
        assert max_error(actual, reference) < 4 * BF16_UNIT, name
    dscores = np.asarray(tf.cast(checks[1][0], tf.float32))
    assert not dscores[..., -shape[-1] // 4 :].any()  # padded keys: weight 0, no gradient
    if keep is not None:  # dropped weights: 0 forward
        assert not np.asarray(tf.cast(checks[0][0], tf.float32))[~keep.numpy()].any()


@pytest.mark.skipif(not onednn_runs_bfloat16(), reason=NO_ONEDNN_BFLOAT16)
def test_attention_softmax_forward_is_the_float32_softmax_rounded_once():
    """oneDNN's bfloat16 softmax computes in float32 and rounds once: the weights of the form
    the step had (float32 softmax, then a cast), to the last bit."""
    from electra_tf.modeling.attention_softmax import softmax_dropout_train, softmax_probs

    scores = _scores_and_padding(np.random.default_rng(10), (4, 4, 32, 128))
    np.testing.assert_array_equal(
        np.asarray(tf.cast(softmax_dropout_train(scores, None, 0.0), tf.float32)),
        np.asarray(tf.cast(softmax_probs(scores), tf.float32)),
    )


def test_attention_softmax_inside_xla_keeps_the_float32_softmax():
    """Compiled by XLA (`jit_compile`), a bfloat16 softmax would be XLA's own, which rounds its
    exponentials and their sum to bfloat16: there the form keeps the float32 softmax."""
    from electra_tf.modeling.attention_softmax import softmax_dropout_train, softmax_probs

    scores = _scores_and_padding(np.random.default_rng(11), (4, 4, 32, 128))
    compiled = tf.function(jit_compile=True)
    np.testing.assert_array_equal(
        np.asarray(
            tf.cast(compiled(lambda s: softmax_dropout_train(s, None, 0.0))(scores), tf.float32)
        ),
        np.asarray(tf.cast(compiled(softmax_probs)(scores), tf.float32)),
    )


def test_span_qa_head_sums_every_bias_gradient_in_float32():
    """SQuAD's head in a bfloat16 training step: every dense layer (the start logits, the joint
    end layer and its GELU layer, the answerable classifier's two layers) sums its bias
    gradient in float32; no bfloat16 BiasAddGrad is left."""
    from electra_tf.finetuning.heads import SpanQAHead

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        head = SpanQAHead("squad")
        batch, length, width = 2, 16, 8
        encoder = {
            "sequence_output": tf.TensorSpec([batch, length, width], tf.bfloat16),
            "cls_output": tf.TensorSpec([batch, width], tf.bfloat16),
        }
        features = {
            "input_mask": tf.TensorSpec([batch, length], tf.int32),
            "segment_ids": tf.TensorSpec([batch, length], tf.int32),
            "squad_start_positions": tf.TensorSpec([batch], tf.int32),
            "squad_end_positions": tf.TensorSpec([batch], tf.int32),
            "squad_is_impossible": tf.TensorSpec([batch], tf.int32),
        }

        def zeros(spec):
            return tf.zeros(spec.shape, spec.dtype)

        # Built before the traced step, so that the tape watches the variables.
        head(tf.nest.map_structure(zeros, encoder), tf.nest.map_structure(zeros, features), True)

        @tf.function
        def step(encoder_outputs, features):
            with tf.GradientTape() as tape:
                losses, _ = head(encoder_outputs, features, training=True)
                loss = tf.reduce_sum(losses)
            return tape.gradient(loss, head.trainable_variables)

        graph_def = step.get_concrete_function(encoder, features).graph.as_graph_def()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    nodes = _graph_nodes(graph_def)
    bf16 = [
        n.name for n in nodes
        if n.op == "BiasAddGrad" and n.attr["T"].type == tf.bfloat16.as_datatype_enum
    ]  # fmt: skip
    assert not bf16, bf16
    # The start, end and answerable layers' sums in float32 (qa_hidden's and the answerable
    # hidden layer's are inside their GELU clusters).
    float32_sums = [n.name for n in nodes if n.op == "BiasAddGrad"]
    assert len(float32_sums) == 3, float32_sums
    gelu_calls = [
        n.name for n in nodes if "gelu_bias_forward" in n.attr["f"].func.name
    ]  # fmt: skip
    assert len(gelu_calls) == 2, gelu_calls  # qa_hidden and the answerable hidden layer
