"""Keras models behind the exported SavedModels, and the `ServingModule` built for each kind.

`ElectraDiscriminator` is the pre-trained discriminator on its own (encoder + replaced-token
head, no generator), the model behind the "discriminator" export and a fluency / error detector
in user code. `serving_module(...)` wires any supported model to its signatures;
`pretrained_specs` / `task_spec` load the project's checkpoints for the export CLI.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import tensorflow as tf
import tf_keras as keras

from electra_tf.config import ModelConfig, PretrainingConfig
from electra_tf.export import ExportError, ExportSpec, config_json, find_vocab
from electra_tf.modeling import DiscriminatorHead, TransformerEncoder
from electra_tf.serving import ServingModule
from electra_tf.serving_features import TextFeaturizer


class ElectraDiscriminator(keras.Model):
    """The ELECTRA discriminator: `TransformerEncoder` (scope `electra`) + `DiscriminatorHead`.

    Args:
        config: the discriminator's encoder config.

    Call: `model({"input_ids", "input_mask", "segment_ids"} int [B, L])` -> dict with the
    encoder's `sequence_output` [B, L, H] and `cls_output` [B, H], plus `logits` [B, L]
    (replaced-token logits; sigmoid gives the probability that a token was replaced).
    """

    def __init__(self, config: ModelConfig, **kwargs: Any):
        super().__init__(**kwargs)
        self.config = config
        self.encoder = TransformerEncoder(config, name="electra")
        self.head = DiscriminatorHead(config)

    def call(self, inputs, training=False):
        outputs = self.encoder(inputs, training=training)
        return {**outputs, "logits": self.head(outputs["sequence_output"])}

    def variable_map(self) -> dict[str, tf.Variable]:
        return {**self.encoder.variable_map("electra"), **self.head.variable_map()}


@functools.lru_cache(maxsize=4)
def _tokenizer(vocab_file: str, do_lower_case: bool, strip_accents: bool) -> Any:
    # Shared by the models of one export run: tracing the tokenizer is most of an export's time.
    from electra_tf.data.tokenization import GraphTokenizer

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
) -> ServingModule:
    """The `ServingModule` for `model`.

    Args:
        kind: "discriminator" (an `ElectraDiscriminator`), "encoder" (a `TransformerEncoder`)
            or "task" (a `FinetuningModel`; `task` the exported one of its `all_tasks`,
            default `[task]`).
        vocab_file: the model's vocabulary (tokenized in the graph with `GraphTokenizer`).
        max_seq_length: inputs are truncated to this many tokens.
    """
    from electra_tf.data.tokenization import load_vocab, vocab_tokens

    vocab = load_vocab(vocab_file)
    tokenizer = _tokenizer(vocab_file, do_lower_case, strip_accents)
    tokens = vocab_tokens(vocab)
    if kind == "discriminator":
        featurizer = TextFeaturizer(tokenizer, vocab, max_seq_length)
        return ServingModule(lambda f: model(f, training=False), model, featurizer, tokens, kind)
    if kind == "encoder":
        featurizer = TextFeaturizer(tokenizer, vocab, max_seq_length)
        return ServingModule(lambda f: model(f, training=False), model, featurizer, tokens, kind)
    if kind != "task":
        raise ValueError(f"kind {kind!r} is not discriminator, encoder or task")
    tasks = all_tasks or [task]
    return _task_module(model, task, tasks, tokenizer, vocab, tokens, max_seq_length)


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


def _task_module(model, task, tasks, tokenizer, vocab, tokens, max_seq_length) -> ServingModule:
    from electra_tf.finetuning.glue import ClassificationTask, RegressionTask
    from electra_tf.finetuning.qa import QATask
    from electra_tf.finetuning.tagging import TaggingTask

    name = task.name

    def head_outputs(features):
        _, outputs = model(_task_features(tasks, features), training=False)
        return outputs[name]

    if isinstance(task, ClassificationTask | RegressionTask):
        pair = task.columns[1] is not None
        featurizer = TextFeaturizer(tokenizer, vocab, max_seq_length)
        if isinstance(task, ClassificationTask):
            return ServingModule(
                head_outputs, model, featurizer, tokens, "classification", pair,
                label_names=task.label_strings(),
            )  # fmt: skip
        # Training targets are (label - min) / max (the original's normalisation): undo it.
        return ServingModule(
            head_outputs, model, featurizer, tokens, "regression", pair,
            score_scale=task.max_value, score_offset=task.min_value,
        )  # fmt: skip
    if isinstance(task, QATask):
        if not task.config.joint_prediction:
            raise ExportError(f"{name}: serving supports the joint-prediction QA head only")
        featurizer = TextFeaturizer(
            tokenizer, vocab, max_seq_length, "first_fixed", task.config.max_query_length
        )
        return ServingModule(
            head_outputs, model, featurizer, tokens, "qa", pair=True,
            max_answer_length=task.config.max_answer_length,
        )  # fmt: skip
    if isinstance(task, TaggingTask):
        mapping = task.label_mapping()
        if not mapping:
            raise ExportError(f"{name}: no label mapping (fine-tune the task first)")
        labels = [tag for tag, _ in sorted(mapping.items(), key=lambda kv: kv[1])]

        def tag_logits(features):
            # Every position is "labeled": the serving output tags every token.
            length = tf.shape(features["input_ids"])[1]
            positions = tf.tile(tf.range(length)[None], [tf.shape(features["input_ids"])[0], 1])
            full = _task_features(tasks, features)
            full[f"{name}_labeled_positions"] = positions  # [B, L]
            _, outputs = model(full, training=False)
            return outputs[name]

        featurizer = TextFeaturizer(tokenizer, vocab, max_seq_length, single_segment_id=1)
        return ServingModule(tag_logits, model, featurizer, tokens, "tagging", label_names=labels)
    raise ExportError(f"task {name}: no serving signature for {type(task).__name__}")


# ------------------------------------------------------------------------------ loading
def pretrained_specs(args: Any, model_dir: str, kinds: tuple[str, ...]) -> list[ExportSpec]:
    """Loads the latest pre-training checkpoint (any format `checkpoints` reads)."""
    from electra_tf import checkpoints

    path = args.checkpoint or model_dir
    # The resolved config saved beside the checkpoint (or in the model dir) records what the
    # weights cannot, e.g. the number of attention heads of an original-format checkpoint.
    config_file = next(
        (
            f
            for f in (
                os.path.join(path if os.path.isdir(path) else os.path.dirname(path), "config.json"),
                os.path.join(model_dir, "config.json"),
            )
            if os.path.isfile(f)
        ),
        None,
    )
    given = checkpoints.read_config_file(config_file) if config_file else None
    source = checkpoints.read_weights(path, config=given)
    config: PretrainingConfig = source.config
    model_config = config.discriminator_config()
    vocab_file = find_vocab(model_dir, config.resolved_vocab_file(), args.vocab_file)
    max_len = args.max_seq_length or config.max_seq_length
    check_length(max_len, model_config)
    specs = []
    for kind in kinds:
        if kind == "discriminator":
            model = ElectraDiscriminator(config.discriminator_config())
            model(dummy_inputs())
            variables = model.variable_map()
        else:
            model = TransformerEncoder(model_config, name="electra")
            variables = model.variable_map("electra")
        checkpoints.assign(variables, source, where=kind)
        module = serving_module(
            kind, model, vocab_file, max_len, config.do_lower_case, config.do_strip_accents
        )
        info = {
            "source": source.path,
            "global_step": source.global_step,
            "max_seq_length": max_len,
            "model_config": model_config.to_dict(),
        }
        specs.append(
            ExportSpec(
                kind, f"{args.model_name}_{kind}", module, config_json(config), vocab_file, info
            )
        )
    return specs


def task_spec(args: Any, model_dir: str) -> ExportSpec:
    """Loads fine-tuning trial `args.trial` of `args.task` (FinetuningModel checkpoint)."""
    from electra_tf.finetuning.config import FinetuningConfig
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.finetuning.registry import get_task
    from electra_tf.finetuning.task import shared_feature_specs

    run_dir = args.checkpoint or os.path.join(
        model_dir, "finetuning_models", f"{args.task}_model_{args.trial}"
    )
    config_path = os.path.join(run_dir, "finetuning_config.json")
    model_config_path = os.path.join(run_dir, "model_config.json")
    for path in (config_path, model_config_path):
        if not os.path.isfile(path):
            raise ExportError(f"{path} not found: fine-tune {args.task} first (make finetune)")
    with open(config_path, encoding="utf-8") as f:
        values = json.load(f)
    config = FinetuningConfig(**values)
    if args.task not in config.task_names:
        raise ExportError(f"{run_dir} was fine-tuned on {config.task_names}, not {args.task}")
    with open(model_config_path, encoding="utf-8") as f:
        model_config = ModelConfig.from_dict(json.load(f))
    vocab_file = find_vocab(model_dir, config.resolved_vocab_file(), args.vocab_file)
    from electra_tf.data.tokenization import FullTokenizer

    tokenizer = FullTokenizer(vocab_file, config.do_lower_case, config.do_strip_accents)
    tasks = [get_task(name, config, tokenizer) for name in config.task_names]
    task = tasks[config.task_names.index(args.task)]
    specs = shared_feature_specs(config)
    for t in tasks:
        specs += t.feature_specs()
    model = FinetuningModel(model_config, tasks, specs)
    latest = tf.train.latest_checkpoint(run_dir)
    if latest is None:
        raise ExportError(f"{run_dir}: no checkpoint")
    status = tf.train.Checkpoint(model=model).read(latest)
    status.assert_existing_objects_matched().expect_partial()
    max_len = args.max_seq_length or config.max_seq_length
    check_length(max_len, model_config)
    module = serving_module(
        "task", model, vocab_file, max_len, config.do_lower_case, config.do_strip_accents, task,
        tasks,
    )  # fmt: skip
    info = {
        "source": latest,
        "task": args.task,
        "max_seq_length": max_len,
        "model_config": model_config.to_dict(),
    }
    return ExportSpec(
        module.kind, f"{args.model_name}_{args.task}", module, config_json(config), vocab_file, info
    )


def check_length(max_seq_length: int, model_config: ModelConfig) -> None:
    if not 3 <= max_seq_length <= model_config.max_position_embeddings:
        raise ExportError(
            f"--max-seq-length {max_seq_length}: must be in [3, "
            f"{model_config.max_position_embeddings}] (the model's position embeddings)"
        )


def dummy_inputs(batch: int = 1, length: int = 2) -> dict[str, tf.Tensor]:
    ones = tf.ones([batch, length], tf.int32)
    return {"input_ids": ones, "input_mask": ones, "segment_ids": tf.zeros_like(ones)}


def save_for_serving(
    model: Any,
    output_dir: str,
    vocab_file: str,
    max_seq_length: int,
    name: str = "electra",
    version: int | None = None,
    overwrite: bool = False,
    config: Any = None,
    do_lower_case: bool = True,
    strip_accents: bool = True,
    task: Any = None,
) -> str:
    """Writes `model` as a TF Serving SavedModel, `<output_dir>/<name>/<version>/`; returns it.

    Args:
        model: an `ElectraDiscriminator`, a `TransformerEncoder`, or a one-task
            `FinetuningModel` (then `task` is its `Task`).
        vocab_file: the vocabulary the model was trained with (copied into the assets).
        max_seq_length: longer inputs are truncated to this many tokens.
        version: None -> one past the highest existing version.
        overwrite: replace an existing version.
        config: the config saved as `assets/config.json` (default: the model's ModelConfig).
    """
    from electra_tf.export import write_export

    if isinstance(model, ElectraDiscriminator):
        kind = "discriminator"
    elif isinstance(model, TransformerEncoder):
        kind = "encoder"
    elif task is not None:
        kind = "task"
    else:
        raise ValueError(
            f"{type(model).__name__}: expected ElectraDiscriminator, TransformerEncoder or a "
            "FinetuningModel with its task"
        )
    model_config = getattr(model, "config", None) or getattr(model, "model_config", None)
    check_length(max_seq_length, model_config)
    module = serving_module(
        kind, model, vocab_file, max_seq_length, do_lower_case, strip_accents, task
    )
    info = {"max_seq_length": max_seq_length, "model_config": model_config.to_dict()}
    if task is not None:
        info["task"] = task.name
    spec = ExportSpec(
        module.kind, name, module, config_json(config or model_config), vocab_file, info
    )
    return write_export(spec, output_dir, version, overwrite)
