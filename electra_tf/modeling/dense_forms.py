"""A dense layer's product and its bias in the forms the bfloat16 training step and the
bfloat16 export use (`dense_rows`, `dense_train_rows`), and the bias adds they are built of.
Moved out of `modeling.utils` (past its size limit); not re-exported there, which this module
imports."""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

from electra_tf.modeling.graph_values import graph_constant, true_value
from electra_tf.modeling.utils import (
    _gelu32,
    _gelu_slope32,
    apply_activation,
    build_sublayer,
    fused,
)


# Training under bfloat16 keeps a dense layer's product and its bias apart. Grappler fuses
# MatMul + BiasAdd into one oneDNN kernel, and for bfloat16 with weights that are not constants
# (training reads them from variables) that kernel is oneDNN's inner product on its generic
# `gemm:jit` path, which does not use AMX: on a 2-core AMX Xeon, [2048, 256] x [256, 1024] took
# 2.98 ms fused against 0.94 ms as a plain MatMul (oneDNN's `brg_matmul` on AMX tiles;
# `ONEDNN_VERBOSE=1` names both). float32 is not affected (the two forms time alike) and keeps
# the fused kernel, so the float32 step is unchanged.
def dense_rows(
    layer: keras.layers.Dense,
    rows: tf.Tensor,
    training: bool = False,
    activation: str | None = None,
    constant_kernel: bool = False,
) -> tf.Tensor:
    """`layer` (a built Dense, no activation of its own) on [n, width] rows, then the
    `activation` name (`apply_activation`; None: none). `constant_kernel`: at inference traced
    into a graph, the kernel is the graph constant of its value (`InferenceOptions.
    constant_kernels`), and the product keeps its bias for Grappler to fuse, whatever the
    dtype: oneDNN's inner product on a constant kernel runs on AMX.

    In bfloat16 the product is a plain MatMul and the bias is added where Grappler cannot fuse
    it into the product (see above): inside the training GELU's cluster when one follows, else
    by a BiasAdd behind a reshape, which the remapper does not look through (in training, its
    gradient summed in float32: `bias_add_train`). The same function:
    the product rounded to bfloat16 once more before the bias, as a bfloat16 Dense computes it
    without the fused kernel. At inference a layer followed by an activation keeps the fused
    kernel: there the activation is one of its post-ops, where apart it would be separate
    bfloat16 element-wise ops (TensorFlow converts each operand on its own: a [4096, 1024]
    GELU took 29 ms beside the fused kernel's 6).
    """
    linear = is_linear(layer)
    if constant_kernel and linear and not training and not tf.executing_eagerly():
        with tf.name_scope(layer.name):
            kernel = tf.cast(graph_constant(layer.kernel), rows.dtype)
            # The bias stays a variable: read as a constant too, the remapper left the
            # bfloat16 products unfused (twice the time).
            output = tf.nn.bias_add(tf.matmul(rows, kernel), tf.cast(layer.bias, rows.dtype))
        return output if activation is None else apply_activation(activation, output, training)
    apart = rows.dtype == tf.bfloat16 and linear
    if not (apart and (training or activation is None)):
        output = layer(rows)
        return output if activation is None else apply_activation(activation, output, training)
    return _product_apart(layer, rows, training, activation)


def _product_apart(layer: keras.layers.Dense, rows: tf.Tensor, training, activation):
    """`dense_rows`' bfloat16 form: the plain product, then the bias (inside the training
    GELU's cluster when `activation` is "gelu" in training, else `bias_add_train` in training
    and `unfused_bias_add` at inference), then `activation`."""
    with tf.name_scope(layer.name):
        product = tf.matmul(rows, tf.cast(layer.kernel, tf.bfloat16))  # [n, units]
        bias = true_value(layer.bias)  # float32 [units] (bfloat16 under a pure policy)
        if activation == "gelu" and training:
            return _gelu_bias_train(product, bias)
        output = bias_add_train(product, bias) if training else unfused_bias_add(product, bias)
    return output if activation is None else apply_activation(activation, output, training)


def dense_train_rows(
    layer: keras.layers.Dense, x: tf.Tensor, training, own_activation: str | None = None
) -> tf.Tensor:
    """`layer(x)` for x [..., width], except in a bfloat16 training step, where a Dense without
    an activation or with the exact GELU as its own (the heads') takes `dense_rows`' training
    forms on [n, width] rows: the product apart from its bias, the bias's gradient summed in
    float32 (`bias_add_train`, `_gelu_bias_train`). Every other case (float32, inference,
    another activation) is the Keras layer itself. `own_activation`: the name of the layer's
    activation where its function is not Keras's of that name ("gelu" for a function that
    computes the exact GELU)."""
    if training is not True or x.dtype != tf.bfloat16:
        return layer(x)
    name = (
        "linear"
        if is_linear(layer)
        else own_activation or getattr(layer.activation, "__name__", "")
    )
    if name not in ("linear", "gelu"):
        return layer(x)
    if not layer.built:  # as its first call would build it (the fine-tuning heads' layers)
        build_sublayer(layer, x.shape)
    rows = tf.reshape(x, [-1, x.shape[-1]])
    output = _product_apart(layer, rows, True, None if name == "linear" else name)
    if x.shape.rank == 2:
        return output
    return tf.reshape(output, tf.concat([tf.shape(x)[:-1], [layer.units]], axis=0))


def is_linear(layer: keras.layers.Dense) -> bool:
    """Whether a Dense layer has no activation of its own. By the activation's name: a test that
    reloads Keras' modules leaves other `linear` function objects."""
    return getattr(layer.activation, "__name__", None) == "linear"


def bias_add_train(product: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """`unfused_bias_add` in a bfloat16 training step, the bias's gradient summed in float32.

    TensorFlow's bfloat16 BiasAddGrad on a CPU accumulates in bfloat16: over 2,048 rows of
    N(0, 1) values its sums were off by 3.8% (median) and up to 9% of the largest against
    float64, where a bfloat16 `reduce_sum` (float32 inside) is off by 0.1% and float32's
    BiasAddGrad of the same values by 1e-7 (`tests/test_bf16_training_forms.py`). So the
    gradient here is float32's BiasAddGrad of the bfloat16 gradient cast to float32: the exact
    sum of the values the product's gradients use, rounded once. The product's gradient passes
    through unchanged."""

    @tf.custom_gradient
    def add(product, bias):
        def backward(dy):
            dbias = tf.raw_ops.BiasAddGrad(out_backprop=tf.cast(dy, tf.float32))
            return dy, tf.cast(dbias, bias.dtype)

        return unfused_bias_add(product, bias), backward

    return add(product, bias)


def unfused_bias_add(product: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """`tf.nn.bias_add(product, bias)` for a 2-D `product` [n, units] (bias cast to its dtype),
    written so that Grappler does not fuse it into the MatMul that made `product`: the BiasAdd
    reads a [n, 1, units] reshape, and the remapper fuses a BiasAdd only when it reads the
    MatMul directly (see `dense_rows` for why bfloat16 wants them apart)."""
    units = product.shape[-1]
    biased = tf.nn.bias_add(tf.reshape(product, [-1, 1, units]), tf.cast(bias, product.dtype))
    return tf.reshape(biased, [-1, units])


@tf.custom_gradient
def _gelu_bias_train(x: tf.Tensor, bias: tf.Tensor):
    """`_gelu_train(x + bias)` for bfloat16 x [n, units] and a float32 bias [units], the bias
    added in float32 inside the same cluster, and its gradient (the sum over rows of the
    pre-activation's gradient, in float32) computed there too, instead of a separate BiasAdd
    and a bfloat16 BiasAddGrad (1.2 ms on [2048, 1024] against 0.55 in float32)."""
    with tf.name_scope("gelu_train"):
        output = _gelu_bias_forward(x, bias)

    def backward(dy):
        with tf.name_scope("gelu_train_grad"):
            return _gelu_bias_backward(x, bias, dy)

    return output, backward


@fused
def _gelu_bias_forward(x, bias):
    return tf.cast(_gelu32(tf.cast(x, tf.float32) + bias), x.dtype)


@fused
def _gelu_bias_backward(x, bias, dy):
    dx = tf.cast(dy, tf.float32) * _gelu_slope32(tf.cast(x, tf.float32) + bias)
    return tf.cast(dx, dy.dtype), tf.reduce_sum(dx, axis=0)
