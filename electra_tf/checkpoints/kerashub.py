"""KerasHub presets of ELECTRA: `keras_hub.models.ElectraBackbone` and `ElectraTokenizer`
directories (Keras 3), written and read with KerasHub's own classes.

An export is one preset directory, with the generator's preset inside it:

    <dir>/config.json, model.weights.h5, metadata.json       ElectraBackbone (discriminator)
    <dir>/tokenizer.json, assets/tokenizer/vocabulary.txt    ElectraTokenizer
    <dir>/electra_heads.safetensors                          the heads, by original name
    <dir>/generator/...                                      the generator's preset, the same files

`keras_hub.models.ElectraBackbone.from_preset(dir)` and `ElectraTokenizer.from_preset(dir)`
load it (`dir/generator` for the generator). A KerasHub backbone has no ELECTRA head (no
replaced-token or masked-LM task class), so the heads travel beside it in
`electra_heads.safetensors`, keyed by the original TF1 names, which KerasHub ignores. The
generator's preset holds a copy of the shared embedding block; read back, a generator whose
embeddings equal the discriminator's bit for bit shares them (as in the Hugging Face layout).

KerasHub's ElectraBackbone computes the feed-forward GELU in its tanh approximation; ELECTRA
(and this project, Hugging Face and Model Garden's BertEncoder with `inner_activation="gelu"`)
use the exact erf form. The weights carry over exactly; the backbone's outputs differ from the
project's by what that approximation makes (docs/checkpoints.md gives the figures). Read back,
a preset is an ELECTRA network with the exact GELU again.

Name map: `_PATHS` below, keyed by the original's names (`electra_tf.checkpoints.names`): word,
position and token-type tables are `token_embedding`, `position_embedding`, `segment_embedding`;
layer i is `transformer_layer_i`, its query/key/value kernels [H, n, d] and biases [n, d], its
attention output kernel [n, d, H] (n heads, d = H / n). The heads are in
electra_heads.safetensors under their original names; KerasHub's `pooled_dense` (ELECTRA has no
pooler) is written as KerasHub initialises it and ignored on import.

keras_hub (and Keras 3) are imported here only, by the functions that need them
(requirements-interop.txt); detecting a preset and reading its config need neither.
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
from electra_tf.checkpoints.config_inference import check_config_matches, config_from_models
from electra_tf.checkpoints.files import CheckpointError, first_line
from electra_tf.checkpoints.format_registry import WeightFormat
from electra_tf.checkpoints.names import HEADS, HEADS_OUT
from electra_tf.checkpoints.names import merge_heads as from_modelgarden
from electra_tf.checkpoints.names import split_heads as to_modelgarden
from electra_tf.checkpoints.weights import SourceWeights
from electra_tf.config import ModelConfig, PretrainingConfig

PRESET_CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
SHARDED_WEIGHTS_FILE = "model.weights.json"
TOKENIZER_FILE = "tokenizer.json"
METADATA_FILE = "metadata.json"
VOCAB_PATH = os.path.join("assets", "tokenizer", "vocabulary.txt")
HEADS_FILE = "electra_heads.safetensors"
GENERATOR = "generator"
BACKBONE = "keras_hub>ElectraBackbone"
_LOG = logging.getLogger(__name__)

# Paths of EMBEDDING_KEYS, PROJECTION_KEYS, LAYER_KEYS (below transformer_layer_i), in order.
_PATHS = names.format_paths(
    (
        "token_embedding/embeddings",
        "position_embedding/embeddings",
        "segment_embedding/embeddings",
        "embeddings_layer_norm/gamma",
        "embeddings_layer_norm/beta",
    ),
    ("embeddings_projection/kernel", "embeddings_projection/bias"),
    (
        ("self_attention_layer/query/kernel", HEADS),
        ("self_attention_layer/query/bias", HEADS),
        ("self_attention_layer/key/kernel", HEADS),
        ("self_attention_layer/key/bias", HEADS),
        ("self_attention_layer/value/kernel", HEADS),
        ("self_attention_layer/value/bias", HEADS),
        ("self_attention_layer/attention_output/kernel", HEADS_OUT),
        "self_attention_layer/attention_output/bias",
        "self_attention_layer_norm/gamma",
        "self_attention_layer_norm/beta",
        "feedforward_intermediate_dense/kernel",
        "feedforward_intermediate_dense/bias",
        "feedforward_output_dense/kernel",
        "feedforward_output_dense/bias",
        "feedforward_layer_norm/gamma",
        "feedforward_layer_norm/beta",
    ),
)
HEAD_SCOPES = names.HEAD_SCOPES


def backbone_table(scope: str, num_layers: int, projection: bool) -> list[tuple[str, str, str]]:
    """(original name, KerasHub weight path, layout) for one ElectraBackbone."""
    return names.encoder_table(
        scope, num_layers, projection, _PATHS, lambda i: f"transformer_layer_{i}"
    )


def target_names(name: str, shape, config: PretrainingConfig) -> list[tuple[str, tuple]]:
    """Where one original-named tensor goes in an export (the dry run's report): its weight
    path (`generator/...` in the generator's preset) and KerasHub shape, or the heads file."""
    if name.startswith(HEAD_SCOPES):
        return [(f"{HEADS_FILE}:{name}", tuple(shape))]
    found = []
    for scope, network in names.separate_networks(config):
        folder = f"{GENERATOR}/" if scope == names.GENERATOR else ""
        projection = network.embedding_width != network.hidden_size
        for row, path, layout in backbone_table(scope, network.num_hidden_layers, projection):
            if names.placed_at(name, scope, row, config):
                shape_there = names.split_shape(shape, layout, network.num_attention_heads)
                found.append((f"{folder}{path}", shape_there))
    return found


def rename(
    name: str, shape, config: PretrainingConfig, native_vars=None
) -> list[tuple[str, tuple]]:
    return target_names(name, shape, config)


# ------------------------------------------------------------------------------- detection
def _json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not a readable JSON file ({e})") from e


def preset_class(path: str) -> str | None:
    """The registered class a KerasHub preset's config.json names (`keras_hub>...`), or None
    for a folder that is not a KerasHub preset (no config.json, or another kind of one)."""
    try:
        with open(os.path.join(path, PRESET_CONFIG_FILE), encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, ValueError):
        return None
    name = values.get("registered_name") if isinstance(values, dict) else None
    return name if isinstance(name, str) and name.startswith("keras_hub>") else None


def is_kerashub_dir(path: str) -> bool:
    return os.path.isdir(path) and preset_class(path) is not None


def check_preset(path: str) -> None:
    """Raises CheckpointError naming what is wrong with a folder that is a KerasHub preset by
    its config.json: another backbone than ELECTRA's, or no weights file (here or in its
    generator/ preset)."""
    for folder in (path, os.path.join(path, GENERATOR)):
        if folder != path and not os.path.isdir(folder):
            continue
        name = preset_class(folder)
        if name != BACKBONE:
            raise CheckpointError(
                f"{folder}: a KerasHub preset of {name or 'no known class'}, not {BACKBONE}"
            )
        if not any(
            os.path.isfile(os.path.join(folder, f)) for f in (WEIGHTS_FILE, SHARDED_WEIGHTS_FILE)
        ):
            raise CheckpointError(
                f"{folder}: a KerasHub preset ({PRESET_CONFIG_FILE} names {BACKBONE}) without "
                f"its weights file {WEIGHTS_FILE}"
            )


def vocab_file(path: str) -> str | None:
    vocab = os.path.join(path, VOCAB_PATH)
    return vocab if os.path.isfile(vocab) else None


# ------------------------------------------------------------------------------- configs
def model_config(path: str) -> ModelConfig:
    """The ModelConfig of the preset at `path`, from its config.json alone."""
    values = _json(os.path.join(path, PRESET_CONFIG_FILE)).get("config", {})
    try:
        return ModelConfig(
            vocab_size=values["vocab_size"],
            hidden_size=values["hidden_dim"],
            num_hidden_layers=values["num_layers"],
            num_attention_heads=values["num_heads"],
            intermediate_size=values["intermediate_dim"],
            hidden_dropout_prob=values.get("dropout", 0.1),
            attention_probs_dropout_prob=values.get("dropout", 0.1),
            max_position_embeddings=values.get("max_sequence_length", 512),
            type_vocab_size=values.get("num_segments", 2),
            embedding_size=values["embedding_dim"],
        )
    except KeyError as e:
        raise CheckpointError(f"{path}/{PRESET_CONFIG_FILE}: no {e.args[0]!r} in its config") from e


def backbone_kwargs(config: ModelConfig) -> dict[str, Any]:
    """`keras_hub.models.ElectraBackbone` arguments for one ELECTRA network (KerasHub has one
    dropout rate for both kinds: the hidden one)."""
    return {
        "vocab_size": config.vocab_size,
        "num_layers": config.num_hidden_layers,
        "num_heads": config.num_attention_heads,
        "hidden_dim": config.hidden_size,
        "embedding_dim": config.embedding_width,
        "intermediate_dim": config.intermediate_size,
        "dropout": config.hidden_dropout_prob,
        "max_sequence_length": config.max_position_embeddings,
        "num_segments": config.type_vocab_size,
    }


def _heads(path: str) -> dict[str, np.ndarray]:
    heads_path = os.path.join(path, HEADS_FILE)
    return safetensors_io.load_file(heads_path) if os.path.isfile(heads_path) else {}


def _pretraining_config(path: str, head_names, untied: bool) -> PretrainingConfig:
    disc = model_config(path)
    generator = os.path.join(path, GENERATOR)
    gen = model_config(generator) if preset_class(generator) else None
    config = config_from_models(disc, gen, untied, where=path)
    if gen is None and "generator_predictions/output_bias" in head_names:
        if "discriminator_predictions/dense/kernel" in head_names:
            config = dataclasses.replace(config, untied_generator=False)
        else:  # one network and the masked-LM head: the original's BERT objective
            config = dataclasses.replace(config, electra_objective=False)
    tokenizer = os.path.join(path, TOKENIZER_FILE)
    if os.path.isfile(tokenizer):
        values = _json(tokenizer).get("config", {})
        config = dataclasses.replace(
            config,
            do_lower_case=bool(values.get("lowercase", config.do_lower_case)),
            do_strip_accents=bool(values.get("strip_accents", config.do_strip_accents)),
        )
    return config


def read_kerashub_config(path: str) -> PretrainingConfig:
    """A preset's PretrainingConfig from its JSON files and the heads' names (no Keras):
    generator embeddings as wide as the discriminator's count as shared until the tensors say
    otherwise (`read_kerashub` compares them)."""
    check_preset(path)
    disc, gen_dir = model_config(path), os.path.join(path, GENERATOR)
    gen = model_config(gen_dir) if preset_class(gen_dir) else None
    untied = bool(gen and gen.embedding_width != disc.embedding_width)
    return _pretraining_config(path, set(_heads(path)), untied)


# ------------------------------------------------------------------------------- reading
def _import_keras_hub():
    try:
        import keras_hub
    except ImportError as e:
        raise CheckpointError(
            f"KerasHub presets need keras-hub ({e}); pip install -r requirements-interop.txt"
        ) from e
    return keras_hub


# config.json key -> (weights file dataset under `layers/`, axis) that holds the same number.
_STORED = {
    "vocab_size": ("reversible_embedding/vars/0", 0),
    "embedding_dim": ("reversible_embedding/vars/0", 1),
    "max_sequence_length": ("position_embedding/vars/0", 0),
    "num_segments": ("embedding/vars/0", 0),
    "hidden_dim": ("transformer_encoder/_self_attention_layer/query_dense/vars/0", 0),
    "num_heads": ("transformer_encoder/_self_attention_layer/query_dense/vars/0", 1),
    "intermediate_dim": ("transformer_encoder/_feedforward_intermediate_dense/vars/0", 1),
}


def stored_dims(weights_file: str) -> dict[str, int]:
    """The sizes a preset's `model.weights.h5` holds, by config.json key (`num_layers`: its
    transformer blocks, which KerasHub's saver names transformer_encoder, _1, _2, ...). Keys
    whose tensors are not where this layout keeps them are left out; an unreadable file gives
    {} (KerasHub's own loader then says what is wrong)."""
    import h5py  # a dependency of Keras

    dims: dict[str, int] = {}
    try:
        with h5py.File(weights_file, "r") as f:
            layers = f.get("layers")
            if not isinstance(layers, h5py.Group):
                return dims
            blocks = [n for n in layers if re.fullmatch(r"transformer_encoder(_\d+)?", n)]
            if blocks:
                dims["num_layers"] = len(blocks)
            for key, (dataset, axis) in _STORED.items():
                value = layers.get(dataset)
                if isinstance(value, h5py.Dataset) and len(value.shape) > axis:
                    dims[key] = int(value.shape[axis])
    except OSError:
        return {}
    return dims


def _check_stored(path: str) -> None:
    """config.json against the sizes of the weights file beside it (see `check_config_matches`):
    KerasHub's loader builds the backbone from config.json, so a layer it does not count would
    be dropped without a word."""
    weights_file = os.path.join(path, WEIGHTS_FILE)
    if not os.path.isfile(weights_file):  # a sharded preset: KerasHub's loader checks it
        return
    config_file = os.path.join(path, PRESET_CONFIG_FILE)
    stated = _json(config_file).get("config", {})
    check_config_matches(config_file, stated, weights_file, stored_dims(weights_file))


def _backbone_weights(path: str, scope: str) -> dict[str, np.ndarray]:
    """Loads the preset with KerasHub and reads its weights by original name."""
    keras_hub = _import_keras_hub()
    _check_stored(path)
    try:
        backbone = keras_hub.models.ElectraBackbone.from_preset(path)
    except (ValueError, OSError) as e:  # what the check above cannot see: still one line
        raise CheckpointError(f"{path}: KerasHub cannot load this preset ({first_line(e)})") from e
    by_path = {w.path: w for w in backbone.weights}
    config = model_config(path)
    rows = backbone_table(
        scope, config.num_hidden_layers, config.embedding_width != config.hidden_size
    )
    missing = [p for _, p, _ in rows if p not in by_path]
    if missing:
        raise CheckpointError(f"{path}: the ElectraBackbone has no {missing[:4]}")
    return {
        name: from_modelgarden(np.asarray(by_path[p].numpy()), layout) for name, p, layout in rows
    }


def read_kerashub(path: str, config: PretrainingConfig | None = None) -> SourceWeights:
    """A KerasHub ELECTRA preset (and its generator/ preset and heads file, if present) as
    neutral weights."""
    check_preset(path)
    weights = _backbone_weights(path, "electra")
    heads = _heads(path)
    unknown = sorted(n for n in heads if not n.startswith(HEAD_SCOPES))
    weights.update({n: v for n, v in heads.items() if n.startswith(HEAD_SCOPES)})
    untied = False
    generator = os.path.join(path, GENERATOR)
    if preset_class(generator):
        gen_weights = _backbone_weights(generator, "generator")
        keys = names.EMBEDDING_KEYS
        disc = {k: weights[f"electra/{k}"] for k in keys}
        same = names.embeddings_shared(disc, {k: gen_weights[f"generator/{k}"] for k in keys})
        if same:
            for key in keys:
                del gen_weights[f"generator/{key}"]
        untied = not same
        weights.update(gen_weights)
    if config is None:
        config = _pretraining_config(path, set(heads), untied)
    unused = ["pooled_dense"] + [f"{HEADS_FILE}:{n}" for n in unknown]
    return SourceWeights(weights, "kerashub", path, config, None, [], unused)


# ------------------------------------------------------------------------------- writing
def _write_preset(
    keras_hub, weights: Mapping[str, np.ndarray], scope: str, config: ModelConfig, folder: str
) -> None:
    backbone = keras_hub.models.ElectraBackbone(**backbone_kwargs(config))
    by_path = {w.path: w for w in backbone.weights}
    rows = backbone_table(
        scope, config.num_hidden_layers, config.embedding_width != config.hidden_size
    )
    for name, path, layout in rows:
        source = name if name in weights else name.replace(f"{scope}/", "electra/", 1)
        value = to_modelgarden(np.asarray(weights[source]), layout, config.num_attention_heads)
        variable = by_path[path]
        if tuple(variable.shape) != value.shape:
            raise CheckpointError(
                f"{name}: shape {value.shape} does not fit KerasHub's {path} {tuple(variable.shape)}"
            )
        variable.assign(value.astype(np.float32))
    backbone.save_to_preset(folder)


def _write_tokenizer(keras_hub, vocab: str, config: PretrainingConfig, folder: str) -> None:
    tokenizer = keras_hub.models.ElectraTokenizer(
        vocabulary=vocab, lowercase=config.do_lower_case, strip_accents=config.do_strip_accents
    )
    tokenizer.save_to_preset(folder)


def write_kerashub_files(
    weights: Mapping[str, np.ndarray],
    directory: str,
    config: PretrainingConfig,
    vocab: str | None = None,
) -> None:
    """Writes the preset(s) described in the module docstring into an existing directory;
    the tokenizer when `vocab` (a vocab.txt) is given."""
    if config.two_tower_generator or config.electric_objective:
        raise CheckpointError(
            "KerasHub has no two-tower (Electric) generator; export the discriminator alone "
            "(--discriminator-only)"
        )
    if not any(names.is_encoder_variable(n) for n in weights):
        raise CheckpointError("a generator without its discriminator has no KerasHub form here")
    keras_hub = _import_keras_hub()
    _write_preset(keras_hub, weights, "electra", config.discriminator_config(), directory)
    has_generator_encoder = any(n.startswith("generator/encoder/") for n in weights)
    if has_generator_encoder:
        folder = os.path.join(directory, GENERATOR)
        os.makedirs(folder)
        _write_preset(keras_hub, weights, "generator", config.generator_config(), folder)
    heads = {n: np.ascontiguousarray(v) for n, v in weights.items() if n.startswith(HEAD_SCOPES)}
    if heads:
        safetensors_io.save_file(heads, os.path.join(directory, HEADS_FILE))
    if vocab is None:
        _LOG.warning("%s: no vocabulary given or found: the preset has no tokenizer", directory)
        return
    _write_tokenizer(keras_hub, vocab, config, directory)
    if has_generator_encoder:
        _write_tokenizer(keras_hub, vocab, config, os.path.join(directory, GENERATOR))


def _detect(path: str, keys) -> bool:
    """A KerasHub preset folder (an incomplete one is a CheckpointError)."""
    if os.path.isdir(path) and is_kerashub_dir(path):
        check_preset(path)
        return True
    return False


def write(weights, directory: str, config, global_step: int | None, vocab: str | None) -> None:
    write_kerashub_files(weights, directory, config, vocab)


FORMAT = WeightFormat(
    name="kerashub",
    detect=_detect,
    detect_order=10,
    read_config=read_kerashub_config,
    read=read_kerashub,
    write=write,
    rename=rename,
    vocab_in_tokenizer=True,
    vocab_file=vocab_file,
    untied_by_values=True,
    no_place_shapes=False,
)
