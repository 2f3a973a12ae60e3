"""The tiny encoder the fine-tuning tests share: one layer 16 wide, embeddings 8 wide, as
fine-tuning hparams (`{**tiny_encoder(), "vocab_size": ..., ...}`)."""

from __future__ import annotations

from typing import Any


def tiny_encoder(intermediate_size: int = 32) -> dict[str, Any]:
    """`model_hparam_overrides` and `embedding_size` of the tests' tiny fine-tuning encoder."""
    return {
        "model_hparam_overrides": {
            "hidden_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 1,
            "intermediate_size": intermediate_size,
        },
        "embedding_size": 8,
    }
