"""Model Garden's names for ELECTRA's tensors: the name map of `modelgarden`'s docstring as a
table keyed by `electra_tf.checkpoints.names`, and the BertEncoder arguments of a network.
"""

from __future__ import annotations

import re

from electra_tf.checkpoints import names
from electra_tf.checkpoints.names import HEADS, HEADS_OUT, PLAIN, merge_heads, split_heads
from electra_tf.config import ModelConfig, PretrainingConfig

ENCODER_CONFIG_FILE = "encoder_config.json"
GENERATOR = "generator"

# Paths of EMBEDDING_KEYS, PROJECTION_KEYS, LAYER_KEYS (below _transformer_layers/i), in order.
_PATHS = names.format_paths(
    (
        "_embedding_layer/embeddings",
        "_position_embedding_layer/embeddings",
        "_type_embedding_layer/embeddings",
        "_embedding_norm_layer/gamma",
        "_embedding_norm_layer/beta",
    ),
    ("_embedding_projection/kernel", "_embedding_projection/bias"),
    (
        ("_attention_layer/_query_dense/kernel", HEADS),
        ("_attention_layer/_query_dense/bias", HEADS),
        ("_attention_layer/_key_dense/kernel", HEADS),
        ("_attention_layer/_key_dense/bias", HEADS),
        ("_attention_layer/_value_dense/kernel", HEADS),
        ("_attention_layer/_value_dense/bias", HEADS),
        ("_attention_layer/_output_dense/kernel", HEADS_OUT),
        "_attention_layer/_output_dense/bias",
        "_attention_layer_norm/gamma",
        "_attention_layer_norm/beta",
        "_intermediate_dense/kernel",
        "_intermediate_dense/bias",
        "_output_dense/kernel",
        "_output_dense/bias",
        "_output_layer_norm/gamma",
        "_output_layer_norm/beta",
    ),
)
_DISCRIMINATOR_HEAD = dict(
    zip(
        names.DISCRIMINATOR_HEAD_KEYS,
        (
            "model/discriminator_projection/kernel",
            "model/discriminator_projection/bias",
            "model/discriminator_head/kernel",
            "model/discriminator_head/bias",
        ),
        strict=True,
    )
)
_GENERATOR_HEAD = dict(
    zip(
        names.GENERATOR_HEAD_KEYS,
        (
            "model/masked_lm/dense/kernel",
            "model/masked_lm/dense/bias",
            "model/masked_lm/layer_norm/gamma",
            "model/masked_lm/layer_norm/beta",
            # The variable's own name is "output_bias/bias"; a checkpoint path writes "/" as ".S".
            "model/masked_lm/output_bias.Sbias",
        ),
        strict=True,
    )
)
DISCRIMINATOR_ROOTS = ("encoder", "model/discriminator_network")
GENERATOR_ROOT = "model/generator_network"
# The layouts' old names (Model Garden was the first format to split attention per head).
to_modelgarden, from_modelgarden = split_heads, merge_heads
__all__ = ["HEADS", "HEADS_OUT", "PLAIN", "to_modelgarden", "from_modelgarden"]


def encoder_table(
    scope: str, root: str, num_layers: int, projection: bool
) -> list[tuple[str, str, str]]:
    """(original name, Model Garden path, layout) for one encoder: `scope` is electra or
    generator, `root` the encoder's path in the checkpoint (`encoder`, `model/...`)."""
    return names.encoder_table(
        scope, num_layers, projection, _PATHS, lambda i: f"_transformer_layers/{i}", f"{root}/"
    )


def target_names(name: str, shape, config: PretrainingConfig) -> list[tuple[str, tuple]]:
    """Where one original-named tensor goes in an export (the dry run's report): its
    checkpoint paths and Model Garden shapes; a shared embedding tensor goes to both networks."""
    heads = {**_DISCRIMINATOR_HEAD, **_GENERATOR_HEAD}
    found = []
    for scope, network in names.separate_networks(config):
        root = "encoder" if scope == names.DISCRIMINATOR else GENERATOR_ROOT
        projection = network.embedding_width != network.hidden_size
        for row, path, layout in encoder_table(scope, root, network.num_hidden_layers, projection):
            if names.placed_at(name, scope, row, config):
                found.append((path, names.split_shape(shape, layout, network.num_attention_heads)))
        if scope == names.DISCRIMINATOR and name in heads:
            found.append((heads[name], tuple(int(d) for d in shape)))
    return found


def rename(
    name: str, shape, config: PretrainingConfig, native_vars=None
) -> list[tuple[str, tuple]]:
    return target_names(name, shape, config)


def _parts(path: str) -> list[str]:
    """The local names along a checkpoint path (TF writes "." as ".." and "/" as ".S")."""
    return [
        re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1), p)
        for p in path.split("/")
    ]


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
