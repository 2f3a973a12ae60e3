"""Dynamic in-graph masking, as the original's `pretrain_helpers.mask` (docs/faithfulness.md,
section 3 'Masking')."""

from __future__ import annotations

import tensorflow as tf

from electra_tf.pretraining.sampling import gather_positions, scatter_update

# Token ids of BERT's uncased vocabulary; pass the vocabulary's own ids for any other.
CLS_ID, SEP_ID, MASK_ID = 101, 102, 103


def candidates_mask(
    input_ids: tf.Tensor,
    input_mask: tf.Tensor,
    cls_id: int = CLS_ID,
    sep_id: int = SEP_ID,
    mask_id: int = MASK_ID,
) -> tf.Tensor:
    """bool [batch, seq_len]: real tokens other than [CLS], [SEP] and [MASK]."""
    ids = tf.cast(input_ids, tf.int32)
    return (
        tf.not_equal(tf.cast(input_mask, tf.int32), 0)
        & tf.not_equal(ids, cls_id)
        & tf.not_equal(ids, sep_id)
        & tf.not_equal(ids, mask_id)
    )


def _active_slots(
    input_mask: tf.Tensor,
    num_candidates: tf.Tensor,
    max_predictions: int,
    mask_prob: float,
    with_replacement: bool,
) -> tf.Tensor:
    """bool [batch, N]: the slots `mask_inputs` fills (its `masked_lm_weights`)."""
    # float32 as the original, so that rounding ties land exactly where the original's do.
    num_tokens = tf.cast(tf.reduce_sum(tf.cast(input_mask, tf.int32), axis=-1), tf.float32)
    num_to_predict = tf.maximum(
        1, tf.minimum(max_predictions, tf.cast(tf.round(num_tokens * mask_prob), tf.int32))
    )
    active = tf.sequence_mask(num_to_predict, max_predictions)  # [batch, N]
    # A sequence without candidates (only specials) predicts nothing instead of sampling NaNs.
    active &= (num_candidates > 0)[:, tf.newaxis]
    if not with_replacement:
        active &= tf.range(max_predictions)[tf.newaxis, :] < num_candidates[:, tf.newaxis]
    return active


def num_masked_slots(
    input_ids: tf.Tensor,
    input_mask: tf.Tensor,
    max_predictions: int,
    mask_prob: float,
    cls_id: int = CLS_ID,
    sep_id: int = SEP_ID,
    mask_id: int = MASK_ID,
    with_replacement: bool = True,
) -> tf.Tensor:
    """float32 scalar: sum of the `masked_lm_weights` that `mask_inputs` will give this batch.

    The count depends only on the lengths and candidates, not on the random draws, so the
    masked-LM loss denominator of a whole batch is known before any part of it is masked
    (gradient accumulation uses this to keep the full batch's loss exactly).
    """
    candidates = candidates_mask(input_ids, input_mask, cls_id, sep_id, mask_id)
    num_candidates = tf.reduce_sum(tf.cast(candidates, tf.int32), axis=-1)  # [batch]
    active = _active_slots(input_mask, num_candidates, max_predictions, mask_prob, with_replacement)
    return tf.reduce_sum(tf.cast(active, tf.float32))


def _draw_positions(
    candidates: tf.Tensor,
    num_candidates: tf.Tensor,
    max_predictions: int,
    seed: tf.Tensor,
    with_replacement: bool,
) -> tf.Tensor:
    """int32 [batch, N]: positions drawn uniformly from each row's candidates (bool [batch,
    seq_len]), with or without replacement; a row without candidates draws from every position."""
    # Uniform over the candidates: log-probability 0 for each, -inf elsewhere.
    log_probs = tf.where(candidates, 0.0, float("-inf"))  # [batch, seq_len]
    log_probs = tf.where((num_candidates > 0)[:, tf.newaxis], log_probs, 0.0)
    if with_replacement:
        return tf.random.stateless_categorical(
            log_probs, max_predictions, seed, dtype=tf.int32
        )  # [batch, N]
    uniform = tf.random.stateless_uniform(tf.shape(log_probs), seed)
    gumbel = -tf.math.log(-tf.math.log(uniform + 1e-9) + 1e-9)
    # Top-k of perturbed log-probs = k draws without replacement. [batch, N]
    return tf.math.top_k(log_probs + gumbel, k=max_predictions, sorted=True).indices


def _choose_slots(
    input_ids: tf.Tensor,
    input_mask: tf.Tensor,
    max_predictions: int,
    mask_prob: float,
    seed: tf.Tensor,
    special_ids: tuple[int, int, int],
    with_replacement: bool,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The slots `mask_inputs` predicts: int32 positions [batch, N] and the ids there [batch, N]
    (both 0 in an inactive slot), and bool active [batch, N]. `input_ids`, `input_mask`: int32
    [batch, seq_len]; `special_ids`: (cls_id, sep_id, mask_id); `seed`: int32 [2]."""
    seq_len = input_ids.shape[1]
    if not with_replacement and seq_len is not None and max_predictions > seq_len:
        raise ValueError(
            f"max_predictions {max_predictions} > sequence length {seq_len}: cannot draw "
            "positions without replacement"
        )
    candidates = candidates_mask(input_ids, input_mask, *special_ids)
    num_candidates = tf.reduce_sum(tf.cast(candidates, tf.int32), axis=-1)  # [batch]

    active = _active_slots(input_mask, num_candidates, max_predictions, mask_prob, with_replacement)
    positions = _draw_positions(
        candidates, num_candidates, max_predictions, seed, with_replacement
    )  # [batch, N]

    active_int = tf.cast(active, tf.int32)
    positions *= active_int
    masked_lm_ids = gather_positions(input_ids, positions) * active_int  # [batch, N]
    return positions, masked_lm_ids, active


def _show_mask(
    input_ids: tf.Tensor,
    positions: tf.Tensor,
    seed: tf.Tensor,
    mask_token_prob: float,
    mask_id: int,
) -> tf.Tensor:
    """int32 [batch, seq_len]: `input_ids` with each chosen position (int32 [batch, N], 0 in an
    inactive slot) replaced by [MASK] with probability `mask_token_prob`, else left visible."""
    show_mask = tf.random.stateless_uniform(tf.shape(positions), seed) < mask_token_prob
    mask_positions = positions * tf.cast(show_mask, tf.int32)  # position 0 = not replaced
    masked_input_ids, _ = scatter_update(
        input_ids, tf.fill(tf.shape(positions), tf.constant(mask_id, tf.int32)), mask_positions
    )
    return masked_input_ids


def mask_inputs(
    input_ids: tf.Tensor,
    input_mask: tf.Tensor,
    max_predictions: int,
    mask_prob: float,
    seed: tf.Tensor,
    cls_id: int = CLS_ID,
    sep_id: int = SEP_ID,
    mask_id: int = MASK_ID,
    with_replacement: bool = True,
    mask_token_prob: float = 0.85,
) -> dict[str, tf.Tensor]:
    """Chooses positions to predict and replaces most of them by [MASK].

    Per sequence, `k = max(1, min(N, round_half_even(num_real_tokens * mask_prob)))` slots are
    active (num_real_tokens counts [CLS]/[SEP]); positions are drawn uniformly from the
    candidates, WITH replacement by default as the original (duplicates possible), or without
    (Gumbel top-k; the fix suggested in original issue #41). Inactive slots get position 0,
    id 0 and weight 0. Each active slot's token becomes [MASK] with probability
    `mask_token_prob` (0.85) and otherwise stays visible; there is no random-token corruption.

    Args:
        input_ids, input_mask: int [batch, seq_len].
        max_predictions: N, the number of slots (config.max_predictions_per_seq).
        mask_prob: fraction of real tokens to predict.
        seed: int [2] seed for the stateless draws.
        cls_id, sep_id, mask_id: special token ids from the vocabulary.
        with_replacement: draw positions with replacement (the original) or not.
        mask_token_prob: probability that a chosen position shows [MASK].

    Returns:
        dict of `masked_input_ids` int32 [batch, seq_len], `masked_lm_positions` int32
        [batch, N], `masked_lm_ids` int32 [batch, N], `masked_lm_weights` float32 [batch, N].
    """
    input_ids = tf.cast(input_ids, tf.int32)
    input_mask = tf.cast(input_mask, tf.int32)
    # int32 seeds: XLA has no StatelessMultinomial kernel for int64 seeds (what
    # tf.random.Generator.make_seeds returns); wrapping keeps the low 32 random bits.
    seed = tf.cast(seed, tf.int32)
    position_seed, mask_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    positions, masked_lm_ids, active = _choose_slots(
        input_ids,
        input_mask,
        max_predictions,
        mask_prob,
        position_seed,
        (cls_id, sep_id, mask_id),
        with_replacement,
    )

    masked_input_ids = _show_mask(input_ids, positions, mask_seed, mask_token_prob, mask_id)
    return {
        "masked_input_ids": tf.stop_gradient(masked_input_ids),
        "masked_lm_positions": positions,
        "masked_lm_ids": masked_lm_ids,
        "masked_lm_weights": tf.cast(active, tf.float32),
    }
