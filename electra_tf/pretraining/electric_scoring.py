"""Scoring text with an Electric model: a log-likelihood estimate per token and per sentence,
every token of every sentence in one forward pass (Electric's use for re-ranking)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from electra_tf.data.tokenization import FullTokenizer
from electra_tf.pretraining.electric import pseudo_log_likelihoods
from electra_tf.pretraining.masking import candidates_mask


@dataclasses.dataclass(frozen=True)
class TextScore:
    """One text's scores.

    Attributes:
        text: the input text.
        tokens: its WordPiece tokens, those scored ([CLS] and [SEP] are not).
        token_scores: -E(x)_t per token, an estimate of log p(token | the rest).
        score: their sum, the sentence's pseudo-log-likelihood estimate.
        truncated: whether tokens past `max_seq_length - 2` were dropped.
    """

    text: str
    tokens: list[str]
    token_scores: list[float]
    score: float
    truncated: bool


def energies(model, inputs: dict[str, tf.Tensor]) -> tf.Tensor:
    """float32 [batch, seq_len]: the discriminator head's output, Electric's energy E(x)_t.

    `model` is an `ElectraPretrainer` (its discriminator and head run; the cloze generator
    does not) or anything that returns the head's output as `logits`, e.g. an
    `ElectraDiscriminator` loaded from an Electric checkpoint.
    """
    discriminator = getattr(model, "discriminator", None)
    head = getattr(model, "discriminator_head", None)
    if discriminator is not None and head is not None:
        hidden = discriminator(inputs, training=False)["sequence_output"]
        return tf.cast(head(hidden), tf.float32)
    return tf.cast(model(inputs, training=False)["logits"], tf.float32)


def score_features(
    model, features: dict[str, tf.Tensor], cls_id: int, sep_id: int, mask_id: int
) -> dict[str, tf.Tensor]:
    """Electric's scores of featurized text, every token in one forward pass; pure tf (the
    serving signature `score_text` runs it in the graph, `score_text` below eagerly).

    A token is scored when it is real and not [CLS], [SEP] or [MASK] (the masking candidates,
    `masking.candidates_mask`): the positions an Electric model was trained to tell data from
    noise at, less [CLS] and [SEP], whose energies carry no word's likelihood.

    Args:
        model: see `energies`.
        features: int `input_ids`, `input_mask`, `segment_ids` [batch, seq_len].
        cls_id, sep_id, mask_id: the vocabulary's special ids.

    Returns:
        `pseudo_log_likelihoods`' dict (`token_scores` [batch, seq_len], `sentence_scores`,
        `num_scored` [batch]) and `scored`, bool [batch, seq_len].
    """
    scored = candidates_mask(
        features["input_ids"], features["input_mask"], cls_id=cls_id, sep_id=sep_id,
        mask_id=mask_id,
    )  # fmt: skip
    return {**pseudo_log_likelihoods(energies(model, features), scored), "scored": scored}


def _padded_batch(
    kept: list[list[int]], cls_id: int, sep_id: int
) -> tuple[np.ndarray, dict[str, tf.Tensor]]:
    """`[CLS] ids [SEP]` per row of `kept`, padded to the longest: the ids as int32
    [batch, length] and the model's inputs (`input_ids`, `input_mask`, `segment_ids`)."""
    length = max(len(ids) for ids in kept) + 2
    input_ids = np.zeros([len(kept), length], np.int32)
    input_mask = np.zeros([len(kept), length], np.int32)
    for row, ids in enumerate(kept):
        input_ids[row, : len(ids) + 2] = [cls_id, *ids, sep_id]
        input_mask[row, : len(ids) + 2] = 1
    inputs = {
        "input_ids": tf.constant(input_ids),
        "input_mask": tf.constant(input_mask),
        "segment_ids": tf.zeros_like(input_ids),
    }
    return input_ids, inputs


def score_text(
    model,
    tokenizer: FullTokenizer,
    texts: Sequence[str],
    max_seq_length: int = 128,
    batch_size: int = 32,
) -> list[TextScore]:
    """Scores each text as `[CLS] tokens [SEP]` with Electric's energies (see
    `electric.pseudo_log_likelihoods`): -E(x)_t per WordPiece token, summed per text.

    Texts are batched `batch_size` at a time and padded to the longest in the batch; padding
    gets no attention weight, so a text's scores do not depend on its batch. The model should
    be an Electric one: an ELECTRA discriminator's output is a replaced-token logit, not an
    energy, and its "scores" are not log-likelihoods.

    Args:
        model: see `energies`.
        tokenizer: the model's WordPiece tokenizer (its vocabulary has [CLS] [SEP] [MASK]).
        texts: the sentences.
        max_seq_length: longer token sequences are truncated (`TextScore.truncated`).
        batch_size: texts per forward pass.

    Returns:
        one `TextScore` per text, in order.
    """
    if max_seq_length < 3:
        raise ValueError(f"max_seq_length {max_seq_length} leaves no room for a token")
    vocab = tokenizer.vocab
    special = {"cls_id": vocab["[CLS]"], "sep_id": vocab["[SEP]"], "mask_id": vocab["[MASK]"]}
    results: list[TextScore] = []
    for start in range(0, len(texts), batch_size):
        chunk = list(texts[start : start + batch_size])
        token_ids = [tokenizer.tokenize_to_ids(text) for text in chunk]
        kept = [ids[: max_seq_length - 2] for ids in token_ids]
        input_ids, inputs = _padded_batch(kept, special["cls_id"], special["sep_id"])
        scores = score_features(model, inputs, **special)
        token_scores = scores["token_scores"].numpy()  # [batch, length]
        scored = scores["scored"].numpy()  # [batch, length]
        for row, text in enumerate(chunk):
            # A [MASK] typed in the text is not scored (it is no candidate), like [CLS]/[SEP].
            positions = np.nonzero(scored[row])[0]
            results.append(
                TextScore(
                    text=text,
                    tokens=tokenizer.convert_ids_to_tokens(input_ids[row, positions].tolist()),
                    token_scores=token_scores[row, positions].tolist(),
                    score=float(scores["sentence_scores"][row]),
                    truncated=len(kept[row]) < len(token_ids[row]),
                )
            )
    return results
