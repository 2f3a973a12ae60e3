"""The project's Dropout: the original's keep rule, the bits made inside the kernel that
applies the mask (SplitMix64's output function of the seed's key and the element's index)."""

import helpers_reference_numpy as ref
import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from electra_tf.modeling.dropout import Dropout, keep_mask, keep_threshold, seeds_from

RATES = [0.1, 0.2, 0.3, 0.05, 0.5, 0.9, 1e-9, 0.123456789, 1.0 - 2.0**-23]


def _first_kept_mantissa(rate: float) -> int:
    """The independent reference: the smallest 23-bit m whose float32 uniform, built as
    TensorFlow's Philox kernel builds it (bits 0x3F800000 | m read as a float, minus 1), is >=
    the float32 rate; tf.nn.dropout keeps exactly those."""
    m = np.arange(2**23, dtype=np.uint32)
    u = (np.uint32(0x3F800000) | m).view(np.float32) - np.float32(1.0)
    kept = u >= np.float32(rate)
    return int(np.argmax(kept)) if kept.any() else 2**23


@pytest.mark.parametrize("rate", RATES)
def test_keep_rule_is_the_float_uniforms_over_all_23_bit_draws(rate):
    # Kept exactly where m >= K over all 2^23 values of m: tf.nn.dropout's probability.
    assert keep_threshold(rate) == _first_kept_mantissa(rate)


def test_a_rate_that_keeps_nothing_has_no_threshold():
    assert keep_threshold(np.nextafter(np.float32(1), np.float32(0))) is None
    with pytest.raises(ValueError, match="keeps nothing"):
        keep_mask([4], 1.0, tf.constant([1, 2]))


def test_masks_are_splitmix64_bits_of_the_seed_and_the_index():
    seed = np.array([-3, 2**31 - 5], np.int32)
    key = ref.splitmix_mix64(seed.view(np.uint64))[0]
    mantissas = ref.random_mantissas(key, 6 * 7 * 5)
    for rate in (0.1, 0.5):
        expected = (mantissas >= keep_threshold(rate)).reshape(6, 7, 5)
        np.testing.assert_array_equal(keep_mask([6, 7, 5], rate, tf.constant(seed)), expected)


def test_masks_keep_at_the_rate_with_independent_neighbours_and_seeds():
    keep = keep_mask([1000, 1000], 0.1, tf.constant([3, 4])).numpy().ravel()
    other = keep_mask([1000, 1000], 0.1, tf.constant([3, 5])).numpy().ravel()
    n = keep.size
    # 5 standard deviations of the binomial proportion.
    assert abs(keep.mean() - 0.9) < 5 * np.sqrt(0.09 / n)
    # Neighbours, elements a row apart, and the same element under the next seed.
    pairs = ((keep[:-1], keep[1:]), (keep[:-1000], keep[1000:]), (keep, other))
    for first, second in pairs:
        both = np.mean(first & second)
        assert abs(both - 0.81) < 5 * np.sqrt(0.81 * 0.19 / first.size)
    # At rate 0.5 the top bit alone decides.
    half = keep_mask([1000, 1000], 0.5, tf.constant([3, 4])).numpy()
    assert abs(half.mean() - 0.5) < 5 * np.sqrt(0.25 / n)


def test_layer_output_and_gradient_use_one_mask_and_the_scale_of_tf_nn_dropout():
    layer = Dropout(0.1)
    x = tf.random.stateless_normal([64, 32, 16], [5, 6])
    weights = tf.random.stateless_normal([64, 32, 16], [7, 8])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(y * weights)
    grad = tape.gradient(loss, x).numpy()
    y = y.numpy()
    kept = y != 0
    scale = np.float32(1.0 / (1.0 - 0.1))
    assert 0.85 < kept.mean() < 0.95
    np.testing.assert_array_equal(y[kept], x.numpy()[kept] * scale)
    np.testing.assert_array_equal(grad, np.where(kept, weights.numpy() * scale, 0.0))


def test_masks_follow_the_global_seed_and_differ_between_calls():
    x = tf.ones([8, 128])

    def run():
        keras.utils.set_random_seed(1234)
        layer = Dropout(0.3)

        @tf.function
        def twice(x):
            return layer(x, training=True), layer(x, training=True)

        return [t.numpy() for t in twice(x)]

    first, second = run()
    again = run()
    np.testing.assert_array_equal(first, again[0])
    np.testing.assert_array_equal(second, again[1])
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("dtype", ["float32", "float16"])  # our kernel; Keras's stateless path
def test_a_function_fed_its_seed_draws_new_masks_per_call_and_the_same_for_the_same_seed(dtype):
    # What the parallel micro-batches rely on: one traced body called once per part, each
    # call with its own seed, the body's Dropout calls taking theirs from it in order.
    first_layer, second_layer = Dropout(0.3, dtype=dtype), Dropout(0.3, dtype=dtype)
    x = tf.ones([8, 128], dtype)

    @tf.function(autograph=False, experimental_attributes={"_noinline": True})
    def body(seed):
        with seeds_from(seed):
            return first_layer(x, training=True), second_layer(x, training=True)

    @tf.function(autograph=False)
    def two_parts(a, b):
        return body(a), body(b)

    seed_a, seed_b = tf.constant([3, 4]), tf.constant([3, 5])
    (a1, a2), (b1, b2) = [[t.numpy() != 0 for t in part] for part in two_parts(seed_a, seed_b)]
    (c1, c2), _ = [[t.numpy() != 0 for t in part] for part in two_parts(seed_a, seed_a)]
    assert not np.array_equal(a1, b1) and not np.array_equal(a2, b2)  # two seeds, two masks
    assert not np.array_equal(a1, a2)  # two layers of one call
    np.testing.assert_array_equal(a1, c1)  # the same seed: the same masks
    np.testing.assert_array_equal(a2, c2)
    assert 0.6 < a1.mean() < 0.8


def test_inference_rate_zero_and_other_dtypes_keep_keras_behaviour():
    x = tf.random.stateless_normal([4, 8], [1, 2])
    np.testing.assert_array_equal(Dropout(0.5)(x, training=False).numpy(), x.numpy())
    np.testing.assert_array_equal(Dropout(0.0)(x, training=True).numpy(), x.numpy())
    halves = Dropout(0.5, dtype="float16")(tf.ones([4000], tf.float16), training=True)
    assert halves.dtype == tf.float16
    assert set(np.unique(halves.numpy())) <= {0.0, 2.0}
    ours, theirs = Dropout(0.25, name="d").get_config(), keras.layers.Dropout(0.25, name="d")
    assert ours == theirs.get_config()
