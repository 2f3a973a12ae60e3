"""The original's checkpoints: TF1 name-based checkpoints as google-research/electra writes
and releases them (`electra/...`, `generator/...`, heads, `global_step`, optional
`adam_m`/`adam_v` slots; Electric's `generator_ltr/...`, `generator_rtl/...`,
`cloze_predictions/...`), read and written under the original variable names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from electra_tf.checkpoints import names
from electra_tf.checkpoints.config_inference import infer_config
from electra_tf.checkpoints.files import (
    open_checkpoint,
    read_tensor,
    resolve_prefix,
    write_state_file,
)
from electra_tf.checkpoints.format_registry import WeightFormat
from electra_tf.checkpoints.weights import SourceWeights
from electra_tf.config import PretrainingConfig

ORIGINAL_PREFIX = "model.ckpt"  # run_pretraining's Estimator prefix
_SLOT_SUFFIXES = ("/adam_m", "/adam_v")


# Every pre-training variable name of docs/faithfulness.md, section 9 'Checkpoint variable names',
# and of Electric's two-tower generator
# (run_pretraining.py's `generator_ltr` / `generator_rtl` BertModels and `cloze_predictions`);
# fine-tuning heads are `task_specific/`. Spelled from `checkpoint_names`.
def _either(*alternatives: str) -> str:
    return "(" + "|".join(re.escape(a) for a in alternatives) + ")"


_ENCODER_SCOPES = _either(*names.ENCODER_SCOPES)
_MODEL_VARIABLE = re.compile(
    rf"{_ENCODER_SCOPES}/{_either(*names.EMBEDDING_KEYS, *names.PROJECTION_KEYS)}"
    rf"|{_ENCODER_SCOPES}/encoder/layer_\d+/{_either(*names.LAYER_KEYS)}"
    rf"|{_either(*names.DISCRIMINATOR_HEAD_KEYS)}"
    rf"|{_either(*names.GENERATOR_HEAD_KEYS)}"
    rf"|{_either(*(k.replace(names.GENERATOR_HEAD, names.CLOZE_HEAD, 1) for k in names.GENERATOR_HEAD_KEYS))}"
)


def is_model_variable(original_name: str) -> bool:
    """Whether `original_name` is a pre-training model variable of the original layout."""
    return _MODEL_VARIABLE.fullmatch(original_name) is not None


def read_original(path: str, config: PretrainingConfig | None = None) -> SourceWeights:
    """A TF1 name-based checkpoint: model variables kept, slots and global_step set aside."""
    prefix = resolve_prefix(path)
    reader = open_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    weights: dict[str, np.ndarray] = {}
    skipped: list[str] = []
    unused: list[str] = []
    global_step = None
    for name in sorted(shapes):
        if name == "global_step":
            global_step = int(read_tensor(reader, prefix, name))
            skipped.append(name)
        elif name.endswith(_SLOT_SUFFIXES):
            skipped.append(name)
        elif is_model_variable(name) or name.startswith("task_specific/"):
            weights[name] = read_tensor(reader, prefix, name)
        else:
            unused.append(name)
    if config is None:
        config = infer_config({n: shapes[n] for n in weights}, where=prefix)
    return SourceWeights(weights, "original", prefix, config, global_step, skipped, unused)


def write_original_files(
    weights: Mapping[str, np.ndarray], directory: str, global_step: int | None
) -> str:
    """Writes a TF1 name-based checkpoint `model.ckpt-<step>` (+ `checkpoint` file) into an
    existing directory; names and dtypes are exactly the original's (global_step int64)."""
    step = int(global_step or 0)
    name = f"{ORIGINAL_PREFIX}-{step}"
    tensors = {k: tf.constant(v) for k, v in weights.items()}
    tensors["global_step"] = tf.constant(step, dtype=tf.int64)
    keys = sorted(tensors)
    tf.raw_ops.SaveV2(
        prefix=os.path.join(directory, name),
        tensor_names=keys,
        shape_and_slices=[""] * len(keys),
        tensors=[tensors[k] for k in keys],
    )
    write_state_file(directory, name)
    return os.path.join(directory, name)


def read_original_config(path: str) -> PretrainingConfig:
    """The config an original checkpoint's variable shapes give (no tensor read)."""
    prefix = resolve_prefix(path)
    shapes = open_checkpoint(prefix).get_variable_to_shape_map()
    return infer_config({n: s for n, s in shapes.items() if is_model_variable(n)}, prefix)


def _write(weights, directory: str, config, global_step: int | None, vocab: str | None) -> None:
    write_original_files(weights, directory, global_step)


FORMAT = WeightFormat(
    name="original",
    detect=lambda path, keys: "_CHECKPOINTABLE_OBJECT_GRAPH" not in keys(),
    detect_order=40,
    read_config=read_original_config,
    read=read_original,
    write=_write,
    rename=lambda name, shape, config, native_vars=None: [(name, tuple(shape))],
    needs_config=False,
)
