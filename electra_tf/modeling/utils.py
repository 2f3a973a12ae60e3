"""Small helpers shared by the modeling layers: initializers, name maps, explicit builds, and the
`InferenceOptions` that serving passes to the encoder."""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf
import tf_keras as keras

from electra_tf.config import ModelConfig
from electra_tf.modeling.graph_values import graph_constant, per_graph, true_value

# The model has no tensor-dependent Python control flow (every `if`/`for` is on config values),
# so AutoGraph's source rewriting would only cost tracing time. Decorating a train step is
# enough: layers called inside it inherit the disabled status. (Not for `call` itself: the
# wrapper's *args/**kwargs signature would make Keras pass `training`/`mask` to every layer.)
no_autograph = tf.autograph.experimental.do_not_convert

# TF1's `tf.contrib.layers.layer_norm` epsilon; every LayerNorm in the model uses it.
LAYER_NORM_EPSILON = 1e-12


def truncated_normal(config: ModelConfig) -> keras.initializers.Initializer:
    """The original's `create_initializer`: truncated normal (2 std cut-off), stddev 0.02."""
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def layer_norm(name: str = "LayerNorm", dtype=None) -> keras.layers.LayerNormalization:
    """The model's LayerNorm under `dtype` (a policy or its name; None: the global policy).

    Its variables stay float32 and it computes in float32 under every policy: under a pure
    16-bit policy (the bfloat16 serving export builds the model under "bfloat16") it takes the
    mixed one, as Keras' mixed policies already do for it. float32 and the mixed policies
    pass through unchanged."""
    policy = dtype if dtype is not None else keras.mixed_precision.global_policy()
    name_of_policy = policy if isinstance(policy, str) else getattr(policy, "name", None)
    if name_of_policy in ("bfloat16", "float16"):
        dtype = f"mixed_{name_of_policy}"
    return keras.layers.LayerNormalization(
        axis=-1, epsilon=LAYER_NORM_EPSILON, name=name, dtype=dtype
    )


@dataclasses.dataclass(frozen=True)
class InferenceOptions:
    """How the encoder computes at inference, where a serving signature wants other forms of
    the same functions than training does. Passed explicitly, as the `inference_options` call
    argument of `TransformerEncoder` (and `ElectraDiscriminator`), which hands it to its
    `Embeddings` and `TransformerLayer`s; the default, `PLAIN_INFERENCE`, is the Keras layers'
    own form, as training computes it. The serving code (`serving.module.ServingModule`)
    chooses its options and passes them when it traces its signatures.

    Both apply only to inference (`training=False`) traced into a graph: eagerly there is no
    Grappler to fuse a LayerNorm and no inter-op pool to run groups side by side, so an eager
    call computes the plain form whatever the options say.

    Attributes:
        fused_layer_norms: write float32 inference LayerNorms in the form that Grappler fuses
            into one oneDNN kernel (`apply_layer_norm`). Only for graphs that Grappler
            optimizes without gradients: where it does not fuse it, that form runs oneDNN's
            FusedBatchNorm kernel, which is less accurate than the Keras layer on rows whose
            mean is large next to their spread (an error of 1e-3 where the layer's is 2e-4,
            on a row of mean 1 and spread 1e-3); the fused `_MklLayerNorm` is as accurate as
            the layer or better. XLA fuses the Keras form itself.
        query_blocks: run every layer of a bidirectional encoder on this many consecutive
            groups of query positions (`TransformerEncoder`'s blocked form; 1 = the plain
            form). The groups share only the attention's keys and values, so an executor with
            an inter-op pool runs them side by side: on a CPU whose kernels scale badly at
            small sizes (a batch of one 128-token text), one group per core uses the cores
            where one kernel on two cores does not.
        constant_kernels: the encoder's dense kernels enter the graph as constants
            (their values when it is traced; `dense_rows`), each product with its bias (and
            GELU) fused. oneDNN prepacks a constant kernel once, and in bfloat16 only then runs
            the fused product on AMX: on a 2-core AMX Xeon, [4096, 256] x [256, 1024] with bias
            and GELU took 3.2 ms against 7.1 ms with the kernel read from a variable, whose
            fused kernel is oneDNN's generic inner product. For exports (the bfloat16 one): the
            graph no longer reads those variables, and a retrained model needs a new export.
    """

    fused_layer_norms: bool = False
    query_blocks: int = 1
    constant_kernels: bool = False

    def __post_init__(self):
        if self.query_blocks < 1:
            raise ValueError(f"query blocks must be >= 1, got {self.query_blocks}")

    def blocks(self) -> int:
        """The number of query groups to trace (1 when executing eagerly)."""
        return 1 if tf.executing_eagerly() else self.query_blocks


# The forms training computes: what every layer uses unless a caller passes other options.
PLAIN_INFERENCE = InferenceOptions()


def apply_layer_norm(
    norm: keras.layers.LayerNormalization,
    x: tf.Tensor,
    training: bool = False,
    fused: bool = False,
) -> tf.Tensor:
    """`norm(x)` over the last axis, with the same variables and epsilon. Two other forms of the
    same function: in training, `_layer_norm_train` (a hand-written gradient; under mixed
    precision in float32, as the layer computes it); at inference with `fused`
    (`InferenceOptions.fused_layer_norms`) and traced into a graph, one that Grappler fuses
    (statistics in float32; bfloat16 in and out where x is bfloat16).

    Args:
        norm: a built LayerNormalization over the last axis (its gamma, beta and epsilon).
        x: [..., width], in the layer's compute dtype.
        training: whether this is a training step (takes `_layer_norm_train`).
        fused: write the fusable form at inference (ignored eagerly and in training).

    Returns:
        [..., width], x's shape and the layer's compute dtype.

    tf_keras' LayerNormalization with the original's epsilon of 1e-12 cannot use its
    FusedBatchNorm path (that op's Python wrapper raises epsilon to 1.001e-5), so it is eight
    elementwise and reduction ops. Grappler's oneDNN remapper fuses exactly one LayerNorm
    pattern into `_MklLayerNorm`: Reshape -> FusedBatchNormV3 (training mode, unit scale, zero
    offset, empty mean/variance) -> Reshape -> Mul(gamma) -> AddV2(beta), on 2-D or 3-D input.
    The raw op keeps epsilon at 1e-12, and the remapper copies it into the fused kernel.
    """
    if training and norm.variable_dtype == "float32":
        # Under mixed precision in float32 and back, as the Keras layer computes it.
        return _layer_norm_train(
            tf.cast(x, norm.compute_dtype), norm.gamma, norm.beta, norm.epsilon
        )
    # The fusable form only where Grappler fuses it: an inference graph whose LayerNorm
    # computes in float32 (see above; its compute dtype may be a mixed policy's 16 bits).
    if training or not fused or norm.variable_dtype != "float32" or tf.executing_eagerly():
        return norm(x)
    # bfloat16 stays: a widening cast moved past the Reshape broke the pattern (3.4 against
    # 0.58 ms on [4096, 256]); `_MklLayerNorm` reads bfloat16 and computes in float32.
    dtype = tf.bfloat16 if x.dtype == tf.bfloat16 else tf.float32
    x = tf.cast(x, dtype)  # no op in float32 and bfloat16
    shape = tf.shape(x)
    width = x.shape[-1]
    rows = tf.reduce_prod(shape[:-1])
    # [1, rows, width, 1]: FusedBatchNorm in NCHW normalises each channel (here: each row) over
    # the batch and spatial dimensions (here: the row's `width` values), with batch statistics.
    channels = tf.reshape(x, [1, rows, width, 1])
    empty = tf.constant([], tf.float32)
    normalised = tf.raw_ops.FusedBatchNormV3(
        x=channels,
        scale=tf.ones([rows]),
        offset=tf.zeros([rows]),
        mean=empty,
        variance=empty,
        epsilon=norm.epsilon,
        data_format="NCHW",
        is_training=True,
    )[0]
    gamma, beta = (_cast_once(v, dtype) for v in (norm.gamma, norm.beta))
    return tf.cast(tf.reshape(normalised, shape) * gamma + beta, norm.compute_dtype)


def _cast_once(variable, dtype: tf.DType) -> tf.Tensor:
    """`variable` read and cast to `dtype` once per graph, not once per query group."""
    return per_graph(("cast", id(variable), dtype.name), lambda: tf.cast(variable, dtype))


def _layer_norm_train(x: tf.Tensor, gamma: tf.Variable, beta: tf.Variable, epsilon: float):
    """LayerNorm over the last axis, computed in float32, with its gradient written out.

    x may be float32 or bfloat16 (mixed precision: the result is cast back to x's dtype, as the
    Keras layer computes it). The same function as the layer (mean, then the variance of the
    centred values, so the same two-pass accuracy), but automatic differentiation of the layer's
    eight forward ops emits about twenty backward ops, each a pass over the activations. With
    xhat = (x - mean) * r, r = 1 / sqrt(var + eps) and g = dy * gamma:
    dx = r * (g - mean(g) - xhat * mean(g * xhat)), dgamma = sum(dy * xhat), dbeta = sum(dy).
    Each direction is one XLA cluster (`fused`), so the casts, reductions and element-wise
    steps are two or three passes over memory instead of ten; the backward recomputes the
    statistics from x rather than keeping a float32 copy of xhat. Checked against automatic
    differentiation of the Keras layer in tests/test_modeling.py.
    """

    # The name scopes (here and in `_gelu_train`) let the profile (bench/profile_breakdown.py)
    # tell these ops, and their hand-written gradients, from the rest.
    @tf.custom_gradient
    def forward(x, gamma, beta):
        with tf.name_scope("layer_norm_train"):
            output = _layer_norm_forward(x, gamma, beta, epsilon)

        def backward(dy):
            with tf.name_scope("layer_norm_train_grad"):
                return _layer_norm_backward(x, gamma, dy, epsilon)

        return output, backward

    return forward(x, gamma, beta)


# One compiled cluster per direction (`jit_compile` on a function called from a graph that is
# not compiled itself): XLA fuses the casts and element-wise steps into single loops, in
# float32. On a 2-core Zen 4 (AVX512_BF16), forward plus backward of the GELU on [4096, 1024]
# takes 4.5 ms of CPU time in bfloat16 and 4.2 ms in float32, against 14.5 and 9.3 ms as
# separate TensorFlow ops (`python -m bench.fusion_micro`
# has the forms side by side).
fused = tf.function(jit_compile=True)


@fused
def _layer_norm_forward(x, gamma, beta, epsilon):
    normalised, _ = normalise32(tf.cast(x, tf.float32), epsilon)
    return tf.cast(normalised * gamma + beta, x.dtype)


@fused
def _layer_norm_backward(x, gamma, dy, epsilon):
    normalised, inverse = normalise32(tf.cast(x, tf.float32), epsilon)
    dx, dgamma, dbeta = layer_norm_grads32(normalised, inverse, gamma, tf.cast(dy, tf.float32))
    return tf.cast(dx, x.dtype), dgamma, dbeta


def normalise32(x32, epsilon):
    """(x32 centred and scaled over its last axis, the scale 1 / sqrt(var + eps)) for float32
    x32: the LayerNorm statistics inside the clusters (here and `residual_norm`)."""
    mean = tf.reduce_mean(x32, axis=-1, keepdims=True)
    centred = x32 - mean
    inverse = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True) + epsilon)
    return centred * inverse, inverse


def layer_norm_grads32(normalised, inverse, gamma, dy32):
    """(dx, dgamma, dbeta) in float32 of a LayerNorm from `normalise32`'s two results and the
    output's gradient (`_layer_norm_train`'s formulas)."""
    width = tf.shape(dy32)[-1]
    dgamma = tf.reduce_sum(tf.reshape(dy32 * normalised, [-1, width]), axis=0)  # [width]
    dbeta = tf.reduce_sum(tf.reshape(dy32, [-1, width]), axis=0)  # [width]
    scaled = dy32 * gamma
    dx = inverse * (
        scaled
        - tf.reduce_mean(scaled, axis=-1, keepdims=True)
        - normalised * tf.reduce_mean(scaled * normalised, axis=-1, keepdims=True)
    )
    return dx, dgamma, dbeta


_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@tf.custom_gradient
def _gelu_train(x: tf.Tensor):
    """x * Phi(x) (the exact GELU) in the original's form, 0.5 * (1 + erf(x / sqrt(2))), with
    its derivative Phi(x) + x * phi(x) written out. Each direction is one XLA cluster computing
    in float32 (bfloat16 input is widened and the result rounded once): one pass over memory
    each way, where the separate ops took five (and in bfloat16 each op converted on its own).
    The backward recomputes erf from x instead of keeping Phi(x)."""
    with tf.name_scope("gelu_train"):
        output = _gelu_forward(x)

    def backward(dy):
        with tf.name_scope("gelu_train_grad"):
            return _gelu_backward(x, dy)

    return output, backward


def _gelu32(x32):
    """x * Phi(x) of float32 x, the original's erf form (inside the clusters below)."""
    return x32 * (0.5 * (1.0 + tf.math.erf(x32 * _SQRT_HALF)))


def _gelu_slope32(x32):
    """d/dx of `_gelu32`: Phi(x) + x * phi(x), for float32 x."""
    t = x32 * _SQRT_HALF
    cdf = 0.5 * (1.0 + tf.math.erf(t))
    density = tf.exp(-tf.square(t)) * _INV_SQRT_2PI  # phi(x)
    return cdf + x32 * density


@fused
def _gelu_forward(x):
    return tf.cast(_gelu32(tf.cast(x, tf.float32)), x.dtype)


@fused
def _gelu_backward(x, dy):
    slope = _gelu_slope32(tf.cast(x, tf.float32))
    return tf.cast(tf.cast(dy, tf.float32) * slope, dy.dtype)


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
    if name == "linear":
        output = dense_rows(layer, rows, training=True)
    else:
        with tf.name_scope(layer.name):
            product = tf.matmul(rows, tf.cast(layer.kernel, tf.bfloat16))  # [n, units]
            output = _gelu_bias_train(product, true_value(layer.bias))
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


def apply_activation(name: str, x: tf.Tensor, training: bool = False) -> tf.Tensor:
    """The config's `hidden_act` on x. The exact GELU in training takes `_gelu_train` (the same
    values, a shorter gradient; in x's dtype, float32 or bfloat16, as the Keras form computes
    it); inference keeps the Keras form, which the serving graph fuses into the matrix product
    before it."""
    if name == "gelu" and training and x.dtype in (tf.float32, tf.bfloat16):
        return _gelu_train(x)
    return keras.activations.get(name)(x)


def build_sublayer(layer: keras.layers.Layer, input_shape) -> None:
    """Builds a sublayer now, under its own name scope, so variables exist before any call.

    Variables are created in a fixed order at construction of the parent, which keeps
    initial values reproducible under a fixed seed and lets `variable_map()` work early.
    """
    if not layer.built:
        with tf.name_scope(layer.name):
            layer.build(input_shape)


def require_built(layer: keras.layers.Layer) -> None:
    if not layer.built:
        raise ValueError(
            f"{layer.name}: variable_map() needs built variables; call the layer or build() first"
        )


def dense_map(prefix: str, dense: keras.layers.Dense) -> dict[str, tf.Variable]:
    """`<prefix>/kernel` ([in, out], as TF1 stores it) and `<prefix>/bias`."""
    return {f"{prefix}/kernel": dense.kernel, f"{prefix}/bias": dense.bias}


def layer_norm_map(prefix: str, norm: keras.layers.LayerNormalization) -> dict[str, tf.Variable]:
    return {f"{prefix}/gamma": norm.gamma, f"{prefix}/beta": norm.beta}


class ConfiguredLayer(keras.layers.Layer):
    """A layer built from one `ModelConfig` (kept as `self.config`): serialises it in
    `get_config` and rebuilds from it in `from_config`."""

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(ModelConfig.from_dict(config.pop("config")), **config)
