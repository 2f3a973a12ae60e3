"""Tiny pre-training configs and batches shared by the pretrainer tests (no files read)."""

import numpy as np

from electra_tf.config import pretraining_config

CLS, SEP, MASK = 1, 2, 3
SPECIAL_IDS = {"cls_id": CLS, "sep_id": SEP, "mask_id": MASK}
VOCAB = 60


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
