"""The Keras models a user fine-tunes on raw text: `ElectraEncoder`, `ElectraClassifier` and
`ElectraTagger`, each with `from_pretrained` (any of the five weight homes) and exported by
`save_for_serving` with the user's label names.

The heads are the fine-tuning command's (`finetuning/heads.py`), named as its models name them
(`task_specific/<task>/dense/*`): the classifier is dropout 0.1 and a dense layer on [CLS]
(or the mean of the final states), the tagger a dense layer on every position, read at each
word's first sub-token. Keras' losses average over the examples (the tagger's over the labelled
words), where the command sums over the batch: with Adam the two differ little.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras as keras

from electra_tf.finetuning.heads import ClassificationHead, TaggingHead, pooled_output
from electra_tf.finetuning.keras_models import pretrained as P
from electra_tf.finetuning.keras_models.preprocessing import (
    ElectraPreprocessor,
    ElectraTaggingPreprocessor,
)
from electra_tf.finetuning.keras_models.text_model import ElectraTextModel
from electra_tf.modeling import TransformerEncoder
from electra_tf.modeling.dense_forms import dense_train_rows
from electra_tf.serving.module import ServingHead


def _built_from(path: str, fmt: str, dtype: Any, dropout, max_seq_length: int, text: dict):
    """(the encoder with the weights at `path`, its preprocessor's text settings)."""
    home = P.read_home(path, fmt)
    settings = P.text_settings(home, **text)
    P.check_vocab(settings, home)
    encoder = P.pretrained_encoder(home, max_seq_length, dropout, dtype)
    return encoder, settings.preprocessor_kwargs()


def _names(names: Sequence[str] | None, count: int | None, given: Any, what: str):
    """(names, count) of the labels or tags, from the names, the count or the preprocessor."""
    names = tuple(str(n) for n in names) if names else getattr(given, what, None)
    if names and count is not None and count != len(names):
        raise ValueError(f"{len(names)} {what} given but num_{what} is {count}")
    count = len(names) if names else count
    if not count:
        raise ValueError(f"give the {what} (or num_{what})")
    return names, count


class ElectraEncoder(ElectraTextModel):
    """The pre-trained encoder on raw text: `sequence_output` [B, L, H] and `cls_output`
    [B, H] (float32 under any policy), for features or a head of one's own.

    `ElectraEncoder.from_pretrained(path)`; `model(["some text"])` or `model(features)`;
    `encoder.encoder` is the `TransformerEncoder` layer itself. Exported as kind "encoder".
    Args: as `ElectraTextModel`'s.
    """

    def __init__(self, encoder: TransformerEncoder, preprocessor=None, **kwargs: Any):
        super().__init__(encoder, preprocessor, **kwargs)
        self._seed_dropout()

    def call(self, inputs, training=False):
        outputs = self.encoder(self.features(inputs), training=training)
        return {
            "sequence_output": tf.cast(outputs["sequence_output"], tf.float32),
            "cls_output": tf.cast(outputs["cls_output"], tf.float32),
        }

    @classmethod
    def from_pretrained(
        cls, path: str, max_seq_length: int = 128, pair: bool = False, fmt: str = "auto",
        vocab_file: str | None = None, do_lower_case: bool | None = None,
        dropout: float | None = P.FINETUNING_DROPOUT, dtype: Any = None, seed: int | None = None,
    ) -> ElectraEncoder:  # fmt: skip
        """The encoder of the pre-trained model at `path` (native run folder, original TF1
        checkpoint, Hugging Face folder, Model Garden checkpoint or KerasHub preset), with a
        preprocessor of its vocabulary and casing. Arguments as `ElectraClassifier`'s."""
        text = {"vocab_file": vocab_file, "do_lower_case": do_lower_case}
        encoder, settings = _built_from(path, fmt, dtype, dropout, max_seq_length, text)
        preprocessor = ElectraPreprocessor(max_seq_length=max_seq_length, pair=pair, **settings)
        return cls(encoder, preprocessor, seed=seed, dtype=dtype)

    def serving_head(self) -> ServingHead:
        def predict(features, options):
            return self.encoder(features, training=False, inference_options=options)

        return ServingHead("encoder", predict)

    def build_twin(self) -> ElectraEncoder:
        return ElectraEncoder(self._twin_encoder(), self.preprocessor)


class ElectraClassifier(ElectraTextModel):
    """Sentence or sentence-pair classification: the encoder, dropout and a dense layer on the
    [CLS] vector (the command's classification head). Returns float32 logits [B, C].

    `ElectraClassifier.from_pretrained(path, labels=["neg", "pos"])`, then `compile` (loss and
    metrics default to sparse cross-entropy on the logits and accuracy) and `fit` on raw text
    with string labels; `predict_labels(texts)`; `save_for_serving` answers with the labels.

    Args:
        encoder: a `TransformerEncoder` (scope `electra`).
        num_labels: the number of classes (or give `labels`).
        task_name: names the head's variables `task_specific/<task_name>/dense/*`.
        dropout_rate: the head's dropout.
        labels: the class names, a class's id its position (default: the preprocessor's).
        preprocessor: an `ElectraPreprocessor` (raw text in); None: features only.
        pooling: "cls" (the original) or "mean" (`heads.pooled_output`).
        seed (keyword): resumable dropout masks (`ElectraTextModel`).
    """

    def __init__(
        self, encoder: TransformerEncoder, num_labels: int | None = None,
        task_name: str = "classifier", dropout_rate: float = 0.1,
        labels: Sequence[str] | None = None, preprocessor: ElectraPreprocessor | None = None,
        pooling: str = "cls", **kwargs: Any,
    ):  # fmt: skip
        super().__init__(encoder, preprocessor, **kwargs)
        self.labels, self.num_labels = _names(labels, num_labels, preprocessor, "labels")
        self.head = ClassificationHead(
            task_name, self.num_labels, dropout_rate, pooling, dtype=self.dtype_policy
        )
        # Builds the head so that `variable_map()` works before the first call.
        self.head.logits(tf.zeros((1, encoder.config.hidden_size)))
        self._seed_dropout()

    def call(self, inputs, training=False):
        features = self.features(inputs)
        encoded = self.encoder(features, training=training)
        return self.head.logits(pooled_output(encoded, features, self.head.pooling), training)

    @classmethod
    def from_pretrained(
        cls, path: str, labels: Sequence[str] | None = None, num_labels: int | None = None,
        pair: bool = False, max_seq_length: int = 128, fmt: str = "auto",
        vocab_file: str | None = None, do_lower_case: bool | None = None,
        dropout: float | None = P.FINETUNING_DROPOUT, dtype: Any = None, **kwargs: Any,
    ) -> ElectraClassifier:  # fmt: skip
        """A classifier on the pre-trained model at `path`, its head new.

        Args:
            path: a native run folder, an original TF1 checkpoint, a Hugging Face folder, a
                Model Garden checkpoint or a KerasHub preset (`fmt` "auto" detects which).
            labels: the class names (string labels in `fit`; the export's `label`).
            num_labels: the number of classes, for integer labels without names.
            pair: whether an example is a pair of texts, `(text_a, text_b)`.
            max_seq_length: the length every input is cut and padded to.
            vocab_file, do_lower_case: default: the vocab.txt beside the weights, the
                pre-training's casing.
            dropout: the encoder's hidden and attention dropout (fine-tuning's 0.1; None:
                the checkpoint's).
            dtype: the Keras dtype policy, e.g. "mixed_bfloat16".
            kwargs: `task_name`, `dropout_rate`, `pooling`, `seed`, as the constructor.
        """
        text = {"vocab_file": vocab_file, "do_lower_case": do_lower_case}
        encoder, settings = _built_from(path, fmt, dtype, dropout, max_seq_length, text)
        names, count = _names(labels, num_labels, None, "labels")
        preprocessor = ElectraPreprocessor(
            max_seq_length=max_seq_length, labels=names, pair=pair, **settings
        )
        return cls(encoder, count, labels=names, preprocessor=preprocessor, dtype=dtype, **kwargs)

    def compile(self, optimizer="rmsprop", loss="auto", metrics="auto", **kwargs):
        """Keras' `compile`; "auto": sparse cross-entropy on the logits, and accuracy."""
        if loss == "auto":
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        if metrics == "auto":
            metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def label_names(self) -> tuple[str, ...]:
        """The class names ("0", "1", ... without `labels`)."""
        return self.labels or tuple(str(i) for i in range(self.num_labels))

    def predict_labels(self, x, batch_size: int | None = None) -> list[str]:
        """The predicted class name of every input."""
        ids = np.argmax(self.predict(x, batch_size=batch_size, verbose=0), axis=-1)
        return [self.label_names()[i] for i in ids]

    def head_variables(self) -> dict[str, tf.Variable]:
        return self.head.variable_map()

    def serving_head(self) -> ServingHead:
        def predict(features, options):
            encoded = self.encoder(features, training=False, inference_options=options)
            pooled = pooled_output(encoded, features, self.head.pooling)
            return {"logits": self.head.logits(pooled)}

        pair = bool(getattr(self.preprocessor, "pair", False))
        return ServingHead("classification", predict, pair, self.label_names())

    def build_twin(self) -> ElectraClassifier:
        return ElectraClassifier(
            self._twin_encoder(), self.num_labels, self.head.task_name, self.head.dropout.rate,
            self.labels, self.preprocessor, self.head.pooling,
        )  # fmt: skip


class TagAccuracy(keras.metrics.Mean):
    """The share of labelled words (target >= 0) whose tag is the arg-max of the logits."""

    def __init__(self, name: str = "accuracy", **kwargs: Any):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        labelled = tf.cast(y_true >= 0, tf.float32)  # [B, L]
        right = tf.cast(tf.equal(tf.argmax(y_pred, -1, output_type=tf.int32), y_true), tf.float32)
        if sample_weight is not None:
            labelled *= tf.cast(sample_weight, tf.float32)
        return super().update_state(right, labelled)


class ElectraTagger(ElectraTextModel):
    """Token tagging (named entities, chunks): the encoder and a dense layer on every position
    (the command's tagging head), trained at each word's first sub-token. Returns float32
    logits [B, L, num_tags].

    `ElectraTagger.from_pretrained(path, tags=["O", "B-PER", "I-PER", ...])`, `fit` on
    sentences (or word lists) with their tags as the data writes them, `predict_tags`;
    `save_for_serving` answers with those tags (BIO in, BIO out).

    Args:
        encoder: a `TransformerEncoder` (scope `electra`).
        num_tags: the number of tags (or give `tags`).
        task_name: names the head's variables `task_specific/<task_name>/dense/*`.
        tags: the tag names, a tag's id its position (default: the preprocessor's).
        preprocessor: an `ElectraTaggingPreprocessor` (words in); None: features only.
        seed (keyword): resumable dropout masks (`ElectraTextModel`).
    """

    def __init__(
        self, encoder: TransformerEncoder, num_tags: int | None = None, task_name: str = "tagger",
        tags: Sequence[str] | None = None,
        preprocessor: ElectraTaggingPreprocessor | None = None, **kwargs: Any,
    ):  # fmt: skip
        super().__init__(encoder, preprocessor, **kwargs)
        self.tags, self.num_tags = _names(tags, num_tags, preprocessor, "tags")
        self.head = TaggingHead(task_name, self.num_tags, dtype=self.dtype_policy)
        self.head.dense(tf.zeros((1, encoder.config.hidden_size)))
        self._seed_dropout()

    def call(self, inputs, training=False):
        sequence = self.encoder(self.features(inputs), training=training)["sequence_output"]
        return tf.cast(dense_train_rows(self.head.dense, sequence, training), tf.float32)

    @classmethod
    def from_pretrained(
        cls, path: str, tags: Sequence[str] | None = None, num_tags: int | None = None,
        max_seq_length: int = 128, fmt: str = "auto", vocab_file: str | None = None,
        do_lower_case: bool | None = None, dropout: float | None = P.FINETUNING_DROPOUT,
        dtype: Any = None, segment_id: int = 0, truncation: str = "fit", **kwargs: Any,
    ) -> ElectraTagger:  # fmt: skip
        """A tagger on the pre-trained model at `path`, its head new; `tags` the tag names
        (the export's `tag`), `segment_id` and `truncation` the preprocessor's (0, "fit": the
        command's tagging of a user's data; 1, "original": the original's chunking), the rest
        as `ElectraClassifier.from_pretrained`."""
        text = {"vocab_file": vocab_file, "do_lower_case": do_lower_case}
        encoder, settings = _built_from(path, fmt, dtype, dropout, max_seq_length, text)
        names, count = _names(tags, num_tags, None, "tags")
        preprocessor = ElectraTaggingPreprocessor(
            max_seq_length=max_seq_length,
            tags=names,
            segment_id=segment_id,
            truncation=truncation,
            **settings,
        )
        return cls(encoder, count, tags=names, preprocessor=preprocessor, dtype=dtype, **kwargs)

    def compile(self, optimizer="rmsprop", loss="auto", metrics="auto", **kwargs):
        """Keras' `compile`; "auto": sparse cross-entropy over the labelled words
        (`ignore_class=-1`), and their accuracy."""
        if loss == "auto":
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1)
        if metrics == "auto":
            metrics = [TagAccuracy()]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def tag_names(self) -> tuple[str, ...]:
        return self.tags or tuple(str(i) for i in range(self.num_tags))

    def predict_tags(self, x) -> list[list[str]]:
        """The tags of every sentence's words (sentences or word lists); words past the
        truncation have none (a shorter list)."""
        if self.preprocessor is None:
            raise ValueError(f"{self.name}: predict_tags needs a preprocessor (from_pretrained)")
        features, positions = self.preprocessor.word_features(x)
        logits = self(features, training=False)  # [B, L, C]
        ids = tf.gather(tf.argmax(logits, -1, output_type=tf.int32), positions, batch_dims=1)
        names = self.tag_names()
        return [[names[i] for i in row] for row in ids.to_list()]

    def head_variables(self) -> dict[str, tf.Variable]:
        return self.head.variable_map()

    def serving_head(self) -> ServingHead:
        def predict(features, options):
            encoded = self.encoder(features, training=False, inference_options=options)
            return {"logits": self.head.dense(encoded["sequence_output"])}

        segment_id = getattr(self.preprocessor, "segment_id", 0)
        return ServingHead("tagging", predict, False, self.tag_names(), segment_id)

    def build_twin(self) -> ElectraTagger:
        return ElectraTagger(
            self._twin_encoder(), self.num_tags, self.head.task_name, self.tags, self.preprocessor
        )
