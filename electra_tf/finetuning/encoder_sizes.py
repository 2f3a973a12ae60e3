"""The fine-tuning encoder's size, from the size table alone: no pre-training config built.

`FinetuningConfig.model_config()` sizes a randomly initialised encoder here; an init
checkpoint's own encoder config wins over it (`runs.finetuning_plan`), and `size_of_encoder`
names that encoder's size for the learning-rate rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from electra_tf.config import MODEL_SIZES, ModelConfig

# The original's debug encoder (run_finetuning.FinetuningModel).
DEBUG_MODEL = {
    "num_hidden_layers": 3,
    "hidden_size": 144,
    "intermediate_size": 576,
    "num_attention_heads": 4,
}


def sized_encoder(
    model_size: str,
    overrides: Mapping[str, Any],
    embedding_size: int | None,
    vocab_size: int,
    max_seq_length: int,
) -> ModelConfig:
    """An encoder of the size table's `model_size` (`MODEL_SIZES`) with `overrides`: the
    original's `get_bert_config`, the rules of `PretrainingConfig.discriminator_config()`
    (heads of 64, a 4x feed-forward, at least 512 positions; `embedding_size` None: the
    hidden size)."""
    hidden, layers = MODEL_SIZES[model_size]
    args: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "max_position_embeddings": max(512, max_seq_length),
    }
    args.update(overrides)
    hidden = args["hidden_size"]
    args.setdefault("num_attention_heads", max(1, hidden // 64))
    args.setdefault("intermediate_size", 4 * hidden)
    args["embedding_size"] = embedding_size or args.get("embedding_size") or hidden
    return ModelConfig.from_dict(args)


def size_of_encoder(model_config: ModelConfig) -> str | None:
    """The model size ("small", "base", "large") whose hidden size and depth an encoder has;
    None for any other shape (a custom model follows the user's `model_size`)."""
    shape = (model_config.hidden_size, model_config.num_hidden_layers)
    return next((name for name, sizes in MODEL_SIZES.items() if sizes == shape), None)
