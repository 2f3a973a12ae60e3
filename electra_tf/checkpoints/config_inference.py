"""The PretrainingConfig of a checkpoint: inferred from variable shapes, or built from the two
networks' ModelConfigs (HF config.json files), through `config.config_from_values`, the one
constructor of a config from values read. A JSON file: `config.read_config_file` (re-exported).

Heads are not stored in a checkpoint: they are taken as hidden // 64, ELECTRA's head size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from electra_tf.checkpoints.files import CheckpointError
from electra_tf.config import (  # noqa: F401 (read_config_file: re-exported)
    MODEL_SIZES,
    ModelConfig,
    PretrainingConfig,
    ResolvedPretrainingConfig,
    config_from_values,
    read_config_file,
)


def _same_structure(a: ModelConfig, b: ModelConfig) -> bool:
    fields = (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "intermediate_size", "max_position_embeddings", "type_vocab_size", "embedding_width",
    )  # fmt: skip
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def config_from_models(
    disc: ModelConfig,
    gen: ModelConfig | None,
    untied_embeddings: bool = False,
    where: str = "",
    electric: bool = False,
) -> ResolvedPretrainingConfig:
    """The PretrainingConfig whose discriminator/generator configs are `disc` and `gen`
    (with `electric`, `gen` is each tower of Electric's two-tower generator)."""
    size = next((name for name, (h, _) in MODEL_SIZES.items() if h == disc.hidden_size), "small")
    overrides = {
        k: v for k, v in disc.to_dict().items() if k not in ("vocab_size", "embedding_size")
    }
    values: dict[str, Any] = {
        "model_size": size,
        "model_hparam_overrides": overrides,
        "embedding_size": disc.embedding_width,
        "vocab_size": disc.vocab_size,
        "max_seq_length": min(PretrainingConfig.max_seq_length, disc.max_position_embeddings),
        "untied_generator_embeddings": untied_embeddings,
    }
    if electric:  # as the original's README runs Electric
        values["electra_objective"] = False
        values["electric_objective"] = True
    if gen is not None:
        values["generator_hidden_size"] = gen.hidden_size / disc.hidden_size
        values["generator_layers"] = gen.num_hidden_layers / disc.num_hidden_layers
    config = config_from_values(values, where or "checkpoint")
    problems = []
    if not _same_structure(config.discriminator_config(), disc):
        problems.append(f"discriminator {disc} -> {config.discriminator_config()}")
    if gen is not None and not _same_structure(config.generator_config(), gen):
        problems.append(
            f"generator {gen} -> {config.generator_config()} (the config derives heads = "
            "max(1, hidden // 64) and FFN = 4 * hidden from the generator's hidden size)"
        )
    if problems:
        raise CheckpointError(f"{where}: no PretrainingConfig expresses: {'; '.join(problems)}")
    return config


def _encoder_config(shapes: Mapping[str, tuple], scope: str, where: str) -> ModelConfig | None:
    prefix = f"{scope}/encoder/layer_"
    layers = {int(n[len(prefix) :].split("/")[0]) for n in shapes if n.startswith(prefix)}
    if not layers:
        return None
    if layers != set(range(len(layers))):
        raise CheckpointError(f"{where}: {scope} layers are not 0..N-1: {sorted(layers)}")
    emb = scope if f"{scope}/embeddings/word_embeddings" in shapes else "electra"
    needed = [
        f"{emb}/embeddings/word_embeddings",
        f"{emb}/embeddings/position_embeddings",
        f"{emb}/embeddings/token_type_embeddings",
        f"{prefix}0/attention/self/query/kernel",
        f"{prefix}0/intermediate/dense/kernel",
    ]
    missing = [n for n in needed if n not in shapes]
    if missing:
        raise CheckpointError(f"{where}: cannot infer the {scope} config; missing {missing}")
    vocab, width = shapes[needed[0]]
    hidden = shapes[needed[3]][1]
    return ModelConfig(
        vocab_size=vocab,
        embedding_size=width,
        hidden_size=hidden,
        num_hidden_layers=len(layers),
        num_attention_heads=max(1, hidden // 64),  # not stored; ELECTRA's head size is 64
        intermediate_size=shapes[needed[4]][1],
        max_position_embeddings=shapes[needed[1]][0],
        type_vocab_size=shapes[needed[2]][0],
    )


def infer_config(
    shapes: Mapping[str, tuple], where: str = "checkpoint"
) -> ResolvedPretrainingConfig:
    """Infers the PretrainingConfig (E, H, L, heads = H/64, FFN, generator fractions, V,
    max positions, type vocabulary, untied generator embeddings) from variable shapes.

    A two-tower generator (`generator_ltr/...`, `generator_rtl/...`) is read as Electric, the
    objective the original built it for; the ELECTRA objective with a two-tower generator (an
    ablation) has the same variables, and needs its config passed to be read as such.
    """
    shapes = {k: tuple(v) for k, v in shapes.items()}
    disc = _encoder_config(shapes, "electra", where)
    if disc is None:
        raise CheckpointError(f"{where}: no electra/encoder/layer_* variables; not ELECTRA?")
    gen = _encoder_config(shapes, "generator", where)
    towers = [_encoder_config(shapes, scope, where) for scope in ("generator_ltr", "generator_rtl")]
    electric = any(tower is not None for tower in towers)
    if electric:
        ltr, rtl = towers
        if gen is not None or ltr is None or rtl is None or not _same_structure(ltr, rtl):
            raise CheckpointError(
                f"{where}: a two-tower generator needs generator_ltr and generator_rtl of one "
                f"structure and no generator/ encoder; found generator {gen}, ltr {ltr}, rtl {rtl}"
            )
        gen = ltr
        untied = "generator_ltr/embeddings/word_embeddings" in shapes
    else:
        untied = "generator/embeddings/word_embeddings" in shapes
    config = config_from_models(disc, gen, untied, where, electric=electric)
    if gen is None and "generator_predictions/output_bias" in shapes:
        # A masked-LM head without a generator encoder reads the `electra` encoder: either the
        # generator shares all weights, or there is no discriminator (the BERT baseline).
        if "discriminator_predictions/dense/kernel" in shapes:
            config = dataclasses.replace(config, untied_generator=False)
        else:
            config = dataclasses.replace(config, electra_objective=False)
    return config  # replace() on a resolved config validates and derives again


def check_config_matches(
    config_file: str, stated: Mapping[str, Any], weights_file: str, stored: Mapping[str, Any]
) -> None:
    """Raises CheckpointError when a config file states another value than its weights hold,
    for any key that both give (layers, heads, widths, positions, vocabulary, segments).

    A reader that builds the network from the config and then loads the weights (KerasHub's
    `from_preset`, Model Garden's `BertEncoder(**encoder_config)`) would silently drop a layer
    the config does not count, or fail deep inside with a shape error: the conversion stops
    here instead, naming both values and both files.
    """
    differ = [
        f"{key} {stated[key]!r} where the weights hold {stored[key]!r}"
        for key in sorted(stored)
        if stated.get(key) is not None and stated[key] != stored[key]  # None: derived
    ]
    if differ:
        raise CheckpointError(
            f"{config_file} does not describe {weights_file}: {'; '.join(differ)} (correct "
            "the config, or convert from a copy whose config matches its weights)"
        )
