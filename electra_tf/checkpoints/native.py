"""This project's own checkpoints: an object-based `tf.train.Checkpoint(model=ElectraPretrainer)`
(training checkpoints also hold the optimizer, the step and the data iterator, see
`training_state`), named `ckpt-<step>`, with the resolved `config.json` beside it. A prefix or a
directory (its latest checkpoint) is read into the neutral weights by restoring it into a fresh
pretrainer and reading the pretrainer's `variable_map()`.
"""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf

from electra_tf.checkpoints.config_inference import read_config_file
from electra_tf.checkpoints.files import (
    CHECKPOINT_PREFIX,
    CONFIG_FILE,
    CheckpointError,
    first_line,
    open_checkpoint,
    quiet_tf_warnings,
    read_tensor,
    resolve_prefix,
    write_state_file,
)
from electra_tf.checkpoints.format_registry import WeightFormat
from electra_tf.checkpoints.recovery import (
    checkpoint_problem,
    checkpoints_on_disk,
    newest_readable,
)
from electra_tf.checkpoints.weights import GENERATOR_HEAD_BIASES, SourceWeights
from electra_tf.config import PretrainingConfig, save_config

# What a native checkpoint can hold: the whole pretrainer, the discriminator (encoder + its
# replaced-token head, what an HF `ElectraForPreTraining` folder is) or the bare encoder (an
# `ElectraModel` folder, or `save_weights(encoder, ...)`). Each is `Checkpoint(model=...)` of
# that model; the object graph's first attribute under `model/` tells them apart.
NATIVE_KINDS = ("pretrainer", "discriminator", "encoder")
_KIND_ATTRIBUTE = {"discriminator": "pretrainer", "head": "discriminator", "embeddings": "encoder"}


def build_pretrainer(config: PretrainingConfig):
    """An ElectraPretrainer with every variable created (so `variable_map()` is complete)."""
    from electra_tf.pretraining.pretrainer import ElectraPretrainer

    # The special token ids steer masking only, never a variable; 0 fits any vocabulary.
    return ElectraPretrainer(config, cls_id=0, sep_id=0, mask_id=0)


def build_model(config: PretrainingConfig, kind: str = "pretrainer"):
    """The model of one native kind, built, so that its `variable_map()` is complete."""
    from electra_tf.modeling import ElectraDiscriminator, TransformerEncoder
    from electra_tf.modeling.discriminator import dummy_inputs

    if kind == "pretrainer":
        return build_pretrainer(config)
    if kind == "discriminator":
        model = ElectraDiscriminator(config.discriminator_config())
    elif kind == "encoder":
        model = TransformerEncoder(config.discriminator_config(), name="electra")
    else:
        raise CheckpointError(f"native model kind {kind!r} is not one of {NATIVE_KINDS}")
    model(dummy_inputs())
    return model


def weights_kind(names, config: PretrainingConfig) -> str:
    """The native kind that holds these original names: the pretrainer when there is a
    generator head (or the config has no generator), else discriminator or encoder."""
    names = set(names)
    if names.intersection(GENERATOR_HEAD_BIASES):
        return "pretrainer"
    if "discriminator_predictions/dense/kernel" in names:
        return "pretrainer" if config.uniform_generator else "discriminator"
    return "encoder"


def _native_kind(reader, root: str, prefix: str) -> str:
    attributes = {
        name.split("/")[1]
        for name in reader.get_variable_to_shape_map()
        if name.startswith(f"{root}/") and name.count("/") > 1
    }
    kinds = {_KIND_ATTRIBUTE[a] for a in attributes if a in _KIND_ATTRIBUTE}
    if len(kinds) != 1:
        raise CheckpointError(
            f"{prefix}: `{root}` is none of the native models ({', '.join(NATIVE_KINDS)}); "
            f"its attributes: {sorted(attributes)[:12]}"
        )
    return kinds.pop()


def _native_root(prefix: str) -> tuple[str, int | None]:
    """The checkpoint's key holding the model (what `tf.train.Checkpoint(<key>=model)` used)
    and its step counter, if any."""
    reader = open_checkpoint(prefix)
    roots = set()
    step = None
    for name in reader.get_variable_to_shape_map():
        head = name.split("/", 1)[0]
        if name in ("step/.ATTRIBUTES/VARIABLE_VALUE", "global_step/.ATTRIBUTES/VARIABLE_VALUE"):
            step = int(read_tensor(reader, prefix, name))
        elif head not in ("optimizer", "save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH", "step"):
            roots.add(head)
    if "model" in roots:  # training checkpoints also hold the optimizer and data iterator
        return "model", step
    if len(roots) != 1:
        raise CheckpointError(f"{prefix}: no `model` object in the checkpoint (found {roots})")
    return roots.pop(), step


def read_native_config(prefix: str) -> PretrainingConfig:
    """The resolved config saved beside a native checkpoint."""
    config_path = os.path.join(os.path.dirname(prefix), CONFIG_FILE)
    if not os.path.exists(config_path):
        raise CheckpointError(
            f"{prefix}: a native checkpoint needs its config; none at {config_path}, "
            "pass --config (config=...)"
        )
    return read_config_file(config_path)


def read_native(path: str, config: PretrainingConfig | None = None) -> SourceWeights:
    """Restores a native checkpoint into a fresh ElectraPretrainer and reads its variable map."""
    prefix = resolve_prefix(path)
    if config is None:
        config = read_native_config(prefix)
    try:
        root, step = _native_root(prefix)
        kind = _native_kind(open_checkpoint(prefix), root, prefix)
    except CheckpointError as e:  # an unreadable index: say which older checkpoint reads
        raise damaged_or(prefix, e) from None
    model = build_model(config, kind)
    error = None
    with quiet_tf_warnings():
        try:
            status = tf.train.Checkpoint(**{root: model}).read(prefix)
            status.expect_partial()  # the optimizer, step and data iterator are not weights
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError, IndexError, tf.errors.OpError) as e:
            # TF's message can hold every unmatched object, arrays included: one line of it.
            error = first_line(e)
    if error is not None:
        mismatch = CheckpointError(f"{prefix}: does not match the {kind} of its config ({error})")
        raise damaged_or(prefix, mismatch)
    weights = {name: var.numpy() for name, var in model.variable_map().items()}
    return SourceWeights(weights, "native", prefix, config, step)


def damaged_or(prefix: str, otherwise: CheckpointError) -> CheckpointError:
    """Why a native checkpoint did not read: damaged files (naming the file and the newest
    older checkpoint beside it that reads in full), else `otherwise`."""
    problem = checkpoint_problem(prefix)
    if problem is None:
        return otherwise
    older = newest_readable(checkpoints_on_disk(os.path.dirname(prefix)), below=prefix)
    hint = (
        f"{older} reads in full: use it (--input {older})"
        if older
        else "no older checkpoint beside it reads in full"
    )
    return CheckpointError(f"{prefix}: cannot be used: {problem}; {hint}")


def write_native_files(
    model, directory: str, config: PretrainingConfig | None, global_step: int | None
) -> str:
    """Writes `tf.train.Checkpoint(model=model, step=...)` as `ckpt-<step>` plus config.json."""
    name = f"{CHECKPOINT_PREFIX}-{int(global_step or 0)}"
    objects = {"model": model}
    if global_step is not None:  # an unknown step stays unknown (HF weights carry none)
        objects["step"] = tf.Variable(int(global_step), dtype=tf.int64, trainable=False)
    tf.train.Checkpoint(**objects).write(os.path.join(directory, name))
    write_state_file(directory, name)
    if config is not None:
        save_config(config, os.path.join(directory, CONFIG_FILE))
    return os.path.join(directory, name)


def restore_weights(model: Any, path: str) -> None:
    """Loads only a native checkpoint's model weights (continued pre-training: no slots)."""
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None:
        raise FileNotFoundError(f"init_checkpoint: no checkpoint in {path}")
    status = tf.train.Checkpoint(model=model).read(prefix)
    status.expect_partial()  # the optimizer, step and data iterator are deliberately left out
    status.assert_existing_objects_matched()


def _rename(name: str, shape, config: PretrainingConfig, native_vars) -> list[tuple[str, tuple]]:
    """`WeightFormat.rename`: the model variable that holds the tensor (`native_vars`: the
    target model's `variable_map()`; none known, no place)."""
    var = (native_vars or {}).get(name)
    return [] if var is None else [(f"model:{var.name}", tuple(var.shape))]


# Any checkpoint that no other format claims is tried as a native one (detect_order last).
# Writing builds the model (`formats.write_weights`), so `write` is None.
FORMAT = WeightFormat(
    name="native",
    detect=lambda path, keys: True,
    detect_order=90,
    read_config=lambda path: read_native_config(resolve_prefix(path)),
    read=read_native,
    write=None,
    rename=_rename,
    needs_config=False,
)
