"""Dropout with the original's keep rule, drawn from 24 random bits per element instead of 32.

The original (`tf.nn.dropout`, TF1 and TF2 alike) draws a float32 uniform u per element and
keeps it where u >= rate, scaled by 1 / (1 - rate). TensorFlow builds u from the low 23 bits m
of one 32-bit Philox word, u = m / 2^23, so an element is kept exactly when
m >= ceil(rate * 2^23) =: K. Random bits are most of dropout's cost on a CPU (8.5% of the
CPU time of the ELECTRA-Small train step), and only 24 of each 32 are needed to
make that decision with the same probability: with v uniform on 24 bits, P(v >= 2K) =
P(m >= K).

`keep_mask` takes v as a 16-bit half word h and a byte b, from two stateless draws (half a
word and a quarter of a word per element):

    keep  <=>  v = h * 256 + b >= 2K  <=>  h > H  or  (h == H and b >= L),   2K = H * 256 + L

The keep probability is the original's to the last bit (1 - K / 2^23; tested exhaustively over
all 2^24 values of v in tests/test_dropout.py), the scale is `tf.nn.dropout`'s, and the
masks are drawn from a seed the layer takes from Keras's own random generator, so
`keras.utils.set_random_seed` and a layer's `seed` reproduce them as before. Forward and
backward on a million elements on one thread: 2.6 against 3.9 ms for Keras's dropout
(`python -m bench.fusion_micro --intra 1`, its dropout rows; bench/README.md has the figures).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
import tf_keras as keras

# The 23 mantissa bits TensorFlow's float32 uniform is made of; the mask compares 24.
_MANTISSA_BITS = 23
_MASK_BITS = 24


def keep_thresholds(rate: float) -> tuple[int, int] | None:
    """(H, L) of the module docstring for a float32 `rate`: keep h > H, or h == H and b >= L.

    None where the rule keeps nothing (a rate that rounds to 1.0 in float32).
    """
    rate32 = float(np.float32(rate))
    first_kept = math.ceil(rate32 * 2**_MANTISSA_BITS)  # exact: rate32 has 24 significant bits
    threshold = first_kept << (_MASK_BITS - _MANTISSA_BITS)
    if threshold >= 2**_MASK_BITS:
        return None
    return threshold >> 8, threshold & 0xFF


def _bits(size: tf.Tensor, seed: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """`size` uniform values of the unsigned `dtype` (uint16 or uint8), cut from 32-bit words."""
    per_word = 4 // dtype.size  # values per 4-byte word
    words = tf.random.stateless_uniform(
        [(size + per_word - 1) // per_word], seed, dtype=tf.uint32, minval=None, maxval=None
    )
    return tf.reshape(tf.bitcast(words, dtype), [-1])[:size]  # [size]


def keep_from_bits(
    high_bits: tf.Tensor, low_bits: tf.Tensor | None, thresholds: tuple[int, int]
) -> tf.Tensor:
    """bool, like `high_bits`: keep where h > H, or h == H and b >= L (`low_bits` b, which may
    be None where L is 0)."""
    high, low = thresholds
    high = tf.constant(high, tf.uint16)
    if low == 0:
        return high_bits >= high
    return (high_bits > high) | ((high_bits == high) & (low_bits >= tf.constant(low, tf.uint8)))


def keep_mask(shape: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """bool [shape]: True where dropout keeps the element, P = the original's keep probability.

    Args:
        shape: int [rank], the shape of the mask.
        rate: the dropout rate, 0 < rate, and below the float32 value that rounds to 1.
        seed: int [2], a stateless seed.
    """
    thresholds = keep_thresholds(rate)
    if thresholds is None:
        raise ValueError(f"dropout rate {rate} keeps nothing; Keras's Dropout handles it")
    size = tf.reduce_prod(shape)
    seeds = tf.random.experimental.stateless_split(seed, 2)  # [2, 2]
    high_bits = _bits(size, seeds[0], tf.uint16)  # [size]
    # Where L is 0 the byte never decides: keep_from_bits then ignores it, so it is not drawn.
    low_bits = None if thresholds[1] == 0 else _bits(size, seeds[1], tf.uint8)  # [size]
    keep = keep_from_bits(high_bits, low_bits, thresholds)
    return tf.reshape(keep, shape)


def scale_kept(x: tf.Tensor, keep: tf.Tensor, rate: float) -> tf.Tensor:
    """x * (1 / (1 - rate)) where `keep`, else 0, as tf.nn.dropout computes it (the scale rounded
    once to x's dtype), with the same rule for the gradient. Each direction is one fused pass
    (`_fused_scale_kept`, an XLA cluster) instead of a product, a select and their gradients;
    in bfloat16, where each separate op converts on its own, that matters most."""
    scale = tf.constant(1.0 / (1.0 - rate), x.dtype)

    @tf.custom_gradient
    def apply(x):
        return _fused_scale_kept(x, keep, scale), lambda dy: _fused_scale_kept(dy, keep, scale)

    return apply(x)


@tf.function(jit_compile=True)
def _fused_scale_kept(x, keep, scale):
    return tf.where(keep, x * scale, tf.zeros_like(x))


class Dropout(keras.layers.Dropout):
    """Keras's Dropout (same arguments, config and scale) whose float32 and bfloat16 masks come
    from `keep_mask`: the original's keep probability from 24 random bits per element.

    Under mixed_bfloat16 the mask is the float32 one of the same seed (it does not depend on
    the dtype) and the scale is `tf.nn.dropout`'s in bfloat16; Keras's own bfloat16 path
    draws its uniforms in bfloat16, 7 random bits, which kept 115/128 = 0.898 of the elements
    at rate 0.1, not 0.9. float16, a `noise_shape`, and a rate that keeps nothing take
    Keras's own path.

    Inputs: any float tensor; outputs: the same shape and dtype.
    """

    def own_mask(self, inputs: tf.Tensor) -> bool:
        """Whether this layer draws `inputs`' mask with `keep_mask` (else Keras's path runs)."""
        return (
            inputs.dtype in (tf.float32, tf.bfloat16)
            and self.noise_shape is None
            and isinstance(self.rate, (int, float))
            and self.rate != 0
            and keep_thresholds(self.rate) is not None
        )

    def keep(self, inputs: tf.Tensor) -> tf.Tensor:
        """bool like `inputs`: the training mask that `call` would draw for them (one seed of
        the layer's generator), for a caller that applies it inside a fused kernel with the
        scale 1 / (1 - rate) (`residual_norm`). Only where `own_mask(inputs)`."""
        with tf.name_scope("dropout"):
            return keep_mask(tf.shape(inputs), self.rate, self._stateless_seed())

    def call(self, inputs, training=None):
        if not self.own_mask(inputs):
            return super().call(inputs, training=training)
        if training is None:
            training = keras.backend.learning_phase()

        def dropped():
            return scale_kept(inputs, self.keep(inputs), self.rate)

        return tf.__internal__.smart_cond.smart_cond(training, dropped, lambda: tf.identity(inputs))

    def _stateless_seed(self) -> tf.Tensor:
        """int [2] for this call, from the layer's Keras random generator: its stateless seed
        where it has one, else one draw of a stateful op seeded as Keras seeds its own
        dropout op (the global seed and the layer's `seed`)."""
        generator = self._random_generator
        seed = generator.make_seed_for_stateless_op()
        if seed is not None:
            return tf.cast(seed, tf.int32)
        return tf.random.uniform(
            [2], maxval=tf.int32.max, dtype=tf.int32, seed=generator.make_legacy_seed()
        )
