"""The step's random draws, the same whatever the layout of the batch over replicas.

One replica with the global batch B, or R replicas (on one or several workers) with B / R rows
each, must corrupt every example the same way, or "two workers train as one" cannot hold. Two
things in TensorFlow get in the way, and this module takes them out:

- A `tf.random.Generator` created under a strategy hashes the replica id into every key it
  hands out, so each replica (replica 0 included) draws a different stream from the same
  state. `step_seeds` reads the generator exactly as `make_seeds` does, without that hash:
  every replica gets the seeds a lone replica would (and with no strategy the numbers are
  `make_seeds`' own, bit for bit: the default single-device step is unchanged).
- A stateless draw over a replica's B / R rows is not the same numbers as rows of a draw over
  B. The masking draws are small ([B, seq_len] and [B, N]): `global_rows_masking` gathers the
  global batch's ids and mask from every replica (one int32 all-gather), masks the whole
  global batch exactly as one replica would, and keeps this replica's rows. The sampler's
  noise is [B, N, vocab] (too large to draw whole on every replica): each replica makes only
  its rows' uniforms, starting the stream (`random_bits.mantissas`) where those rows start in
  the draw over B (`sample_row_starts`).

Row r of the global batch is row r - first of replica `replica_id_in_sync_group`, where
first = replica id x B / R: the order in which `tf.distribute` assigns per-replica batches and
in which the input pipeline (`data/pretraining_input.py`) lays the global batch out.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.ops import gen_stateless_random_ops_v2


def step_seeds(generator: tf.random.Generator, count: int) -> tf.Tensor:
    """int64 [2, count]: `generator.make_seeds(count)` without the replica hash (above).

    Advances the generator as `make_seeds` does; every replica advances its copy alike."""
    state = generator.skip(count)  # the state before the skip: [counter..., key]
    counter_size = state.shape[0] - 1
    counter = tf.bitcast(state[:counter_size], tf.uint64)
    key = tf.bitcast(state[counter_size : counter_size + 1], tf.uint64)
    keys = gen_stateless_random_ops_v2.stateless_random_uniform_full_int_v2(
        shape=[count], key=key, counter=counter, dtype=tf.int64, alg=generator.algorithm
    )  # [count]
    return tf.stack([keys, tf.zeros_like(keys)])


def replica_rows() -> tuple[tf.Tensor, int]:
    """(this replica's index, number of replicas) in the replica context; (0, 1) outside."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tf.constant(0), 1
    return tf.cast(context.replica_id_in_sync_group, tf.int32), context.num_replicas_in_sync


def global_rows_masking(mask_fn, input_ids: tf.Tensor, input_mask: tf.Tensor) -> dict:
    """`mask_fn(global_ids, global_mask)` over the whole global batch, this replica's rows.

    Args:
        mask_fn: the masking (`masking.mask_inputs` with its seed and settings bound).
        input_ids, input_mask: int [rows, seq_len], this replica's part of the batch.

    Returns:
        `mask_fn`'s dict, each value cut to this replica's rows [rows, ...].
    """
    index, replicas = replica_rows()
    if replicas == 1:
        return mask_fn(input_ids, input_mask)
    rows = tf.shape(input_ids)[0]
    local = tf.stack([tf.cast(input_ids, tf.int32), tf.cast(input_mask, tf.int32)], axis=1)
    context = tf.distribute.get_replica_context()
    everyone = context.all_gather(local, axis=0)  # [replicas * rows, 2, seq_len]
    masked = mask_fn(everyone[:, 0], everyone[:, 1])
    first = index * rows
    return {key: value[first : first + rows] for key, value in masked.items()}


def sample_row_starts(rows: tf.Tensor, row_size: int) -> tf.Tensor:
    """int64 [rows]: where each of this replica's rows starts in the sampler's stream of
    uniforms over the global batch (row r of the global batch at r * row_size, row_size being
    num_masked * vocab), so that each replica's noise is its rows of the one draw over the
    global batch (`sampling.gumbel_uniform`), and a slice of the rows keeps its own."""
    index, _ = replica_rows()  # 0 with one replica
    first = tf.cast(index * rows, tf.int64)
    return (first + tf.range(tf.cast(rows, tf.int64))) * row_size
