"""Model Garden (tf-models-official) checkpoints of ELECTRA: `BertEncoder` networks and an
`ElectraPretrainer`, object-based, in the layout Model Garden's own trainer writes.

An export is one directory:

    <dir>/ckpt-<step>, checkpoint, encoder_config.json, vocab.txt
        tf.train.Checkpoint(encoder=<discriminator BertEncoder>, model=<ElectraPretrainer>,
                            global_step=<step>)
    <dir>/generator/ckpt-<step>, checkpoint, encoder_config.json
        tf.train.Checkpoint(encoder=<generator BertEncoder>)

`encoder` is what Model Garden's fine-tuning tasks restore from `init_checkpoint`
(`tf.train.Checkpoint(encoder=...)`, `SentencePredictionTask.initialize`); `model` is what its
pre-training trainer saves beside it, so `Checkpoint(model=ElectraPretrainer(...))` restores
both networks and both heads. Without a generator, `model` holds only the discriminator network
and its head, under the pretrainer's attribute names. `encoder_config.json` holds the keyword
arguments of `official.nlp.modeling.networks.BertEncoder` (`BertEncoder(**json.load(f))`).

Sharing. ELECTRA shares the whole embedding block (word, position and token-type tables and
their LayerNorm) between the two networks; Model Garden's pretrainer can share only the word
embedding layer (`BertEncoder(embedding_layer=...)`). The export shares that layer (one object
in the checkpoint, read by both networks) and gives the generator copies of the other four
tensors. Read back, a generator whose word table is the discriminator's object and whose other
embedding tensors equal the discriminator's bit for bit has the shared block; otherwise it has
its own tables (`untied_generator_embeddings`), the word table copied if it was the only one
shared. A generator that shares the whole network (`untied_generator` false) is the
discriminator's `BertEncoder` passed as both networks.

Name map (paths are object-graph paths below the encoder; i = layer; n = heads, d = H / n;
"heads" = the [H, H] kernel is [H, n, d] in Model Garden, its bias [n, d]; "heads-out" = the
[H, H] kernel is [n, d, H]):

| original (TF1, scope electra/ or generator/)     | Model Garden                                         |
| ------------------------------------------------ | ---------------------------------------------------- |
| embeddings/word_embeddings                       | _embedding_layer/embeddings                          |
| embeddings/position_embeddings                   | _position_embedding_layer/embeddings                 |
| embeddings/token_type_embeddings                 | _type_embedding_layer/embeddings                     |
| embeddings/LayerNorm/{gamma,beta}                | _embedding_norm_layer/{gamma,beta}                   |
| embeddings_project/{kernel,bias} (E != H)        | _embedding_projection/{kernel,bias}                  |
| encoder/layer_i/attention/self/{query,key,value} | _transformer_layers/i/_attention_layer/_{query,key,value}_dense (heads) |
| encoder/layer_i/attention/output/dense           | _transformer_layers/i/_attention_layer/_output_dense (heads-out) |
| encoder/layer_i/attention/output/LayerNorm       | _transformer_layers/i/_attention_layer_norm          |
| encoder/layer_i/intermediate/dense               | _transformer_layers/i/_intermediate_dense            |
| encoder/layer_i/output/dense                     | _transformer_layers/i/_output_dense                  |
| encoder/layer_i/output/LayerNorm                 | _transformer_layers/i/_output_layer_norm             |
| discriminator_predictions/dense                  | model/discriminator_projection                       |
| discriminator_predictions/dense_1                | model/discriminator_head                             |
| generator_predictions/dense, /LayerNorm          | model/masked_lm/dense, /layer_norm                   |
| generator_predictions/output_bias                | model/masked_lm/output_bias.Sbias ("output_bias/bias") |
| (none: ELECTRA has no pooler)                    | _pooler_layer: written as Model Garden initialises it, ignored on import |
| (none)                                           | model/classification (the pretrainer's sentence head): same |

Reading needs no Model Garden: names are resolved in the checkpoint's object graph, so a
pretrainer checkpoint from Model Garden's trainer (optimizer and step included) reads as well.
Writing builds Model Garden's own classes (`official`, imported here only).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from electra_tf.checkpoints.config_inference import check_config_matches, config_from_models
from electra_tf.checkpoints.files import (
    CHECKPOINT_PREFIX,
    CheckpointError,
    open_checkpoint,
    read_tensor,
    resolve_prefix,
    write_state_file,
)
from electra_tf.checkpoints.weights import SourceWeights
from electra_tf.config import ModelConfig, PretrainingConfig

ENCODER_CONFIG_FILE = "encoder_config.json"
GENERATOR = "generator"
_LOG = logging.getLogger(__name__)

# How a tensor's layout differs: none, [H, H] <-> [H, n, d] (or [H] <-> [n, d] for a bias),
# [H, H] <-> [n, d, H].
PLAIN, HEADS, HEADS_OUT = "plain", "heads", "heads-out"

_EMBEDDINGS = {
    "embeddings/word_embeddings": "_embedding_layer/embeddings",
    "embeddings/position_embeddings": "_position_embedding_layer/embeddings",
    "embeddings/token_type_embeddings": "_type_embedding_layer/embeddings",
    "embeddings/LayerNorm/gamma": "_embedding_norm_layer/gamma",
    "embeddings/LayerNorm/beta": "_embedding_norm_layer/beta",
}
_PROJECTION = {
    "embeddings_project/kernel": "_embedding_projection/kernel",
    "embeddings_project/bias": "_embedding_projection/bias",
}
_LAYER = {  # encoder/layer_i/<key> <-> _transformer_layers/i/<path>
    "attention/self/query/kernel": ("_attention_layer/_query_dense/kernel", HEADS),
    "attention/self/query/bias": ("_attention_layer/_query_dense/bias", HEADS),
    "attention/self/key/kernel": ("_attention_layer/_key_dense/kernel", HEADS),
    "attention/self/key/bias": ("_attention_layer/_key_dense/bias", HEADS),
    "attention/self/value/kernel": ("_attention_layer/_value_dense/kernel", HEADS),
    "attention/self/value/bias": ("_attention_layer/_value_dense/bias", HEADS),
    "attention/output/dense/kernel": ("_attention_layer/_output_dense/kernel", HEADS_OUT),
    "attention/output/dense/bias": ("_attention_layer/_output_dense/bias", PLAIN),
    "attention/output/LayerNorm/gamma": ("_attention_layer_norm/gamma", PLAIN),
    "attention/output/LayerNorm/beta": ("_attention_layer_norm/beta", PLAIN),
    "intermediate/dense/kernel": ("_intermediate_dense/kernel", PLAIN),
    "intermediate/dense/bias": ("_intermediate_dense/bias", PLAIN),
    "output/dense/kernel": ("_output_dense/kernel", PLAIN),
    "output/dense/bias": ("_output_dense/bias", PLAIN),
    "output/LayerNorm/gamma": ("_output_layer_norm/gamma", PLAIN),
    "output/LayerNorm/beta": ("_output_layer_norm/beta", PLAIN),
}
_DISCRIMINATOR_HEAD = {
    "discriminator_predictions/dense/kernel": "model/discriminator_projection/kernel",
    "discriminator_predictions/dense/bias": "model/discriminator_projection/bias",
    "discriminator_predictions/dense_1/kernel": "model/discriminator_head/kernel",
    "discriminator_predictions/dense_1/bias": "model/discriminator_head/bias",
}
_GENERATOR_HEAD = {
    "generator_predictions/dense/kernel": "model/masked_lm/dense/kernel",
    "generator_predictions/dense/bias": "model/masked_lm/dense/bias",
    "generator_predictions/LayerNorm/gamma": "model/masked_lm/layer_norm/gamma",
    "generator_predictions/LayerNorm/beta": "model/masked_lm/layer_norm/beta",
    # The variable's own name is "output_bias/bias"; a checkpoint path writes "/" as ".S".
    "generator_predictions/output_bias": "model/masked_lm/output_bias.Sbias",
}
DISCRIMINATOR_ROOTS = ("encoder", "model/discriminator_network")
GENERATOR_ROOT = "model/generator_network"


def encoder_table(
    scope: str, root: str, num_layers: int, projection: bool
) -> list[tuple[str, str, str]]:
    """(original name, Model Garden path, layout) for one encoder: `scope` is electra or
    generator, `root` the encoder's path in the checkpoint (`encoder`, `model/...`)."""
    rows = [(f"{scope}/{k}", f"{root}/{v}", PLAIN) for k, v in _EMBEDDINGS.items()]
    if projection:
        rows += [(f"{scope}/{k}", f"{root}/{v}", PLAIN) for k, v in _PROJECTION.items()]
    for i in range(num_layers):
        for key, (path, layout) in _LAYER.items():
            rows.append(
                (
                    f"{scope}/encoder/layer_{i}/{key}",
                    f"{root}/_transformer_layers/{i}/{path}",
                    layout,
                )
            )
    return rows


def target_names(name: str, shape, config: PretrainingConfig) -> list[tuple[str, tuple]]:
    """Where one original-named tensor goes in an export (the dry run's report): its
    checkpoint paths and Model Garden shapes; a shared embedding tensor goes to both networks."""
    disc = config.discriminator_config()
    gen = config.generator_config() if config.has_discriminator else None
    places = {
        n: (p, lay, disc.num_attention_heads)
        for n, p, lay in encoder_table(
            "electra", "encoder", disc.num_hidden_layers, disc.embedding_width != disc.hidden_size
        )
    }
    heads = {**_DISCRIMINATOR_HEAD, **_GENERATOR_HEAD}
    found = [(places[name][0], places[name][1], places[name][2])] if name in places else []
    if name in heads:
        found.append((heads[name], PLAIN, 1))
    if gen is not None and config.untied_generator and name.startswith(("electra/", "generator/")):
        gen_rows = encoder_table(
            "generator",
            GENERATOR_ROOT,
            gen.num_hidden_layers,
            gen.embedding_width != gen.hidden_size,
        )
        own = name.replace("electra/", "generator/", 1)
        shared = name.startswith("electra/embeddings/") and not config.untied_generator_embeddings
        for gen_name, path, layout in gen_rows:
            if gen_name == name or (shared and gen_name == own):
                found.append((path, layout, gen.num_attention_heads))
    return [
        (path, to_modelgarden(np.empty(shape, np.int8), layout, num_heads).shape)
        for path, layout, num_heads in found
    ]


def to_modelgarden(value: np.ndarray, layout: str, num_heads: int) -> np.ndarray:
    """An original-layout tensor in Model Garden's layout."""
    if layout == HEADS:  # [H, H] -> [H, n, d]; [H] -> [n, d]
        return value.reshape(*value.shape[:-1], num_heads, value.shape[-1] // num_heads)
    if layout == HEADS_OUT:  # [H, H] -> [n, d, H]
        return value.reshape(num_heads, value.shape[0] // num_heads, value.shape[1])
    return value


def from_modelgarden(value: np.ndarray, layout: str) -> np.ndarray:
    """A Model Garden tensor in the original layout (the inverse of `to_modelgarden`)."""
    if layout == HEADS:  # [H, n, d] -> [H, H]; [n, d] -> [H]
        return value.reshape(*value.shape[:-2], value.shape[-2] * value.shape[-1])
    if layout == HEADS_OUT:  # [n, d, H] -> [H, H]
        return value.reshape(value.shape[0] * value.shape[1], value.shape[2])
    return value


def _parts(path: str) -> list[str]:
    """The local names along a checkpoint path (TF writes "." as ".." and "/" as ".S")."""
    return [
        re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1), p)
        for p in path.split("/")
    ]


# ------------------------------------------------------------------------------- reading
class _ObjectGraph:
    """A checkpoint's object graph: the checkpoint key of a variable at an attribute path."""

    def __init__(self, prefix: str):
        from tensorflow.core.protobuf import trackable_object_graph_pb2

        self.prefix = prefix
        self.reader = open_checkpoint(prefix)
        self.shapes = self.reader.get_variable_to_shape_map()
        if "_CHECKPOINTABLE_OBJECT_GRAPH" not in self.shapes:
            raise CheckpointError(f"{prefix}: a name-based checkpoint, not a Model Garden one")
        graph = trackable_object_graph_pb2.TrackableObjectGraph()
        graph.ParseFromString(read_tensor(self.reader, prefix, "_CHECKPOINTABLE_OBJECT_GRAPH"))
        self.nodes = graph.nodes

    def node(self, path: str) -> int | None:
        node = 0
        for part in _parts(path):
            children = {c.local_name: c.node_id for c in self.nodes[node].children}
            if part not in children:
                return None
            node = children[part]
        return node

    def children(self, path: str) -> list[str]:
        node = self.node(path)
        return [] if node is None else [c.local_name for c in self.nodes[node].children]

    def key(self, path: str) -> str | None:
        """The checkpoint key of the variable at `path` (`a/b/kernel`), or None."""
        head, _, leaf = path.rpartition("/")
        node = self.node(head) if head else 0
        if node is None:
            return None
        for child in self.nodes[node].children:
            if child.local_name == _parts(leaf)[0]:
                for attribute in self.nodes[child.node_id].attributes:
                    if attribute.name == "VARIABLE_VALUE":
                        return attribute.checkpoint_key
        return None

    def tensor(self, path: str) -> np.ndarray:
        key = self.key(path)
        if key is None:
            raise CheckpointError(f"{self.prefix}: no variable at {path}")
        return read_tensor(self.reader, self.prefix, key)


def is_modelgarden_checkpoint(names) -> bool:
    """Whether a checkpoint's keys are Model Garden's: its transformer blocks' private
    attribute names, or the pretrainer's heads (this project's models use neither)."""
    return any(
        "/_attention_layer/_query_dense/" in n or n.startswith("model/masked_lm/") for n in names
    )


def is_export_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, ENCODER_CONFIG_FILE))


def _discriminator_root(graph: _ObjectGraph) -> str:
    for root in DISCRIMINATOR_ROOTS:
        if graph.key(f"{root}/_embedding_layer/embeddings") is not None:
            return root
    raise CheckpointError(
        f"{graph.prefix}: no Model Garden BertEncoder under `encoder` or "
        "`model/discriminator_network` (what tf.train.Checkpoint(encoder=...) and Model Garden's "
        "ElectraPretrainer write)"
    )


def _encoder_shape(graph: _ObjectGraph, root: str) -> tuple[ModelConfig, bool]:
    """The ModelConfig of the BertEncoder at `root` from its shapes (heads from the query
    kernel's [H, n, d]), and whether it has an embedding projection."""
    layers = graph.children(f"{root}/_transformer_layers")
    if not layers or sorted(int(i) for i in layers) != list(range(len(layers))):
        raise CheckpointError(f"{graph.prefix}: {root} has no transformer layers 0..N-1")

    def shape(path: str) -> list[int]:
        key = graph.key(f"{root}/{path}")
        if key is None:
            raise CheckpointError(f"{graph.prefix}: {root}/{path} is missing")
        return graph.shapes[key]

    vocab, width = shape("_embedding_layer/embeddings")
    hidden, heads, _ = shape("_transformer_layers/0/_attention_layer/_query_dense/kernel")
    config = ModelConfig(
        vocab_size=vocab,
        embedding_size=width,
        hidden_size=hidden,
        num_hidden_layers=len(layers),
        num_attention_heads=heads,
        intermediate_size=shape("_transformer_layers/0/_intermediate_dense/kernel")[1],
        max_position_embeddings=shape("_position_embedding_layer/embeddings")[0],
        type_vocab_size=shape("_type_embedding_layer/embeddings")[0],
    )
    return config, graph.key(f"{root}/_embedding_projection/kernel") is not None


def _read_encoder(
    graph: _ObjectGraph, scope: str, root: str, config: ModelConfig, projection: bool
) -> dict[str, np.ndarray]:
    rows = encoder_table(scope, root, config.num_hidden_layers, projection)
    return {name: from_modelgarden(graph.tensor(path), layout) for name, path, layout in rows}


def _encoder_config(folder: str) -> tuple[str, dict]:
    """The encoder_config.json beside a checkpoint (its path, its values; {} without one)."""
    path = os.path.join(folder, ENCODER_CONFIG_FILE)
    if not os.path.isfile(path):
        return path, {}
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not a readable JSON config ({e})") from e
    if not isinstance(values, dict):
        raise CheckpointError(f"{path}: not a JSON object of BertEncoder arguments")
    return path, values


# encoder_config.json keys that the checkpoint's shapes also give.
_SHAPED = (
    "vocab_size", "hidden_size", "num_layers", "num_attention_heads", "max_sequence_length",
    "type_vocab_size", "inner_dim", "embedding_width",
)  # fmt: skip


def _encoder_settings(folder: str, shaped: ModelConfig, prefix: str) -> dict:
    """ModelConfig fields that no shape records (dropout, initializer), from the
    encoder_config.json beside a checkpoint if there is one; a network ELECTRA does not have
    (pre-LN), or sizes other than the checkpoint's (`shaped`), are an error."""
    path, values = _encoder_config(folder)
    if not values:
        return {}
    stored = encoder_kwargs(shaped)
    check_config_matches(path, values, prefix, {key: stored[key] for key in _SHAPED})
    if values.get("norm_first"):
        raise CheckpointError(f"{path}: norm_first true (pre-LN); ELECTRA's network is post-LN")
    activation = values.get("inner_activation", "gelu")
    if activation != "gelu":
        _LOG.warning(
            "%s: inner_activation %r; ELECTRA's is the exact gelu (read as such)", path, activation
        )
    settings = {}
    for field, key in (
        ("hidden_dropout_prob", "output_dropout"),
        ("attention_probs_dropout_prob", "attention_dropout"),
    ):
        if isinstance(values.get(key), (int, float)):
            settings[field] = float(values[key])
    stddev = (values.get("initializer") or {}).get("config", {}).get("stddev")
    if isinstance(stddev, (int, float)):
        settings["initializer_range"] = float(stddev)
    return settings


def read_modelgarden(path: str, config: PretrainingConfig | None = None) -> SourceWeights:
    """A Model Garden checkpoint (`Checkpoint(encoder=BertEncoder)`, an ElectraPretrainer
    checkpoint of Model Garden's trainer, or both, as `write_modelgarden_files` writes) as
    neutral weights; the config from its shapes unless given."""
    prefix = resolve_prefix(path)
    folder = os.path.dirname(prefix)
    graph = _ObjectGraph(prefix)
    root = _discriminator_root(graph)
    disc, disc_projection = _encoder_shape(graph, root)
    disc = dataclasses.replace(disc, **_encoder_settings(folder, disc, prefix))
    weights = _read_encoder(graph, "electra", root, disc, disc_projection)
    heads = {**_DISCRIMINATOR_HEAD, **_GENERATOR_HEAD}
    weights.update({n: graph.tensor(p) for n, p in heads.items() if graph.key(p) is not None})

    gen = None
    shared_network = untied = False
    if graph.key(f"{GENERATOR_ROOT}/_embedding_layer/embeddings") is not None:
        query = "_transformer_layers/0/_attention_layer/_query_dense/kernel"
        shared_network = graph.key(f"{GENERATOR_ROOT}/{query}") == graph.key(f"{root}/{query}")
        if not shared_network:
            gen, gen_projection = _encoder_shape(graph, GENERATOR_ROOT)
            # generator/encoder_config.json, if any, is only checked: the generator's
            # settings have always been taken from the discriminator's
            _encoder_settings(os.path.join(folder, GENERATOR), gen, prefix)
            gen_weights = _read_encoder(graph, "generator", GENERATOR_ROOT, gen, gen_projection)
            untied = _untie(weights, gen_weights, graph, root, prefix)
            weights.update(gen_weights)
    unused = [
        p
        for p in (
            f"{root}/_pooler_layer",
            f"{GENERATOR_ROOT}/_pooler_layer",
            "model/classification",
        )
        if graph.children(p)
    ]
    skipped = [n for n in graph.shapes if n.startswith(("optimizer/", "global_step/"))]
    step_key = "global_step/.ATTRIBUTES/VARIABLE_VALUE"
    step = int(read_tensor(graph.reader, prefix, step_key)) if step_key in graph.shapes else None
    if config is None:
        config = config_from_models(disc, gen, untied, where=prefix)
        if shared_network:  # one network, two heads: the generator shares all weights
            config = dataclasses.replace(config, untied_generator=False)
    return SourceWeights(weights, "modelgarden", prefix, config, step, skipped, unused)


def _untie(
    weights: dict[str, np.ndarray],
    gen_weights: dict[str, np.ndarray],
    graph: _ObjectGraph,
    root: str,
    prefix: str,
) -> bool:
    """Drops the generator's embedding tensors from `gen_weights` when they are the shared
    block (returns False), else keeps them as its own tables (returns True)."""
    word = "_embedding_layer/embeddings"
    word_shared = graph.key(f"{GENERATOR_ROOT}/{word}") == graph.key(f"{root}/{word}")
    same = [
        np.array_equal(weights[f"electra/{k}"], gen_weights[f"generator/{k}"]) for k in _EMBEDDINGS
    ]
    if word_shared and all(same):
        for key in _EMBEDDINGS:
            del gen_weights[f"generator/{key}"]
        return False
    if word_shared:
        _LOG.warning(
            "%s: the generator shares only the word embeddings with the discriminator (Model "
            "Garden's tie_embeddings); ELECTRA shares the whole embedding block or none, so the "
            "generator gets its own copy of the word table (both networks compute the same)",
            prefix,
        )
    return True


def read_modelgarden_config(path: str) -> PretrainingConfig:
    return read_modelgarden(path).config


# ------------------------------------------------------------------------------- writing
def encoder_kwargs(config: ModelConfig) -> dict:
    """`networks.BertEncoder` keyword arguments for one ELECTRA network (JSON-ready).
    `inner_activation` "gelu" is the exact erf form there (tf_keras.activations.get); Model
    Garden's experiment configs map `hidden_activation: gelu` to the tanh approximation."""
    return {
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "max_sequence_length": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "inner_dim": config.intermediate_size,
        "inner_activation": config.hidden_act,
        "output_dropout": config.hidden_dropout_prob,
        "attention_dropout": config.attention_probs_dropout_prob,
        "initializer": {
            "class_name": "TruncatedNormal",
            "config": {"stddev": config.initializer_range},
        },
        "embedding_width": config.embedding_width,
        "norm_first": False,
        "dict_outputs": True,
    }


def _import_modelgarden():
    try:
        import tf_keras
        from official.nlp.modeling import models, networks
    except ImportError as e:  # tf-models-official is a development dependency only
        raise CheckpointError(
            f"writing Model Garden checkpoints needs tf-models-official ({e}); "
            "pip install -r requirements.txt"
        ) from e
    return tf_keras, models, networks


def _trackable(root, path: str):
    """The object at an attribute path of the object graph `root` spans (the names a
    checkpoint records: `_trackable_children`, not Python attributes)."""
    node = root
    for part in _parts(path):
        children = node._trackable_children()
        if part not in children:
            raise CheckpointError(f"Model Garden model: no {path!r} (stopped at {part!r})")
        node = children[part]
    return node


def build_encoder(config: ModelConfig, embedding_layer=None):
    """Model Garden's BertEncoder of `config`, built."""
    _, _, networks = _import_modelgarden()
    encoder = networks.BertEncoder(**encoder_kwargs(config), embedding_layer=embedding_layer)
    return encoder


def _head_module(tf_keras, disc, hidden: int, activation: str):
    """The discriminator and its head under ElectraPretrainer's attribute names (no generator)."""
    module = tf.Module()
    module.discriminator_network = disc
    module.discriminator_projection = tf_keras.layers.Dense(hidden, activation=activation)
    module.discriminator_head = tf_keras.layers.Dense(1)
    module.discriminator_projection.build([None, hidden])
    module.discriminator_head.build([None, hidden])
    return module


def _dummy_pretrainer_inputs() -> dict[str, tf.Tensor]:
    ids = tf.constant([[2, 5, 6, 3]], tf.int32)  # [1, 4]
    positions = tf.constant([[1]], tf.int32)  # [1, 1]
    return {
        "input_word_ids": ids,
        "input_mask": tf.ones_like(ids),
        "input_type_ids": tf.zeros_like(ids),
        "masked_lm_positions": positions,
        "masked_lm_ids": tf.zeros_like(positions),
        "masked_lm_weights": tf.ones([1, 1]),
    }


def _write_checkpoint(objects: dict, directory: str, step: int | None) -> None:
    name = f"{CHECKPOINT_PREFIX}-{int(step or 0)}"
    tf.train.Checkpoint(**objects).write(os.path.join(directory, name))
    write_state_file(directory, name)


def _write_config(config: ModelConfig, directory: str) -> None:
    with open(os.path.join(directory, ENCODER_CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(encoder_kwargs(config), f, indent=2, sort_keys=True)
        f.write("\n")


def write_modelgarden_files(
    weights: Mapping[str, np.ndarray],
    directory: str,
    config: PretrainingConfig,
    global_step: int | None,
) -> None:
    """Writes the export described in the module docstring into an existing directory."""
    if config.two_tower_generator or config.electric_objective:
        raise CheckpointError(
            "Model Garden has no two-tower (Electric) generator; export the discriminator "
            "alone (--discriminator-only)"
        )
    if not config.has_discriminator:
        raise CheckpointError(
            "a masked LM without a discriminator has no Model Garden ElectraPretrainer form"
        )
    if not any(n.startswith("electra/encoder/") for n in weights):
        raise CheckpointError("a generator without its discriminator has no Model Garden form")
    tf_keras, models, _ = _import_modelgarden()
    disc_config = config.discriminator_config()
    disc = build_encoder(disc_config)
    has_generator = "generator_predictions/output_bias" in weights
    has_head = "discriminator_predictions/dense/kernel" in weights
    gen = None
    objects: dict = {"encoder": disc}
    if has_generator:
        if config.untied_generator:
            shared_words = "generator/embeddings/word_embeddings" not in weights
            layer = disc.get_embedding_layer() if shared_words else None
            gen = build_encoder(config.generator_config(), embedding_layer=layer)
        else:
            gen = disc
        objects["model"] = models.ElectraPretrainer(
            generator_network=gen,
            discriminator_network=disc,
            vocab_size=disc_config.vocab_size,
            num_classes=2,
            num_token_predictions=1,
            mlm_activation=tf_keras.activations.get(disc_config.hidden_act),
            mlm_initializer=tf_keras.initializers.TruncatedNormal(disc_config.initializer_range),
        )
        objects["model"](_dummy_pretrainer_inputs())  # builds the heads
    elif has_head:
        objects["model"] = _head_module(
            tf_keras, disc, disc_config.hidden_size, disc_config.hidden_act
        )
    rows = encoder_table(
        "electra",
        "encoder",
        disc_config.num_hidden_layers,
        disc_config.embedding_width != disc_config.hidden_size,
    )
    if gen is not None and gen is not disc:
        gen_config = config.generator_config()
        gen_rows = encoder_table(
            "generator",
            GENERATOR_ROOT,
            gen_config.num_hidden_layers,
            gen_config.embedding_width != gen_config.hidden_size,
        )
        for name, path, layout in gen_rows:
            shared = name.replace("generator/", "electra/", 1)
            if name not in weights and shared in weights:  # the shared block: copies
                rows.append((shared, path, layout))
            elif name in weights:
                rows.append((name, path, layout))
    heads = {
        **(_DISCRIMINATOR_HEAD if has_head else {}),
        **(_GENERATOR_HEAD if has_generator else {}),
    }
    rows += [(name, path, PLAIN) for name, path in heads.items()]
    root = tf.train.Checkpoint(**objects)
    for name, path, layout in rows:
        variable = _trackable(root, path)
        num_heads = (
            config.generator_config() if name.startswith("generator/") else disc_config
        ).num_attention_heads
        value = to_modelgarden(np.asarray(weights[name]), layout, num_heads)
        if tuple(variable.shape) != value.shape:
            raise CheckpointError(
                f"{name}: shape {value.shape} does not fit Model Garden's {path} {variable.shape}"
            )
        variable.assign(value.astype(variable.dtype.as_numpy_dtype))
    if global_step is not None:
        objects["global_step"] = tf.Variable(int(global_step), dtype=tf.int64, trainable=False)
    _write_checkpoint(objects, directory, global_step)
    _write_config(disc_config, directory)
    if gen is not None and gen is not disc:
        folder = os.path.join(directory, GENERATOR)
        os.makedirs(folder)
        _write_checkpoint({"encoder": gen}, folder, global_step)
        _write_config(config.generator_config(), folder)
