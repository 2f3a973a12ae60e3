"""Keras preprocessing layers: raw text and string labels -> a model's inputs and targets.

`ElectraPreprocessor` (sentences and sentence pairs) and `ElectraTaggingPreprocessor` (words)
featurize as the fine-tuning command does (`features.py`), tokenizing in the graph with the
same WordPiece ids (`GraphTokenizer`), so they run inside `tf.data.Dataset.map` and `model.fit`
trains on strings. Called as `preprocessor(x, y=None, sample_weight=None)`, the form of a
`tf.data` element, they return `x`'s features, or `(features, label ids[, sample_weight])`
when labels come along: `dataset.map(preprocessor)` is a training set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf
import tf_keras as keras

from electra_tf.data.graph_tokenizer import GraphTokenizer
from electra_tf.data.tokenization import load_vocab
from electra_tf.finetuning.keras_models import features as F
from electra_tf.serving.featurizer import TextFeaturizer

TEXT_KEYS = ("text", "text_a", "text_b")  # the serving signatures' input names


def as_tensor(value: Any) -> tf.Tensor | tf.RaggedTensor:
    """A tensor of `value`: ragged for lists of lists of unequal lengths."""
    if isinstance(value, tf.RaggedTensor) or tf.is_tensor(value):
        return value
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):
        return tf.ragged.constant(value)
    return tf.convert_to_tensor(value)


def _first(values: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {name: value[0] for name, value in values.items()}


class _LabelTable:
    """Label names <-> ids: names in the order given (id = position), any string unknown to it
    an error naming it. Integer labels pass as ids, checked against the count."""

    def __init__(self, names: Sequence[str] | None, what: str):
        self.names = tuple(str(n) for n in names) if names else None
        self.what = what
        if self.names is not None:
            repeated = sorted({n for n in self.names if self.names.count(n) > 1})
            if repeated:
                raise ValueError(f"{what}: {repeated} given more than once")
            self.table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(self.names), tf.range(len(self.names), dtype=tf.int32)
                ),
                default_value=-1,
            )

    def ids(self, labels: tf.Tensor) -> tf.Tensor:
        """Ids (int32, the shape of `labels`) of string or integer labels."""
        if labels.dtype != tf.string:
            return tf.cast(labels, tf.int32)
        if self.names is None:
            raise ValueError(f"string labels need the {self.what} (none were given)")
        ids = self.table.lookup(labels)
        unknown = tf.boolean_mask(labels, ids < 0)
        check = tf.debugging.Assert(
            tf.size(unknown) == 0,
            [f"not one of the {self.what} {list(self.names)}:", unknown],
            summarize=5,
        )
        with tf.control_dependencies([check]):
            return tf.identity(ids)


class _Preprocessor(keras.layers.Layer):
    """What both layers share: the vocabulary, the in-graph tokenizer and their settings."""

    def __init__(
        self,
        vocab_file: str,
        max_seq_length: int = 128,
        do_lower_case: bool = True,
        strip_accents: bool = True,
        **kwargs: Any,
    ):
        super().__init__(trainable=False, **kwargs)
        if max_seq_length < 3:
            raise ValueError(f"max_seq_length {max_seq_length} leaves no room for text")
        self.vocab_file = vocab_file
        self.max_seq_length = max_seq_length
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.vocab = load_vocab(vocab_file)
        self.tokenizer = GraphTokenizer(vocab_file, do_lower_case, strip_accents)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "vocab_file": self.vocab_file,
            "max_seq_length": self.max_seq_length,
            "do_lower_case": self.do_lower_case,
            "strip_accents": self.strip_accents,
        }

    def call(self, x, y=None, sample_weight=None):
        features, targets = self.encode(x, y)
        if y is None and sample_weight is None:
            return features
        return keras.utils.pack_x_y_sample_weight(features, targets, sample_weight)

    def encode(self, x, y=None) -> tuple[dict[str, tf.Tensor], tf.Tensor | None]:
        """(features of `x`, ids of the labels `y`, None without them)."""
        raise NotImplementedError


class ElectraPreprocessor(_Preprocessor):
    """Sentences or sentence pairs -> `input_ids`, `input_mask`, `segment_ids` int32
    [batch, max_seq_length], as the fine-tuning command featurizes (`[CLS] a [SEP] (b [SEP])`,
    segment ids 0 then 1, a pair cut longest-first, a single text to `max_seq_length - 2`
    tokens); string labels -> their ids.

    Args:
        vocab_file: the model's vocabulary.
        max_seq_length: the length of every feature row.
        labels: the label names; a label's id is its position. None: integer labels only.
        pair: whether an input is a pair of texts.
        do_lower_case, strip_accents: the tokenizer's (the pre-trained model's).

    Inputs `x`: string [batch] (or a scalar, one example); with `pair`, `(text_a, text_b)` or
    `{"text_a": ..., "text_b": ...}` (the export's input names; `{"text": ...}` for one text).
    `y`: string or integer labels [batch]. A label outside `labels` fails the step, naming it.
    """

    def __init__(
        self,
        vocab_file: str,
        max_seq_length: int = 128,
        labels: Sequence[str] | None = None,
        pair: bool = False,
        do_lower_case: bool = True,
        strip_accents: bool = True,
        **kwargs: Any,
    ):
        super().__init__(vocab_file, max_seq_length, do_lower_case, strip_accents, **kwargs)
        self.pair = pair
        self.label_table = _LabelTable(labels, "labels")
        self.featurizer = TextFeaturizer(self.tokenizer, self.vocab, max_seq_length)

    @property
    def labels(self) -> tuple[str, ...] | None:
        return self.label_table.names

    def get_config(self) -> dict[str, Any]:
        labels = list(self.labels) if self.labels else None
        return {**super().get_config(), "labels": labels, "pair": self.pair}

    def texts(self, x) -> tuple[tf.Tensor, tf.Tensor | None]:
        """(text_a, text_b or None) of an input, as string tensors."""
        if isinstance(x, dict):
            unknown = sorted(set(x) - set(TEXT_KEYS))
            if unknown:
                raise ValueError(f"text inputs are named {TEXT_KEYS}, not {unknown}")
            x = (x["text_a"], x["text_b"]) if "text_b" in x else x.get("text", x.get("text_a"))
        is_pair = isinstance(x, (tuple, list)) and len(x) == 2 and not isinstance(x[0], str)
        if self.pair != is_pair:
            raise ValueError(
                "this preprocessor takes pairs of texts, (text_a, text_b)"
                if self.pair
                else "this preprocessor takes single texts: build it with pair=True for pairs"
            )
        if self.pair:
            return as_tensor(x[0]), as_tensor(x[1])
        return as_tensor(x), None

    def encode(self, x, y=None) -> tuple[dict[str, tf.Tensor], tf.Tensor | None]:
        """The model inputs of `x` (one example for scalar texts, else a batch), the ids of
        its labels `y` (None without)."""
        text_a, text_b = self.texts(x)
        labels = None if y is None else self.label_table.ids(as_tensor(y))
        if text_a.shape.rank == 0:
            batch = F.text_features(
                self.featurizer, text_a[None], None if text_b is None else text_b[None]
            )
            return _first(batch), labels
        return F.text_features(self.featurizer, text_a, text_b), labels


class ElectraTaggingPreprocessor(_Preprocessor):
    """Sentences as words -> the tagging features of the fine-tuning command (each word
    tokenized on its own, one segment id on every real token, a whole word or none); each
    word's tag -> its id at the word's first sub-token, -1 elsewhere (`ignore_class=-1`).

    Args:
        vocab_file, max_seq_length, do_lower_case, strip_accents: as `ElectraPreprocessor`.
        tags: the tag names (as the data writes them: BIO, BIOES, IOB1 ... kept as they are); a
            tag's id is its position. None: integer tags only.
        segment_id, truncation: 0 and "fit" (a word kept while its pieces and the closing
            [SEP] fit) as the command's tagging tasks on a user's data (`UserTaggingTask`); 1
            and "original" as the original's chunking (`TaggingTask`; `features.py`).

    Inputs `x`: words, string [batch, (words)] (ragged), or sentences, string [batch], split on
    whitespace. `y`: tags of the same shape (ragged), or [batch] strings of space-separated
    tags; a sentence whose tags and words differ in number fails the step.
    Targets: int32 [batch, max_seq_length].
    """

    def __init__(
        self,
        vocab_file: str,
        max_seq_length: int = 128,
        tags: Sequence[str] | None = None,
        do_lower_case: bool = True,
        strip_accents: bool = True,
        segment_id: int = 0,
        truncation: str = "fit",
        **kwargs: Any,
    ):
        super().__init__(vocab_file, max_seq_length, do_lower_case, strip_accents, **kwargs)
        if truncation not in F.TRUNCATIONS:
            raise ValueError(f"truncation {truncation!r} is not one of {F.TRUNCATIONS}")
        self.tag_table = _LabelTable(tags, "tags")
        self.segment_id = segment_id
        self.truncation = truncation
        self.pair = False

    @property
    def tags(self) -> tuple[str, ...] | None:
        return self.tag_table.names

    def get_config(self) -> dict[str, Any]:
        tags = list(self.tags) if self.tags else None
        return {
            **super().get_config(),
            "tags": tags,
            "segment_id": self.segment_id,
            "truncation": self.truncation,
        }

    @staticmethod
    def words(x) -> tf.RaggedTensor:
        """Words [batch, (words)] of sentences [batch] (split on whitespace) or of words."""
        x = as_tensor(x)
        if isinstance(x, tf.RaggedTensor):
            return x
        if x.shape.rank != 1:
            raise ValueError(
                f"tagging inputs are sentences [batch] or words [batch, (words)], not rank "
                f"{x.shape.rank} (Dataset.ragged_batch batches lists of words)"
            )
        return F.split_words(x)

    def word_features(self, x) -> tuple[dict[str, tf.Tensor], tf.RaggedTensor]:
        """(features, the first sub-token of each kept word [batch, (kept)]) of a batch."""
        return F.word_features(
            self.tokenizer,
            self.words(x),
            self.max_seq_length,
            self.vocab["[CLS]"],
            self.vocab["[SEP]"],
            self.segment_id,
            self.truncation,
        )

    def encode(self, x, y=None) -> tuple[dict[str, tf.Tensor], tf.Tensor | None]:
        """The features of `x` and the tag ids of `y` [batch, max_seq_length] (None without);
        a scalar sentence is one example."""
        x = as_tensor(x)
        single = not isinstance(x, tf.RaggedTensor) and x.shape.rank == 0
        if single:
            x, y = x[None], None if y is None else as_tensor(y)[None]
        words = self.words(x)
        features, positions = self.word_features(words)
        labels = None if y is None else self._tag_ids(words, positions, y)
        if single:
            return _first(features), None if labels is None else labels[0]
        return features, labels

    def _tag_ids(self, words: tf.RaggedTensor, positions: tf.RaggedTensor, y) -> tf.Tensor:
        tags = self.words(y)
        tag_ids = tags.with_flat_values(self.tag_table.ids(tags.flat_values))
        same = tf.debugging.assert_equal(
            words.row_lengths(),
            tf.cast(tags.row_lengths(), words.row_splits.dtype),
            message="a sentence's tags and words differ in number",
        )
        with tf.control_dependencies([same]):
            return F.word_labels(positions, tag_ids, self.max_seq_length)
