"""Small helpers shared by the modeling layers: initializers, name maps, explicit builds, and the
`InferenceOptions` that serving passes to the encoder."""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf
import tf_keras as keras

from electra_tf.config import ModelConfig
from electra_tf.modeling.graph_values import per_graph

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
