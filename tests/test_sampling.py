"""gather_positions / scatter_update / gumbel_sample: hand-written cases and statistics."""

import helpers_reference_numpy as ref
import numpy as np
import tensorflow as tf

from electra_tf.pretraining.sampling import gather_positions, gumbel_sample, scatter_update


def test_gather_positions_2d_and_3d():
    seq = tf.constant([[10, 11, 12, 13], [20, 21, 22, 23]])
    positions = tf.constant([[3, 0, 3], [1, 2, 2]])
    np.testing.assert_array_equal(gather_positions(seq, positions), [[13, 10, 13], [21, 22, 22]])
    seq3 = tf.reshape(tf.range(16, dtype=tf.float32), [2, 4, 2])
    out = gather_positions(seq3, positions)
    assert out.shape == (2, 3, 2)
    np.testing.assert_array_equal(out[1, 0], [10.0, 11.0])
    np.testing.assert_array_equal(out[0, 0], [6.0, 7.0])


def test_scatter_update_floor_averages_duplicates_and_ignores_position_zero():
    seq = tf.constant([[100, 1, 2, 3, 4], [100, 1, 2, 3, 4]])
    updates = tf.constant([[10, 13, 7, 99], [5, 5, 5, 5]])
    positions = tf.constant([[2, 2, 4, 0], [0, 0, 0, 0]])
    updated, mask = scatter_update(seq, updates, positions)
    # Position 2: (10 + 13) // 2 = 11; position 0 keeps 100 although 99 was aimed at it.
    np.testing.assert_array_equal(updated, [[100, 1, 11, 3, 7], [100, 1, 2, 3, 4]])
    np.testing.assert_array_equal(mask, [[0, 0, 1, 0, 1], [0, 0, 0, 0, 0]])
    # Three duplicates and a float sequence: the plain mean.
    updated, mask = scatter_update(
        tf.zeros([1, 3]), tf.constant([[1.0, 2.0, 4.0]]), tf.constant([[1, 1, 1]])
    )
    np.testing.assert_allclose(updated, [[0.0, 7.0 / 3.0, 0.0]])
    np.testing.assert_array_equal(mask, [[0, 1, 0]])


def test_scatter_update_3d():
    seq = tf.ones([1, 3, 2])
    updated, mask = scatter_update(seq, tf.constant([[[4.0, 6.0], [2.0, 2.0]]]), [[2, 2]])
    np.testing.assert_allclose(updated, [[[1, 1], [1, 1], [3, 4]]])
    np.testing.assert_array_equal(mask, [[0, 0, 1]])


def test_scatter_update_matches_reference_on_random_cases():
    rng = np.random.default_rng(1)
    seq = rng.integers(0, 50, size=(6, 9)).astype(np.int32)
    updates = rng.integers(0, 50, size=(6, 7)).astype(np.int32)
    positions = rng.integers(0, 4, size=(6, 7)).astype(np.int32)  # many duplicates and zeros
    updated, mask = scatter_update(tf.constant(seq), tf.constant(updates), tf.constant(positions))
    want, want_mask = ref.scatter_update(seq, updates, positions)
    np.testing.assert_array_equal(updated, want)
    np.testing.assert_array_equal(mask, want_mask)


def test_gumbel_sample_never_returns_a_disallowed_token():
    # The disallowed token dominates by far; without the penalty it would be sampled ~always.
    logits = tf.tile(tf.constant([[[0.0, 0.0, 12.0, 0.0]]]), [8, 64, 1])
    original = tf.fill([8, 64], 2)
    seed = tf.constant([3, 4])
    assert np.mean(gumbel_sample(logits, seed).numpy() == 2) > 0.99
    sampled = gumbel_sample(logits, seed, disallow_ids=original).numpy()
    assert sampled.dtype == np.int32 and sampled.shape == (8, 64)
    assert not np.any(sampled == 2)
    assert set(np.unique(sampled)) == {0, 1, 3}


def test_gumbel_sample_follows_the_softmax():
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4], np.float32))
    batch = tf.tile(tf.constant(logits)[None, None], [4, 5000, 1])
    for temperature in (1.0, 2.0):
        sampled = gumbel_sample(batch, tf.constant([1, 2]), temperature=temperature).numpy()
        freq = np.bincount(sampled.ravel(), minlength=4) / sampled.size
        np.testing.assert_allclose(freq, ref.softmax(logits / temperature), atol=0.015)


def test_gumbel_sample_is_a_function_of_the_seed():
    logits = tf.random.normal([2, 5, 30])
    a = gumbel_sample(logits, tf.constant([7, 7]))
    b = gumbel_sample(logits, tf.constant([7, 7]))
    c = gumbel_sample(logits, tf.constant([7, 8]))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_xla_compiles():
    # XLA's stateless RNG is a different bit stream from the eager kernels', so compiled draws
    # are checked for their properties, and the deterministic scatter for equality.
    logits = tf.tile(tf.constant([[[0.0, 0.0, 12.0, 0.0]]]), [2, 50, 1])
    disallow = tf.fill([2, 50], 2)
    sample = tf.function(gumbel_sample, jit_compile=True)
    ids = sample(logits, tf.constant([5, 6]), 1.0, disallow).numpy()
    np.testing.assert_array_equal(ids, sample(logits, tf.constant([5, 6]), 1.0, disallow))
    assert ids.shape == (2, 50) and not np.any(ids == 2) and len(np.unique(ids)) == 3

    seq = tf.constant([[1, 2, 3, 4], [5, 6, 7, 8]])
    updates = tf.constant([[9, 4, 5, 6, 7], [1, 2, 3, 4, 5]])
    positions = tf.constant([[1, 1, 0, 3, 2], [0, 0, 0, 0, 1]])
    compiled = tf.function(scatter_update, jit_compile=True)(seq, updates, positions)
    for a, b in zip(scatter_update(seq, updates, positions), compiled, strict=True):
        np.testing.assert_array_equal(a, b)


def test_gumbel_uniforms_are_splitmix64_mantissas_of_the_step_seed():
    from electra_tf.pretraining.sampling import gumbel_uniform

    seed = np.array([-(2**62) + 12345, 0], np.int64)  # as `step_seeds` gives it: key, 0
    first, second = seed.view(np.uint64)
    with np.errstate(over="ignore"):
        key = ref.splitmix_mix64(first ^ (second * np.uint64(0x9E3779B97F4A7C15)))
    expected = ref.random_mantissas(key, 3 * 4 * 5).astype(np.float32) / np.float32(2**23)
    actual = gumbel_uniform(tf.constant([3, 4, 5]), tf.constant(seed)).numpy()
    np.testing.assert_array_equal(actual, expected.reshape(3, 4, 5))


def test_gumbel_uniform_rows_from_an_offset_and_their_distribution():
    from electra_tf.modeling.random_bits import uniform

    seed = tf.constant([77, 0], tf.int64)
    whole = uniform([4, 19, 1000], seed).numpy()
    # The second half's rows drawn on their own (another replica's part of the batch).
    np.testing.assert_array_equal(uniform([2, 19, 1000], seed, 2 * 19 * 1000).numpy(), whole[2:])
    values = whole.ravel()
    assert values.min() >= 0.0 and values.max() < 1.0
    # Uniform on [0, 1): the 10 deciles hold a tenth each (chi-square, 9 degrees of freedom,
    # under its 0.1% point), and neighbours are uncorrelated (5 standard errors).
    counts = np.histogram(values, bins=10, range=(0.0, 1.0))[0]
    expected = values.size / 10
    assert ((counts - expected) ** 2 / expected).sum() < 27.9
    assert abs(np.corrcoef(values[:-1], values[1:])[0, 1]) < 5 / np.sqrt(values.size)


def test_fused_noise_is_the_separate_ops_noise_of_the_same_uniforms():
    # Without `uniform`, the noise is made inside one XLA cluster from the seed's stream; fed
    # the same stream's uniforms, the TensorFlow ops (the original's) give the same scores up to
    # the logs' last bits, and so the same ids away from exact near-ties.
    from electra_tf.pretraining.sampling import _gumbel_scores, gumbel_noise, gumbel_uniform

    logits = tf.random.stateless_normal([4, 19, 3000], [1, 2]) * 3.0
    disallow = tf.random.stateless_uniform([4, 19], [3, 4], 0, 3000, tf.int32)
    seed = tf.constant([11, 0], tf.int64)
    uniform = gumbel_uniform(tf.shape(logits), seed)
    fused = _gumbel_scores(logits, seed, tf.constant(0, tf.int64), 2.0, disallow).numpy()
    penalty = tf.one_hot(disallow, 3000) * 1000.0
    separate = (logits / 2.0 - penalty + gumbel_noise(uniform)).numpy()
    np.testing.assert_allclose(fused, separate, rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(
        gumbel_sample(logits, seed, 2.0, disallow).numpy(),
        gumbel_sample(logits, seed, 2.0, disallow, uniform=uniform).numpy(),
    )


def test_rows_sampled_from_their_start_are_the_whole_batch_rows():
    # A part of the batch (a micro-batch, a replica's rows) samples from where its first row
    # starts in the stream: the whole batch's samples for those rows, and not another part's.
    logits = tf.random.stateless_normal([6, 5, 40], [5, 6])
    seed = tf.constant([21, 0], tf.int64)
    whole = gumbel_sample(logits, seed).numpy()
    tail = gumbel_sample(logits[4:], seed, start=4 * 5 * 40).numpy()
    np.testing.assert_array_equal(tail, whole[4:])
    assert not np.array_equal(gumbel_sample(logits[4:], seed).numpy(), whole[4:])
