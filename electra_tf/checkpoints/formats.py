"""Weights in and out of the checkpoint formats: native, original (TF1), Hugging Face, Model
Garden and KerasHub.

Every format is read into, or written from, one neutral form (`weights.SourceWeights`): a dict
of NumPy arrays keyed by the ORIGINAL TF1 variable names (docs/faithfulness.md, section 9),
which are also the keys of every model's `variable_map()`. So there is one name map per foreign
format (`hf`, `modelgarden`, `kerashub`) and none for our own models.

- native (`native`): this project's object-based `tf.train.Checkpoint(model=ElectraPretrainer)`,
  a prefix or a directory (latest checkpoint), with the resolved `config.json` beside it.
- original (`original`): a TF1 name-based checkpoint as google-research/electra writes and
  releases it.
- hf (`hf`): `discriminator/` and/or `generator/` folders of config.json + model.safetensors,
  or one such folder on its own.
- modelgarden (`modelgarden`): tf-models-official's object-based checkpoints,
  `Checkpoint(encoder=BertEncoder, model=ElectraPretrainer)`, with `generator/` beside.
- kerashub (`kerashub`): a KerasHub ElectraBackbone + ElectraTokenizer preset directory (Keras 3;
  keras-hub is imported only to read or write one).

`load_weights(model, path)` loads a checkpoint into a built model; `pretrained.read_pretrained`
reads one once for a fine-tuning run or an export. `save_weights(...)` and
`python -m electra_tf.convert` (`write_weights`) write the other direction.
"""

from __future__ import annotations

import os
import shutil

from electra_tf.checkpoints import format_registry, names
from electra_tf.checkpoints.config_inference import config_from_models
from electra_tf.checkpoints.files import (
    CheckpointError,
    open_checkpoint,
    resolve_prefix,
)
from electra_tf.checkpoints.format_registry import WeightFormat
from electra_tf.checkpoints.native import (
    build_model,
    build_pretrainer,
    damaged_or,
    weights_kind,
    write_native_files,
)
from electra_tf.checkpoints.output import VOCAB_FILE, check_apart, output_dir
from electra_tf.checkpoints.weights import (
    LoadResult,
    SourceWeights,
    assign,
    check_fit,
    model_weights,
)
from electra_tf.config import ModelConfig, PretrainingConfig

# The registered formats (electra_tf/checkpoints/format_registry.py), as they were when this was imported.
FORMATS = format_registry.names()


def _checkpoint_keys(path: str):
    """`keys()` for `WeightFormat.detect`: the checkpoint keys of `path`, read on first call."""
    read: list = []

    def keys():
        if not read:
            prefix = resolve_prefix(path)
            try:
                read.append(open_checkpoint(prefix).get_variable_to_shape_map())
            except CheckpointError as e:  # a damaged index: name the older checkpoint that reads
                raise damaged_or(prefix, e) from None
        return read[0]

    return keys


def detect_format(path: str) -> str:
    """The first registered format (by `detect_order`) that claims `path`: a KerasHub preset
    folder, a folder with HF config.json files, else 'modelgarden', 'original' or 'native' by
    the checkpoint's keys. A folder that is only partly one of these (a preset without its
    weights file, a Model Garden encoder_config.json without a checkpoint) is a
    CheckpointError naming the format it found."""
    keys = _checkpoint_keys(path)
    for weight_format in format_registry.in_detect_order():
        if weight_format.detect(path, keys):
            return weight_format.name
    raise CheckpointError(f"{path}: no registered format reads it")


def plugin(fmt: str, auto: bool = True) -> WeightFormat:
    """The registered format `fmt`; a CheckpointError naming the choices otherwise."""
    if fmt not in format_registry.names():
        choices = ("auto, " if auto else "") + ", ".join(format_registry.names())
        raise CheckpointError(f"format {fmt!r} is not one of {choices}")
    return format_registry.get(fmt)


def _check_format(fmt: str, auto: bool = True) -> None:
    plugin(fmt, auto)


def read_weights(
    path: str, fmt: str = "auto", config: PretrainingConfig | None = None
) -> SourceWeights:
    """Reads any format into weights keyed by original names (`fmt="auto"` detects it)."""
    if fmt == "auto":
        fmt = detect_format(path)
    return plugin(fmt).read(path, config)


def read_config(path: str, fmt: str = "auto") -> PretrainingConfig:
    """A checkpoint's PretrainingConfig without reading its tensors: the config.json beside a
    native checkpoint, the HF config.json files, or an original checkpoint's variable shapes."""
    if fmt == "auto":
        fmt = detect_format(path)
    return plugin(fmt).read_config(path)


def load_weights(
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


def save_weights(
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
    if plugin(fmt, auto=False).needs_config and not isinstance(config, PretrainingConfig):
        raise CheckpointError(f"a {fmt} export needs the model's PretrainingConfig (config=...)")
    with output_dir(path, fmt, overwrite) as tmp:
        if fmt == "native":
            write_native_files(model, tmp, config, global_step)
        else:
            _write_foreign(model_weights(model), tmp, fmt, config, global_step, None)


def _generator_names(name: str) -> bool:
    """The generator's own variables (an MLM or a two-tower one), and the embeddings it reads
    (shared or its own)."""
    return name.startswith((*names.GENERATOR_SCOPES, f"{names.DISCRIMINATOR}/{names.EMBEDDINGS}/"))


def check_complete(source: SourceWeights) -> tuple[str, object | None]:
    """The model `source` holds (a native kind, or "generator" for a generator on its own),
    after checking that every variable of that model is there with its shape: a conversion
    that would write a partial (or empty) checkpoint fails instead. Returns the kind and, for
    a native kind, the model built to check it."""
    kind = weights_kind(source.weights, source.config)
    has_encoder = any(names.is_encoder_variable(n) for n in source.weights)
    if kind == "pretrainer" and not has_encoder and not source.config.uniform_generator:
        model = build_pretrainer(source.config)
        expected = {n: v for n, v in model.variable_map().items() if _generator_names(n)}
        check_fit(expected, source, "the generator")
        return "generator", None
    model = build_model(source.config, kind)
    variables = model.variable_map()
    check_fit(variables, source, f"a {kind} of its config")
    check_accounted(variables, source, kind)
    return kind, model


def check_accounted(variables: dict, source: SourceWeights, kind: str) -> None:
    """Raises CheckpointError when the source holds weights its config has no place for
    (4 layers of weights under a config.json that says 2): a conversion would silently
    write a smaller model."""
    extra = sorted(set(source.weights) - set(variables))
    if not extra:
        return
    shown = ", ".join(extra[:4]) + (" ..." if len(extra) > 4 else "")
    raise CheckpointError(
        f"{source.path} ({source.fmt}) holds {len(extra)} weights that a {kind} of its config "
        f"has no place for ({shown}); its config does not describe these weights (a layer "
        "count or size that is off?): correct the config, or pass --config with the right one"
    )


def _write_foreign(
    weights, directory: str, fmt: str, config, global_step: int | None, vocab: str | None
) -> None:
    """Writes `weights` in a format other than native into the existing `directory`; the
    vocabulary goes into the format's tokenizer (KerasHub's), or beside the weights as vocab.txt."""
    weight_format = plugin(fmt, auto=False)
    weight_format.write(weights, directory, config, global_step, vocab)
    if vocab is not None and not weight_format.vocab_in_tokenizer:
        shutil.copyfile(vocab, os.path.join(directory, VOCAB_FILE))


def write_weights(
    source: SourceWeights,
    path: str,
    fmt: str,
    overwrite: bool = False,
    vocab_file: str | None = None,
) -> None:
    """Writes weights read by `read_weights` in another format. What the source holds must be
    complete: a pre-training checkpoint, a discriminator (encoder + head) or an encoder, each
    as a native checkpoint of that kind; or (original/hf only) a generator on its own.
    `vocab_file`: the tokenizer's vocabulary, written with the weights (see `_write_foreign`)."""
    _check_format(fmt, auto=False)
    check_apart(source.path, path)
    kind, model = check_complete(source)
    if fmt == "native":
        if model is None:
            raise CheckpointError(
                f"{source.path}: a generator without its discriminator has no native form; "
                "convert it to original or hf, or add the discriminator"
            )
        assign(model.variable_map(), source, where=kind)
    with output_dir(path, fmt, overwrite) as tmp:
        if fmt == "native":
            write_native_files(model, tmp, source.config, source.global_step)
            if vocab_file is not None:
                shutil.copyfile(vocab_file, os.path.join(tmp, VOCAB_FILE))
        else:
            _write_foreign(source.weights, tmp, fmt, source.config, source.global_step, vocab_file)
