"""NumPy re-derivations of the paper's objective ablations (Section 3.2, Table 5), written from
the paper's definitions as `electra_tf/pretraining/ablations.py` reads them, never by calling
TensorFlow. float64 throughout; the encoder and heads come from `helpers_reference_numpy`."""

from __future__ import annotations

import helpers_reference_numpy as ref
import numpy as np


def generator_positions(positions: np.ndarray, seq_len: int) -> np.ndarray:
    """[batch, seq_len] 0/1: the positions some masked slot points at, each once; slots at
    position 0 are the inactive ones and mark nothing."""
    mask = np.zeros([positions.shape[0], seq_len])
    for row, slots in enumerate(positions):
        for position in slots:
            if position != 0:
                mask[row, position] = 1.0
    return mask


def weighted_mean(values: np.ndarray, weights: np.ndarray) -> float:
    """The losses' batch mean: sum(w * v) / (sum(w) + 1e-6)."""
    weights = weights.astype(np.float64)
    return float((weights * values).sum() / (weights.sum() + 1e-6))


def with_scope(w: dict, scope: str, as_scope: str) -> dict:
    """`w` plus the `scope/...` weights renamed `as_scope/...`, so that `helpers_reference_numpy`'s
    heads (written for `generator_predictions` / `discriminator_predictions`) score a head of
    the same structure under another name."""
    prefix = f"{scope}/"
    renamed = {f"{as_scope}/{k[len(prefix) :]}": v for k, v in w.items() if k.startswith(prefix)}
    assert renamed, f"no weights under {scope}/"
    return {**w, **renamed}


def main_network(w: dict, config, input_ids, input_mask, segment_ids) -> np.ndarray:
    """The full-size network (scope `electra`) on `input_ids`: [batch, seq_len, hidden]."""
    return ref.encoder(
        w,
        input_ids,
        input_mask,
        segment_ids,
        **ref.structure(config.discriminator_config()),
        scope="electra",
    )


def mlm_head_logits(w: dict, sequence_output, positions) -> np.ndarray:
    """The full-size network's `mlm_predictions` head (tied to `electra/embeddings`)."""
    w = with_scope(w, "mlm_predictions", "generator_predictions")
    return ref.generator_logits(w, sequence_output, positions, "electra")


def copy_head_logits(w: dict, sequence_output) -> np.ndarray:
    """The `copy_predictions` gate's logits [batch, seq_len] (the discriminator head's
    structure)."""
    w = with_scope(w, "copy_predictions", "discriminator_predictions")
    return ref.discriminator_logits(w, sequence_output)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def copy_distribution(generation_logits, copy_logits, input_ids) -> np.ndarray:
    """p(v) = D * 1[v == input token] + (1 - D) * softmax(generation logits)(v),
    D = sigmoid(copy logit): [batch, seq_len, vocab]."""
    copy_logits = copy_logits.astype(np.float64)[..., None]  # [batch, seq_len, 1]
    # 1 - D as sigmoid(-logit): 1.0 - sigmoid(30) would keep only ~3 digits of 9e-14.
    copy, generate = sigmoid(copy_logits), sigmoid(-copy_logits)
    one_hot = np.eye(generation_logits.shape[-1])[input_ids]  # [batch, seq_len, vocab]
    return copy * one_hot + generate * ref.softmax(generation_logits.astype(np.float64))


def nll(probabilities: np.ndarray, target_ids: np.ndarray) -> np.ndarray:
    """-log p(target) per position from probabilities [batch, positions, vocab]."""
    rows = np.arange(target_ids.shape[0])[:, None]
    cols = np.arange(target_ids.shape[1])[None, :]
    return -np.log(probabilities[rows, cols, target_ids])
