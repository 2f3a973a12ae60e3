"""The fine-tuning command's featurization, inside the TF graph, for Keras preprocessing.

`text_features`: one text or a pair, as `finetuning/glue.py`'s `featurize_pair` (the serving
featurizer's `pack_features`), zero-padded to `max_seq_length`. `word_features`: a sentence as
words, as `finetuning/tagging.py`'s `TaggingTask.featurize`: every word tokenized on its own,
one segment id on every real token, only a word's first sub-token labelled, [SEP] closing the
ids whatever was cut. Two settings follow the command's two kinds of tagging task:

- a user's data (`UserTaggingTask`): segment id 0; truncation "fit": a word is kept while its
  pieces and the closing [SEP] fit.
- the original's chunking (`TaggingTask`): segment id 1; truncation "original", which counts
  the words of the sentence against the ids added so far: word k (0 = [CLS], W + 1 = [SEP]) is
  added while `W + 2 + ids so far + 1 <= max_seq_length` (a sentence of n one-piece words is
  whole only while 2n + 4 <= max_seq_length). Without the [CLS] (more than
  `max_seq_length - 3` words) the ids are a lone [SEP], as there. One case the command does
  not survive: a word that alone overflows the sequence (the test passes before its pieces
  are added, so the command's ids outgrow `max_seq_length` and its records cannot be
  written); here the ids are cut to `max_seq_length - 1` and closed with [SEP].
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.data import charclasses
from electra_tf.serving.featurizer import TextFeaturizer

# BERT's whitespace (what the tokenizer splits on): a sentence string's words.
WHITESPACE = charclasses.re2_class(charclasses.split_space_ranges()) + "+"


def padded(features: dict[str, tf.Tensor], max_seq_length: int) -> dict[str, tf.Tensor]:
    """Each [B, T <= max_seq_length] feature zero-padded to [B, max_seq_length]."""
    out = {}
    for name, value in features.items():
        value = tf.pad(value, [[0, 0], [0, max_seq_length - tf.shape(value)[1]]])
        out[name] = tf.ensure_shape(value, [None, max_seq_length])
    return out


def text_features(
    featurizer: TextFeaturizer, text_a: tf.Tensor, text_b: tf.Tensor | None
) -> dict[str, tf.Tensor]:
    """`[CLS] a [SEP] (b [SEP])` ids, mask and segment ids [B, max_seq_length] of string [B]
    texts: the command's `featurize_pair` (pairs truncated longest-first)."""
    return padded(featurizer(text_a, text_b), featurizer.max_seq_length)


def split_words(sentences: tf.Tensor) -> tf.RaggedTensor:
    """String [B] -> words [B, (W)], split on runs of BERT's whitespace."""
    return tf_text.regex_split(sentences, WHITESPACE)


TRUNCATIONS = ("fit", "original")


def word_features(
    tokenizer, words: tf.RaggedTensor, max_seq_length: int, cls_id: int, sep_id: int,
    segment_id: int = 0, truncation: str = "fit",
) -> tuple[dict[str, tf.Tensor], tf.RaggedTensor]:  # fmt: skip
    """Words [B, (W)] -> (features [B, max_seq_length], positions [B, (kept)]): the command's
    tagging features, and the index of each kept word's first sub-token (the words past the
    truncation have none: `positions.row_lengths()` <= W). `segment_id`, `truncation`: see
    the module docstring.

    `tokenizer.tokenize(string [N]) -> int [N, (pieces)]` (a `GraphTokenizer`).
    """
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation {truncation!r} is not one of {TRUNCATIONS}")
    pieces = tokenizer.tokenize(words.flat_values)  # [N, (pieces)]
    word_ids = tf.RaggedTensor.from_row_splits(pieces, words.row_splits)  # [B, (W), (pieces)]
    counts = tf.cast(word_ids.row_lengths(axis=2), tf.int32)  # [B, (W)]
    num_words = tf.cast(words.row_lengths(), tf.int32)  # [B]
    before = tf.math.cumsum(counts, axis=1, exclusive=True) + 1  # [B, (W)]: after [CLS]
    if truncation == "fit":  # the word's pieces and the closing [SEP] fit
        has_cls = tf.ones_like(num_words, tf.bool)  # [B]
        kept = before + counts <= max_seq_length - 1  # [B, (W)], a prefix of each row
    else:
        limit = max_seq_length - num_words - 3  # [B]: the ids a word may find before it
        has_cls = limit >= 0  # [B]
        kept = (before <= limit[:, None]) & has_cls[:, None]  # [B, (W)], a prefix
    body = tf.ragged.boolean_mask(word_ids, kept).merge_dims(1, 2)  # [B, (tokens)]
    cls = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(has_cls, tf.int32))], cls_id), tf.cast(has_cls, tf.int64)
    )  # [B, (0 or 1)]
    # [CLS] + the kept words, cut where one word alone overflowed (the command fails there).
    head = tf.concat([cls, tf.cast(body, tf.int32)], axis=1)[:, : max_seq_length - 1]
    sep = tf.fill([tf.shape(num_words)[0], 1], sep_id)
    ids = tf.concat([head, tf.RaggedTensor.from_tensor(sep)], axis=1)  # [B, (T)]
    positions = tf.ragged.boolean_mask(before, kept)  # [B, (kept)]
    positions = tf.ragged.boolean_mask(positions, positions < max_seq_length - 1)
    real = tf.ones_like(ids)
    features = {
        "input_ids": ids.to_tensor(0, shape=[None, max_seq_length]),
        "input_mask": real.to_tensor(0, shape=[None, max_seq_length]),
        "segment_ids": (real * segment_id).to_tensor(0, shape=[None, max_seq_length]),
    }
    return features, positions


def word_labels(
    positions: tf.RaggedTensor, tag_ids: tf.RaggedTensor, max_seq_length: int
) -> tf.Tensor:
    """int32 [B, max_seq_length]: the tag ids [B, (W)] of each kept word at its first sub-token
    (`positions` [B, (kept)], from `word_features`), -1 (no label) everywhere else."""
    kept = positions.row_lengths()  # [B]
    first = tf.ragged.range(tf.cast(tag_ids.row_lengths(), kept.dtype)) < kept[:, None]
    labels = tf.ragged.boolean_mask(tf.cast(tag_ids, tf.int32), first)  # [B, (kept)]
    rows = tf.cast(positions.value_rowids(), tf.int32)
    indices = tf.stack([rows, tf.cast(positions.flat_values, tf.int32)], axis=1)  # [K, 2]
    return tf.tensor_scatter_nd_update(
        tf.fill([tf.shape(kept)[0], max_seq_length], -1), indices, labels.flat_values
    )
