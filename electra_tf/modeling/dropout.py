"""Dropout with the original's keep rule, its random bits made inside the kernel that applies
the mask.

The original (`tf.nn.dropout`, TF1 and TF2 alike) draws a float32 uniform u per element and
keeps it where u >= rate, scaled by 1 / (1 - rate). TensorFlow builds u from 23 random bits m
(u = m / 2^23), so an element is kept exactly when m >= K := ceil(rate * 2^23)
(`keep_threshold`; tests/test_dropout.py checks K against TensorFlow's float construction for
every m). That rule, and so the keep probability 1 - K / 2^23, is the original's to the last
bit; only the generator of m differs.

Here m is made where it is used, inside the XLA cluster that scales the tensor (`_fused_drop`,
and `residual_norm`'s clusters): `random_bits.mantissas` of the call's stateless seed (int32
[2], from the layer's Keras random generator, so `keras.utils.set_random_seed` and a layer's
`seed` reproduce the masks) at each element's flat index. The backward makes the same bits
again from the same seed instead of keeping a mask: no mask tensor is written or read. Forward
and backward on [16, 4, 128, 128] on a 2-core AMD EPYC Zen 4, one thread: 2.34 ms, against 5.87
ms with 24 Philox bits per element drawn apart (this module before) and 7.31 ms for Keras's
dropout (`python -m bench.fusion_micro --rounds 1 --intra 1`, its dropout rows).
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import tensorflow as tf
import tf_keras as keras

from electra_tf.modeling.random_bits import MANTISSA_BITS, mantissas, seed_key
from electra_tf.modeling.utils import fused


def keep_threshold(rate: float) -> int | None:
    """K of the module docstring for a float32 `rate`: keep where the 23-bit m >= K. None where
    the rule keeps nothing (a rate that rounds to 1.0 in float32)."""
    first_kept = math.ceil(float(np.float32(rate)) * 2**MANTISSA_BITS)  # exact: 24-bit rate32
    return None if first_kept >= 2**MANTISSA_BITS else first_kept


def kept(x: tf.Tensor, seed: tf.Tensor, threshold: tf.Tensor) -> tf.Tensor:
    """bool like x: where dropout keeps x's elements for `seed` (int32 [2]) and `threshold`
    (uint64 K). Traced inside the clusters that apply it; the same mask for any x of that size."""
    return mantissas(tf.shape(x), seed_key(seed)) >= threshold


def threshold_tensor(rate: float) -> tf.Tensor:
    """uint64 K for `rate`; a ValueError where the rule keeps nothing."""
    threshold = keep_threshold(rate)
    if threshold is None:
        raise ValueError(f"dropout rate {rate} keeps nothing; Keras's Dropout handles it")
    return tf.constant(threshold, tf.uint64)


@fused
def _fused_keep_mask(x, seed, threshold):
    return kept(x, seed, threshold)


def keep_mask(shape, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """bool [shape]: the mask a Dropout call with `seed` applies to a tensor of `shape` (for
    tests and callers that need the mask itself; the layer never builds it)."""
    return _fused_keep_mask(tf.zeros(shape, tf.bool), seed, threshold_tensor(rate))


def drop(x: tf.Tensor, seed: tf.Tensor, rate: float) -> tf.Tensor:
    """x * (1 / (1 - rate)) where `kept`, else 0, as tf.nn.dropout computes it (the scale rounded
    once to x's dtype), with the same rule for the gradient. Each direction is one fused pass
    (`_fused_drop`, an XLA cluster) that makes the mask's bits as it goes."""
    threshold = threshold_tensor(rate)
    scale = tf.constant(1.0 / (1.0 - rate), x.dtype)

    @tf.custom_gradient
    def apply(x):
        backward = lambda dy: _fused_drop(dy, seed, threshold, scale)  # noqa: E731
        return _fused_drop(x, seed, threshold, scale), backward

    return apply(x)


@fused
def _fused_drop(x, seed, threshold, scale):
    return tf.where(kept(x, seed, threshold), x * scale, tf.zeros_like(x))


class _SeedFeed:
    """The seeds of the Dropout calls traced inside one `seeds_from` block: the i-th call's is
    base + [0, i] (distinct 64-bit words, each mixed into a key by `random_bits.seed_key`)."""

    def __init__(self, base: tf.Tensor):
        self.base = tf.cast(base, tf.int32)
        self.count = 0

    def next(self) -> tf.Tensor:
        self.count += 1
        return self.base + tf.constant([0, self.count], tf.int32)


_FEEDS: list[_SeedFeed] = []


@contextlib.contextmanager
def seeds_from(base: tf.Tensor):
    """Within the block, every `Dropout` call takes its mask's seed from `base` (int [2]), one
    per call in the order traced, instead of drawing from its generator: a traced function that
    takes `base` as an argument has no random state of its own, so calling it twice with two
    bases gives two sets of masks (two inlined copies of a stateful draw would repeat them)."""
    _FEEDS.append(_SeedFeed(base))
    try:
        yield
    finally:
        _FEEDS.pop()


class GeneratorSeeds(tf.Module):
    """Stands in for a `Dropout` layer's Keras random generator (`draw_seeds_from`): each
    training call's mask seed is one draw of `generator`, a `tf.random.Generator` whose state
    is a variable the model's checkpoint holds. Keras's default generator draws from legacy
    stateful ops whose state lives in the kernels and restarts with every process, so a run
    resumed from a checkpoint would repeat its first masks; this one continues the stream, as
    the pretrainer's `model.rng` does for the masking.

    Args:
      generator: the model's generator (one for every layer: calls draw in program order).
    """

    # What Keras reads of its own generator: the layer's config stays the legacy one's.
    _rng_type = "legacy_stateful"

    def __init__(self, generator: tf.random.Generator):
        super().__init__(name="dropout_seeds")
        self.generator = generator

    def _maybe_init(self) -> None:
        """Keras builds its generator lazily; this one exists already."""

    def make_seed_for_stateless_op(self) -> tf.Tensor:
        return self.generator.make_seeds()[:, 0]  # int64 [2]

    def dropout(self, inputs, rate, noise_shape=None):
        """Keras's own path (float16, a noise shape), from the same stream."""
        seed = self.make_seed_for_stateless_op()
        return tf.nn.experimental.stateless_dropout(inputs, rate, seed, noise_shape)


def draw_seeds_from(layer: keras.layers.Layer, generator: tf.random.Generator) -> int:
    """Makes every `Dropout` under `layer` draw its masks' seeds from `generator`; returns how
    many. Not tracked as a dependency (Keras keeps its generator out of checkpoints too): the
    owner tracks `generator` itself."""
    dropouts = [m for m in layer.submodules if isinstance(m, Dropout)]
    for dropout in dropouts:
        # Past Keras's attribute tracking, as Keras assigns its own generator.
        object.__setattr__(dropout, "_random_generator", GeneratorSeeds(generator))
    return len(dropouts)


class Dropout(keras.layers.Dropout):
    """Keras's Dropout (same arguments, config and scale) whose float32 and bfloat16 masks are
    the module docstring's: the original's keep probability, the bits made in the kernel.

    Under mixed_bfloat16 the mask is the float32 one of the same seed (it does not depend on
    the dtype) and the scale is `tf.nn.dropout`'s in bfloat16; Keras's own bfloat16 path
    draws its uniforms in bfloat16, 7 random bits, which kept 115/128 = 0.898 of the elements
    at rate 0.1, not 0.9. float16, a `noise_shape`, and a rate that keeps nothing take
    Keras's own path.

    Inputs: any float tensor; outputs: the same shape and dtype.
    """

    def own_mask(self, inputs: tf.Tensor) -> bool:
        """Whether this layer makes `inputs`' mask by `kept` (else Keras's path runs)."""
        return (
            inputs.dtype in (tf.float32, tf.bfloat16)
            and self.noise_shape is None
            and isinstance(self.rate, (int, float))
            and self.rate != 0
            and keep_threshold(self.rate) is not None
        )

    def applies_in_kernel(self, inputs: tf.Tensor) -> bool:
        """Whether a caller's fused kernel may apply this layer's dropout to `inputs` itself,
        from `call_seed` with `kept` and the scale 1 / (1 - rate) (`residual_norm`,
        `attention_softmax`): where the layer makes its own mask, or drops nothing."""
        return self.own_mask(inputs) or self.rate == 0

    def call_seed(self) -> tf.Tensor | None:
        """int32 [2]: the seed of one training call's mask (one draw of the layer's generator),
        for a caller that applies the mask inside a fused kernel of its own; None at rate 0
        (no mask). Only where `applies_in_kernel(inputs)`."""
        if self.rate == 0:
            return None
        with tf.name_scope("dropout"):
            return self._stateless_seed()

    def call(self, inputs, training=None):
        if training is None:
            training = keras.backend.learning_phase()
        static = tf.get_static_value(training)
        if static is not None and not static:
            # Inference: the input itself, not Keras's `tf.identity` of it. A Session (TF
            # Serving's runtime) still holds that Identity when Grappler's remapper runs, and
            # one between a dense product and the residual sum kept the sum out of the product's
            # fused kernel (the function runtime prunes it first).
            return inputs
        if self.own_mask(inputs):

            def dropped():
                return drop(inputs, self.call_seed(), self.rate)

        elif _FEEDS and self.rate != 0:  # Keras's stateless path, from the block's seed

            def dropped():
                seed = self._stateless_seed()
                return tf.nn.experimental.stateless_dropout(
                    inputs, self.rate, seed, self.noise_shape
                )

        else:
            return super().call(inputs, training=training)
        return tf.__internal__.smart_cond.smart_cond(training, dropped, lambda: tf.identity(inputs))

    def _stateless_seed(self) -> tf.Tensor:
        """int [2] for this call, from the layer's Keras random generator: its stateless seed
        where it has one, else one draw of a stateful op seeded as Keras seeds its own
        dropout op (the global seed and the layer's `seed`); inside `seeds_from`, the block's
        next seed."""
        if _FEEDS:
            return _FEEDS[-1].next()
        generator = self._random_generator
        seed = generator.make_seed_for_stateless_op()
        if seed is not None:
            return tf.cast(seed, tf.int32)
        return tf.random.uniform(
            [2], maxval=tf.int32.max, dtype=tf.int32, seed=generator.make_legacy_seed()
        )
