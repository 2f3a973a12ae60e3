"""Hugging Face's ElectraConfig (config.json) for one ELECTRA network, written and read: what
`hf` writes beside each folder's safetensors, and the fields ELECTRA's network fixes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from electra_tf.checkpoints.files import CheckpointError
from electra_tf.config import ModelConfig
from electra_tf.modeling.utils import LAYER_NORM_EPSILON

_LOG = logging.getLogger("electra_tf.checkpoints.hf")  # its messages are the HF format's


class HFFormatError(CheckpointError):
    """A Hugging Face directory that cannot be read or written; the message names the file."""


def config_dict(model_config: ModelConfig, architecture: str) -> dict[str, Any]:
    """transformers' ElectraConfig fields for one network."""
    return {
        "architectures": [architecture],
        "model_type": "electra",
        "vocab_size": model_config.vocab_size,
        "embedding_size": model_config.embedding_width,
        "hidden_size": model_config.hidden_size,
        "num_hidden_layers": model_config.num_hidden_layers,
        "num_attention_heads": model_config.num_attention_heads,
        "intermediate_size": model_config.intermediate_size,
        "hidden_act": model_config.hidden_act,
        "hidden_dropout_prob": model_config.hidden_dropout_prob,
        "attention_probs_dropout_prob": model_config.attention_probs_dropout_prob,
        "max_position_embeddings": model_config.max_position_embeddings,
        "type_vocab_size": model_config.type_vocab_size,
        "initializer_range": model_config.initializer_range,
        # What ELECTRA fixes, written out so that transformers builds the same network.
        "layer_norm_eps": LAYER_NORM_EPSILON,
        "position_embedding_type": "absolute",
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "is_decoder": False,
        "add_cross_attention": False,
    }


# HF config fields that change the network, with the only value ELECTRA's network has; any
# other value is refused on import rather than silently dropped.
FIXED_FIELDS = {
    "layer_norm_eps": LAYER_NORM_EPSILON,
    "position_embedding_type": "absolute",
    "is_decoder": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}
# Activations that mean the same function here (tf_keras) and in transformers.
HF_ACTIVATIONS = ("gelu", "relu")


def model_config_from_dict(values: Mapping[str, Any], where: str) -> ModelConfig:
    """A ModelConfig from an HF config.json (absent fields take ElectraConfig's defaults)."""
    if values.get("model_type", "electra") != "electra":
        raise HFFormatError(f"{where}: model_type {values.get('model_type')!r} is not 'electra'")
    defaults = {  # transformers' ElectraConfig defaults (the small discriminator)
        "vocab_size": 30522,
        "embedding_size": 128,
        "hidden_size": 256,
        "num_hidden_layers": 12,
        "num_attention_heads": 4,
        "intermediate_size": 1024,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
    }
    args = {key: values.get(key, default) for key, default in defaults.items()}
    for key, fixed in FIXED_FIELDS.items():
        value = values.get(key, fixed)
        same = value == fixed if not isinstance(fixed, float) else abs(value - fixed) <= 1e-15
        if not same:
            raise HFFormatError(
                f"{where}: {key} {value!r}, but ELECTRA's network has {fixed!r} only "
                "(only absolute position embeddings exist in ELECTRA)"
                if key == "position_embedding_type"
                else f"{where}: {key} {value!r}, but ELECTRA's network has {fixed!r} only"
            )
    if args["hidden_act"] not in HF_ACTIVATIONS:
        raise HFFormatError(
            f"{where}: hidden_act {args['hidden_act']!r} is not one of {HF_ACTIVATIONS} "
            "(transformers' gelu is the exact erf form, ELECTRA's)"
        )
    if values.get("pad_token_id", 0) != 0:
        _LOG.warning(
            "%s: pad_token_id %s; ELECTRA pads with id 0 (it does not change the outputs)",
            where, values["pad_token_id"],
        )  # fmt: skip
    return ModelConfig(**args)
