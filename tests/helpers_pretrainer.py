"""Tiny pre-training configs and batches shared by the pretrainer tests (no files read)."""

import contextlib
import os

import numpy as np

from electra_tf.config import pretraining_config

CLS, SEP, MASK = 1, 2, 3
SPECIAL_IDS = {"cls_id": CLS, "sep_id": SEP, "mask_id": MASK}
VOCAB = 60

# A vocabulary of 128 placeholder words with BERT's special ids (the pretrainer's defaults):
# [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103.
BERT_LAYOUT_VOCAB = [f"w{i}" for i in range(128)]
for _index, _token in (
    (0, "[PAD]"),
    (100, "[UNK]"),
    (101, "[CLS]"),
    (102, "[SEP]"),
    (103, "[MASK]"),
):
    BERT_LAYOUT_VOCAB[_index] = _token

# Hparams of a tiny run through the training loop (D 2 x 32, G 2 x 8, E 16, length 32) with
# dropout off, so that runs compared with each other see the same networks.
TINY_RUN_HPARAMS = {
    "model_size": "small",
    "model_hparam_overrides": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
    "embedding_size": 16,
    "vocab_size": len(BERT_LAYOUT_VOCAB),
    "max_seq_length": 32,
    "learning_rate": 1e-3,
    "num_warmup_steps": 0,
    "jit_compile": False,
}


def write_bert_layout_vocab(data_dir) -> None:
    """`<data_dir>/vocab.txt` holding `BERT_LAYOUT_VOCAB`."""
    with open(os.path.join(data_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(BERT_LAYOUT_VOCAB) + "\n")


def tiny_config(**overrides):
    """Discriminator 2 x 32 (E = 16 != H), generator 16 wide, vocab 60, length 16, N = 4."""
    hparams = {
        "model_size": "small",
        "vocab_size": VOCAB,
        "max_seq_length": 16,
        "mask_prob": 0.25,
        "embedding_size": 16,
        "generator_hidden_size": 0.5,
        "model_hparam_overrides": {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 16,
        },
    }
    hparams.update(overrides)
    return pretraining_config(hparams=hparams)


def tiny_batch(batch=4, seq_len=16, seed=0):
    """[CLS] words [SEP] words [SEP] + padding, two segments, varied lengths."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, VOCAB, size=(batch, seq_len)).astype(np.int32)
    lengths = np.linspace(seq_len, seq_len // 2, batch).astype(int)
    mask = (np.arange(seq_len)[None] < lengths[:, None]).astype(np.int32)
    segments = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, 0] = CLS
        ids[row, n // 2] = SEP
        ids[row, n - 1] = SEP
        segments[row, n // 2 + 1 : n] = 1
    return {"input_ids": ids * mask, "input_mask": mask, "segment_ids": segments}


@contextlib.contextmanager
def batch_split_invariant_objective():
    """Makes the pretrainer's corruption independent of how a batch is split.

    The pretrainer's RNG draws one stream per call, so half a batch is masked differently from
    the same examples inside the full batch. Inside this context every example is masked by the
    real `mask_inputs` with a seed made from its own tokens, and sampling is the argmax: a
    batch split over replicas or accumulation micro-batches sees the same corrupted inputs as
    the whole batch, and only the plumbing under test differs.
    """
    import tensorflow as tf

    from electra_tf.pretraining import pretrainer as pretrainer_module

    real_mask_inputs = pretrainer_module.mask_inputs
    real_sample = pretrainer_module.gumbel_sample

    def per_example_mask_inputs(input_ids, input_mask, *args, **kwargs):
        seq_len = input_ids.shape[1]
        weights = tf.range(1, seq_len + 1, dtype=tf.int32)
        ids, mask = tf.cast(input_ids, tf.int32), tf.cast(input_mask, tf.int32)
        seeds = tf.stack([tf.reduce_sum(ids * weights, 1), tf.reduce_sum(mask, 1)], 1)  # [b, 2]
        probe = real_mask_inputs(ids[:1], mask[:1], *args[:2], seeds[0], **kwargs)

        def one(example):
            row_ids, row_mask, seed = example
            out = real_mask_inputs(row_ids[None], row_mask[None], *args[:2], seed, **kwargs)
            return {key: value[0] for key, value in out.items()}

        signature = {k: tf.TensorSpec(v.shape[1:], v.dtype) for k, v in probe.items()}
        return tf.map_fn(one, (ids, mask, seeds), fn_output_signature=signature)

    def argmax_sample(logits, seed, temperature=1.0, disallow_ids=None, uniform=None, start=0):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)  # [batch, num_masked]

    pretrainer_module.mask_inputs = per_example_mask_inputs
    pretrainer_module.gumbel_sample = argmax_sample
    try:
        yield
    finally:
        pretrainer_module.mask_inputs = real_mask_inputs
        pretrainer_module.gumbel_sample = real_sample


def one_layer_config(**overrides):
    """Where tracing/XLA compilation dominates a test's time, one layer per tower."""
    return tiny_config(
        model_hparam_overrides={
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 16,
        },
        **overrides,
    )
