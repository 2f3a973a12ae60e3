"""The `ServingModule` for each kind of model: which featurizer, which prediction function and
which post-processing a discriminator (ELECTRA's or Electric's), an encoder or a fine-tuned
task model is served with; and `save_for_serving`, the one-call export of a model held in
Python.
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from electra_tf.config import DEFAULT_QUERY_BLOCKS, ModelConfig
from electra_tf.modeling import ElectraDiscriminator, TransformerEncoder
from electra_tf.modeling.utils import InferenceOptions
from electra_tf.pretraining.electric_scoring import score_features
from electra_tf.serving.featurizer import TextFeaturizer
from electra_tf.serving.module import ServingHead, ServingModule
from electra_tf.serving.precision import (
    bfloat16_twin,
    check_precision,
    model_twin_builder,
    precision_twin,
)
from electra_tf.serving.saved_model import ExportError, ExportSpec, config_json, write_export

# The kind of a model that says itself how it serves (`ServingHead`).
SERVING_HEAD = "serving_head"


@functools.lru_cache(maxsize=4)
def _tokenizer(vocab_file: str, do_lower_case: bool, strip_accents: bool) -> Any:
    # Shared by the models of one export run: tracing the tokenizer is most of an export's time.
    from electra_tf.data.graph_tokenizer import GraphTokenizer

    return GraphTokenizer(vocab_file, do_lower_case=do_lower_case, strip_accents=strip_accents)


def serving_module(
    kind: str,
    model: Any,
    vocab_file: str,
    max_seq_length: int,
    do_lower_case: bool = True,
    strip_accents: bool = True,
    task: Any = None,
    all_tasks: list[Any] | None = None,
    jit_compile: bool = False,
    query_blocks: int = DEFAULT_QUERY_BLOCKS,
    constant_kernels: bool = False,
) -> ServingModule:
    """The `ServingModule` for `model`.

    Args:
        kind: "discriminator" (an `ElectraDiscriminator`), "electric" (the
            `ElectraDiscriminator` of an Electric model: energies, scored as log-likelihoods),
            "encoder" (a `TransformerEncoder`), "task" (a `FinetuningModel`; `task` the
            exported one of its `all_tasks`, default `[task]`), "serving_head" (`ServingHead`).
        vocab_file: the model's vocabulary (tokenized in the graph with `GraphTokenizer`).
        max_seq_length: inputs are truncated to this many tokens.
        jit_compile: compile the model's forward pass with XLA (`ServingModule`).
        query_blocks: groups of positions the encoder runs side by side (`ServingModule`).
        constant_kernels: the dense kernels as graph constants (`ServingModule`; the bfloat16
            export's form).
    """
    from electra_tf.data.tokenization import load_vocab, vocab_tokens

    vocab = load_vocab(vocab_file)
    tokenizer = _tokenizer(vocab_file, do_lower_case, strip_accents)
    tokens = vocab_tokens(vocab)
    module = functools.partial(
        ServingModule,
        jit_compile=jit_compile,
        query_blocks=query_blocks,
        constant_kernels=constant_kernels,
    )
    if kind in ("discriminator", "encoder"):
        featurizer = TextFeaturizer(tokenizer, vocab, max_seq_length)
        return module(functools.partial(_inference, model), model, featurizer, tokens, kind)
    if kind == "electric":
        special = {"cls_id": vocab["[CLS]"], "sep_id": vocab["[SEP]"], "mask_id": vocab["[MASK]"]}
        featurizer = TextFeaturizer(tokenizer, vocab, max_seq_length)

        def electric_scores(features, options):
            # `score_features` calls a model as `model(inputs, training=False)` and reads its
            # `logits`: this one is the discriminator with the serving options passed on.
            def discriminator(inputs, training=False):
                return model(inputs, training=training, inference_options=options)

            return score_features(discriminator, features, **special)

        return module(electric_scores, model, featurizer, tokens, kind)
    if kind == SERVING_HEAD:
        return _head_module(model, tokenizer, vocab, tokens, max_seq_length, module)
    if kind != "task":
        raise ValueError(f"kind {kind!r}: not discriminator/electric/encoder/task/{SERVING_HEAD}")
    tasks = all_tasks or [task]
    return _task_module(model, task, tasks, tokenizer, vocab, tokens, max_seq_length, module)


def _head_module(model, tokenizer, vocab, tokens, max_seq_length, module) -> ServingModule:
    """The `ServingModule` of a model that says how it serves (`model.serving_head()`)."""
    head: ServingHead = model.serving_head()
    featurizer = TextFeaturizer(
        tokenizer, vocab, max_seq_length, single_segment_id=head.single_segment_id
    )
    return module(
        head.predict, model, featurizer, tokens, head.kind, head.pair,
        label_names=head.label_names,
    )  # fmt: skip


def _inference(model: Any, features: dict[str, tf.Tensor], options: InferenceOptions):
    """`model` (an `ElectraDiscriminator` or a `TransformerEncoder`) at inference, its encoder
    traced with the signature's `options`."""
    return model(features, training=False, inference_options=options)


def _task_features(tasks: list[Any], features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """Adds `task_id` and zero labels for every task of the model: each head computes its loss
    even at inference."""
    batch, length = tf.shape(features["input_ids"])[0], tf.shape(features["input_ids"])[1]
    out = dict(features, task_id=tf.zeros([batch], tf.int32))
    for spec in [spec for task in tasks for spec in task.feature_specs()]:
        dtype = tf.int32 if spec.is_int else tf.float32
        shape = [batch] if not spec.shape else [batch, length]
        out[spec.name] = tf.zeros(shape, dtype)
    return out


def _task_module(
    model, task, tasks, tokenizer, vocab, tokens, max_seq_length, module=ServingModule
) -> ServingModule:
    """The `ServingModule` of `task` (one of the `FinetuningModel`'s `tasks`): served as its
    `kind`, with its `serving_options()` (task.py) split between the featurizer and the
    module. No task class is named here: a registered task serves as its kind does."""
    from electra_tf.finetuning.task import FEATURIZER_OPTIONS, MODULE_OPTIONS, NotServable
    from electra_tf.finetuning.task_table import TASK_KINDS

    name = task.name
    if task.kind not in TASK_KINDS:
        raise ExportError(f"task {name}: kind {task.kind!r} is not one of {TASK_KINDS}")
    try:
        served = dict(task.serving_options())
    except NotServable as e:
        raise ExportError(f"{name}: {e}") from None
    unknown = sorted(set(served) - set(FEATURIZER_OPTIONS) - set(MODULE_OPTIONS))
    if unknown:
        raise ExportError(
            f"task {name}: serving_options() {unknown} are none of "
            f"{FEATURIZER_OPTIONS + MODULE_OPTIONS}"
        )
    featurizing = {k: served.pop(k) for k in FEATURIZER_OPTIONS if k in served}
    featurizer = TextFeaturizer(tokenizer, vocab, max_seq_length, **featurizing)

    def head_outputs(features, options):
        full = _task_features(tasks, features)
        if task.kind == "tagging":  # every position "labeled": the export tags every token
            ids = features["input_ids"]
            positions = tf.tile(tf.range(tf.shape(ids)[1])[None], [tf.shape(ids)[0], 1])
            full[f"{name}_labeled_positions"] = positions  # [B, L]
        return _task_head_outputs(model, name, full, options)

    return module(head_outputs, model, featurizer, tokens, task.kind, **served)


def _task_head_outputs(
    model: Any, name: str, features: dict[str, tf.Tensor], options: InferenceOptions
) -> dict[str, tf.Tensor]:
    """Task `name`'s head outputs from a `FinetuningModel` at inference: its encoder traced with
    the signature's `options`, then that task's head.

    What `model(features, training=False)[1][name]` computes (the other tasks' heads do not
    feed this task's outputs), spelled out because `FinetuningModel.call` does not take the
    encoder's options.

    Args:
        model: a `FinetuningModel` (its `encoder`, `task_names` and `task_heads`).
        name: the exported task.
        features: the ids [B, L] and every task's label features (`_task_features`).
        options: the encoder's `InferenceOptions`.
    """
    encoder_outputs = model.encoder(features, training=False, inference_options=options)
    head = model.task_heads[model.task_names.index(name)]
    _, outputs = head(encoder_outputs, features, training=False)
    return outputs


def check_length(max_seq_length: int, model_config: ModelConfig) -> None:
    if not 3 <= max_seq_length <= model_config.max_position_embeddings:
        raise ExportError(
            f"--max-seq-length {max_seq_length}: must be in [3, "
            f"{model_config.max_position_embeddings}] (the model's position embeddings)"
        )


def _kind_of(model: Any, task: Any, electric: bool) -> str:
    """The export kind of `save_for_serving`'s `model` (with its `task`, if any)."""
    if callable(getattr(model, "serving_head", None)):
        return SERVING_HEAD
    if isinstance(model, ElectraDiscriminator):
        return "electric" if electric else "discriminator"
    if isinstance(model, TransformerEncoder):
        return "encoder"
    if task is not None:
        return "task"
    raise ValueError(
        f"{type(model).__name__}: expected ElectraDiscriminator, TransformerEncoder, a "
        "FinetuningModel with its task, or a model with serving_head() (ElectraClassifier, "
        "ElectraTagger, ElectraEncoder)"
    )


def _as_exported(model: Any, precision: str) -> Any:
    """The model the export computes with: `model`'s bfloat16 twin for a bfloat16 export; a
    float32 twin of a model built under a mixed policy (the user's global one), so that a
    float32 export computes in float32 as its export.json says; else `model` itself."""
    if precision == "bfloat16":
        return bfloat16_twin(model, model_twin_builder(model))
    if getattr(getattr(model, "dtype_policy", None), "compute_dtype", "float32") != "float32":
        return precision_twin(model, model_twin_builder(model, precision), "float32")
    return model


def _text_settings(model: Any, **given: Any) -> dict[str, Any]:
    """`vocab_file`, `max_seq_length`, `do_lower_case`, `strip_accents`: as given, else the
    model's own (`model.text_settings()`: a Keras model's preprocessor), else lower-cased with
    accents stripped; the vocabulary and the length have no default."""
    own = model.text_settings() if callable(getattr(model, "text_settings", None)) else {}
    settings = {"do_lower_case": True, "strip_accents": True, **own}
    settings.update({key: value for key, value in given.items() if value is not None})
    missing = [key for key in ("vocab_file", "max_seq_length") if settings.get(key) is None]
    if missing:
        raise ExportError(
            f"{type(model).__name__}: pass {' and '.join(missing)} (the model has no "
            "preprocessor that knows them)"
        )
    return settings


def _export_info(
    model: Any, kind: str, model_config: ModelConfig, settings: dict, precision: str, task: Any
) -> dict[str, Any]:
    """What export.json records beside the module's own: the length, the encoder config, the
    precision, the task's name, and the label names of a model that serves with them."""
    info = {
        "max_seq_length": settings["max_seq_length"],
        "model_config": model_config.to_dict(),
        "precision": precision,
    }
    if task is not None:
        info["task"] = task.name
    if kind == SERVING_HEAD and model.serving_head().label_names:
        info["labels"] = list(model.serving_head().label_names)
    return info


def save_for_serving(
    model: Any,
    output_dir: str,
    vocab_file: str | None = None,
    max_seq_length: int | None = None,
    name: str = "electra",
    version: int | None = None,
    overwrite: bool = False,
    config: Any = None,
    do_lower_case: bool | None = None,
    strip_accents: bool | None = None,
    task: Any = None,
    electric: bool | None = None,
    jit_compile: bool = False,
    query_blocks: int = DEFAULT_QUERY_BLOCKS,
    precision: str = "float32",
) -> str:
    """Writes `model` as a TF Serving SavedModel, `<output_dir>/<name>/<version>/`; returns it.

    Args:
        model: an `ElectraDiscriminator`, a `TransformerEncoder`, a one-task
            `FinetuningModel` (then `task` is its `Task`), or a model with `serving_head()`
            (`ElectraClassifier`, `ElectraTagger`, `ElectraEncoder`: the user's labels out).
        vocab_file, max_seq_length, do_lower_case, strip_accents: the vocabulary the model was
            trained with (copied into the assets), the length inputs are cut to, the casing;
            None: the model's preprocessor's (`_text_settings`).
        version: None -> one past the highest existing version.
        overwrite: replace an existing version.
        config: the config saved as `assets/config.json` (default: the model's ModelConfig).
        electric: whether an `ElectraDiscriminator` comes from an Electric model (its head
            outputs energies: the export scores text, kind "electric"); None reads
            `config.electric_objective` (False without a pre-training config).
        jit_compile: compile the model's forward pass with XLA (`ServingModule`).
        query_blocks: groups of positions the encoder runs side by side (`ServingModule`).
        precision: "float32", or "bfloat16": the export computes with a bfloat16 twin of
            `model` (`serving.precision`; a discriminator or an encoder); `model` is unchanged.
            (A model built under a mixed policy exports in float32 from a float32 twin.)
    """
    check_precision(precision)
    if electric is None:
        electric = bool(getattr(config, "electric_objective", False))
    kind = _kind_of(model, task, electric)
    text = _text_settings(
        model, vocab_file=vocab_file, max_seq_length=max_seq_length,
        do_lower_case=do_lower_case, strip_accents=strip_accents,
    )  # fmt: skip
    model_config = getattr(model, "config", None) or getattr(model, "model_config", None)
    check_length(text["max_seq_length"], model_config)
    info = _export_info(model, kind, model_config, text, precision, task)
    model = _as_exported(model, precision)
    module = serving_module(
        kind, model, text["vocab_file"], text["max_seq_length"], text["do_lower_case"],
        text["strip_accents"], task, jit_compile=jit_compile, query_blocks=query_blocks,
        constant_kernels=precision == "bfloat16",
    )  # fmt: skip
    spec = ExportSpec(
        module.kind, name, module, config_json(config or model_config), text["vocab_file"], info
    )
    return write_export(spec, output_dir, version, overwrite)
