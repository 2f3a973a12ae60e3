"""Metric trackers of the pretrainer: the original's eval `metric_fn`, plus the total loss."""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras


class LastValue(keras.metrics.Metric):
    """Reports the most recent value (e.g. the learning rate), not an average."""

    def __init__(self, name: str = "learning_rate", **kwargs):
        super().__init__(name=name, **kwargs)
        # Every replica holds the same value: MEAN keeps it (the default SUM would multiply it).
        self.value = self.add_weight(
            "value", initializer="zeros", aggregation=tf.VariableAggregation.MEAN
        )

    def update_state(self, value, sample_weight=None):
        del sample_weight
        self.value.assign(tf.cast(value, self.dtype))

    def result(self):
        return tf.identity(self.value)


class PretrainingMetrics:
    """The trackers and how one batch's outputs update them.

    Names and weighting are the original's (`run_pretraining.metric_fn`): masked-LM metrics
    weighted by `masked_lm_weights`, discriminator metrics by `input_mask`; precision and recall
    are accuracies weighted by the predictions / the labels; `disc_loss` averages per-sequence
    means, as the original's. The original computed AUC with
    padding counted as negatives scored 0; here padding is weighted out.

    Args:
        electra_objective: whether there is a discriminator (ELECTRA or Electric).
        cloze: the two-tower generator; adds `cloze_loss` (ours: the generator's training loss,
            which the original's metric_fn does not report), weighted by the candidates.
    """

    def __init__(self, electra_objective: bool, cloze: bool = False):
        names = ["loss", "masked_lm_loss", "masked_lm_accuracy"]
        if cloze:
            names.append("cloze_loss")
        if electra_objective:
            names += ["sampled_masked_lm_accuracy", "disc_loss"]
            names += ["disc_accuracy", "disc_precision", "disc_recall"]
        self.trackers: dict[str, keras.metrics.Metric] = {
            name: keras.metrics.Mean(name=name) for name in names
        }
        if electra_objective:
            self.trackers["disc_auc"] = keras.metrics.AUC(num_thresholds=200, name="disc_auc")
        # Reported only when the optimizer has a schedule (see `metrics`).
        self.learning_rate = LastValue("learning_rate")

    def metrics(self, with_learning_rate: bool) -> list[keras.metrics.Metric]:
        extra = [self.learning_rate] if with_learning_rate else []
        return list(self.trackers.values()) + extra

    def update(self, outputs: dict[str, tf.Tensor], input_mask: tf.Tensor, num_parts: int):
        """`num_parts`: how many pieces (replicas x accumulation micro-batches) the batch loss
        is split into; each piece's loss has the WHOLE batch's denominator, so the Mean of
        `num_parts` times it is the batch loss."""
        t = self.trackers
        t["loss"].update_state(outputs["loss"] * num_parts)
        weights = outputs["masked_lm_weights"]
        ids = outputs["masked_lm_ids"]
        t["masked_lm_loss"].update_state(outputs["masked_lm_losses"], weights)
        predicted = tf.argmax(outputs["mlm_logits"], axis=-1, output_type=tf.int32)
        t["masked_lm_accuracy"].update_state(_equal(predicted, ids), weights)
        if "cloze_loss" in t:
            t["cloze_loss"].update_state(outputs["cloze_losses"], outputs["cloze_weights"])
        if "disc_logits" not in outputs:
            return
        t["sampled_masked_lm_accuracy"].update_state(_equal(outputs["sampled_ids"], ids), weights)
        mask = tf.cast(input_mask, tf.float32)
        labels = tf.cast(outputs["disc_labels"], tf.float32)
        logits = tf.cast(outputs["disc_logits"], tf.float32)
        preds = tf.cast(logits > 0, tf.float32)
        correct = tf.cast(tf.equal(preds, labels), tf.float32)
        # The original's eval `disc_loss` is the mean of per-sequence means (its
        # `per_example_loss`), not the per-token mean that the training loss uses.
        per_sequence = tf.reduce_sum(tf.cast(outputs["disc_losses"], tf.float32) * mask, -1) / (
            1e-6 + tf.reduce_sum(mask, -1)
        )  # [batch]
        t["disc_loss"].update_state(per_sequence)
        t["disc_accuracy"].update_state(correct, mask)
        t["disc_precision"].update_state(correct, preds * mask)
        t["disc_recall"].update_state(correct, labels * mask)
        t["disc_auc"].update_state(labels, tf.sigmoid(logits), mask)

    def update_learning_rate(self, value: tf.Tensor) -> None:
        self.learning_rate.update_state(value)


def _equal(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.equal(tf.cast(a, tf.int32), tf.cast(b, tf.int32)), tf.float32)
