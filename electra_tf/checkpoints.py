"""Weights in and out of the three checkpoint formats: native, original (TF1) and Hugging Face.

Every format is read into, or written from, one neutral form: a dict of NumPy arrays keyed by
the ORIGINAL TF1 variable names (ORIGINAL.md section 5), which are also the keys of every
model's `variable_map()`. So there is one name map per foreign format (HF: `electra_tf.hf`) and
none for our own models.

- native: this project's object-based `tf.train.Checkpoint(model=ElectraPretrainer)`, a prefix
  or a directory (latest checkpoint), with the resolved `config.json` beside it.
- original: a TF1 name-based checkpoint as google-research/electra writes and releases it
  (`electra/...`, `generator/...`, heads, `global_step`, optional `adam_m`/`adam_v` slots).
- hf: `discriminator/` and/or `generator/` folders of config.json + model.safetensors, or one
  such folder on its own.

`load_into(model, path)` is the entry point for training and fine-tuning; `export(...)` and
`python -m electra_tf.convert` write the other direction.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import numpy as np
import tensorflow as tf

from electra_tf import hf
from electra_tf.checkpoint_config import (  # noqa: F401 (part of this module's API)
    CheckpointError,
    config_from_models,
    infer_config,
    read_config_file,
)
from electra_tf.config import ModelConfig, PretrainingConfig, save_config
from electra_tf.tf1_files import resolve_prefix, write_state_file
from electra_tf.training.checkpointing import CHECKPOINT_PREFIX as NATIVE_PREFIX

FORMATS = ("native", "original", "hf")
CONFIG_FILE = "config.json"  # the resolved PretrainingConfig beside a native checkpoint
ORIGINAL_PREFIX = "model.ckpt"  # run_pretraining's Estimator prefix
_SLOT_SUFFIXES = ("/adam_m", "/adam_v")
_LOG = logging.getLogger(__name__)


@dataclasses.dataclass
class SourceWeights:
    """Weights read from a checkpoint, by original name, and what was learned on the way."""

    weights: dict[str, np.ndarray]
    fmt: str
    path: str  # the resolved checkpoint prefix or HF directory
    config: PretrainingConfig  # given, saved beside the checkpoint, or inferred from shapes
    global_step: int | None = None
    skipped: list[str] = dataclasses.field(default_factory=list)  # optimizer slots etc.
    unused: list[str] = dataclasses.field(default_factory=list)  # unknown names in the source

    @property
    def has_generator(self) -> bool:
        return "generator_predictions/output_bias" in self.weights


@dataclasses.dataclass
class LoadResult:
    """What `load_into` did. `global_step` is the source's step (None if it has none)."""

    fmt: str
    path: str
    global_step: int | None
    loaded: list[str]
    fresh: list[str]  # target variables left at initialisation on purpose (task heads)
    unused: list[str]  # source variables the target has no place for
    skipped: list[str]  # optimizer slots / step counters, ignored by design


# ------------------------------------------------------------------------------ locating
def detect_format(path: str) -> str:
    """'hf' for a folder with HF config.json files, else 'native' or 'original' by its keys."""
    if os.path.isdir(path) and hf.is_hf_dir(path):
        return "hf"
    names = tf.train.load_checkpoint(resolve_prefix(path)).get_variable_to_shape_map()
    return "native" if "_CHECKPOINTABLE_OBJECT_GRAPH" in names else "original"


# ------------------------------------------------------------------------------ reading
def read_original(path: str, config: PretrainingConfig | None = None) -> SourceWeights:
    """A TF1 name-based checkpoint: model variables kept, slots and global_step set aside."""
    prefix = resolve_prefix(path)
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    weights: dict[str, np.ndarray] = {}
    skipped: list[str] = []
    unused: list[str] = []
    global_step = None
    for name in sorted(shapes):
        if name == "global_step":
            global_step = int(reader.get_tensor(name))
            skipped.append(name)
        elif name.endswith(_SLOT_SUFFIXES):
            skipped.append(name)
        elif hf.is_model_variable(name) or name.startswith("task_specific/"):
            weights[name] = reader.get_tensor(name)
        else:
            unused.append(name)
    if config is None:
        config = infer_config({n: shapes[n] for n in weights}, where=prefix)
    return SourceWeights(weights, "original", prefix, config, global_step, skipped, unused)


def read_hf(path: str, config: PretrainingConfig | None = None) -> SourceWeights:
    weights, configs, unused = hf.read(path)
    if config is None:
        disc = configs.get(hf.DISCRIMINATOR)
        gen = configs.get(hf.GENERATOR)
        if disc is None:
            raise CheckpointError(
                f"{path}: a generator folder without a discriminator folder needs --config "
                "(the discriminator's size is not recorded anywhere in it)"
            )
        untied = "generator/embeddings/word_embeddings" in weights
        config = config_from_models(disc, gen, untied, where=path)
    return SourceWeights(weights, "hf", path, config, None, [], unused)


def _native_root(prefix: str) -> tuple[str, int | None]:
    """The checkpoint's key holding the model (what `tf.train.Checkpoint(<key>=model)` used)
    and its step counter, if any."""
    reader = tf.train.load_checkpoint(prefix)
    roots = set()
    step = None
    for name in reader.get_variable_to_shape_map():
        head = name.split("/", 1)[0]
        if name in ("step/.ATTRIBUTES/VARIABLE_VALUE", "global_step/.ATTRIBUTES/VARIABLE_VALUE"):
            step = int(reader.get_tensor(name))
        elif head not in ("optimizer", "save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH", "step"):
            roots.add(head)
    if "model" in roots:  # training checkpoints also hold the optimizer and data iterator
        return "model", step
    if len(roots) != 1:
        raise CheckpointError(f"{prefix}: no `model` object in the checkpoint (found {roots})")
    return roots.pop(), step


def read_native(path: str, config: PretrainingConfig | None = None) -> SourceWeights:
    """Restores a native checkpoint into a fresh ElectraPretrainer and reads its variable map."""
    prefix = resolve_prefix(path)
    if config is None:
        config_path = os.path.join(os.path.dirname(prefix), CONFIG_FILE)
        if not os.path.exists(config_path):
            raise CheckpointError(
                f"{prefix}: a native checkpoint needs its config; none at {config_path}, "
                "pass --config (config=...)"
            )
        config = read_config_file(config_path)
    root, step = _native_root(prefix)
    model = build_pretrainer(config)
    try:
        status = tf.train.Checkpoint(**{root: model}).read(prefix)
        status.assert_existing_objects_matched()
        status.expect_partial()  # the optimizer, step and data iterator are not weights
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise CheckpointError(f"{prefix}: does not match the pretrainer of its config: {e}") from e
    weights = {name: var.numpy() for name, var in model.variable_map().items()}
    return SourceWeights(weights, "native", prefix, config, step)


def read_weights(
    path: str, fmt: str = "auto", config: PretrainingConfig | None = None
) -> SourceWeights:
    """Reads any format into weights keyed by original names (`fmt="auto"` detects it)."""
    if fmt == "auto":
        fmt = detect_format(path)
    readers = {"native": read_native, "original": read_original, "hf": read_hf}
    if fmt not in readers:
        raise CheckpointError(f"format {fmt!r} is not one of auto, {', '.join(FORMATS)}")
    return readers[fmt](path, config)


# ------------------------------------------------------------------------------ models
def build_pretrainer(config: PretrainingConfig):
    """An ElectraPretrainer with every variable created (so `variable_map()` is complete)."""
    from electra_tf.pretraining.pretrainer import ElectraPretrainer

    # The special token ids steer masking only, never a variable; 0 fits any vocabulary.
    return ElectraPretrainer(config, cls_id=0, sep_id=0, mask_id=0)


def model_weights(model) -> dict[str, np.ndarray]:
    """A model's weights by original name."""
    return {name: var.numpy() for name, var in model.variable_map().items()}


def summarize(names: list[str]) -> str:
    """`generator/* (68), discriminator_predictions/* (4)`: a long name list in one line."""
    counts: dict[str, int] = {}
    for name in names:
        scope = name.split("/", 1)[0]
        counts[scope] = counts.get(scope, 0) + 1
    return ", ".join(f"{scope}/* ({n})" for scope, n in sorted(counts.items()))


def check_fit(
    variables: Mapping[str, tf.Variable], source: SourceWeights, where: str = "model"
) -> list[str]:
    """Raises CheckpointError listing EVERY target variable the source lacks or has with
    another shape; returns the fine-tuning heads (`task_specific/...`) left to initialise."""
    weights = source.weights
    missing, wrong, fresh = [], [], []
    for name, var in sorted(variables.items()):
        if name not in weights:
            # Fine-tuning heads start fresh by design; anything else would be random silently.
            if name.startswith("task_specific/"):
                fresh.append(name)
            else:
                missing.append(f"{name} {list(var.shape)}")
        elif tuple(weights[name].shape) != tuple(var.shape):
            wrong.append(f"{name}: expected {list(var.shape)}, found {list(weights[name].shape)}")
    if missing or wrong:
        lines = [f"{source.path} ({source.fmt}) does not fit {where}:"]
        if missing:
            lines.append(f"  {len(missing)} missing (name [expected shape]):")
            lines += [f"    {m}" for m in missing]
        if wrong:
            lines.append(f"  {len(wrong)} with the wrong shape:")
            lines += [f"    {w}" for w in wrong]
        raise CheckpointError("\n".join(lines))
    return fresh


def assign(
    variables: Mapping[str, tf.Variable], source: SourceWeights, where: str = "model"
) -> LoadResult:
    """Assigns `source` to `variables` (by original name), after checking ALL names/shapes."""
    fresh = check_fit(variables, source, where)
    weights = source.weights
    for name, var in variables.items():
        if name in weights:
            var.assign(weights[name].astype(var.dtype.as_numpy_dtype))
    unused = sorted(set(weights) - set(variables)) + source.unused
    if unused:
        _LOG.warning(
            "%s: %d source variables unused by %s: %s",
            source.path, len(unused), where, summarize(unused),
        )  # fmt: skip
    loaded = sorted(n for n in variables if n in weights)
    return LoadResult(
        source.fmt, source.path, source.global_step, loaded, fresh, unused, source.skipped
    )


def load_into(
    model, path: str, fmt: str = "auto", config: PretrainingConfig | None = None
) -> LoadResult:
    """Loads weights from a native, original or hf checkpoint into `model`.

    `model` is anything with `variable_map()` (ElectraPretrainer, a fine-tuning model, a bare
    TransformerEncoder), built. Every target variable must be found with its exact shape,
    except fine-tuning heads (`task_specific/...`), which stay as initialised and are listed
    in `LoadResult.fresh`. Source variables the target has no place for (e.g. the generator
    when fine-tuning) are logged and listed in `LoadResult.unused`; optimizer slots and the
    step counter are ignored (`LoadResult.skipped`), and the source's step is
    `LoadResult.global_step`. `config` is needed only for native checkpoints without a
    `config.json` beside them.
    """
    source = read_weights(path, fmt, config)
    return assign(model.variable_map(), source, where=type(model).__name__)


# ------------------------------------------------------------------------------ writing
def _written_by_us(entry: str) -> bool:
    return (
        entry in ("checkpoint", CONFIG_FILE, hf.DISCRIMINATOR, hf.GENERATOR)
        or entry.endswith(".index")
        or ".data-" in entry
    )


@contextmanager
def _output_dir(path: str, overwrite: bool) -> Iterator[str]:
    """A temporary sibling directory that replaces `path` only once fully written.

    An existing `path` is replaced only with `overwrite`, and only if it holds nothing but
    what an export writes, so a mistyped --output cannot wipe unrelated files.
    """
    path = os.path.abspath(path)
    if os.path.exists(path):
        if not overwrite:
            raise CheckpointError(f"{path} exists; pass --overwrite to replace it")
        if not os.path.isdir(path):
            raise CheckpointError(f"{path} exists and is not a directory; not replacing it")
        foreign = sorted(e for e in os.listdir(path) if not _written_by_us(e))
        if foreign:
            raise CheckpointError(
                f"{path}: not replacing it, it holds files no export writes: {foreign}"
            )
    tmp = f"{path}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.exists(path):
        old = f"{path}.old-{os.getpid()}"
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old)
    else:
        os.replace(tmp, path)


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


def write_native_files(
    model, directory: str, config: PretrainingConfig | None, global_step: int | None
) -> str:
    """Writes `tf.train.Checkpoint(model=model, step=...)` as `ckpt-<step>` plus config.json."""
    name = f"{NATIVE_PREFIX}-{int(global_step or 0)}"
    objects = {"model": model}
    if global_step is not None:  # an unknown step stays unknown (HF weights carry none)
        objects["step"] = tf.Variable(int(global_step), dtype=tf.int64, trainable=False)
    tf.train.Checkpoint(**objects).write(os.path.join(directory, name))
    write_state_file(directory, name)
    if config is not None:
        save_config(config, os.path.join(directory, CONFIG_FILE))
    return os.path.join(directory, name)


def write_hf_files(
    weights: Mapping[str, np.ndarray], directory: str, config: PretrainingConfig
) -> None:
    """discriminator/ (when there is a discriminator) and generator/ (when there is a
    generator head) HF folders, configured from `config`."""
    configs = {}
    if any(n.startswith("electra/encoder/") for n in weights):
        configs[hf.DISCRIMINATOR] = config.discriminator_config()
    if "generator_predictions/output_bias" in weights:
        configs[hf.GENERATOR] = config.generator_config()
    dropped = hf.write(weights, directory, configs)
    if dropped:
        _LOG.warning("HF export has no place for %d variables: %s", len(dropped), dropped)


def export(
    model,
    path: str,
    fmt: str,
    config: PretrainingConfig | ModelConfig | None = None,
    global_step: int | None = None,
    overwrite: bool = False,
) -> None:
    """Writes `model`'s weights to `path` in `fmt` (a new directory, atomically).

    `config` defaults to `model.config`; HF needs it for config.json, native writes it beside
    the checkpoint. `global_step` goes into the original/native checkpoint.
    """
    config = config or getattr(model, "config", None)
    if isinstance(config, ModelConfig):  # a bare encoder or a fine-tuning model's encoder
        config = config_from_models(config, None, where=type(model).__name__)
    if fmt not in FORMATS:
        raise CheckpointError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt == "hf" and not isinstance(config, PretrainingConfig):
        raise CheckpointError("an HF export needs the model's PretrainingConfig (config=...)")
    with _output_dir(path, overwrite) as tmp:
        if fmt == "native":
            write_native_files(model, tmp, config, global_step)
        elif fmt == "original":
            write_original_files(model_weights(model), tmp, global_step)
        else:
            write_hf_files(model_weights(model), tmp, config)


def write_weights(source: SourceWeights, path: str, fmt: str, overwrite: bool = False) -> None:
    """Writes weights read by `read_weights` in another format (native builds a pretrainer
    from `source.config`, so every pre-training variable must be present)."""
    if fmt not in FORMATS:
        raise CheckpointError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    model = None
    if fmt == "native":
        model = build_pretrainer(source.config)
        assign(model.variable_map(), source, where="ElectraPretrainer")
    with _output_dir(path, overwrite) as tmp:
        if fmt == "native":
            write_native_files(model, tmp, source.config, source.global_step)
        elif fmt == "original":
            write_original_files(source.weights, tmp, source.global_step)
        else:
            write_hf_files(source.weights, tmp, source.config)
