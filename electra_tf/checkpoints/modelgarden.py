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

import numpy as np

from electra_tf.checkpoints import names
from electra_tf.checkpoints.config_inference import check_config_matches, config_from_models
from electra_tf.checkpoints.files import (
    CheckpointError,
    open_checkpoint,
    read_tensor,
    resolve_prefix,
)
from electra_tf.checkpoints.format_registry import WeightFormat
from electra_tf.checkpoints.modelgarden_names import (  # noqa: F401 (the module's public names)
    _DISCRIMINATOR_HEAD,
    _GENERATOR_HEAD,
    DISCRIMINATOR_ROOTS,
    ENCODER_CONFIG_FILE,
    GENERATOR,
    GENERATOR_ROOT,
    HEADS,
    HEADS_OUT,
    PLAIN,
    _parts,
    encoder_kwargs,
    encoder_table,
    from_modelgarden,
    rename,
    target_names,
    to_modelgarden,
)
from electra_tf.checkpoints.modelgarden_write import (  # noqa: F401 (the module's public names)
    _dummy_pretrainer_inputs,
    _import_modelgarden,
    _trackable,
    build_encoder,
    write,
    write_modelgarden_files,
)
from electra_tf.checkpoints.weights import SourceWeights
from electra_tf.config import ModelConfig, PretrainingConfig

_LOG = logging.getLogger(__name__)


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
    keys = names.EMBEDDING_KEYS
    disc = {k: weights[f"electra/{k}"] for k in keys}
    if word_shared and names.embeddings_shared(
        disc, {k: gen_weights[f"generator/{k}"] for k in keys}
    ):
        for key in keys:
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


def _detect(path: str, keys) -> bool:
    """An export folder without its checkpoint is an error; else Model Garden's keys."""
    if os.path.isdir(path) and is_export_dir(path):
        try:
            resolve_prefix(path)
        except CheckpointError:
            raise CheckpointError(
                f"{path}: a Model Garden export ({ENCODER_CONFIG_FILE}) without "
                "its checkpoint (no `checkpoint` file or ckpt-*.index)"
            ) from None
    names_ = keys()
    return "_CHECKPOINTABLE_OBJECT_GRAPH" in names_ and is_modelgarden_checkpoint(names_)


FORMAT = WeightFormat(
    name="modelgarden",
    detect=_detect,
    detect_order=30,
    read_config=read_modelgarden_config,
    read=read_modelgarden,
    write=write,
    rename=rename,
    no_place_shapes=False,
)
