"""The weight formats `electra_tf.checkpoints` reads and writes: ONE registry, one line each.

A line names the module that supplies the format and says in a few words what it is; the module
defines `FORMAT`, a `WeightFormat` (detect / read config / read / write / rename). Everything
that lists formats derives from here: `checkpoints.FORMATS`, `detect_format`, `read_weights`,
`write_weights`, `convert`'s choices, help and `--dry-run`. The modules are imported on first
use, so that `convert --help` imports no TensorFlow. docs/checkpoints.md ("Adding a format")
shows a new one.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

# name -> (module defining FORMAT, what it is). The order is the order of `--help`.
_REGISTRY: dict[str, tuple[str, str]] = {
    "native": ("electra_tf.checkpoints.native", "this project's checkpoints (config.json beside)"),
    "original": ("electra_tf.checkpoints.original", "google-research/electra's TF1 checkpoints"),
    "hf": ("electra_tf.checkpoints.hf", "Hugging Face safetensors folders"),
    "modelgarden": ("electra_tf.checkpoints.modelgarden", "tf-models-official checkpoints"),
    "kerashub": ("electra_tf.checkpoints.kerashub", "KerasHub ElectraBackbone presets"),
}


@dataclasses.dataclass(frozen=True)
class WeightFormat:
    """What a format module supplies. Weights are `checkpoints.weights.SourceWeights`, keyed by
    the original's names (`electra_tf.checkpoints.names`).

    Args:
        name: the format's name (`--from`/`--to`, `init_checkpoint_format`).
        detect: `detect(path, keys)`: whether `path` is of this format. `keys()` gives the
            checkpoint keys of `path` (read once, on first call, for all formats). Raises
            CheckpointError for a folder that is only partly of this format.
        detect_order: formats are asked in this order (lowest first); the one that answers
            any checkpoint (native) comes last.
        read_config: `read_config(path)`: the PretrainingConfig, no tensors read where it can.
        read: `read(path, config_or_None)` -> SourceWeights.
        write: `write(weights, directory, config, global_step, vocab_file)` into an existing
            directory (None for native, which writes a model: `formats.write_weights`).
        rename: `rename(name, shape, config, native_vars)` -> [(name in the format, shape)]:
            where one tensor goes (the dry run's report); [] for no place.
        needs_config: writing needs the model's PretrainingConfig.
        vocab_in_tokenizer: the format writes the vocabulary into its own tokenizer (which
            needs the special tokens); otherwise it is copied beside the weights as vocab.txt.
        vocab_file: `vocab_file(folder)`: the format's own vocabulary in a folder, or None.
        untied_by_values: `read_config` cannot tell a generator's own embedding tables of the
            discriminator's width from the shared block (`read` compares their values).
        no_place_shapes: the dry run's "(no place in ...)" lines show the tensor's shape (the
            lines of formats that do not, as they always have, leave it out).
    """

    name: str
    detect: Callable
    detect_order: int
    read_config: Callable
    read: Callable
    write: Callable | None
    rename: Callable
    needs_config: bool = True
    vocab_in_tokenizer: bool = False
    vocab_file: Callable | None = None
    untied_by_values: bool = False
    no_place_shapes: bool = True


def register(name: str, module: str, description: str) -> None:
    """Adds a format (a test's or a plugin's); the built-in ones are the lines above."""
    if name in _REGISTRY or name == "auto":
        raise ValueError(f"format {name!r} is already registered")
    _REGISTRY[name] = (module, description)


def unregister(name: str) -> None:
    """Removes a format added with `register` (a test's, after it)."""
    _REGISTRY.pop(name)


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def description(name: str) -> str:
    return _REGISTRY[name][1]


def get(name: str) -> WeightFormat:
    """The format's `WeightFormat` (its module imported on first use); KeyError if unknown."""
    module, _ = _REGISTRY[name]
    found = importlib.import_module(module).FORMAT
    if found.name != name:
        raise ValueError(f"{module}.FORMAT is {found.name!r}, registered as {name!r}")
    return found


def in_detect_order() -> list[WeightFormat]:
    return sorted((get(name) for name in _REGISTRY), key=lambda f: f.detect_order)
