"""In-graph featurization for serving: raw strings -> `input_ids`, `input_mask`, `segment_ids`.

It reproduces, inside the TF graph, what fine-tuning does in Python (`finetuning/glue.py`
`featurize_pair`, the original's BERT featurization): WordPiece ids from the same
`GraphTokenizer` as training, `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]` with segment ids 0 then
1, pairs truncated longest-first (the original's `_truncate_seq_pair`), single texts cut to
`max_seq_length - 2`. Rows are zero-padded to the longest row of the batch, not to
`max_seq_length`: position embeddings make the real positions' outputs identical either way
(the encoder is padding-invariant), and short requests run faster.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

# How the second text is cut: "longest_first" as GLUE; "first_fixed" keeps up to
# `max_first_length` tokens of text_a and fills the rest with text_b (the original's QA, where
# text_a is the question and text_b the context).
TRUNCATION_MODES = ("longest_first", "first_fixed")


def clean_utf8(text: tf.Tensor) -> tf.Tensor:
    """Drops invalid UTF-8 bytes, as the original's `convert_to_unicode` (errors="ignore")."""
    return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="ignore")


def truncated_lengths(
    len_a: tf.Tensor,
    len_b: tf.Tensor,
    budget: tf.Tensor,
    mode: str = "longest_first",
    max_first_length: int | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Kept lengths of a pair after truncation to `budget` tokens in total (all int [batch]).

    `longest_first` is the closed form of the original's loop "while too long: pop from the
    longer, from b on a tie": b keeps at least half the budget (rounded down) unless a is
    shorter than its half, and a takes what b leaves.
    """
    if mode == "longest_first":
        new_b = tf.minimum(len_b, tf.maximum(budget // 2, budget - len_a))
        new_a = tf.minimum(len_a, budget - new_b)
    elif mode == "first_fixed":
        new_a = len_a if max_first_length is None else tf.minimum(len_a, max_first_length)
        new_a = tf.minimum(new_a, budget)
        new_b = tf.minimum(len_b, budget - new_a)
    else:
        raise ValueError(f"truncation mode {mode!r} is not one of {TRUNCATION_MODES}")
    return new_a, new_b


def _flat_ids(ids: tf.RaggedTensor) -> tf.RaggedTensor:
    """[batch, (words), (pieces)] -> [batch, (pieces)]; a 2-D ragged tensor passes through."""
    while ids.ragged_rank > 1:
        ids = ids.merge_dims(1, 2)
    return ids


def _padded(ids: tf.RaggedTensor) -> tf.Tensor:
    # One spare zero column, so that gathering from a batch of empty texts is still valid.
    return tf.pad(ids.to_tensor(0), [[0, 0], [0, 1]])  # [batch, longest + 1]


def pack_features(
    ids_a: tf.RaggedTensor,
    ids_b: tf.RaggedTensor | None,
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
    truncation: str = "longest_first",
    max_first_length: int | None = None,
    single_segment_id: int = 0,
) -> dict[str, tf.Tensor]:
    """Ragged token ids -> dense int32 features [batch, longest row <= max_seq_length].

    A row whose text_b has no tokens is featurized as a single text (no second [SEP]), as the
    Python featurizer does for an empty text_b. `single_segment_id` = 1 reproduces the original
    tagging features (segment 1 on every real token).

    Each output position is computed from its index (which part of `[CLS] a [SEP] b [SEP]` it
    falls in) with dense ops: concatenating ragged pieces traces ten times as many ops.
    """
    ids_a = tf.cast(_flat_ids(ids_a), tf.int32)
    len_a = tf.cast(ids_a.row_lengths(), tf.int32)
    if ids_b is None:
        ids_b = tf.RaggedTensor.from_row_lengths(
            tf.zeros([0], tf.int32), tf.zeros_like(len_a, tf.int64)
        )
    ids_b = tf.cast(_flat_ids(ids_b), tf.int32)
    len_b = tf.cast(ids_b.row_lengths(), tf.int32)
    has_b = tf.cast(len_b > 0, tf.int32)
    keep_a, keep_b = truncated_lengths(
        len_a, len_b, max_seq_length - 2 - has_b, truncation, max_first_length
    )
    total = 2 + keep_a + keep_b + has_b  # [batch]
    # At least [CLS] [SEP]: a batch of 0 rows is [0, 2], not [0, 0], which the encoder's
    # [CLS] slice (classification heads) could not index.
    width = tf.reduce_max(tf.concat([total, [2]], 0))
    positions = tf.broadcast_to(tf.range(width)[None, :], [tf.shape(total)[0], width])  # [B, T]
    ka, kb = keep_a[:, None], keep_b[:, None]
    in_a = (positions >= 1) & (positions <= ka)
    in_b = (positions >= ka + 2) & (positions < ka + 2 + kb)
    is_sep = (positions == ka + 1) | ((positions == ka + 2 + kb) & (has_b[:, None] > 0))
    real = positions < total[:, None]
    dense_a, dense_b = _padded(ids_a), _padded(ids_b)
    a_index = tf.clip_by_value(positions - 1, 0, tf.shape(dense_a)[1] - 1)
    b_index = tf.clip_by_value(positions - ka - 2, 0, tf.shape(dense_b)[1] - 1)
    from_a = tf.gather(dense_a, a_index, batch_dims=1)  # [B, T]
    from_b = tf.gather(dense_b, b_index, batch_dims=1)  # [B, T]
    zeros = tf.zeros_like(positions)
    input_ids = tf.where(in_a, from_a, tf.where(in_b, from_b, zeros))
    input_ids = tf.where(is_sep, sep_id, tf.where(positions == 0, cls_id, input_ids))
    input_ids = tf.where(real, input_ids, 0)
    second = in_b | (is_sep & (positions > ka + 1))
    segment_ids = tf.where(second, 1, tf.where(real, single_segment_id, 0))
    return {
        "input_ids": input_ids,
        "input_mask": tf.cast(real, tf.int32),
        "segment_ids": segment_ids,
    }


class TextFeaturizer(tf.Module):
    """Raw UTF-8 strings -> model features, tokenized in the graph.

    Args:
        tokenizer: a `GraphTokenizer` (or anything with `tokenize(tf.string [B]) ->
            tf.RaggedTensor` of ids); it is tracked, so its vocabulary table is saved with the
            SavedModel.
        vocab: token -> id (for the [CLS] / [SEP] ids).
        max_seq_length: the model's sequence length; longer inputs are truncated.
        truncation, max_first_length, single_segment_id: see `pack_features`.
    """

    def __init__(
        self,
        tokenizer: Any,
        vocab: dict[str, int],
        max_seq_length: int,
        truncation: str = "longest_first",
        max_first_length: int | None = None,
        single_segment_id: int = 0,
        name: str = "featurizer",
    ):
        super().__init__(name=name)
        if truncation not in TRUNCATION_MODES:
            raise ValueError(f"truncation mode {truncation!r} is not one of {TRUNCATION_MODES}")
        if max_seq_length < 3:
            raise ValueError(f"max_seq_length {max_seq_length} leaves no room for text")
        self.tokenizer = tokenizer
        self.cls_id = vocab["[CLS]"]
        self.sep_id = vocab["[SEP]"]
        self.max_seq_length = max_seq_length
        self.truncation = truncation
        self.max_first_length = max_first_length
        self.single_segment_id = single_segment_id

    def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        return self.tokenizer.tokenize(clean_utf8(tf.reshape(text, [-1])))

    def __call__(self, text_a: tf.Tensor, text_b: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        ids_b = None if text_b is None else self.tokenize(text_b)
        return pack_features(
            self.tokenize(text_a),
            ids_b,
            self.max_seq_length,
            self.cls_id,
            self.sep_id,
            self.truncation,
            self.max_first_length,
            self.single_segment_id,
        )
