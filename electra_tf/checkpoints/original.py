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

from electra_tf.checkpoints.config_inference import infer_config
from electra_tf.checkpoints.files import (
    open_checkpoint,
    read_tensor,
    resolve_prefix,
    write_state_file,
)
from electra_tf.checkpoints.weights import SourceWeights
from electra_tf.config import PretrainingConfig

ORIGINAL_PREFIX = "model.ckpt"  # run_pretraining's Estimator prefix
_SLOT_SUFFIXES = ("/adam_m", "/adam_v")

# Every pre-training variable name of docs/faithfulness.md, section 9 'Checkpoint variable names',
# and of Electric's two-tower generator
# (run_pretraining.py's `generator_ltr` / `generator_rtl` BertModels and `cloze_predictions`);
# fine-tuning heads are `task_specific/`.
_ENCODER_SCOPES = "(electra|generator|generator_ltr|generator_rtl)"
_MODEL_VARIABLE = re.compile(
    rf"{_ENCODER_SCOPES}/embeddings/"
    r"(word_embeddings|position_embeddings|token_type_embeddings|LayerNorm/(gamma|beta))"
    rf"|{_ENCODER_SCOPES}/embeddings_project/(kernel|bias)"
    rf"|{_ENCODER_SCOPES}/encoder/layer_\d+/"
    r"((attention/self/(query|key|value)|attention/output/dense|intermediate/dense|output/dense)"
    r"/(kernel|bias)|(attention/output|output)/LayerNorm/(gamma|beta))"
    r"|discriminator_predictions/(dense|dense_1)/(kernel|bias)"
    r"|(generator|cloze)_predictions/(dense/(kernel|bias)|LayerNorm/(gamma|beta)|output_bias)"
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
