"""The ELECTRA losses as batch-level weighted means, in float32 (docs/faithfulness.md,
sections 4 'Generator, sampling and labels' and 5 'Discriminator and losses').

Each mean's denominator is summed over replicas inside the replica context, so that with N
replicas every replica's loss is (its numerator) / (global denominator), and the SUM of
replica gradients that the optimizer applies equals the single-device gradient of the global
batch: the original's math, whatever the number of replicas.
"""

from __future__ import annotations

import tensorflow as tf

# The original adds this to every denominator (an all-padding batch gives 0, not NaN).
DENOMINATOR_EPSILON = 1e-6


def replica_sum(value: tf.Tensor) -> tf.Tensor:
    """Sum over replicas in a replica context with several replicas; identity otherwise."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def weighted_mean(
    values: tf.Tensor, weights: tf.Tensor, denominator: tf.Tensor | None = None
) -> tf.Tensor:
    """sum(w * v) / (sum(w) + 1e-6), the denominator over the global batch.

    `denominator`, when given, replaces sum(w) (summed over replicas): with gradient
    accumulation it is the sum over the whole batch of which `values` is one micro-batch.
    """
    weights = tf.cast(weights, tf.float32)
    numerator = tf.reduce_sum(weights * values)
    if denominator is None:
        denominator = replica_sum(tf.reduce_sum(weights))
    return numerator / (denominator + DENOMINATOR_EPSILON)


@tf.custom_gradient
def _row_cross_entropy(logits: tf.Tensor, target_ids: tf.Tensor):
    """-log softmax(logits)[target] per row of float32 [rows, V] logits, int32 [rows] ids.

    The same numbers as `tf.nn.sparse_softmax_cross_entropy_with_logits` (and the original's
    -sum(log_softmax * one_hot)), computed around one softmax, which oneDNN runs in one pass
    where the sparse cross-entropy kernel takes twice as long and more
    (`bench/fusion_micro.py`):
    log-sum-exp = max - log(max softmax), the largest probability being at least 1 / V, so
    its log never underflows; the gradient is softmax - one_hot(target), from the same
    softmax.
    """
    probs = tf.nn.softmax(logits)
    log_sum_exp = tf.reduce_max(logits, axis=-1) - tf.math.log(tf.reduce_max(probs, axis=-1))
    target_logits = tf.gather(logits, target_ids[:, tf.newaxis], batch_dims=1)[:, 0]

    def backward(upstream):
        rows = tf.range(tf.shape(target_ids)[0])
        targets = tf.stack([rows, target_ids], axis=1)  # [rows, 2]
        return tf.tensor_scatter_nd_sub(probs * upstream[:, tf.newaxis], targets, upstream), None

    return log_sum_exp - target_logits, backward


def masked_lm_losses(logits: tf.Tensor, target_ids: tf.Tensor) -> tf.Tensor:
    """-log p(target) per slot: float32 [batch, num_masked] from logits [batch, num_masked, V]
    (or per position, [batch, seq_len] from cloze logits [batch, seq_len, V])."""
    logits = tf.cast(logits, tf.float32)
    target_ids = tf.cast(target_ids, tf.int32)
    rows = tf.reshape(logits, [-1, tf.shape(logits)[-1]])
    losses = _row_cross_entropy(rows, tf.reshape(target_ids, [-1]))
    return tf.reshape(losses, tf.shape(target_ids))


def replaced_token_losses(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Sigmoid cross-entropy per token: float32 [batch, seq_len]."""
    return tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.float32), logits=tf.cast(logits, tf.float32)
    )


def electra_loss(
    mlm_logits: tf.Tensor,
    masked_lm_ids: tf.Tensor,
    masked_lm_weights: tf.Tensor,
    disc_logits: tf.Tensor | None,
    disc_labels: tf.Tensor | None,
    input_mask: tf.Tensor | None,
    gen_weight: float = 1.0,
    disc_weight: float = 50.0,
    denominators: tuple[tf.Tensor, ...] | None = None,
    cloze: tuple[tf.Tensor, tf.Tensor, tf.Tensor] | None = None,
) -> dict[str, tf.Tensor]:
    """total = gen_weight * generator loss + disc_weight * replaced-token-detection loss.

    The generator loss is the masked-LM loss, or with `cloze` (the two-tower generator) the
    cloze loss: run_pretraining.py adds `cloze_output.loss if two_tower_generator else
    mlm_output.loss`, and the masked-LM loss (the cloze logits at the masked slots) is then a
    metric only. Without discriminator inputs (the BERT baseline) the total is the generator
    loss only. `denominators` (masked-LM weight sum, input-mask sum[, cloze weight sum]) of a
    larger batch make the losses this part's share of that batch's losses (see
    `weighted_mean`).

    Args:
        cloze: (cloze logits [batch, seq_len, vocab], target ids [batch, seq_len] (the
            unmasked input), weights [batch, seq_len] (the masking candidates)), or None.

    Returns:
        dict of scalar `loss`, `masked_lm_loss`, `disc_loss` (0 without a discriminator) and
        per-element `masked_lm_losses` [batch, num_masked], `disc_losses` [batch, seq_len]; with
        `cloze`, also `cloze_loss` and `cloze_losses` [batch, seq_len].
    """
    mlm_losses = masked_lm_losses(mlm_logits, masked_lm_ids)
    mlm_denominator, disc_denominator, *cloze_denominator = denominators or (None, None, None)
    mlm_loss = weighted_mean(mlm_losses, masked_lm_weights, mlm_denominator)
    out = {"masked_lm_losses": mlm_losses, "masked_lm_loss": mlm_loss}
    generator_loss = mlm_loss
    if cloze is not None:
        cloze_logits, cloze_ids, cloze_weights = cloze
        out["cloze_losses"] = masked_lm_losses(cloze_logits, cloze_ids)  # [batch, seq_len]
        denominator = cloze_denominator[0] if cloze_denominator else None
        out["cloze_loss"] = weighted_mean(out["cloze_losses"], cloze_weights, denominator)
        generator_loss = out["cloze_loss"]
    total = gen_weight * generator_loss
    disc_loss = tf.constant(0.0)
    if disc_logits is not None:
        out["disc_losses"] = replaced_token_losses(disc_logits, disc_labels)
        disc_loss = weighted_mean(out["disc_losses"], input_mask, disc_denominator)
        total += disc_weight * disc_loss
    out["disc_loss"] = disc_loss
    out["loss"] = total
    return out
