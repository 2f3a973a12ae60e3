"""Electric's energy-based discriminator output (Clark et al. 2020, "Pre-Training Transformers
as Energy-Based Cloze Models"), as the original's `run_pretraining.py` computes it. Pure tf."""

from __future__ import annotations

import tensorflow as tf

from electra_tf.pretraining.losses import masked_lm_losses


def token_log_probs(logits: tf.Tensor, token_ids: tf.Tensor) -> tf.Tensor:
    """log softmax(logits)[token] per position: float32 [batch, seq_len] from logits
    [batch, seq_len, vocab] and int ids [batch, seq_len].

    Computed as minus the masked-LM loss (`losses.masked_lm_losses`), which gives the same
    numbers as the original's `reduce_sum(log_softmax(logits) * one_hot(ids))` without a
    [batch, seq_len, vocab] log-softmax or one-hot tensor.
    """
    return -masked_lm_losses(logits, token_ids)


def noise_prior(mask_prob: float) -> tf.Tensor:
    """log(mask_prob / (1 - mask_prob)), float32: the ratio in Python floats, the log in
    float32, as the original's `tf.log` of the Python ratio."""
    return tf.math.log(tf.constant(mask_prob / (1 - mask_prob), tf.float32))


def electric_logits(
    energies: tf.Tensor, cloze_logits: tf.Tensor, token_ids: tf.Tensor, mask_prob: float
) -> dict[str, tf.Tensor]:
    """Electric's discriminator logits (label 1 = noise), as `_get_discriminator_output`:

        logit_t = E_t + stop_gradient(log q(x_t | context)) + log(mask_prob / (1 - mask_prob))

    with E_t the discriminator head's output (the energy) and q the two-tower cloze model.

    The paper's NCE classifier tells data from noise with p(x_t | x_\\t) = exp(-E) / Z and k
    noise samples among n tokens: P(data) = (n - k) exp(-E) / ((n - k) exp(-E) + k q), Z taken
    as 1. Its complement, P(noise), is sigmoid(E + log q + log(k / (n - k))): this logit.
    Where the code and the paper differ, this follows the code:
    - k / (n - k) is the constant mask_prob / (1 - mask_prob), not each sequence's number of
      sampled positions over the rest (which rounding and duplicate positions change);
    - log q is the cloze model's log-probability of the discriminator's INPUT token given the
      clean, unmasked sequence (the one pass that also gave the samples), not given the noised
      context the discriminator sees; where no sample was written it is log q of the original;
    - it is added at every position ([CLS] and [SEP] count in the loss, which is over
      input_mask), and there the cloze features saw the token they score: the shift wraps
      around at [CLS], and a padded row's [SEP] gets the features of a padded query that
      attends to every token (see `TwoTowerClozeTransformer`).
    The gradient of the discriminator loss does not reach the cloze model (stop_gradient):
    q is trained by its cloze loss only.

    Args:
        energies: float [batch, seq_len], the discriminator head's output.
        cloze_logits: float [batch, seq_len, vocab], the cloze model on the unmasked input.
        token_ids: int [batch, seq_len], the discriminator's input (the sampled fakes).
        mask_prob: the config's mask_prob.

    Returns:
        dict of float32 [batch, seq_len]: `disc_logits`, `energies`, `log_q`.
    """
    energies = tf.cast(energies, tf.float32)
    log_q = tf.stop_gradient(token_log_probs(cloze_logits, token_ids))
    return {
        "disc_logits": energies + log_q + noise_prior(mask_prob),
        "energies": energies,
        "log_q": log_q,
    }


def pseudo_log_likelihoods(energies: tf.Tensor, scored: tf.Tensor) -> dict[str, tf.Tensor]:
    """Electric's likelihood scores: log p(x_t | x_\\t) ~= -E(x)_t for every token in ONE pass
    (a masked LM needs a pass per token for its pseudo-log-likelihood).

    Electric models p(x_t | x_\\t) = exp(-E(x)_t) / Z(x_\\t) and never computes Z: the NCE
    objective's optimum has E = -log p_data(x_t | x_\\t) (the classifier above is then exact),
    so -E is read as the log-probability itself. An approximation as good as that optimum.

    Args:
        energies: float [batch, seq_len], the discriminator head's output.
        scored: bool [batch, seq_len], the tokens to score (e.g. real tokens other than [CLS]
            and [SEP]: `masking.candidates_mask`).

    Returns:
        dict of float32 `token_scores` [batch, seq_len] (-E at scored tokens, 0 elsewhere),
        `sentence_scores` [batch] (their sum) and `num_scored` [batch].
    """
    weights = tf.cast(scored, tf.float32)
    token_scores = -tf.cast(energies, tf.float32) * weights  # [batch, seq_len]
    return {
        "token_scores": token_scores,
        "sentence_scores": tf.reduce_sum(token_scores, axis=-1),
        "num_scored": tf.reduce_sum(weights, axis=-1),
    }
