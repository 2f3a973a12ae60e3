"""One transformer encoder's config (`ModelConfig`), and how a pre-training config's settings
derive the discriminator's and the generator's (the original's `get_bert_config` and
`get_generator_config`). Every name here is also importable from `electra_tf.config`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from electra_tf.config.checks import ConfigError, check_ranges, check_types, replace_checked

# Hidden size and depth per model size, as the original's `training_utils.get_bert_config`.
MODEL_SIZES = {"small": (256, 12), "base": (768, 12), "large": (1024, 24)}


def check_model_overrides(overrides: Mapping[str, Any], where: str) -> None:
    """`model_hparam_overrides`: known keys, their types, dropout probabilities in [0, 1]."""
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"{where}: {overrides!r} is not a JSON object")
    model = replace_checked(ModelConfig(), overrides, where=where)
    check_types(model)
    check_ranges(
        model,
        at_least_one=(
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ),
        positive=("initializer_range",),
        probabilities=("hidden_dropout_prob", "attention_probs_dropout_prob"),
    )


def check_head_split(config: Any) -> None:
    """Each encoder's hidden width splits evenly over its attention heads (the original's
    `BertModel` raises on the same condition, from deep inside graph construction)."""
    networks = [("", derive_discriminator_config(config))]
    if config.untied_generator:
        networks.append(("generator ", derive_generator_config(config)))
    for which, model in networks:
        hidden, heads = model.hidden_size, model.num_attention_heads
        if hidden % heads:
            raise ConfigError(
                f"num_attention_heads: the {which}hidden_size {hidden} is not a multiple of "
                f"num_attention_heads {heads} (each head takes hidden_size / "
                "num_attention_heads dimensions); set both in model_hparam_overrides"
            )


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """One transformer encoder (the original's `BertConfig`).

    `embedding_size` is the width of the shared embedding tables; when it differs from
    `hidden_size` the encoder owns an `embeddings_project` dense layer (E -> H).
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    embedding_size: int | None = None  # None -> hidden_size

    @property
    def embedding_width(self) -> int:
        return self.embedding_size or self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ModelConfig:
        return replace_checked(cls(), values, where="model config")


def derive_discriminator_config(config: Any) -> ModelConfig:
    """The discriminator's encoder config (the original's `get_bert_config`)."""
    hidden, layers = MODEL_SIZES[config.model_size]
    args: dict[str, Any] = {
        "vocab_size": config.vocab_size,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "max_position_embeddings": max(512, config.max_seq_length),
    }
    args.update(config.model_hparam_overrides)
    hidden = args["hidden_size"]
    args.setdefault("num_attention_heads", max(1, hidden // 64))
    args.setdefault("intermediate_size", 4 * hidden)
    args["embedding_size"] = config.embedding_size or args.get("embedding_size") or hidden
    return ModelConfig.from_dict(args)


def derive_generator_config(config: Any) -> ModelConfig:
    """The generator's encoder config (the original's `get_generator_config`).

    Hidden = round(H * generator_hidden_size), layers = round(L * generator_layers),
    heads = max(1, hidden // 64), FFN = 4 * hidden; embeddings are the discriminator's width,
    except with `untied_generator_embeddings`: the generator's own tables are then its
    hidden width, with no projection (run_pretraining.py passes `embedding_size=None`).
    """
    disc = derive_discriminator_config(config)
    if not config.untied_generator:
        return disc
    hidden = int(round(disc.hidden_size * config.generator_hidden_size))
    return dataclasses.replace(
        disc,
        initializer_range=config.generator_initializer_range or disc.initializer_range,
        hidden_size=hidden,
        num_hidden_layers=int(round(disc.num_hidden_layers * config.generator_layers)),
        num_attention_heads=max(1, hidden // 64),
        intermediate_size=4 * hidden,
        embedding_size=None if config.untied_generator_embeddings else disc.embedding_size,
    )


def derive_max_predictions(config: Any) -> int:
    """Masked positions per sequence: `mask_prob` of `max_seq_length`, rounded as the original."""
    return int((config.mask_prob + 0.005) * config.max_seq_length)
