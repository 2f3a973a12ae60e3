"""The project's own models as `ExportSpec`s: the pre-trained discriminator and encoder from a
pre-training checkpoint (any format `checkpoints` reads), or a fine-tuned task model from its
trial directory (`<model_dir>/finetuning_models/<task>_model_<trial>/`)."""

from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf

from electra_tf import checkpoints
from electra_tf.checkpoints.files import CONFIG_FILE
from electra_tf.config import DEFAULT_QUERY_BLOCKS, ModelConfig, PretrainingConfig
from electra_tf.modeling import ElectraDiscriminator, TransformerEncoder
from electra_tf.modeling.discriminator import dummy_inputs
from electra_tf.serving.kinds import check_length, serving_module
from electra_tf.serving.precision import bfloat16_twin, check_precision
from electra_tf.serving.saved_model import ExportError, ExportSpec, config_json


def find_vocab(model_dir: str, fallback: str, override: str | None) -> str:
    """`override` (--vocab-file), else the model dir's vocab.txt, else the config's vocabulary."""
    for path in (override, os.path.join(model_dir, "vocab.txt"), fallback):
        if path and os.path.isfile(path):
            return path
    raise ExportError(
        f"no vocabulary: looked for {override or '(no --vocab-file)'}, "
        f"{os.path.join(model_dir, 'vocab.txt')} and {fallback}; pass --vocab-file"
    )


def _saved_config_file(path: str, model_dir: str) -> str | None:
    """The config file beside the checkpoint `path` (a directory or prefix), else in
    `model_dir`; None if neither has one."""
    # The resolved config saved beside the checkpoint (or in the model dir) records what the
    # weights cannot, e.g. the number of attention heads of an original-format checkpoint.
    return next(
        (
            f
            for f in (
                os.path.join(path if os.path.isdir(path) else os.path.dirname(path), CONFIG_FILE),
                os.path.join(model_dir, CONFIG_FILE),
            )
            if os.path.isfile(f)
        ),
        None,
    )


def pretrained_specs(
    model_name: str,
    model_dir: str,
    kinds: tuple[str, ...],
    checkpoint: str | None = None,
    vocab_file: str | None = None,
    max_seq_length: int | None = None,
    jit_compile: bool = False,
    query_blocks: int = DEFAULT_QUERY_BLOCKS,
    source: checkpoints.SourceWeights | None = None,
    precision: str = "float32",
) -> list[ExportSpec]:
    """One spec per kind ("discriminator", "encoder") from the latest pre-training checkpoint
    in `model_dir`, or from `checkpoint` (a directory or prefix), or from `source`, its weights
    already read (`checkpoints.read_pretrained(path).weights()`, export's --pretrained).

    The discriminator of an Electric model (`electric_objective`) is exported as kind
    "electric": its head outputs energies, so it serves Electric's scores (`score_text`), not
    replaced-token probabilities. The directory keeps the name `<model_name>_discriminator`.

    `precision` "bfloat16": the models' bfloat16 twins (`serving.precision`).
    """
    check_precision(precision)
    path = checkpoint or model_dir
    config_file = _saved_config_file(path, model_dir)
    given = checkpoints.read_config_file(config_file) if config_file and not source else None
    source = source or checkpoints.read_weights(path, config=given)
    config: PretrainingConfig = source.config
    model_config = config.discriminator_config()
    vocab_file = find_vocab(model_dir, config.resolved_vocab_file(), vocab_file)
    max_len = config.max_seq_length if max_seq_length is None else max_seq_length
    check_length(max_len, model_config)
    specs = []
    for kind in kinds:
        build = _discriminator_builder(model_config) if kind == "discriminator" else None
        build = build or (lambda: TransformerEncoder(model_config, name="electra"))
        model = build()
        checkpoints.assign(model.variable_map(), source, where=kind)
        if precision == "bfloat16":
            model = bfloat16_twin(model, build)
        serving_kind = "electric" if kind == "discriminator" and config.electric_objective else kind
        casing = {"do_lower_case": config.do_lower_case, "strip_accents": config.do_strip_accents}
        module = serving_module(
            serving_kind, model, vocab_file, max_len, **casing, jit_compile=jit_compile,
            query_blocks=query_blocks, constant_kernels=precision == "bfloat16",
        )  # fmt: skip
        info = {
            "source": source.path,
            "precision": precision,
            "global_step": source.global_step,
            "max_seq_length": max_len,
            "model_config": model_config.to_dict(),
        }
        name = f"{model_name}_{kind}"
        specs.append(ExportSpec(serving_kind, name, module, config_json(config), vocab_file, info))
    return specs


def _discriminator_builder(model_config: ModelConfig):
    def build() -> ElectraDiscriminator:
        model = ElectraDiscriminator(model_config)
        model(dummy_inputs())  # creates the variables
        return model

    return build


def _trial_configs(run_dir: str, task_name: str) -> tuple[Any, ModelConfig]:
    """A fine-tuning trial's FinetuningConfig and encoder ModelConfig, saved in its folder."""
    from electra_tf.finetuning.config import (
        FINETUNING_CONFIG_FILE,
        MODEL_CONFIG_FILE,
        load_finetuning_config,
    )

    config_path = os.path.join(run_dir, FINETUNING_CONFIG_FILE)
    model_config_path = os.path.join(run_dir, MODEL_CONFIG_FILE)
    for path in (config_path, model_config_path):
        if not os.path.isfile(path):
            raise ExportError(f"{path} not found: fine-tune {task_name} first (make finetune)")
    config = load_finetuning_config(config_path)
    if task_name not in config.task_names:
        raise ExportError(f"{run_dir} was fine-tuned on {config.task_names}, not {task_name}")
    with open(model_config_path, encoding="utf-8") as f:
        return config, ModelConfig.from_dict(json.load(f))


def _trial_checkpoint(run_dir: str, config: Any, best: bool) -> str:
    """The checkpoint a trial is exported from: its best evaluation's where it kept one
    (`metric_for_best`: its results were computed with those weights) and `best`, else its
    last (naming the trial folder, `--checkpoint`, exports its last)."""
    from electra_tf.finetuning.config import BEST_CHECKPOINT_DIR

    latest = tf.train.latest_checkpoint(run_dir)
    if latest is None:
        raise ExportError(f"{run_dir}: no checkpoint")
    kept = tf.train.latest_checkpoint(os.path.join(run_dir, BEST_CHECKPOINT_DIR))
    if best and config.metric_for_best is not None and kept is not None:
        return kept
    return latest


def task_spec(
    model_name: str,
    model_dir: str,
    task_name: str,
    trial: int = 1,
    checkpoint: str | None = None,
    vocab_file: str | None = None,
    max_seq_length: int | None = None,
    jit_compile: bool = False,
    query_blocks: int = DEFAULT_QUERY_BLOCKS,
    precision: str = "float32",
) -> ExportSpec:
    """The spec of fine-tuning trial `trial` of `task_name` (its FinetuningModel checkpoint), or
    of the trial directory `checkpoint`; `precision` "bfloat16": its bfloat16 twin."""
    check_precision(precision)
    from electra_tf.data.tokenization import FullTokenizer
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.finetuning.registry import get_task
    from electra_tf.finetuning.task import shared_feature_specs, use_trained_state

    run_dir = checkpoint or os.path.join(
        model_dir, "finetuning_models", f"{task_name}_model_{trial}"
    )
    config, model_config = _trial_configs(run_dir, task_name)
    vocab_file = find_vocab(model_dir, config.resolved_vocab_file(), vocab_file)
    tokenizer = FullTokenizer(vocab_file, config.do_lower_case, config.do_strip_accents)
    tasks = [get_task(name, config, tokenizer) for name in config.task_names]
    use_trained_state(tasks, run_dir)  # e.g. chunk's label mapping: no data needed
    task = tasks[config.task_names.index(task_name)]
    specs = shared_feature_specs(config)
    for t in tasks:
        specs += t.feature_specs()

    def build() -> FinetuningModel:
        return FinetuningModel(model_config, tasks, specs)

    model = build()
    latest = _trial_checkpoint(run_dir, config, best=checkpoint is None)
    status = tf.train.Checkpoint(model=model).read(latest)
    status.assert_existing_objects_matched().expect_partial()
    if precision == "bfloat16":
        model = bfloat16_twin(model, build)
    max_len = config.max_seq_length if max_seq_length is None else max_seq_length
    check_length(max_len, model_config)
    module = serving_module(
        "task", model, vocab_file, max_len, config.do_lower_case, config.do_strip_accents, task,
        tasks, jit_compile, query_blocks, constant_kernels=precision == "bfloat16",
    )  # fmt: skip
    info = {
        "source": latest,
        "precision": precision,
        "task": task_name,
        "max_seq_length": max_len,
        "model_config": model_config.to_dict(),
    }
    return ExportSpec(
        module.kind, f"{model_name}_{task_name}", module, config_json(config), vocab_file, info
    )
