"""The paper's objective ablations (Clark et al. 2020, Section 3.2, Table 5), selected by
`PretrainingConfig.objective_variant`. The original never released code for them; what is
computed here is read from the paper's definitions, with these interpretations:

- Every variant keeps ELECTRA's pipeline up to the full-size network's input: dynamic masking
  (85% [MASK] / 15% kept), the generator trained by its own masked-LM loss (weight
  `gen_weight`), Gumbel samples written into EVERY chosen position (the paper's
  x_corrupt = REPLACE(x, m, x_hat); duplicate positions get the original's floor-average).
- "electra_15": the replaced-token-detection loss sums over i in m, the positions that went
  through the generator, as a set: a position drawn twice counts once, and it is weighted
  whether or not its sample happens to equal the original token. Its metrics (accuracy, AUC,
  ...) are weighted the same way.
- "replace_mlm": the full-size network reads x_corrupt (generator samples where BERT would
  show [MASK]) and a masked-LM head tied to its embeddings (`mlm_predictions`) predicts the
  original token at each masked slot; the loss is the slot-weighted mean cross-entropy, as the
  generator's.
- "all_tokens_mlm": the same network and head predict the original token at EVERY real
  position (padding excluded, [CLS]/[SEP] included, as the discriminator's loss), with the
  paper's copy mechanism: a copy probability D = sigmoid(copy logit) per position and
  p(v) = D * 1[v == the token the network was shown] + (1 - D) * softmax(MLM logits)(v).
  "A sigmoid layer" is read as the ELECTRA discriminator's head (dense + gelu, then a
  one-unit dense: the paper writes the discriminator itself as sigmoid(w . h)), under its own
  scope `copy_predictions`; its logit is the log-odds of COPYING (the opposite sense of the
  replaced-token logit). The loss is the mean over real tokens of -log p(original token).
- For both masked-LM variants `disc_weight` weighs the full-size network's loss, and there is
  no replaced-token head (no `discriminator_predictions` variables).

Cost: All-Tokens MLM computes vocabulary logits at every position, [batch, seq_len, vocab]
(float32: 2.0 GB at batch 128, length 128, 30522 words), seq_len / N (about 6.7 at
mask_prob 0.15) times what a masked-slot head needs; the paper's variant has the same cost.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

from electra_tf.config import MASKED_LM_VARIANTS, ModelConfig, PretrainingConfig
from electra_tf.modeling import DiscriminatorHead, GeneratorHead
from electra_tf.modeling.embeddings import Embeddings
from electra_tf.pretraining.losses import masked_lm_losses, weighted_mean
from electra_tf.pretraining.metrics import PretrainingMetrics
from electra_tf.pretraining.sampling import scatter_update


# ---------------------------------------------------------------------- ELECTRA 15%
def generator_positions_mask(positions: tf.Tensor, seq_len: int | tf.Tensor) -> tf.Tensor:
    """float32 [batch, seq_len]: 1 at every position a masked slot points to (each once,
    however many slots drew it), 0 elsewhere. Slots at position 0 (the inactive ones) mark
    nothing, as the sample scatter ignores them."""
    positions = tf.cast(positions, tf.int32)  # [batch, N]
    batch = tf.shape(positions)[0]
    zeros = tf.zeros(tf.stack([batch, seq_len]), tf.int32)  # [batch, seq_len]
    _, updated = scatter_update(zeros, tf.ones_like(positions), positions)
    return tf.cast(updated, tf.float32)


def discriminator_weighting(
    config: PretrainingConfig,
    masked_lm_positions: tf.Tensor,
    input_mask: tf.Tensor,
    denominators: tuple[tf.Tensor, ...] | None,
) -> tuple[tf.Tensor, tuple[tf.Tensor, ...] | None]:
    """(per-token weights of the replaced-token loss [batch, seq_len], `electra_loss`'s
    `denominators`). ELECTRA: every real token. ELECTRA 15%: the generator's positions; with
    gradient accumulation their whole-batch count is taken as the masked-slot count: exact
    when positions are drawn without replacement (`check_objective_variant` requires it) and
    position 0 is [CLS], as in every example the data pipeline writes."""
    if config.objective_variant != "electra_15":
        return input_mask, denominators
    weights = generator_positions_mask(masked_lm_positions, tf.shape(input_mask)[1])
    if denominators is not None:
        denominators = (denominators[0], denominators[0], *denominators[2:])
    return weights, denominators


# ---------------------------------------------------------------------- copy mechanism
def _log_add_exp(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """log(exp(a) + exp(b)), finite in value and gradient for finite inputs."""
    return tf.maximum(a, b) + tf.math.log1p(tf.exp(-tf.abs(a - b)))


def copy_mechanism_log_probs(
    generation_logits: tf.Tensor, copy_logits: tf.Tensor, input_ids: tf.Tensor
) -> tf.Tensor:
    """log p(v) of the All-Tokens MLM's output distribution over the whole vocabulary.

    p(v) = D * 1[v == input token] + (1 - D) * softmax(generation_logits)(v), D =
    sigmoid(copy_logits): a mixture of a point mass and a softmax, so it sums to 1.

    Args:
        generation_logits: float [batch, seq_len, vocab], the masked-LM head's logits.
        copy_logits: float [batch, seq_len], the copy gate's logits.
        input_ids: int [batch, seq_len], the tokens the network was shown (copy targets).

    Returns:
        float32 [batch, seq_len, vocab].
    """
    generation_logits = tf.cast(generation_logits, tf.float32)
    copy_logits = tf.cast(copy_logits, tf.float32)[..., tf.newaxis]  # [batch, seq_len, 1]
    # [batch, seq_len, vocab]: log((1 - D) * softmax).
    generated = tf.math.log_sigmoid(-copy_logits) + tf.nn.log_softmax(generation_logits)
    is_input = tf.cast(
        tf.one_hot(tf.cast(input_ids, tf.int32), tf.shape(generation_logits)[-1]), tf.bool
    )  # [batch, seq_len, vocab]
    copied = _log_add_exp(tf.math.log_sigmoid(copy_logits), generated)
    return tf.where(is_input, copied, generated)


def copy_mechanism_nll(
    generation_logits: tf.Tensor,
    copy_logits: tf.Tensor,
    input_ids: tf.Tensor,
    target_ids: tf.Tensor,
) -> tf.Tensor:
    """-log p(target) per position under `copy_mechanism_log_probs`, float32 [batch, seq_len],
    without building the [batch, seq_len, vocab] log-probabilities a second time."""
    target_ids = tf.cast(target_ids, tf.int32)
    copy_logits = tf.cast(copy_logits, tf.float32)
    # [batch, seq_len]: log((1 - D) * softmax(target)).
    generated = tf.math.log_sigmoid(-copy_logits) - masked_lm_losses(generation_logits, target_ids)
    copied = _log_add_exp(tf.math.log_sigmoid(copy_logits), generated)
    same = tf.equal(target_ids, tf.cast(input_ids, tf.int32))
    return -tf.where(same, copied, generated)


def copy_mechanism_predictions(
    generation_logits: tf.Tensor, copy_logits: tf.Tensor, input_ids: tf.Tensor
) -> tf.Tensor:
    """int32 [batch, seq_len]: the argmax of the copy-mechanism distribution, from the top two
    generation logits instead of the whole [batch, seq_len, vocab] distribution. The winner is
    the input token or the most probable other token, whose probability is (1 - D) times its
    softmax value."""
    generation_logits = tf.cast(generation_logits, tf.float32)
    copy_logits = tf.cast(copy_logits, tf.float32)
    input_ids = tf.cast(input_ids, tf.int32)
    log_z = tf.reduce_logsumexp(generation_logits, axis=-1)  # [batch, seq_len]
    top = tf.math.top_k(generation_logits, k=2)  # values, indices: [batch, seq_len, 2]
    first_is_input = tf.equal(top.indices[..., 0], input_ids)
    other = tf.where(first_is_input, top.indices[..., 1], top.indices[..., 0])
    other_logit = tf.where(first_is_input, top.values[..., 1], top.values[..., 0])
    input_logit = tf.gather(generation_logits, input_ids, batch_dims=2)  # [batch, seq_len]
    log_keep = tf.math.log_sigmoid(-copy_logits)
    log_p_input = _log_add_exp(tf.math.log_sigmoid(copy_logits), log_keep + input_logit - log_z)
    log_p_other = log_keep + other_logit - log_z
    return tf.where(log_p_input >= log_p_other, input_ids, other)


# ---------------------------------------------------------------------- masked-LM variants
class CorruptedMLMHead(keras.layers.Layer):
    """The full-size network's heads for Replace MLM and All-Tokens MLM.

    A masked-LM head tied to the network's word embeddings (`mlm_predictions`, the
    generator head's structure on the discriminator's width) and, for All-Tokens MLM, a copy
    gate (`copy_predictions`, the discriminator head's structure) scoring whether to copy the
    token the network was shown.

    Args:
        config: the full-size network's encoder config.
        embeddings: its `Embeddings` (the masked-LM output layer is tied to the word table).
        all_tokens: All-Tokens MLM (predict every position, with the copy gate) rather than
            Replace MLM (predict the masked slots).

    Call args:
        sequence_output: float [batch, seq_len, hidden], the network's output on x_corrupt.
        positions: int [batch, N], the masked slots (Replace MLM).

    Returns:
        dict of float32 `corrupted_mlm_logits`, [batch, N, vocab] (Replace MLM) or [batch,
        seq_len, vocab] (All-Tokens MLM), and for All-Tokens MLM `copy_logits` [batch,
        seq_len].
    """

    def __init__(self, config: ModelConfig, embeddings: Embeddings, all_tokens: bool, **kwargs):
        kwargs.setdefault("name", "corrupted_mlm")
        super().__init__(**kwargs)
        self.all_tokens = all_tokens
        self.mlm_head = GeneratorHead(
            config, embeddings, name="mlm_predictions", dtype=self.dtype_policy
        )
        self.copy_head = None
        if all_tokens:
            self.copy_head = DiscriminatorHead(
                config, name="copy_predictions", dtype=self.dtype_policy
            )

    def call(self, sequence_output, positions, training=None):
        if not self.all_tokens:
            # [batch, N, vocab]
            logits = self.mlm_head(sequence_output, positions, training=training)
            return {"corrupted_mlm_logits": tf.cast(logits, tf.float32)}
        shape = tf.shape(sequence_output)
        # [batch, seq_len]: every position, so the head scores the whole sequence.
        every = tf.broadcast_to(tf.range(shape[1])[tf.newaxis, :], shape[:2])
        logits = self.mlm_head(sequence_output, every, training=training)  # [batch, seq_len, vocab]
        return {
            "corrupted_mlm_logits": tf.cast(logits, tf.float32),
            "copy_logits": tf.cast(self.copy_head(sequence_output, training=training), tf.float32),
        }

    def variable_map(self) -> dict[str, tf.Variable]:
        """The heads' own variables (the tied word table is listed by the encoder)."""
        names = self.mlm_head.variable_map("mlm_predictions")
        if self.copy_head is not None:
            names.update(self.copy_head.variable_map("copy_predictions"))
        return names


def build_corrupted_mlm_head(
    config: PretrainingConfig, encoder_config: ModelConfig, embeddings: Embeddings, dtype
) -> CorruptedMLMHead | None:
    """The masked-LM variants' head, or None for the detector variants and BERT."""
    if config.objective_variant not in MASKED_LM_VARIANTS:
        return None
    all_tokens = config.objective_variant == "all_tokens_mlm"
    return CorruptedMLMHead(encoder_config, embeddings, all_tokens, dtype=dtype)


def corrupted_mlm_loss(
    config: PretrainingConfig,
    outputs: dict[str, tf.Tensor],
    input_ids: tf.Tensor,
    input_mask: tf.Tensor,
    denominators: tuple[tf.Tensor, ...] | None = None,
) -> dict[str, tf.Tensor]:
    """The masked-LM variants' loss, added to `outputs["loss"]` with weight `disc_weight`.

    `outputs` holds the pretrainer's masking, sampling and head outputs. Replace MLM: the
    cross-entropy of the original token at each masked slot, weighted by the slot weights;
    All-Tokens MLM: the copy-mechanism negative log-likelihood of the original token at every
    real position. `denominators` as `electra_loss`'s (masked-slot count, real-token count).

    Returns:
        dict of `corrupted_mlm_ids` (targets), `corrupted_mlm_weights`, `corrupted_mlm_losses`
        (each [batch, N] or [batch, seq_len]), scalar `corrupted_mlm_loss` and the new `loss`.
    """
    logits = outputs["corrupted_mlm_logits"]
    if config.objective_variant == "replace_mlm":
        targets, weights = outputs["masked_lm_ids"], outputs["masked_lm_weights"]
        losses = masked_lm_losses(logits, targets)  # [batch, N]
        denominator = denominators[0] if denominators else None
    else:
        targets, weights = tf.cast(input_ids, tf.int32), tf.cast(input_mask, tf.float32)
        losses = copy_mechanism_nll(
            logits, outputs["copy_logits"], outputs["fake_input_ids"], targets
        )  # [batch, seq_len]
        denominator = denominators[1] if denominators else None
    loss = weighted_mean(losses, weights, denominator)
    return {
        "corrupted_mlm_ids": targets,
        "corrupted_mlm_weights": weights,
        "corrupted_mlm_losses": losses,
        "corrupted_mlm_loss": loss,
        "loss": outputs["loss"] + config.disc_weight * loss,
    }


# ---------------------------------------------------------------------- metrics
class Electra15Metrics(PretrainingMetrics):
    """ELECTRA's metrics, the discriminator's weighted by the generator's positions (the
    positions its loss covers) instead of every real token."""

    def __init__(self):
        super().__init__(electra_objective=True)

    def update(self, outputs, input_mask, num_parts):
        weights = generator_positions_mask(outputs["masked_lm_positions"], tf.shape(input_mask)[1])
        super().update(outputs, weights * tf.cast(input_mask, tf.float32), num_parts)


class CorruptedMLMMetrics(PretrainingMetrics):
    """The BERT baseline's metrics (the generator's masked-LM loss and accuracy here), the
    generator's sampled accuracy, and the full-size network's `<variant>_loss` /
    `<variant>_accuracy` (argmax of its output distribution against the original tokens,
    weighted as its loss)."""

    def __init__(self, variant: str):
        super().__init__(electra_objective=False)
        self.variant = variant
        for name in ("sampled_masked_lm_accuracy", f"{variant}_loss", f"{variant}_accuracy"):
            self.trackers[name] = keras.metrics.Mean(name=name)

    def update(self, outputs, input_mask, num_parts):
        super().update(outputs, input_mask, num_parts)
        t = self.trackers
        slots, weights = outputs["masked_lm_weights"], outputs["corrupted_mlm_weights"]
        sampled = _equal(outputs["sampled_ids"], outputs["masked_lm_ids"])  # [batch, N]
        t["sampled_masked_lm_accuracy"].update_state(sampled, slots)
        t[f"{self.variant}_loss"].update_state(outputs["corrupted_mlm_losses"], weights)
        if "copy_logits" in outputs:
            predicted = copy_mechanism_predictions(
                outputs["corrupted_mlm_logits"], outputs["copy_logits"], outputs["fake_input_ids"]
            )
        else:
            predicted = tf.argmax(outputs["corrupted_mlm_logits"], axis=-1, output_type=tf.int32)
        correct = _equal(predicted, outputs["corrupted_mlm_ids"])
        t[f"{self.variant}_accuracy"].update_state(correct, weights)


def _equal(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.equal(tf.cast(a, tf.int32), tf.cast(b, tf.int32)), tf.float32)


def pretraining_metrics(config: PretrainingConfig) -> PretrainingMetrics:
    """The metric trackers for the config's objective."""
    if config.objective_variant == "electra_15":
        return Electra15Metrics()
    if config.objective_variant in MASKED_LM_VARIANTS:
        return CorruptedMLMMetrics(config.objective_variant)
    return PretrainingMetrics(config.has_discriminator, cloze=config.two_tower_generator)
