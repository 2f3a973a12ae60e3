"""Fine-tuning heads, as the original's `get_prediction_module`s.

Every head is called as `head(encoder_outputs, features, training)` and returns
`(per_example_losses [batch], outputs)`; the model sums the losses over the batch. Dense layers
use Glorot-uniform kernels and zero biases (the `tf.layers.dense` defaults) and are named as the
original's auto-named `tf.layers` so `variable_map()` gives `task_specific/<task>/dense/kernel`.

Precision: a head's layers take its dtype policy (`dtype`, a Keras layer argument; None: the
global policy), the fine-tuning model's. Under a mixed policy the dense layers compute in 16 bits
and their logits are cast to float32 before any softmax, cross-entropy or squared error, as the
pre-training heads' are: every loss and every output a scorer reads is float32.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

from electra_tf.modeling.dense_forms import dense_train_rows
from electra_tf.modeling.dropout import Dropout


def _dense(units: int, name: str, activation=None, dtype=None) -> keras.layers.Dense:
    return keras.layers.Dense(
        units,
        activation=activation,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        name=name,
        dtype=dtype,
    )


def _float32(x: tf.Tensor) -> tf.Tensor:
    """Logits in float32 before a softmax or a loss (no op under float32)."""
    return tf.cast(x, tf.float32)


def _gelu(x: tf.Tensor) -> tf.Tensor:
    # The original's modeling.gelu is the exact erf form.
    return keras.activations.gelu(x, approximate=False)


class _Head(keras.layers.Layer):
    """Shared plumbing: the `task_specific/<task>/<layer>/{kernel,bias}` map."""

    def __init__(self, task_name: str, **kwargs):
        super().__init__(name=kwargs.pop("name", f"{task_name}_head"), **kwargs)
        self.task_name = task_name
        self._named: dict[str, keras.layers.Dense] = {}

    def _add(self, layer: keras.layers.Dense) -> keras.layers.Dense:
        self._named[layer.name] = layer
        return layer

    def _dense(self, units: int, name: str, activation=None) -> keras.layers.Dense:
        """A named dense layer of this head, under the head's dtype policy."""
        return self._add(_dense(units, name, activation, dtype=self.dtype_policy))

    def variable_map(self) -> dict[str, tf.Variable]:
        scope = f"task_specific/{self.task_name}"
        out = {}
        for name, layer in self._named.items():
            out[f"{scope}/{name}/kernel"] = layer.kernel
            out[f"{scope}/{name}/bias"] = layer.bias
        return out


POOLINGS = ("cls", "mean")


def pooled_output(encoder_outputs, features, pooling: str) -> tf.Tensor:
    """The sentence vector a head reads: [CLS] (the original) or the mean over real tokens.

    "mean" (ours) averages `sequence_output` [B, L, H] over positions where `input_mask` is 1,
    [CLS] and [SEP] included. Returns [B, H].
    """
    if pooling == "cls":
        return encoder_outputs["cls_output"]
    if pooling != "mean":
        raise ValueError(f"pooling: {pooling!r} is not one of {list(POOLINGS)}")
    # Summed in float32 under a mixed policy too: a 16-bit sum of L terms loses up to L roundings.
    sequence = _float32(encoder_outputs["sequence_output"])  # [B, L, H]
    mask = tf.cast(features["input_mask"], sequence.dtype)[:, :, None]  # [B, L, 1]
    total = tf.reduce_sum(sequence * mask, axis=1)  # [B, H]
    return total / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)


class ClassificationHead(_Head):
    """Dropout 0.1 then dense(num_labels) on the [CLS] vector (no pooler); softmax CE.

    `pooling="mean"` (ours) reads the mean of the final hidden states over real tokens instead
    of [CLS] (`pooled_output`).
    Inputs: `encoder_outputs["cls_output"]` [B, H] (or `sequence_output` [B, L, H] and
    `features["input_mask"]` [B, L] for "mean"), `features["<task>_label_ids"]` [B].
    Outputs: logits [B, C], predictions [B], label_ids [B], loss [B].
    """

    def __init__(
        self,
        task_name: str,
        num_labels: int,
        dropout_rate: float = 0.1,
        pooling: str = "cls",
        **kwargs,
    ):
        super().__init__(task_name, **kwargs)
        if pooling not in POOLINGS:
            raise ValueError(f"pooling: {pooling!r} is not one of {list(POOLINGS)}")
        self.num_labels = num_labels
        self.pooling = pooling
        self.dropout = Dropout(dropout_rate, dtype=self.dtype_policy)
        self.dense = self._dense(num_labels, "dense")

    def logits(self, cls_output: tf.Tensor, training: bool = False) -> tf.Tensor:
        """float32 logits [B, C] of the sentence vectors [B, H]."""
        return _float32(
            dense_train_rows(self.dense, self.dropout(cls_output, training=training), training)
        )

    def call(self, encoder_outputs, features, training=False):
        logits = self.logits(pooled_output(encoder_outputs, features, self.pooling), training)
        label_ids = features[f"{self.task_name}_label_ids"]
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        labels = tf.one_hot(label_ids, self.num_labels, dtype=log_probs.dtype)
        losses = -tf.reduce_sum(labels * log_probs, axis=-1)
        return losses, {
            "loss": losses,
            "logits": logits,
            "predictions": tf.argmax(logits, axis=-1, output_type=tf.int32),
            "label_ids": label_ids,
        }


class RegressionHead(_Head):
    """Dropout 0.1 then dense(1) on [CLS]; squared error against the normalised target.

    Inputs: `features["<task>_targets"]` [B] float (label / 5 for STS).
    """

    def __init__(self, task_name: str, dropout_rate: float = 0.1, **kwargs):
        super().__init__(task_name, **kwargs)
        self.dropout = Dropout(dropout_rate, dtype=self.dtype_policy)
        self.dense = self._dense(1, "dense")

    def call(self, encoder_outputs, features, training=False):
        reprs = self.dropout(encoder_outputs["cls_output"], training=training)
        predictions = _float32(tf.squeeze(dense_train_rows(self.dense, reprs, training), -1))  # [B]
        targets = tf.cast(features[f"{self.task_name}_targets"], predictions.dtype)
        losses = tf.square(predictions - targets)
        return losses, {"loss": losses, "predictions": predictions, "targets": targets}


class TaggingHead(_Head):
    """Dense(n_classes) on the first sub-token of each word; CE masked and summed per sentence.

    Inputs: `features["<task>_labeled_positions"]`, `<task>_labels` [B, L] int and
    `<task>_labels_mask` [B, L] float.
    """

    def __init__(self, task_name: str, num_classes: int, **kwargs):
        super().__init__(task_name, **kwargs)
        self.num_classes = num_classes
        self.dense = self._dense(num_classes, "dense")

    def call(self, encoder_outputs, features, training=False):
        sequence = encoder_outputs["sequence_output"]  # [B, L, H]
        positions = features[f"{self.task_name}_labeled_positions"]  # [B, P]
        reprs = tf.gather(sequence, positions, batch_dims=1)  # [B, P, H]
        logits = _float32(dense_train_rows(self.dense, reprs, training))  # [B, P, C]
        labels = features[f"{self.task_name}_labels"]
        mask = tf.cast(features[f"{self.task_name}_labels_mask"], logits.dtype)
        token_losses = tf.nn.softmax_cross_entropy_with_logits(
            labels=tf.one_hot(labels, self.num_classes, dtype=logits.dtype), logits=logits
        )  # [B, P]
        losses = tf.reduce_sum(token_losses * mask, axis=-1)
        return losses, {
            "loss": losses,
            "logits": logits,
            "predictions": tf.argmax(logits, axis=-1, output_type=tf.int32),
            "labels": labels,
            "labels_mask": mask,
        }


class SpanQAHead(_Head):
    """The original's XLNet-style QA head with an answerability classifier.

    Start logits `dense`; the end logits see [h_start, h_j] through `qa_hidden` (512, gelu) and
    `dense_1`, with h_start the gold start in training and each of the top `beam_size` starts at
    inference; positions outside the context (and [CLS]) get -1000. The answerability logit is
    `dense_3(gelu(dense_2([h_CLS, sum_j softmax(start)_j h_j])))`, its sigmoid CE on
    `is_impossible` added with weight `answerable_weight`. Span loss = (start CE + end CE) / 2.

    Outputs (inference): start_top_log_probs / start_top_index [B, K], end_top_log_probs /
    end_top_index [B, K, K], answerable_logit [B], start_logits [B, L].
    """

    def __init__(
        self,
        task_name: str,
        beam_size: int = 20,
        joint_prediction: bool = True,
        answerable_classifier: bool = True,
        answerable_uses_start_logits: bool = True,
        answerable_weight: float = 0.5,
        **kwargs,
    ):
        super().__init__(task_name, **kwargs)
        self.beam_size = beam_size
        self.joint_prediction = joint_prediction
        self.answerable_classifier = answerable_classifier
        self.answerable_uses_start_logits = answerable_uses_start_logits
        self.answerable_weight = answerable_weight
        # Creation order reproduces tf.layers' auto-numbering: dense, [qa_hidden], dense_1, ...
        self.start_dense = self._dense(1, "dense")
        if joint_prediction:
            self.qa_hidden = self._dense(512, "qa_hidden", _gelu)
        self.end_dense = self._dense(1, "dense_1")
        next_index = 2
        if answerable_classifier:
            if answerable_uses_start_logits:
                self.answer_hidden = self._dense(512, f"dense_{next_index}", _gelu)
                next_index += 1
            self.answer_dense = self._dense(1, f"dense_{next_index}")

    def call(self, encoder_outputs, features, training=False):
        name = self.task_name
        hidden = encoder_outputs["sequence_output"]  # [B, L, H], the compute dtype
        seq_length = tf.shape(hidden)[1]
        answer_mask = tf.cast(features["input_mask"], tf.float32) * tf.cast(
            features["segment_ids"], tf.float32
        )
        answer_mask += tf.one_hot(0, seq_length, dtype=tf.float32)  # [B, L]: context + [CLS]
        mask_penalty = 1000.0 * (answer_mask - 1.0)  # float32, as every logit below
        start_positions = features[f"{name}_start_positions"]
        end_positions = features[f"{name}_end_positions"]

        start_logits = _float32(
            tf.squeeze(dense_train_rows(self.start_dense, hidden, training), -1)
        )  # [B, L]
        outputs = {}
        if self.joint_prediction:
            start_logits += mask_penalty
            start_log_probs = tf.nn.log_softmax(start_logits)
            k = tf.minimum(self.beam_size, seq_length)
            start_top_log_probs, start_top_index = tf.math.top_k(start_log_probs, k=k)
            if training:
                end_logits = self._end_logits_given_start(hidden, start_positions, mask_penalty)
            else:
                end_top_log_probs, end_top_index = self._beam_ends(
                    hidden, start_top_index, mask_penalty, k
                )
                # As the original: no single end distribution exists at inference.
                end_logits = tf.zeros_like(start_logits)
                outputs.update(end_top_log_probs=end_top_log_probs, end_top_index=end_top_index)
            outputs.update(start_top_log_probs=start_top_log_probs, start_top_index=start_top_index)
        else:
            end_logits = (
                _float32(tf.squeeze(dense_train_rows(self.end_dense, hidden, training), -1))
                + mask_penalty
            )
            start_logits += mask_penalty

        def cross_entropy(logits, positions):
            one_hot = tf.one_hot(positions, seq_length, dtype=logits.dtype)
            return -tf.reduce_sum(one_hot * tf.nn.log_softmax(logits, axis=-1), axis=-1)

        losses = (
            cross_entropy(start_logits, start_positions) + cross_entropy(end_logits, end_positions)
        ) / 2.0

        answerable_logit = tf.zeros_like(losses)
        if self.answerable_classifier:
            answerable_logit = self._answerable_logit(hidden, start_logits, training)  # [B]
            impossible = tf.cast(features[f"{name}_is_impossible"], answerable_logit.dtype)
            losses += self.answerable_weight * tf.nn.sigmoid_cross_entropy_with_logits(
                labels=impossible, logits=answerable_logit
            )
        outputs.update(
            loss=losses,
            start_logits=start_logits,
            end_logits=end_logits,
            answerable_logit=answerable_logit,
        )
        return losses, outputs

    def _end_logits_given_start(self, hidden, start_positions, mask_penalty):
        """Training: end logits [B, L] conditioned on the gold start."""
        seq_length = tf.shape(hidden)[1]
        start_h = tf.gather(hidden, start_positions, batch_dims=1)  # [B, H]
        start_h = tf.tile(start_h[:, None, :], [1, seq_length, 1])  # [B, L, H]
        # A training step: in bfloat16 the two dense layers' bias gradients are summed in
        # float32 (`dense_train_rows`; qa_hidden's activation is the exact GELU).
        joint = dense_train_rows(self.qa_hidden, tf.concat([start_h, hidden], -1), True, "gelu")
        end_logits = tf.squeeze(dense_train_rows(self.end_dense, joint, True), -1)  # [B, L]
        return _float32(end_logits) + mask_penalty

    def _beam_ends(self, hidden, start_top_index, mask_penalty, k):
        """Inference: the top `k` ends for each of the top `k` starts, log-probs and indices
        [B, K, K]."""
        seq_length = tf.shape(hidden)[1]
        start_h = tf.gather(hidden, start_top_index, batch_dims=1)  # [B, K, H]
        start_h = tf.tile(start_h[:, :, None, :], [1, 1, seq_length, 1])  # [B, K, L, H]
        end_h = tf.tile(hidden[:, None], [1, k, 1, 1])  # [B, K, L, H]
        beam_end_logits = tf.squeeze(
            self.end_dense(self.qa_hidden(tf.concat([start_h, end_h], -1))), -1
        )  # [B, K, L]
        beam_end_logits = _float32(beam_end_logits) + mask_penalty[:, None, :]
        return tf.math.top_k(tf.nn.log_softmax(beam_end_logits), k=k)  # [B, K, K]

    def _answerable_logit(self, hidden, start_logits, training):
        """[B]: from [CLS], and (answerable_uses_start_logits) the start-weighted hidden state."""
        reprs = hidden[:, 0]  # [B, H]
        if self.answerable_uses_start_logits:
            start_p = tf.nn.softmax(start_logits)  # [B, L], float32
            # The weighted sum in float32 (L terms), cast back to the layers' dtype as Keras
            # would; in a bfloat16 step their bias gradients are summed in float32 (as every
            # other layer's, `dense_train_rows`).
            start_feature = tf.reduce_sum(start_p[:, :, None] * _float32(hidden), axis=1)
            joined = tf.concat([_float32(reprs), start_feature], -1)
            joined = tf.cast(joined, self.answer_hidden.compute_dtype)
            reprs = dense_train_rows(self.answer_hidden, joined, training, "gelu")
        answerable = dense_train_rows(self.answer_dense, reprs, training)
        return _float32(tf.squeeze(answerable, -1))  # [B]
