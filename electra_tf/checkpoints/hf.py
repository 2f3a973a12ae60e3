"""The Hugging Face layout of ELECTRA weights: names, configs and safetensors directories.

This module is the ONE place where original TF1 names (docs/faithfulness.md, section 9, the
keys of every `variable_map()`) meet Hugging Face's PyTorch state-dict names (transformers'
`modeling_electra.py`). An export is a directory with two model folders:

    <dir>/discriminator/{config.json, model.safetensors}   ElectraForPreTraining
    <dir>/generator/{config.json, model.safetensors}       ElectraForMaskedLM

An Electric discriminator keeps ElectraForPreTraining (the class with its modules) and says in
its config.json that the head's output is an energy (`electric_objective`, `electra_tf_note`);
read back, that key makes the folder's config an Electric one again.

Name map (i = layer index; "T" = the kernel is transposed, since torch Linear stores [out, in]):

| original (TF1)                                      | HF folder     | HF name                                        |
| --------------------------------------------------- | ------------- | ---------------------------------------------- |
| electra/embeddings/{word,position,token_type}_embeddings | both (tied) | electra.embeddings.{...}_embeddings.weight   |
| electra/embeddings/LayerNorm/{gamma,beta}           | both (tied)   | electra.embeddings.LayerNorm.{weight,bias}     |
| generator/embeddings/... (untied_generator_embeddings) | generator  | electra.embeddings....                         |
| electra/embeddings_project/{kernel,bias}            | discriminator | electra.embeddings_project.{weight T,bias}     |
| electra/encoder/layer_i/<path>/{kernel,bias}        | discriminator | electra.encoder.layer.i.<path>.{weight T,bias} |
| electra/encoder/layer_i/<path>/LayerNorm/{gamma,beta} | discriminator | electra.encoder.layer.i.<path>.LayerNorm.{weight,bias} |
| discriminator_predictions/dense/{kernel,bias}       | discriminator | discriminator_predictions.dense.{weight T,bias} |
| discriminator_predictions/dense_1/{kernel,bias}     | discriminator | discriminator_predictions.dense_prediction.{weight T,bias} |
| generator/embeddings_project/{kernel,bias}          | generator     | electra.embeddings_project.{weight T,bias}     |
| generator/encoder/layer_i/...                       | generator     | electra.encoder.layer.i.... (as above)         |
| generator_predictions/dense/{kernel,bias}           | generator     | generator_predictions.dense.{weight T,bias}    |
| generator_predictions/LayerNorm/{gamma,beta}        | generator     | generator_predictions.LayerNorm.{weight,bias}  |
| generator_predictions/output_bias                   | generator     | generator_lm_head.bias                         |
| (tied to electra/embeddings/word_embeddings)        | generator     | generator_lm_head.weight (not written)         |

<path> is one of attention/self/{query,key,value}, attention/output/dense, intermediate/dense,
output/dense (and attention/output, output for the LayerNorms). Fine-tuning heads
(`task_specific/...`) have no HF counterpart and are not exported.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from electra_tf.checkpoints import names, safetensors_io
from electra_tf.checkpoints.config_inference import config_from_models
from electra_tf.checkpoints.files import CONFIG_FILE, CheckpointError
from electra_tf.checkpoints.format_registry import WeightFormat
from electra_tf.checkpoints.hf_config import (  # noqa: F401 (the module's public names)
    FIXED_FIELDS,
    HF_ACTIVATIONS,
    HFFormatError,
    config_dict,
    model_config_from_dict,
)
from electra_tf.checkpoints.original import is_model_variable
from electra_tf.checkpoints.weights import SourceWeights
from electra_tf.config import ModelConfig, PretrainingConfig

DISCRIMINATOR = "discriminator"
GENERATOR = "generator"
ARCHITECTURES = {DISCRIMINATOR: "ElectraForPreTraining", GENERATOR: "ElectraForMaskedLM"}
# HF keys with no original counterpart: a position-id buffer older transformers saved, and the
# generator's output matrix, which is the word-embedding table itself.
HF_IGNORED = ("electra.embeddings.position_ids",)
# Written into an Electric discriminator's config.json (see write_hf_files).
ELECTRIC_NOTE = (
    "An Electric discriminator (Clark et al. 2020, energy-based cloze model), not ELECTRA's: "
    "the discriminator_predictions head outputs each token's energy E(x_t), not a "
    "replaced-token logit. Electric's P(replaced) = sigmoid(E + log q(x_t | context) + "
    "log(mask_prob / (1 - mask_prob))) also needs the two-tower cloze model q, which has no "
    "Hugging Face class and is not in this export. The encoder (ElectraModel) fine-tunes as any "
    "ELECTRA encoder."
)
HF_TIED_OUTPUT = "generator_lm_head.weight"
WEIGHTS_FILE = "model.safetensors"  # beside HF's own config.json (CONFIG_FILE)
_LOG = logging.getLogger(__name__)
_EMBEDDING_TABLES = names.EMBEDDING_TABLES


def is_kernel(original_name: str) -> bool:
    """Dense kernels are the only tensors whose HF layout is transposed."""
    return original_name.endswith("/kernel")


def _leaf_to_hf(path: str) -> str:
    """`a/b/LayerNorm/gamma` -> `a.b.LayerNorm.weight`, `.../kernel` -> `....weight`, etc."""
    parts = path.split("/")
    leaf = parts[-1]
    if leaf in _EMBEDDING_TABLES:
        parts.append("weight")
    else:
        parts[-1] = {"kernel": "weight", "gamma": "weight", "beta": "bias"}.get(leaf, leaf)
    name = ".".join(parts)
    return re.sub(r"\blayer_(\d+)\b", r"layer.\1", name)


def _leaf_from_hf(name: str) -> str:
    parts = name.split(".")
    leaf = parts.pop()
    path = re.sub(r"\blayer/(\d+)\b", r"layer_\1", "/".join(parts))
    if parts and parts[-1] in _EMBEDDING_TABLES and leaf == "weight":
        return path
    if parts and parts[-1] == "LayerNorm":
        return f"{path}/{'gamma' if leaf == 'weight' else 'beta'}"
    return f"{path}/{'kernel' if leaf == 'weight' else leaf}"


def to_hf(original_name: str, masked_lm: bool = False) -> list[tuple[str, str]]:
    """(HF folder, HF name) pairs for one original name; the shared embeddings go to both.

    `masked_lm`: the original's BERT objective (`electra_objective` false), a masked LM whose
    network lives under `electra/`: it is the generator folder's `electra.*`."""
    if masked_lm and original_name.startswith("electra/"):
        return [(GENERATOR, "electra." + _leaf_to_hf(original_name[len("electra/") :]))]
    if original_name.startswith("electra/embeddings/"):
        name = "electra." + _leaf_to_hf(original_name[len("electra/") :])
        return [(DISCRIMINATOR, name), (GENERATOR, name)]
    if original_name.startswith("electra/"):
        return [(DISCRIMINATOR, "electra." + _leaf_to_hf(original_name[len("electra/") :]))]
    if original_name.startswith("discriminator_predictions/dense_1/"):
        leaf = original_name.rsplit("/", 1)[1]
        return [(DISCRIMINATOR, _leaf_to_hf(f"discriminator_predictions/dense_prediction/{leaf}"))]
    if original_name.startswith("discriminator_predictions/"):
        return [(DISCRIMINATOR, _leaf_to_hf(original_name))]
    if original_name.startswith("generator/"):
        return [(GENERATOR, "electra." + _leaf_to_hf(original_name[len("generator/") :]))]
    if original_name == "generator_predictions/output_bias":
        return [(GENERATOR, "generator_lm_head.bias")]
    if original_name.startswith("generator_predictions/"):
        return [(GENERATOR, _leaf_to_hf(original_name))]
    return []


def from_hf(
    folder: str, hf_name: str, untied_generator_embeddings: bool = False, masked_lm: bool = False
) -> str | None:
    """The original name of an HF tensor, or None for the keys listed in HF_IGNORED."""
    if hf_name in HF_IGNORED or hf_name == HF_TIED_OUTPUT:
        return None
    if masked_lm and folder == GENERATOR and hf_name.startswith("electra."):
        return "electra/" + _leaf_from_hf(hf_name[len("electra.") :])
    if folder == GENERATOR:
        if hf_name == "generator_lm_head.bias":
            return "generator_predictions/output_bias"
        if hf_name.startswith("electra.embeddings."):
            scope = "generator" if untied_generator_embeddings else "electra"
            return f"{scope}/" + _leaf_from_hf(hf_name[len("electra.") :])
        if hf_name.startswith("electra."):
            return "generator/" + _leaf_from_hf(hf_name[len("electra.") :])
        return _leaf_from_hf(hf_name)
    if hf_name.startswith("discriminator_predictions.dense_prediction."):
        leaf = hf_name.rsplit(".", 1)[1]
        return "discriminator_predictions/dense_1/" + ("kernel" if leaf == "weight" else leaf)
    return _leaf_from_hf(hf_name)


# ------------------------------------------------------------------------------- folders
def _folder_tensors(folder_path: str) -> dict[str, np.ndarray]:
    single = os.path.join(folder_path, WEIGHTS_FILE)
    index = single + ".index.json"
    if os.path.exists(single):
        return safetensors_io.load_file(single)
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map", {})
        tensors: dict[str, np.ndarray] = {}
        for shard in sorted(set(weight_map.values())):
            tensors.update(safetensors_io.load_file(os.path.join(folder_path, shard)))
        return tensors
    if os.path.exists(os.path.join(folder_path, "pytorch_model.bin")):
        raise HFFormatError(
            f"{folder_path}: only pytorch_model.bin (a torch pickle) is present; re-save it as "
            "safetensors where torch is installed: "
            "`AutoModel...from_pretrained(d).save_pretrained(d, safe_serialization=True)`"
        )
    raise HFFormatError(f"{folder_path}: no {WEIGHTS_FILE} (or sharded index) found")


def is_hf_dir(path: str) -> bool:
    """An export (discriminator/ or generator/ inside) or one HF model folder. A native
    checkpoint's config.json is ours, not an HF one: only HF's has `model_type`."""
    if any(os.path.exists(os.path.join(path, p, CONFIG_FILE)) for p in (DISCRIMINATOR, GENERATOR)):
        return True
    try:
        with open(os.path.join(path, CONFIG_FILE), encoding="utf-8") as f:
            return "model_type" in json.load(f)
    except (OSError, ValueError):
        return False


def folders(path: str) -> dict[str, str]:
    """{"discriminator"/"generator": folder} found at `path` (an export or a single HF model)."""
    found = {
        part: os.path.join(path, part)
        for part in (DISCRIMINATOR, GENERATOR)
        if os.path.exists(os.path.join(path, part, CONFIG_FILE))
    }
    if found:
        return found
    config_path = os.path.join(path, CONFIG_FILE)
    if not os.path.exists(config_path):
        raise HFFormatError(
            f"{path}: neither discriminator/{CONFIG_FILE}, generator/{CONFIG_FILE} "
            f"nor {CONFIG_FILE} found"
        )
    with open(config_path, encoding="utf-8") as f:
        architectures = json.load(f).get("architectures") or ["ElectraForPreTraining"]
    part = GENERATOR if "ElectraForMaskedLM" in architectures else DISCRIMINATOR
    return {part: path}


def _read_config_json(folder: str) -> dict[str, Any]:
    config_path = os.path.join(folder, CONFIG_FILE)
    try:
        with open(config_path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HFFormatError(f"{config_path}: not a readable JSON config ({e})") from e


def read_model_configs(path: str) -> dict[str, ModelConfig]:
    """The ModelConfig of each HF folder at `path`, from its config.json alone (no tensors)."""
    return {
        part: model_config_from_dict(_read_config_json(folder), os.path.join(folder, CONFIG_FILE))
        for part, folder in folders(path).items()
    }


def read_pretraining_config(path: str) -> PretrainingConfig:
    """The PretrainingConfig of the HF folders at `path`, each config.json read once, no
    tensors: Electric when the discriminator folder says so (`is_electric`), untied generator
    embeddings when the generator's embedding width is not the discriminator's (tables of equal
    width are told apart by their values only: `read_hf` compares them)."""
    found = folders(path)
    raw = {part: _read_config_json(folder) for part, folder in found.items()}
    configs = {
        part: model_config_from_dict(values, os.path.join(found[part], CONFIG_FILE))
        for part, values in raw.items()
    }
    electric = raw.get(DISCRIMINATOR, {}).get("electric_objective") is True
    disc, gen = configs.get(DISCRIMINATOR), configs.get(GENERATOR)
    untied = bool(disc and gen and gen.embedding_width != disc.embedding_width)
    return pretraining_config(configs, untied, path, electric=electric)


def is_electric(path: str) -> bool:
    """Whether the discriminator folder at `path` says it is Electric's (`write_hf_files`)."""
    folder = folders(path).get(DISCRIMINATOR)
    return bool(folder and _read_config_json(folder).get("electric_objective") is True)


def pretraining_config(
    configs: Mapping[str, ModelConfig], untied: bool, path: str, electric: bool = False
) -> PretrainingConfig:
    """The PretrainingConfig of HF folders, from their ModelConfigs (`electric`: the
    discriminator folder is an Electric one, see `is_electric`)."""
    disc = configs.get(DISCRIMINATOR)
    if disc is None and GENERATOR in configs:  # a masked LM: the original's BERT objective
        config = config_from_models(configs[GENERATOR], None, where=path)
        return dataclasses.replace(config, electra_objective=False)
    if disc is None:
        raise CheckpointError(
            f"{path}: a generator folder without a discriminator folder needs --config "
            "(the discriminator's size is not recorded anywhere in it)"
        )
    return config_from_models(disc, configs.get(GENERATOR), untied, where=path, electric=electric)


# The keys of a bare `ElectraModel` folder (`ElectraModel.save_pretrained`, and the encoder of
# every fine-tuned model on the Hub) have no `electra.` prefix.
_BARE_ENCODER_KEYS = ("embeddings.", "embeddings_project.", "encoder.")


def _with_model_prefix(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One key layout: a bare encoder's keys get the `electra.` prefix the others have."""
    return {
        f"electra.{k}" if k.startswith(_BARE_ENCODER_KEYS) else k: v for k, v in tensors.items()
    }


def read(
    path: str, masked_lm: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, ModelConfig], list[str]]:
    """Weights by original name, the ModelConfig per folder, and the HF keys left unused
    (`read_tensors`, plus each folder's config.json)."""
    configs = read_model_configs(path)
    weights, unused = read_tensors(path, masked_lm)
    return weights, configs, unused


def read_tensors(path: str, masked_lm: bool = False) -> tuple[dict[str, np.ndarray], list[str]]:
    """Weights by original name and the HF keys left unused; no config.json is parsed.

    With both folders, the generator's embeddings are the shared ones when they equal the
    discriminator's bit for bit (a tied export); otherwise they become `generator/embeddings/*`.
    `masked_lm`: a generator folder read as the original's BERT-objective model (see `to_hf`).
    """
    weights: dict[str, np.ndarray] = {}
    unused: list[str] = []
    tensors_by_part = {
        part: _with_model_prefix(_folder_tensors(folder)) for part, folder in folders(path).items()
    }
    untied = False
    if DISCRIMINATOR in tensors_by_part and GENERATOR in tensors_by_part:
        disc, gen = tensors_by_part[DISCRIMINATOR], tensors_by_part[GENERATOR]
        block = {
            k: v
            for k, v in disc.items()
            if k.startswith("electra.embeddings.") and k not in HF_IGNORED
        }
        untied = not names.embeddings_shared(block, gen)
    for part, tensors in tensors_by_part.items():
        for hf_name, value in tensors.items():
            if hf_name == HF_TIED_OUTPUT:
                word = tensors.get("electra.embeddings.word_embeddings.weight")
                if word is None or not np.array_equal(word, value):
                    raise HFFormatError(
                        f"{path}/{part}: {HF_TIED_OUTPUT} differs from the word embeddings; "
                        "ELECTRA ties the generator's output matrix to them"
                    )
                continue
            name = from_hf(part, hf_name, untied, masked_lm)
            if name is None:
                continue
            if not is_model_variable(name) or (part, hf_name) not in to_hf(name, masked_lm):
                unused.append(f"{part}/{hf_name}")
                continue
            weights[name] = value.T if is_kernel(name) else value
    return weights, unused


def write(
    weights: Mapping[str, np.ndarray],
    path: str,
    configs: Mapping[str, ModelConfig],
    masked_lm: bool = False,
    extra_config: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """Writes one HF folder per entry of `configs` under `path` (which must already exist).

    A discriminator folder without `discriminator_predictions/*` is a bare `ElectraModel`.
    `extra_config`: per folder, keys added to its config.json (transformers keeps unknown keys
    as attributes). Returns the names that have no HF counterpart (fine-tuning heads), which
    are not written.
    """
    untied = names.own_generator_embeddings(weights)
    per_part: dict[str, dict[str, np.ndarray]] = {part: {} for part in configs}
    dropped = []
    for name, value in weights.items():
        targets = to_hf(name, masked_lm)
        if not targets:
            dropped.append(name)
        if untied and name.startswith("electra/embeddings/"):
            targets = [(DISCRIMINATOR, t) for p, t in targets if p == DISCRIMINATOR]
        for part, hf_name in targets:
            if part in per_part:
                array = np.asarray(value)
                per_part[part][hf_name] = np.ascontiguousarray(
                    array.T if is_kernel(name) else array
                )
    extra = extra_config or {}
    for part, tensors in per_part.items():
        architecture = ARCHITECTURES[part]
        if part == DISCRIMINATOR and "discriminator_predictions.dense.weight" not in tensors:
            architecture = "ElectraModel"
        folder = os.path.join(path, part)
        os.makedirs(folder, exist_ok=True)
        safetensors_io.save_file(tensors, os.path.join(folder, WEIGHTS_FILE), {"format": "pt"})
        with open(os.path.join(folder, CONFIG_FILE), "w", encoding="utf-8") as f:
            values = {**config_dict(configs[part], architecture), **extra.get(part, {})}
            json.dump(values, f, indent=2, sort_keys=True)
            f.write("\n")
    return sorted(dropped)


# ------------------------------------------------------------------------------- formats
def read_hf(path: str, config: PretrainingConfig | None = None) -> SourceWeights:
    """An HF export or model folder as neutral weights; the config from its config.json files."""
    # A generator folder on its own (ElectraForMaskedLM) is a masked LM: without a config
    # it is the original's BERT-objective model, which has exactly that network and head.
    masked_lm = not config.has_discriminator if config else set(folders(path)) == {GENERATOR}
    weights, unused = read_tensors(path, masked_lm)
    if config is None:
        untied = names.own_generator_embeddings(weights)
        configs = read_model_configs(path)
        config = pretraining_config(configs, untied, path, electric=is_electric(path))
    return SourceWeights(weights, "hf", path, config, None, [], unused)


def write_hf_files(
    weights: Mapping[str, np.ndarray], directory: str, config: PretrainingConfig
) -> None:
    """discriminator/ (when there is a discriminator) and generator/ (when there is a
    generator head) HF folders, configured from `config`."""
    configs = {}
    masked_lm = not config.has_discriminator
    if masked_lm:  # the BERT objective: its one network is the masked LM's
        configs[GENERATOR] = config.discriminator_config()
    if any(names.is_encoder_variable(n) for n in weights) and not masked_lm:
        configs[DISCRIMINATOR] = config.discriminator_config()
    if names.GENERATOR_OUTPUT_BIAS in weights and not masked_lm:
        configs[GENERATOR] = config.generator_config()
    extra = {}
    if config.electric_objective and DISCRIMINATOR in configs:
        # HF has no Electric class. ElectraForPreTraining is the one whose modules hold these
        # tensors, so the folder keeps it (transformers loads it), but its output is not what
        # that class promises: the config says so instead of letting it pass as ELECTRA's.
        extra[DISCRIMINATOR] = {"electric_objective": True, "electra_tf_note": ELECTRIC_NOTE}
        _LOG.warning("HF export of an Electric discriminator: %s", ELECTRIC_NOTE)
    dropped = write(weights, directory, configs, masked_lm, extra)
    if dropped:
        _LOG.warning("HF export has no place for %d variables: %s", len(dropped), dropped)


def rename(
    name: str, shape, config: PretrainingConfig, native_vars=None
) -> list[tuple[str, tuple]]:
    """`WeightFormat.rename`: the folder/name and (transposed kernel) shape of one tensor."""
    transposed = tuple(reversed(shape)) if is_kernel(name) else tuple(shape)
    pairs = to_hf(name, not config.has_discriminator)
    return [(f"{folder}/{hf_name}", transposed) for folder, hf_name in pairs]


def _write(weights, directory: str, config, global_step: int | None, vocab: str | None) -> None:
    write_hf_files(weights, directory, config)


FORMAT = WeightFormat(
    name="hf",
    detect=lambda path, keys: os.path.isdir(path) and is_hf_dir(path),
    detect_order=20,
    read_config=read_pretraining_config,
    read=read_hf,
    write=_write,
    rename=rename,
    untied_by_values=True,
)
