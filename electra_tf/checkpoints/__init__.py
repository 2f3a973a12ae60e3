"""Checkpoints: weights in and out of every format, and the training state that resumes a run.
Each format module defines `FORMAT`, registered in `electra_tf/format_registry.py`; the names
of an ELECTRA checkpoint's parts are `electra_tf/checkpoint_names.py`.

| module             | what lives there                                                      |
| ------------------ | --------------------------------------------------------------------- |
| `pretrained`       | `read_pretrained`: a pre-trained model read once (format, config, weights) |
| `formats`          | the entry points: `load_weights`, `save_weights`, `read_weights`, `write_weights` |
| `weights`          | the neutral form (`SourceWeights`, by original name) and fitting it into a model |
| `native`           | this project's object-based checkpoints (`ckpt-<step>` + config.json) |
| `original`         | google-research/electra's TF1 name-based checkpoints                  |
| `hf`, `hf_config`, `safetensors_io` | Hugging Face folders (name map, config.json, safetensors) |
| `modelgarden` (+ `_names`, `_write`) | tf-models-official `BertEncoder` / `ElectraPretrainer` checkpoints |
| `kerashub`         | KerasHub `ElectraBackbone` + `ElectraTokenizer` presets (keras_hub lazily) |
| `config_inference` | a checkpoint's PretrainingConfig, from its shapes or HF configs       |
| `training_state`   | `TrainingCheckpoints` (model + optimizer + step + data), resume checks |
| `files`            | `CheckpointError`, `CONFIG_FILE`, prefixes and the `checkpoint` index file |
| `mapping`          | the name-by-name report of a conversion (`convert --dry-run`)          |
"""

from electra_tf.checkpoints.config_inference import (
    config_from_models,
    infer_config,
    read_config_file,
)
from electra_tf.checkpoints.files import CONFIG_FILE, CheckpointError, resolve_prefix
from electra_tf.checkpoints.formats import (
    FORMATS,
    check_complete,
    detect_format,
    load_weights,
    read_config,
    read_weights,
    save_weights,
    write_weights,
)
from electra_tf.checkpoints.native import CHECKPOINT_PREFIX, build_pretrainer, write_native_files
from electra_tf.checkpoints.original import write_original_files
from electra_tf.checkpoints.pretrained import PretrainedModel, read_pretrained, saved_config
from electra_tf.checkpoints.weights import (
    LoadResult,
    SourceWeights,
    assign,
    check_fit,
    model_weights,
    summarize,
)

# The name before `load_weights`; the README's fine-tuning snippet and user code use it.
load_into = load_weights

__all__ = [
    "CHECKPOINT_PREFIX",
    "CONFIG_FILE",
    "FORMATS",
    "CheckpointError",
    "LoadResult",
    "PretrainedModel",
    "SourceWeights",
    "assign",
    "build_pretrainer",
    "check_complete",
    "check_fit",
    "config_from_models",
    "detect_format",
    "infer_config",
    "load_into",
    "load_weights",
    "model_weights",
    "read_config",
    "read_config_file",
    "read_pretrained",
    "read_weights",
    "resolve_prefix",
    "save_weights",
    "saved_config",
    "summarize",
    "write_native_files",
    "write_original_files",
    "write_weights",
]
