"""Checkpoints: weights in and out of every format, and the training state that resumes a run.
Each format module defines `FORMAT`, registered in `format_registry`; the names of an ELECTRA
checkpoint's parts are `names`.

The names below are imported on first use (PEP 562), so that `names` and `format_registry`,
which the model layers and `convert --help` read, import neither TensorFlow nor the formats.

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
| `names`            | the ONE description of an ELECTRA checkpoint's parts (original names)  |
| `format_registry`  | the formats, one line each (`WeightFormat`, the module supplying it)   |
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> (module of this package, its name there).
_PUBLIC: dict[str, tuple[str, str]] = {
    **{name: ("config_inference", name) for name in ("config_from_models", "infer_config")},
    "read_config_file": ("config_inference", "read_config_file"),
    **{name: ("files", name) for name in ("CONFIG_FILE", "CheckpointError", "resolve_prefix")},
    **{
        name: ("formats", name)
        for name in (
            "FORMATS",
            "check_complete",
            "detect_format",
            "load_weights",
            "read_config",
            "read_weights",
            "save_weights",
            "write_weights",
        )
    },
    # The name before `load_weights`; the README's fine-tuning snippet and user code use it.
    "load_into": ("formats", "load_weights"),
    **{name: ("native", name) for name in ("CHECKPOINT_PREFIX", "build_pretrainer")},
    "write_native_files": ("native", "write_native_files"),
    "write_original_files": ("original", "write_original_files"),
    **{name: ("pretrained", name) for name in ("PretrainedModel", "read_pretrained")},
    "saved_config": ("pretrained", "saved_config"),
    **{
        name: ("weights", name)
        for name in ("LoadResult", "SourceWeights", "assign", "check_fit", "model_weights")
    },
    "summarize": ("weights", "summarize"),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    """A public name (imported from its module, then kept here), or a submodule not yet
    imported (`electra_tf.checkpoints.hf` after `import electra_tf.checkpoints`)."""
    if name in _PUBLIC:
        module, attribute = _PUBLIC[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
