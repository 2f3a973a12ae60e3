"""Fine-tuning hyperparameters: the original's `configure_finetuning.py`, typed.

Loading order: dataclass defaults -> the original's per-task / per-size rules -> user overrides
(`--hparams`, so explicit values always win, as in the original's second `update`) -> paths.
The per-task rules look only at `task_names` and the per-size rules only at `model_size`, both
taken after the overrides, exactly as the original reads them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Mapping
from typing import Any

from electra_tf.config import (
    INIT_CHECKPOINT_FORMATS,
    MODEL_SIZES,
    ConfigError,
    ModelConfig,
    check_model_overrides,
    check_precision,
    check_ranges,
    check_types,
    parse_hparams,
    replace_checked,
)
from electra_tf.config.checks import check_layout, thread_changes
from electra_tf.finetuning import task_table
from electra_tf.finetuning.encoder_sizes import DEBUG_MODEL, size_of_encoder, sized_encoder
from electra_tf.runtime import device_defaults  # pure "auto" answers; no TensorFlow import
from electra_tf.runtime.atomic_io import file_sha1, write_json  # file_sha1: also importable here

# Beside every fine-tuned model (one trial's model dir): its config and its encoder's config.
FINETUNING_CONFIG_FILE = "finetuning_config.json"
MODEL_CONFIG_FILE = "model_config.json"
# <trial>/best: the weights of a trial's best evaluation (`metric_for_best`), which its results
# and its export use.
BEST_CHECKPOINT_DIR = "best"

is_qa_task = task_table.is_qa_task  # where it was; every task name is the table's


@dataclasses.dataclass(frozen=True)
class FinetuningConfig:
    """Field names and defaults are the original's; fields under "ours" are additions.

    `init_checkpoint`: "auto" -> `<data_dir>/models/<model_name>` (None in debug, as the
    original); None -> random initialisation; any other string -> that directory or checkpoint.
    """

    model_name: str = "electra"
    data_dir: str = "data"

    # General.
    debug: bool = False  # the original's quick mode: 3x144 encoder, no init checkpoint
    log_examples: bool = False  # print the first featurized example of each split
    num_trials: int = 1  # train+eval runs, each in a fresh model dir
    do_train: bool = True
    do_eval: bool = True
    keep_all_models: bool = True  # False: delete every trial's model dir but the last

    # Model.
    model_size: str = "small"  # small | base | large
    task_names: tuple[str, ...] = ("chunk",)
    model_hparam_overrides: dict = dataclasses.field(default_factory=dict)
    embedding_size: int | None = None  # None -> hidden size; the "small" rule sets 128
    vocab_size: int = 30522
    do_lower_case: bool = True

    # Training.
    learning_rate: float = 1e-4  # "large" rule: 5e-5
    weight_decay_rate: float = 0.01
    layerwise_lr_decay: float = 0.8  # lr * decay^(L + 2 - depth); "large" rule: 0.9
    num_train_epochs: float = 3.0  # rte/sts 10, squad/qa 2 (one task only)
    warmup_proportion: float = 0.1
    save_checkpoints_steps: int = 1000000
    iterations_per_loop: int = 1000
    use_tfrecords_if_existing: bool = True

    # Outputs.
    write_test_outputs: bool = False  # GLUE tsv + SQuAD 2.0 json test predictions
    n_writes_test: int = 5  # for the first n trials

    # Sizing.
    max_seq_length: int = 128  # squad/qa 512, chunk 256 (one task only)
    train_batch_size: int = 32
    eval_batch_size: int = 32
    predict_batch_size: int = 32
    double_unordered: bool = True  # MRPC / STS train sets also with the two sentences swapped

    # QA.
    max_query_length: int = 64
    doc_stride: int = 128
    n_best_size: int = 20
    max_answer_length: int = 30
    answerable_classifier: bool = True
    answerable_uses_start_logits: bool = True
    answerable_weight: float = 0.5
    joint_prediction: bool = True
    beam_size: int = 20
    qa_na_threshold: float = -2.75

    # --- ours ---
    do_strip_accents: bool = True
    # The original gives the top transformer layer lr * decay^2 (issue #51); True gives it
    # lr * decay, one step below the head.
    fix_layerwise_top_layer: bool = False
    # Adam's bias correction of its moments; the original's AdamW has none, which makes the
    # first few hundred updates 2-6x the learning rate (see optimization.AdamWeightDecay).
    adam_bias_correction: bool = False
    # What sentence-classification heads read: "cls" (the original: the final [CLS] vector) or
    # "mean" (the mean of the final hidden states over real tokens).
    classifier_pooling: str = "cls"
    # Tasks described by data files, by name: each a description as `--task-file` reads it
    # (electra_tf/finetuning/task_spec.py: kind, files, columns, label set). Saved with every
    # fine-tuned model, so its export knows the labels without the data.
    user_tasks: dict = dataclasses.field(default_factory=dict)
    init_checkpoint: str | None = "auto"
    init_checkpoint_format: str = "auto"  # auto | native | original | hf | modelgarden | kerashub
    vocab_file: str | None = None  # None -> models/<model>/vocab.txt, else <data_dir>/vocab.txt
    # Accept a vocabulary with fewer ids than the init checkpoint's embedding rows: a table padded
    # on purpose (what `convert --vocab-padding` writes); any other mismatch stays an error.
    vocab_padding: bool = False
    max_train_examples: int | None = None  # use only the first N train examples (quick runs)
    seed: int = 0  # trial t uses seed + t - 1
    log_every_steps: int = 0  # console/TensorBoard period; 0 -> min(iterations_per_loop, 100)
    overwrite: bool = False  # allow replacing existing fine-tuned model dirs
    # Resuming and evaluating during training (docs/reliability.md, "Fine-tuning"). A trial
    # saves a training checkpoint every `save_checkpoints_steps`, at each epoch's end and when
    # stopped by a signal; the same command resumes it. Checkpoints kept per trial (0: all).
    keep_checkpoint_max: int = 1
    # Dev metrics during training every this many steps (0: none; the original evaluates at
    # the end only), and/or at each epoch's end.
    eval_every_steps: int = 0
    eval_each_epoch: bool = False
    # None (the original's): results and export use the final weights. A metric name
    # ("accuracy", "f1", "mcc", "pearson", "exact_match", ...; "auto": each task's first
    # metric): the best of the evaluations is kept in <trial>/best and used instead.
    metric_for_best: str | None = None
    # Stop a trial after this many evaluations without a better metric_for_best (0: never).
    early_stopping_patience: int = 0
    # The dtype policy of the encoder and heads, as pre-training's `precision`: float32 (the
    # original's), mixed_bfloat16, mixed_float16 (with dynamic loss scaling) or "auto",
    # resolved by resolve(machine) (electra_tf/runtime/device_defaults.py: on a CPU mixed_bfloat16
    # where it has bfloat16 units, else float32). Variables, logits and losses stay float32.
    precision: str = "float32"
    # The CPU layout, as pre-training's: the batch as this many micro-batches whose forward and
    # backward passes are independent ops of one step (the summed gradient is the batch's, the
    # loss being a sum over examples; dropout draws per part), and the thread pools. "auto"
    # (device_defaults): 2 parts with one intra-op and two inter-op threads on a CPU-only
    # machine of 2 cores, where they run side by side; else 1 and TensorFlow's defaults.
    parallel_micro_batches: int | str = "auto"
    intra_op_threads: int | str = "auto"
    inter_op_threads: int | str = "auto"

    def __hash__(self) -> int:
        # The dict fields (`model_hparam_overrides`, `user_tasks`) keep the dataclass' own hash
        # from working: hash the sorted JSON of every field instead (equal configs, equal hash).
        return hash(json.dumps(self.to_dict(), sort_keys=True, default=str))

    def __post_init__(self) -> None:
        """`task_names` as a tuple, from a list or a comma-separated string."""
        # JSON gives lists; a tuple keeps the frozen config hashable.
        if isinstance(self.task_names, str):
            object.__setattr__(self, "task_names", tuple(self.task_names.split(",")))
        elif not isinstance(self.task_names, tuple):
            object.__setattr__(self, "task_names", tuple(self.task_names))

    # ------------------------------------------------------------------ validation
    def validate(self) -> FinetuningConfig:
        """Itself, once every field is known and in range; ConfigError naming the field."""
        if not self.task_names:
            raise ConfigError("task_names: at least one task is required")
        task_table.check_task_names(self.task_names, self.user_tasks)
        if self.model_size not in MODEL_SIZES:
            raise ConfigError(
                f"model_size: {self.model_size!r} is not one of {sorted(MODEL_SIZES)}"
            )
        if self.init_checkpoint_format not in INIT_CHECKPOINT_FORMATS:
            raise ConfigError(
                f"init_checkpoint_format: {self.init_checkpoint_format!r} is not one of "
                + "/".join(INIT_CHECKPOINT_FORMATS)
            )
        check_types(self)
        check_ranges(
            self,
            positive=("learning_rate", "num_train_epochs", "layerwise_lr_decay"),
            at_least_one=(
                "train_batch_size",
                "eval_batch_size",
                "predict_batch_size",
                "num_trials",
                "save_checkpoints_steps",
                "iterations_per_loop",
                "max_query_length",
                "doc_stride",
                "n_best_size",
                "max_answer_length",
                "max_train_examples",
            ),
            non_negative=("weight_decay_rate", "answerable_weight", "log_every_steps")
            + ("keep_checkpoint_max", "eval_every_steps", "early_stopping_patience"),
            probabilities=("warmup_proportion",),
        )
        check_model_overrides(self.model_hparam_overrides, "model_hparam_overrides")
        if self.max_seq_length < 8:
            raise ConfigError(f"max_seq_length: {self.max_seq_length} is too small")
        check_precision(self.precision)
        check_layout(self)
        check_best_model(self)
        if self.classifier_pooling not in ("cls", "mean"):
            raise ConfigError(
                f"classifier_pooling: {self.classifier_pooling!r} is not one of ['cls', 'mean']"
            )
        return self

    # ------------------------------------------------------------------ derived values
    def resolve(self, machine: device_defaults.Machine | None = None) -> FinetuningConfig:
        """Itself with every "auto" (`precision`, `parallel_micro_batches`, the thread counts)
        chosen for `machine` (`device_defaults.probe_machine()`, which a run calls once), as
        `PretrainingConfig.resolve` chooses them; without a machine, for
        `device_defaults.PORTABLE` (float32, one part, TensorFlow's threads). Pure and
        idempotent."""
        machine = device_defaults.PORTABLE if machine is None else machine
        changes: dict[str, Any] = {}
        if self.precision == "auto":
            changes["precision"] = device_defaults.auto_precision(machine)
        parts = self.parallel_micro_batches
        if parts == "auto":
            parts = device_defaults.auto_parallel_micro_batches(machine, self.train_batch_size, 1)
            changes["parallel_micro_batches"] = parts
        changes.update(thread_changes(self, machine, parts))
        return dataclasses.replace(self, **changes) if changes else self

    def model_config(self) -> ModelConfig:
        """The encoder config, as the original's `get_bert_config` (+ its debug sizes)."""
        overrides = dict(self.model_hparam_overrides)
        if self.debug:
            overrides = {**DEBUG_MODEL, **overrides}
        return sized_encoder(
            self.model_size, overrides, self.embedding_size, self.vocab_size, self.max_seq_length
        )

    @property
    def tasks_str(self) -> str:
        """`rte,sst`: the task names as they appear in file and directory names."""
        return ",".join(self.task_names)

    def resolved_model_dir(self) -> str:
        """`<data_dir>/models/<model_name>`: the model's folder, where pre-training wrote it
        (`PretrainingConfig.resolved_model_dir()`) and where fine-tuning writes its trials,
        results and test predictions. Not the `--pretrained` folder, which is only read."""
        return os.path.join(self.data_dir, "models", self.model_name)

    def pretrained_model_dir(self) -> str:
        """Deprecated (it is `<data_dir>/models/<model_name>`, not the `--pretrained`
        folder): `resolved_model_dir()`."""
        warnings.warn(
            "FinetuningConfig.pretrained_model_dir() is deprecated: use resolved_model_dir() "
            "(<data_dir>/models/<model_name>, not the --pretrained folder)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.resolved_model_dir()

    def raw_data_dir(self, task: str) -> str:
        """`<data_dir>/finetuning_data/<task>`: the task's downloaded .tsv / .json files."""
        return os.path.join(self.data_dir, "finetuning_data", task)

    def resolved_vocab_file(self) -> str:
        """`vocab_file`, else the model folder's vocab.txt, else `<data_dir>/vocab.txt`."""
        if self.vocab_file:
            return self.vocab_file
        in_model = os.path.join(self.resolved_model_dir(), "vocab.txt")
        return in_model if os.path.exists(in_model) else os.path.join(self.data_dir, "vocab.txt")

    def resolved_init_checkpoint(self) -> str | None:
        """The checkpoint the encoder starts from (see `init_checkpoint`); None: random."""
        if self.init_checkpoint == "auto":
            return None if self.debug else self.resolved_model_dir()
        return self.init_checkpoint or None

    def model_dir(self, trial: int) -> str:
        """One trial's fine-tuned model:
        `<resolved_model_dir>/finetuning_models/<tasks>_model_<trial>`."""
        return os.path.join(
            self.resolved_model_dir(), "finetuning_models", f"{self.tasks_str}_model_{trial}"
        )

    def results_dir(self) -> str:
        """`<resolved_model_dir>/results`: every run's results files."""
        return os.path.join(self.resolved_model_dir(), "results")

    def results_path(self, ext: str) -> str:
        """`<results_dir>/<tasks>_results.<ext>` (txt or json)."""
        return os.path.join(self.results_dir(), f"{self.tasks_str}_results.{ext}")

    def qa_dir(self) -> str:
        """`<results_dir>/<tasks>_qa`: the QA scorers' predictions and null odds."""
        return os.path.join(self.results_dir(), f"{self.tasks_str}_qa")

    def tfrecords_dir(self) -> str:
        """The featurized examples' cache (`-debug` in debug mode)."""
        suffix = "-debug" if self.debug else ""
        return os.path.join(
            self.resolved_model_dir(),
            "finetuning_tfrecords",
            f"{self.tasks_str}_tfrecords{suffix}",
        )

    def test_predictions_dir(self) -> str:
        """`<resolved_model_dir>/test_predictions`: `write_test_outputs`' files."""
        return os.path.join(self.resolved_model_dir(), "test_predictions")

    def featurization_key(self) -> dict[str, Any]:
        """The settings all tasks' records share; the TFRecord cache is keyed on them and on
        each task's `Task.featurization_key()` (the original keyed it on task names alone: a
        changed `max_seq_length` reused stale records)."""
        return {
            "max_seq_length": self.max_seq_length,
            "vocab_sha1": file_sha1(self.resolved_vocab_file()),
            "do_lower_case": self.do_lower_case,
            "do_strip_accents": self.do_strip_accents,
            "debug": self.debug,
            "max_train_examples": self.max_train_examples,
        }

    def to_dict(self) -> dict[str, Any]:
        """Every field by name (what `save_finetuning_config` writes)."""
        return dataclasses.asdict(self)


def check_best_model(config: FinetuningConfig) -> None:
    """Early stopping and the best checkpoint need evaluations during training to choose."""
    evaluates = config.eval_every_steps > 0 or config.eval_each_epoch
    if config.metric_for_best is not None and not evaluates:
        raise ConfigError(
            f"metric_for_best: {config.metric_for_best!r} needs evaluations during training; "
            "set eval_every_steps or eval_each_epoch"
        )
    if config.early_stopping_patience and config.metric_for_best is None:
        raise ConfigError(
            "early_stopping_patience: needs metric_for_best (the metric that must improve), "
            'e.g. "auto"'
        )


def _task_and_size_rules(task_names: tuple[str, ...], model_size: str, debug: bool) -> dict:
    """The original's defaults that depend on the tasks, the model size and debug mode."""
    rules: dict[str, Any] = {}
    if len(task_names) == 1:  # the task table's rules of a task run alone
        found = task_table.find_task_type(task_names[0])
        rules.update(found.rules if found is not None else task_table.DEFAULT_RULES)
    if model_size == "large":
        rules.update(learning_rate=5e-5, layerwise_lr_decay=0.9)
    elif model_size == "small":
        rules["embedding_size"] = 128
    if debug:
        rules.update(
            save_checkpoints_steps=1000000,
            use_tfrecords_if_existing=False,
            num_trials=1,
            iterations_per_loop=1,
            train_batch_size=32,
            num_train_epochs=3.0,
            log_examples=True,
        )
    return rules


def _overrides(hparams: str | Mapping[str, Any] | None, tasks: str | None) -> dict[str, Any]:
    """The user's values: `hparams` (JSON, a .json file or a mapping), then `--tasks`."""
    overrides = dict(
        parse_hparams(hparams) if isinstance(hparams, str) or hparams is None else hparams
    )
    if tasks is not None:
        names = [t.strip() for t in tasks.split(",") if t.strip()]
        if not names:  # `--tasks ""` used to fall back to the default task, chunk
            raise ConfigError(
                f"--tasks: {tasks!r} names no task; known: {', '.join(task_table.task_names())}"
            )
        overrides["task_names"] = names
    return overrides


def user_config(
    model_name: str = "electra",
    data_dir: str = "data",
    hparams: str | Mapping[str, Any] | None = None,
    tasks: str | None = None,
) -> FinetuningConfig:
    """Defaults + the user's values, keys and types checked, no rules applied: what the user
    named, e.g. the init checkpoint to read before `finetuning_config` sizes the rules by it."""
    config = FinetuningConfig(model_name=model_name, data_dir=data_dir)
    return replace_checked(config, _overrides(hparams, tasks), where="hparams")


def finetuning_config(
    model_name: str = "electra",
    data_dir: str = "data",
    hparams: str | Mapping[str, Any] | None = None,
    tasks: str | None = None,
    checkpoint_encoder: ModelConfig | None = None,
) -> FinetuningConfig:
    """Defaults -> per-task/per-size rules -> hparams (+ `--tasks`, which wins over hparams).

    `checkpoint_encoder`: the init checkpoint's encoder (`checkpoints.read_pretrained(path)
    .config.discriminator_config()`; `runs.finetuning.prepare_finetuning` reads it). The size
    rules (learning rate, layer-wise decay) then follow the checkpoint, and an explicit
    `model_size` that contradicts it is an error: the original failed loudly on that
    mismatch, a silent "small" learning rate for a Large model would not.
    """
    overrides = _overrides(hparams, tasks)
    config = FinetuningConfig(model_name=model_name, data_dir=data_dir)
    # Validate keys first so a typo is reported before any rule runs.
    probe = replace_checked(config, overrides, where="hparams")
    size = size_of_encoder(checkpoint_encoder) if checkpoint_encoder is not None else None
    if size is not None:
        if overrides.get("model_size", size) != size:
            raise ConfigError(
                f"model_size: {overrides['model_size']!r}, but the init checkpoint "
                f"{probe.resolved_init_checkpoint()} holds a {size} encoder; "
                "leave model_size out (it follows the checkpoint) or set it to match"
            )
        overrides["model_size"] = size
        probe = dataclasses.replace(probe, model_size=size)
    rules = _task_and_size_rules(probe.task_names, probe.model_size, probe.debug)
    config = dataclasses.replace(config, **rules)
    config = replace_checked(config, overrides, where="hparams")
    return config.validate()


def save_finetuning_config(config: FinetuningConfig, path: str) -> None:
    """Writes `config` as sorted JSON (atomically); `load_finetuning_config` reads it."""
    write_json(path, config.to_dict(), indent=2, sort_keys=True)


def load_finetuning_config(path: str) -> FinetuningConfig:
    """The config `save_finetuning_config` wrote (a fine-tuned model's FINETUNING_CONFIG_FILE)."""
    with open(path, encoding="utf-8") as f:
        return FinetuningConfig(**json.load(f))
