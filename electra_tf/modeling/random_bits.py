"""Random numbers made inside the XLA cluster that uses them, from a stateless seed.

TensorFlow's Philox kernel makes random words at about 6 ns each on a 2-core AMD EPYC (Zen 4,
one thread, 2^20 words by `tf.random.stateless_uniform`: 6.5 ms; XLA's own generator took
14 ms). An ELECTRA-Small train step needs about 80 million random numbers (dropout's masks
and the sampler's Gumbel noise): drawn that way, with the ops around them, an eighth of a
bfloat16 step's busy time on that CPU. Here element
i of a draw (its flat row-major index, from 0, plus the draw's `start`) gets

    mix64((key XOR i) * GAMMA),

mix64 being SplitMix64's output function (Stafford's Mix13), GAMMA SplitMix64's Weyl
increment (odd, so the product is a bijection), and key mix64 of the seed (`seed_key`): as a
stream, SplitMix64's outputs in another order. In one fused loop that is about 0.7 ns an
element (2^20 of them, one thread, on that CPU), and nothing is written to memory but what
uses them. Two seeds' streams
share an input only where key1 XOR key2 = i XOR j, which needs the two keys to agree in every
bit above the draw's size (about 2^-38 for a pair at 2^26 elements). `tests/test_dropout.py`
and `tests/test_sampling.py` check the bits against a numpy reference and for independence.

The top 23 bits are a float32 uniform's mantissa, u = m / 2^23: the numbers TensorFlow's
float32 uniform takes, each with the same probability.
"""

from __future__ import annotations

import tensorflow as tf

# The 23 mantissa bits of TensorFlow's float32 uniform.
MANTISSA_BITS = 23
# SplitMix64's Weyl increment and Mix13's two multipliers.
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _mix64(z: tf.Tensor) -> tf.Tensor:
    """SplitMix64's output function of uint64 z (a bijection on 64 bits)."""
    shift, xor = tf.bitwise.right_shift, tf.bitwise.bitwise_xor
    z = xor(z, shift(z, tf.constant(30, tf.uint64))) * tf.constant(_MIX1, tf.uint64)
    z = xor(z, shift(z, tf.constant(27, tf.uint64))) * tf.constant(_MIX2, tf.uint64)
    return xor(z, shift(z, tf.constant(31, tf.uint64)))


def seed_key(seed: tf.Tensor) -> tf.Tensor:
    """uint64 scalar key of a stateless seed [2]: int32 (Keras's layer seeds) as its 8 bytes,
    int64 (the step's `step_seeds`) as s0 XOR s1 * GAMMA, then mix64."""
    if seed.dtype == tf.int64:
        first, second = tf.unstack(tf.bitcast(seed, tf.uint64))
        return _mix64(tf.bitwise.bitwise_xor(first, second * tf.constant(_GAMMA, tf.uint64)))
    return _mix64(tf.bitcast(tf.cast(seed, tf.int32), tf.uint64))  # int32 [2] -> one uint64


def mantissas(shape: tf.Tensor, key: tf.Tensor, start: tf.Tensor | int = 0) -> tf.Tensor:
    """uint64 [shape] of 23 random bits each: elements start, start + 1, ... of `key`'s
    stream. Traced inside the cluster that uses them."""
    # key XOR i before the product: XLA would fold i * GAMMA into a constant array, read
    # from memory at 8 bytes an element where the product costs less.
    size = tf.cast(tf.reduce_prod(shape), tf.int64)
    index = tf.cast(tf.range(size) + tf.cast(start, tf.int64), tf.uint64)
    bits = _mix64(tf.bitwise.bitwise_xor(key, index) * tf.constant(_GAMMA, tf.uint64))
    shifted = tf.bitwise.right_shift(bits, tf.constant(64 - MANTISSA_BITS, tf.uint64))
    return tf.reshape(shifted, shape)


@tf.function(jit_compile=True)
def _uniform(shape, seed, start):
    return uniforms(shape, seed, start)


def uniforms(shape: tf.Tensor, seed: tf.Tensor, start: tf.Tensor | int = 0) -> tf.Tensor:
    """`uniform`'s values, traced inside the cluster that uses them (`uniform` is its own
    cluster; the Gumbel sampler's scores make them in theirs)."""
    return tf.cast(mantissas(shape, seed_key(seed), start), tf.float32) * (2.0**-MANTISSA_BITS)


def uniform(shape, seed: tf.Tensor, start: tf.Tensor | int = 0) -> tf.Tensor:
    """float32 [shape] in [0, 1), m / 2^23 for `mantissas`: elements start, start + 1, ... of
    the stream of `seed` (int [2]), so rows of a larger draw are the draw from that row's
    offset. One XLA cluster: `shape` must be known when it runs, and where it is known when
    traced it is passed as numbers, so that the graph's shapes stay static."""
    static = tf.get_static_value(shape)
    shape = tuple(int(d) for d in static) if static is not None else tf.cast(shape, tf.int32)
    return _uniform(shape, seed, tf.cast(start, tf.int64))
