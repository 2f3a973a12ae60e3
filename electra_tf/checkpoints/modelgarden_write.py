"""Writing Model Garden exports (the layout `modelgarden`'s docstring describes) with Model
Garden's own classes: `official` is imported here only, by the functions that need it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from electra_tf.checkpoints import names
from electra_tf.checkpoints.files import CHECKPOINT_PREFIX, CheckpointError, write_state_file
from electra_tf.checkpoints.modelgarden_names import (
    _DISCRIMINATOR_HEAD,
    _GENERATOR_HEAD,
    ENCODER_CONFIG_FILE,
    GENERATOR,
    GENERATOR_ROOT,
    PLAIN,
    _parts,
    encoder_kwargs,
    encoder_table,
    to_modelgarden,
)
from electra_tf.config import ModelConfig, PretrainingConfig


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


def _check_writable(weights: Mapping[str, np.ndarray], config: PretrainingConfig) -> None:
    if config.two_tower_generator or config.electric_objective:
        raise CheckpointError(
            "Model Garden has no two-tower (Electric) generator; export the discriminator "
            "alone (--discriminator-only)"
        )
    if not config.has_discriminator:
        raise CheckpointError(
            "a masked LM without a discriminator has no Model Garden ElectraPretrainer form"
        )
    if not any(names.is_encoder_variable(n) for n in weights):
        raise CheckpointError("a generator without its discriminator has no Model Garden form")


def _build_objects(weights: Mapping[str, np.ndarray], config: PretrainingConfig) -> tuple:
    """The objects of the checkpoint (`encoder`, and `model` when there is a head), built:
    (objects, discriminator encoder, generator encoder or None)."""
    tf_keras, models, _ = _import_modelgarden()
    disc_config = config.discriminator_config()
    disc = build_encoder(disc_config)
    gen = None
    objects: dict = {"encoder": disc}
    if names.GENERATOR_OUTPUT_BIAS in weights:
        if config.untied_generator:
            shared_words = not names.own_generator_embeddings(weights)
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
    elif names.DISCRIMINATOR_HEAD_KEYS[0] in weights:
        objects["model"] = _head_module(
            tf_keras, disc, disc_config.hidden_size, disc_config.hidden_act
        )
    return objects, disc, gen


def _rows(weights: Mapping[str, np.ndarray], config: PretrainingConfig, own_generator: bool):
    """(original name, checkpoint path, layout) of every tensor to assign; a generator of its
    own gets copies of the shared embedding block."""
    disc_config = config.discriminator_config()
    rows = encoder_table(
        "electra",
        "encoder",
        disc_config.num_hidden_layers,
        disc_config.embedding_width != disc_config.hidden_size,
    )
    if own_generator:
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
        **(_DISCRIMINATOR_HEAD if names.DISCRIMINATOR_HEAD_KEYS[0] in weights else {}),
        **(_GENERATOR_HEAD if names.GENERATOR_OUTPUT_BIAS in weights else {}),
    }
    return rows + [(name, path, PLAIN) for name, path in heads.items()]


def write_modelgarden_files(
    weights: Mapping[str, np.ndarray],
    directory: str,
    config: PretrainingConfig,
    global_step: int | None,
) -> None:
    """Writes the export described in `modelgarden`'s docstring into an existing directory."""
    _check_writable(weights, config)
    objects, disc, gen = _build_objects(weights, config)
    own_generator = gen is not None and gen is not disc
    root = tf.train.Checkpoint(**objects)
    disc_config = config.discriminator_config()
    for name, path, layout in _rows(weights, config, own_generator):
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
    if own_generator:
        folder = os.path.join(directory, GENERATOR)
        os.makedirs(folder)
        _write_checkpoint({"encoder": gen}, folder, global_step)
        _write_config(config.generator_config(), folder)


def write(weights, directory: str, config, global_step: int | None, vocab: str | None) -> None:
    """`WeightFormat.write`: the export, vocab.txt beside it is `formats`' part."""
    write_modelgarden_files(weights, directory, config, global_step)
