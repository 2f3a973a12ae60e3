"""An independent NumPy re-derivation of ELECTRA's forward pass and losses.

Written from the math in the original paper/code (docs/faithfulness.md, sections 4-6),
never by calling TensorFlow: weights come in as a dict of NumPy arrays keyed by the ORIGINAL
checkpoint names (e.g. `electra/encoder/layer_0/attention/self/query/kernel`), so the same dict
also checks the name map. Everything is float64 to make this the more accurate side of every
comparison.
"""

from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU: x * Phi(x), Phi the standard normal CDF."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


def dense(w: dict, prefix: str, x: np.ndarray) -> np.ndarray:
    return x @ w[f"{prefix}/kernel"] + w[f"{prefix}/bias"]


def embed(w: dict, input_ids, segment_ids, scope: str = "electra") -> np.ndarray:
    p = f"{scope}/embeddings"
    seq_len = input_ids.shape[1]
    x = (
        w[f"{p}/word_embeddings"][input_ids]
        + w[f"{p}/token_type_embeddings"][segment_ids]
        + w[f"{p}/position_embeddings"][:seq_len][None]
    )
    return layer_norm(x, w[f"{p}/LayerNorm/gamma"], w[f"{p}/LayerNorm/beta"])


def encoder(
    w: dict,
    input_ids,
    input_mask,
    segment_ids,
    num_heads: int,
    num_layers: int,
    project: bool,
    scope: str = "electra",
    embeddings_scope: str = "electra",
    attention_probs: list | None = None,
    dropout=None,
    direction: str = "bidirectional",
) -> np.ndarray:
    """BERT post-LN encoder. Returns [batch, seq_len, hidden].

    `direction` "ltr" / "rtl" is the original BertModel's causal attention (Electric's towers):
    query i may attend key j only if j <= i / j >= i, and a key that is padded OR out of the
    triangle gets -10000 (once: the two 0/1 masks multiply before the bias is made).

    `dropout(x, kind)`, if given, is applied where the original applies dropout, in its order:
    the embeddings after their LayerNorm ("hidden", before any projection), then per layer
    the attention probabilities ("attention"), the attention output and the FFN output (each
    "hidden", before its residual). Without it, there is no dropout (inference).

    The structure comes from the caller's config, never from the weights present:
    `num_layers` layers, and an `embeddings_project` exactly when `project` (E != H). A weight
    the structure needs is a KeyError; a layer or projection beyond it is an AssertionError.
    `attention_probs`, if given, receives every layer's [batch, heads, seq_q, seq_k] weights.
    """
    assert (f"{scope}/embeddings_project/kernel" in w) == project, "embeddings_project"
    assert f"{scope}/encoder/layer_{num_layers}/attention/self/query/kernel" not in w

    def drop(x, kind):
        return x if dropout is None else dropout(x, kind)

    x = drop(embed(w, input_ids, segment_ids, embeddings_scope), "hidden")
    if project:
        x = dense(w, f"{scope}/embeddings_project", x)
    batch, seq_len, hidden = x.shape
    head = hidden // num_heads
    # Bidirectional: padded keys only, the same bias for every query row; causal: per query.
    allowed = np.broadcast_to(
        input_mask[:, None, None, :].astype(np.float64), (batch, 1, 1, seq_len)
    )
    if direction != "bidirectional":
        query, key = np.arange(seq_len)[:, None], np.arange(seq_len)[None, :]
        triangle = (key <= query) if direction == "ltr" else (key >= query)
        allowed = allowed * triangle[None, None].astype(np.float64)  # [batch, 1, seq, seq]
    bias = (1.0 - allowed) * -10000.0
    for i in range(num_layers):
        p = f"{scope}/encoder/layer_{i}"

        def heads(t):
            return t.reshape(batch, seq_len, num_heads, head).transpose(0, 2, 1, 3)

        q = heads(dense(w, f"{p}/attention/self/query", x))
        k = heads(dense(w, f"{p}/attention/self/key", x))
        v = heads(dense(w, f"{p}/attention/self/value", x))
        probs = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + bias)
        if attention_probs is not None:
            attention_probs.append(probs)
        ctx = (drop(probs, "attention") @ v).transpose(0, 2, 1, 3).reshape(batch, seq_len, hidden)
        attn = layer_norm(
            drop(dense(w, f"{p}/attention/output/dense", ctx), "hidden") + x,
            w[f"{p}/attention/output/LayerNorm/gamma"],
            w[f"{p}/attention/output/LayerNorm/beta"],
        )
        ffn = dense(w, f"{p}/output/dense", gelu(dense(w, f"{p}/intermediate/dense", attn)))
        ffn = drop(ffn, "hidden")
        x = layer_norm(
            ffn + attn, w[f"{p}/output/LayerNorm/gamma"], w[f"{p}/output/LayerNorm/beta"]
        )
    return x


def structure(config) -> dict:
    """`encoder`'s structural arguments, from a ModelConfig."""
    return {
        "num_heads": config.num_attention_heads,
        "num_layers": config.num_hidden_layers,
        "project": config.embedding_width != config.hidden_size,
    }


def perturb(variables, seed: int = 0, std: float = 0.2) -> None:
    """Adds N(0, std) to every variable in place. At initial weights (std 0.02) the
    pre-activations are so small that erf and tanh GELU agree to ~1e-8, zero biases hide a
    swapped bias, and unit LayerNorm gains hide a swapped gain: parity must run away from them."""
    rng = np.random.default_rng(seed)
    for var in variables:
        noise = rng.normal(0.0, std, var.shape).astype(var.dtype.as_numpy_dtype)
        var.assign_add(noise)


def generator_logits(w: dict, sequence_output, positions, embeddings_scope="electra"):
    """Tied MLM head at the masked positions: [batch, num_masked, vocab]."""
    rows = np.arange(sequence_output.shape[0])[:, None]
    h = sequence_output[rows, positions]
    h = gelu(dense(w, "generator_predictions/dense", h))
    h = layer_norm(
        h, w["generator_predictions/LayerNorm/gamma"], w["generator_predictions/LayerNorm/beta"]
    )
    table = w[f"{embeddings_scope}/embeddings/word_embeddings"]
    return h @ table.T + w["generator_predictions/output_bias"]


def discriminator_logits(w: dict, sequence_output) -> np.ndarray:
    h = gelu(dense(w, "discriminator_predictions/dense", sequence_output))
    return dense(w, "discriminator_predictions/dense_1", h)[..., 0]


def mlm_loss(logits, target_ids, weights) -> float:
    rows = np.arange(logits.shape[0])[:, None]
    cols = np.arange(logits.shape[1])[None, :]
    nll = -log_softmax(logits)[rows, cols, target_ids]
    return float((weights * nll).sum() / (weights.sum() + 1e-6))


def sigmoid_xent(logits, labels) -> np.ndarray:
    # -[y log s(x) + (1-y) log(1-s(x))], written in the overflow-safe form.
    return np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))


def disc_loss(logits, labels, input_mask) -> float:
    m = input_mask.astype(np.float64)
    return float((sigmoid_xent(logits, labels) * m).sum() / (m.sum() + 1e-6))


def scatter_update(sequence, updates, positions):
    """The original's scatter: duplicates are summed then floor-divided by their count, slots
    aimed at position 0 are ignored. Returns (updated, updated_mask)."""
    out = sequence.copy()
    mask = np.zeros_like(sequence)
    for b in range(sequence.shape[0]):
        sums: dict[int, int] = {}
        counts: dict[int, int] = {}
        for pos, val in zip(positions[b], updates[b], strict=True):
            sums[int(pos)] = sums.get(int(pos), 0) + int(val)
            counts[int(pos)] = counts.get(int(pos), 0) + 1
        for pos, total in sums.items():
            if pos == 0:
                continue
            out[b, pos] = total // counts[pos]
            mask[b, pos] = 1
    return out, mask


# ------------------------------------------------------------------------------ Electric
def roll(x: np.ndarray, direction: int) -> np.ndarray:
    """run_pretraining.roll: the vectors of [batch, seq_len, depth] cycled along the sequence;
    direction -1: out[:, i] = x[:, i - 1] (out[:, 0] = x[:, -1]); +1: out[:, i] = x[:, i + 1]."""
    return np.take(x, (np.arange(x.shape[1]) - {-1: 1, 1: -1}[direction]) % x.shape[1], axis=1)


def two_tower_features(
    w: dict, input_ids, input_mask, segment_ids, untied_embeddings: bool = False, **structure
) -> np.ndarray:
    """Electric's cloze features: [roll(ltr, -1) | roll(rtl, +1)], [batch, seq_len, 2 * hidden].
    With untied embeddings each tower reads its own `<tower>/embeddings` block."""
    towers = []
    for scope, direction, shift in (("generator_ltr", "ltr", -1), ("generator_rtl", "rtl", 1)):
        emb = scope if untied_embeddings else "electra"
        out = encoder(
            w, input_ids, input_mask, segment_ids, **structure,
            scope=scope, embeddings_scope=emb, direction=direction,
        )  # fmt: skip
        towers.append(roll(out, shift))
    return np.concatenate(towers, axis=-1)


def cloze_logits(w: dict, features, table_scope: str = "electra") -> np.ndarray:
    """`cloze_predictions` (get_token_logits) at every position: [batch, seq_len, vocab], tied
    to the ltr tower's word table."""
    h = gelu(dense(w, "cloze_predictions/dense", features))
    h = layer_norm(h, w["cloze_predictions/LayerNorm/gamma"], w["cloze_predictions/LayerNorm/beta"])
    return h @ w[f"{table_scope}/embeddings/word_embeddings"].T + w["cloze_predictions/output_bias"]


def token_log_probs(logits, ids) -> np.ndarray:
    """log softmax(logits)[ids] per position: [batch, seq_len]."""
    rows = np.arange(logits.shape[0])[:, None]
    cols = np.arange(logits.shape[1])[None, :]
    return log_softmax(logits)[rows, cols, ids]


def nce_loss(energies, log_q, labels, input_mask, mask_prob) -> float:
    """The Electric paper's NCE objective, per token, averaged over real tokens:
    with k of n tokens noise, a token is data with probability
    (n - k) exp(-E) / ((n - k) exp(-E) + k q), and k / (n - k) = mask_prob / (1 - mask_prob).
    Loss: -log P(data) at data tokens (label 0), -log P(noise) at noise tokens (label 1)."""
    data = (1 - mask_prob) * np.exp(-energies)
    noise = mask_prob * np.exp(log_q)
    per_token = np.where(
        labels == 1, -np.log(noise / (data + noise)), -np.log(data / (data + noise))
    )
    m = input_mask.astype(np.float64)
    return float((per_token * m).sum() / (m.sum() + 1e-6))


def random_mantissas(key: np.ndarray, size: int) -> np.ndarray:
    """uint64 [size]: the top 23 bits of SplitMix64's output function of (key XOR i) * GAMMA
    for i = 0 .. size - 1 (`electra_tf.modeling.random_bits`), written in numpy."""
    gamma = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (np.uint64(key) ^ np.arange(size, dtype=np.uint64)) * gamma
        z = splitmix_mix64(z)
    return z >> np.uint64(41)


def splitmix_mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (Stafford's Mix13) with wrapping uint64 arithmetic."""
    z = np.asarray(z, np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))
