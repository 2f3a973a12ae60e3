"""Train / evaluate / write results for `num_trials` trials (the original's `run_finetuning`).

Each trial trains a fresh model (encoder from the init checkpoint, new heads) in
`models/<model>/finetuning_models/<tasks>_model_<trial>`, evaluates the dev split, and rewrites
`results/<tasks>_results.{txt,json}` with every trial so far and their median.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import statistics
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import tensorflow as tf
import tf_keras as keras

from electra_tf import checkpoints, optimization
from electra_tf.atomic_io import write_json, write_text
from electra_tf.checkpoints import PretrainedModel, SourceWeights
from electra_tf.checkpoints.training_state import TrainingCheckpoints
from electra_tf.config import ConfigError, ModelConfig, parse_hparams
from electra_tf.data.tokenization import VocabError, id_count, load_vocab
from electra_tf.device_defaults import Machine, probe_machine, warn_if_emulated_bf16
from electra_tf.finetuning.config import (
    FINETUNING_CONFIG_FILE,
    MODEL_CONFIG_FILE,
    FinetuningConfig,
    finetuning_config,
    save_finetuning_config,
    size_of_encoder,
    user_config,
)
from electra_tf.finetuning.model import FinetuningModel
from electra_tf.finetuning.preprocessing import Preprocessor
from electra_tf.finetuning.registry import get_tasks, make_tokenizer
from electra_tf.finetuning.task import Task
from electra_tf.runs.cpu_calls import HEARTBEAT_SECONDS
from electra_tf.runs.pretraining_model import current_learning_rate
from electra_tf.runs.progress import FitProgress, ProgressReporter


def log(*args: Any) -> None:
    """A console line, flushed at once (runs are watched live, often through a pipe)."""
    print(*args, flush=True)


# Encoder settings that do not change the weights' meaning: the fine-tuning config's win.
FINETUNING_MODEL_FIELDS = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "initializer_range",
)


def read_init_checkpoint(config: FinetuningConfig) -> PretrainedModel | None:
    """The config's init checkpoint, its format detected and its config read (the tensors on
    first use), or None: random initialisation, or nothing there yet (the run reports that)."""
    path = config.resolved_init_checkpoint()
    if not path or not os.path.exists(path if os.path.isdir(path) else path + ".index"):
        return None
    return checkpoints.read_pretrained(path, config.init_checkpoint_format)


def prepare_finetuning(
    model_name: str,
    data_dir: str,
    hparams: str | Mapping[str, Any] | None = None,
    tasks: str | None = None,
) -> tuple[FinetuningConfig, PretrainedModel | None]:
    """The run's config and its init checkpoint, read once; `run_finetuning(*prepared)`.

    The init checkpoint is the one the user's values name (`--pretrained`, `init_checkpoint`
    or `<data_dir>/models/<model_name>`); the size rules (learning rate, layer-wise decay)
    follow its encoder, as `finetuning_config(..., checkpoint_config=...)` describes.
    """
    overrides = parse_hparams(hparams) if isinstance(hparams, str) or hparams is None else hparams
    pretrained = read_init_checkpoint(user_config(model_name, data_dir, overrides, tasks))
    config = finetuning_config(
        model_name,
        data_dir,
        overrides,
        tasks,
        checkpoint_config=pretrained.config if pretrained else None,
    )
    if pretrained:  # before anything is written: the command's usage error (exit 2)
        check_positions(config, pretrained.config.discriminator_config())
    return config, pretrained


def checkpoint_model_size(config: FinetuningConfig) -> str | None:
    """The model size of the init checkpoint's encoder (from its config or shapes alone), or
    None: no init checkpoint, none there yet (the run reports that), or a custom shape.
    `finetuning_config(..., checkpoint_size=checkpoint_model_size)`; `prepare_finetuning`
    reads the checkpoint once for both the config and the run."""
    pretrained = read_init_checkpoint(config)
    return size_of_encoder(pretrained.config.discriminator_config()) if pretrained else None


def check_model_size(config: FinetuningConfig, model_config: ModelConfig) -> None:
    """`model_size` picks the learning rate and layer-wise decay; it must be the encoder's."""
    size = size_of_encoder(model_config)
    if size is not None and size != config.model_size:
        raise ConfigError(
            f"model_size is {config.model_size!r} but {config.resolved_init_checkpoint()} holds "
            f"a {size} encoder, so the learning-rate rules would be the wrong size's: build the "
            f"config with prepare_finetuning(...) (the finetune command does) "
            f'or set "model_size": "{size}"'
        )


def init_checkpoint(
    config: FinetuningConfig, pretrained: PretrainedModel | None = None
) -> PretrainedModel | None:
    """`pretrained` (already read), else the config's init checkpoint read now (a missing one
    is a CheckpointError); None when the encoder starts from random values."""
    path = config.resolved_init_checkpoint()
    if not path:
        return None
    return pretrained or checkpoints.read_pretrained(path, config.init_checkpoint_format)


def resolve_encoder(
    config: FinetuningConfig, pretrained: PretrainedModel | None = None
) -> tuple[ModelConfig, SourceWeights | None]:
    """The encoder config and, unless initialising randomly, the source weights.

    `pretrained`: the init checkpoint, read (`read_init_checkpoint`); read here when None.
    A checkpoint's own config (saved beside it, or inferred from its shapes) wins over
    `model_size` for what defines the weights (sizes, vocabulary, activation); dropout and the
    initializer range come from the fine-tuning config, as in the original, where fine-tuning
    built its encoder from its own hparams. A model pre-trained without dropout still
    fine-tunes with the fine-tuning config's dropout.
    """
    pretrained = init_checkpoint(config, pretrained)
    if pretrained is None:
        return config.model_config(), None
    source = pretrained.weights()
    finetuning = config.model_config()
    model_config = dataclasses.replace(
        source.config.discriminator_config(),
        **{name: getattr(finetuning, name) for name in FINETUNING_MODEL_FIELDS},
    )
    check_model_size(config, model_config)
    check_positions(config, model_config)
    return model_config, source


def check_positions(config: FinetuningConfig, model_config: ModelConfig) -> None:
    """`max_seq_length` must fit the init checkpoint's position table: a ConfigError naming
    both (it was a raw ValueError traceback from inside the run)."""
    if config.max_seq_length > model_config.max_position_embeddings:
        raise ConfigError(
            f"max_seq_length {config.max_seq_length} exceeds the max_position_embeddings "
            f"{model_config.max_position_embeddings} of {config.resolved_init_checkpoint()}: "
            f"set max_seq_length to at most {model_config.max_position_embeddings}"
        )


def check_vocab_size(
    config: FinetuningConfig, model_config: ModelConfig, source: SourceWeights | None,
    tasks: list[Task],
) -> None:  # fmt: skip
    """The vocabulary's ids against the encoder's embedding rows, up front (a VocabError: the
    command prints it as one line).

    More ids than rows: the usual cause is a checkpoint pre-trained with its own (smaller)
    vocabulary fine-tuned with `<data_dir>/vocab.txt`, the original's default. Unchecked, that
    fails mid-training in an out-of-range gather on CPU and reads zeros for the extra ids on GPU.

    Fewer ids than a pre-trained encoder's rows: another model's vocabulary (a converted home
    beside the wrong vocab.txt), whose ids mean other tokens to these embeddings. The one
    exception is a table padded on purpose: a native checkpoint whose own run recorded this
    very vocabulary (pre-training with `vocab_size` set above the vocabulary's size).
    """
    vocab = id_count(tasks[0].tokenizer.vocab)  # not len(): a duplicated line leaves a gap
    used, rows = config.resolved_vocab_file(), model_config.vocab_size
    if vocab > rows:
        model = config.resolved_init_checkpoint() or "the random-init model (vocab_size)"
    elif vocab < rows and source is not None:
        recorded = source.config.resolved_vocab_file() if source.fmt == "native" else ""
        if recorded and os.path.isfile(recorded) and os.path.samefile(recorded, used):
            return
        model = source.path
    else:
        return
    raise VocabError(
        f"vocabulary {used} has {vocab} entries but {model} has {rows} embedding rows: "
        'set "vocab_file" to the vocabulary the checkpoint was pre-trained with'
    )


def check_vocab_matches(
    config: FinetuningConfig, source: SourceWeights | None, tasks: list[Task]
) -> None:
    """Warns when a native checkpoint was pre-trained with a different vocabulary file.

    The run's config.json records the vocabulary it used; when that file still exists and its
    token -> id map differs from the one fine-tuning tokenizes with, the encoder's embedding
    rows mean other tokens. A warning, not an error: editing a copy (BERT's [unusedN] slots
    given domain words) is deliberate.
    """
    if source is None or source.fmt != "native":
        return
    recorded, used = source.config.resolved_vocab_file(), config.resolved_vocab_file()
    if not os.path.isfile(recorded) or os.path.samefile(recorded, used):
        return
    theirs, ours = load_vocab(recorded, required=()), tasks[0].tokenizer.vocab
    moved = sum(ours.get(token) != i for token, i in theirs.items())
    if moved:
        log(
            f"WARNING: {used} is not the vocabulary {source.path} was pre-trained with "
            f"({recorded}): {moved} of its {len(theirs)} tokens have another id or none. "
            'Set "vocab_file" to the pre-training vocabulary unless the change is deliberate.'
        )


class ModelRunner:
    """One trial: a model, its optimizer, its training and its evaluation."""

    def __init__(
        self,
        config: FinetuningConfig,
        tasks: list[Task],
        model_dir: str,
        pretrained: PretrainedModel | None = None,
    ):
        """`pretrained`: the init checkpoint, read once per run (`read_init_checkpoint`);
        None reads the config's own here."""
        config = config.resolve()  # a precision still "auto" (no machine probed): float32
        self.config, self.tasks, self.model_dir = config, tasks, model_dir
        self.preprocessor = Preprocessor(config, tasks)
        model_config, source = resolve_encoder(config, pretrained)
        check_vocab_size(config, model_config, source, tasks)
        check_vocab_matches(config, source, tasks)
        self.model = FinetuningModel(
            model_config, tasks, self.preprocessor.specs, dtype=config.precision
        )
        if source is not None:
            result = checkpoints.assign(
                self.model.variable_map(), source, where="fine-tuning model"
            )
            log(f"Loaded {len(result.loaded)} variables from {result.path} ({result.fmt})")
        self.train_steps = 0
        self._predict = tf.function(lambda f: self.model(f, training=False))

    def train(self) -> None:
        """Fits the model on the train split (one pass over all epochs' batches), then saves."""
        dataset, steps = self.preprocessor.prepare_train()
        self.train_steps = steps
        optimizer = self.build_optimizer(steps)
        self.model.compile(optimizer=optimizer)
        log(f"Training for {steps} steps")
        progress = self.progress(steps, optimizer)
        self.model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[progress])
        self.save()

    def build_optimizer(
        self, steps: int, initial_scale: float | None = None
    ) -> keras.optimizers.Optimizer:
        """The original's AdamW on a `steps`-step schedule with layer-wise decay; wrapped for
        loss scaling under mixed_float16, as pre-training's (`optimization.for_precision`;
        `initial_scale`: the loss scale it starts from, else tf_keras's default)."""
        config = self.config
        optimizer = optimization.create_optimizer(
            self.model.variable_map(),
            config.learning_rate,
            steps,
            weight_decay_rate=config.weight_decay_rate,
            warmup_proportion=config.warmup_proportion,
            layerwise_lr_decay_power=config.layerwise_lr_decay,
            n_transformer_layers=self.model.model_config.num_hidden_layers,
            fix_layerwise_top_layer=config.fix_layerwise_top_layer,
            adam_bias_correction=config.adam_bias_correction,
        )
        return optimization.for_precision(optimizer, config.precision, initial_scale)

    def progress(self, steps: int, optimizer: keras.optimizers.Optimizer) -> FitProgress:
        """The console line (pre-training's, with examples/s) and TensorBoard scalars under
        `<model_dir>/train`, every `log_every_steps` (0: min(iterations_per_loop, 100))."""
        config = self.config
        every = config.log_every_steps or min(config.iterations_per_loop, 100)
        reporter = ProgressReporter(steps, 0, os.path.join(self.model_dir, "train"), sys.stdout)
        learning_rate = functools.partial(current_learning_rate, optimizer)
        return FitProgress(
            reporter, every, config.train_batch_size, learning_rate, HEARTBEAT_SECONDS
        )

    def save(self) -> None:
        """The trial's checkpoint, its fine-tuning config and its encoder's config."""
        TrainingCheckpoints(self.model_dir, 1, model=self.model).save(self.train_steps)
        save_finetuning_config(self.config, os.path.join(self.model_dir, FINETUNING_CONFIG_FILE))
        model_config = self.model.model_config.to_dict()
        write_json(os.path.join(self.model_dir, MODEL_CONFIG_FILE), model_config, indent=2)

    def predict(self, tasks: list[Task], split: str) -> Iterator[tuple[Task, dict[str, Any]]]:
        """Yields (task, per-example result dict) for every real example of the split."""
        dataset, _ = self.preprocessor.prepare_predict(tasks, split)
        n_tasks = len(self.config.task_names)
        for batch in dataset:
            _, outputs = self._predict(batch)
            task_ids = batch["task_id"].numpy()
            numpy_outputs = {
                t.name: {k: v.numpy() for k, v in outputs[t.name].items()} for t in tasks
            }
            for i, task_id in enumerate(task_ids):
                if task_id == n_tasks:
                    continue  # padding example
                task = self.tasks[task_id]
                result = {k: v[i] for k, v in numpy_outputs[task.name].items()}
                result["eid"] = int(batch[f"{task.name}_eid"][i])
                yield task, result

    def evaluate_task(self, task: Task, split: str = "dev") -> Any:
        """The task's scorer, fed every prediction of the split."""
        scorer = task.get_scorer(split)
        for _, result in self.predict([task], split):
            scorer.update(result)
        return scorer

    def evaluate(self) -> dict[str, dict[str, float]]:
        """Every task's dev metrics, logged and returned by task name."""
        results = {}
        for task in self.tasks:
            scorer = self.evaluate_task(task)
            results[task.name] = {k: float(v) for k, v in scorer.get_results()}
            log(f"{task.name}: {scorer.results_str()}")
        return results

    def write_test_outputs(self, trial: int) -> None:
        """Every task's test-split predictions in its benchmark's submission format (GLUE .tsv,
        SQuAD 2.0 answers + null odds .json) under `test_predictions_dir()`."""
        out_dir = self.config.test_predictions_dir()
        os.makedirs(out_dir, exist_ok=True)
        for task in self.tasks:
            predict = functools.partial(self.task_predictions, task)
            task.write_test_predictions(predict, out_dir, trial)

    def task_predictions(self, task: Task, split: str) -> Iterator[dict[str, Any]]:
        """`task`'s per-example result dicts for the split (`Task.write_test_predictions`)."""
        for _, result in self.predict([task], split):
            yield result


def summarize(results: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Median over trials of every metric (the original's README reports medians)."""
    median: dict[str, dict[str, float]] = {}
    for task in results[0]:
        median[task] = {
            metric: float(statistics.median(r[task][metric] for r in results))
            for metric in results[0][task]
        }
    return median


def write_results(config: FinetuningConfig, results: list[dict[str, dict[str, float]]]) -> None:
    """`results/<tasks>_results.txt` (every trial, then the medians) and `.json` (+ config)."""
    median = summarize(results)
    lines = []
    for trial, trial_results in enumerate(results, start=1):
        for task, metrics in trial_results.items():
            values = " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items())
            lines.append(f"trial {trial} {task}: {values}")
    for task, metrics in median.items():
        values = " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items())
        lines.append(f"median of {len(results)} {task}: {values}")
    write_text(config.results_path("txt"), "\n".join(lines) + "\n")
    payload = {"trials": results, "median": median, "config": config.to_dict()}
    write_json(config.results_path("json"), payload, indent=2, default=str)
    log(f"Wrote results to {config.results_path('txt')}")


def resolve_precision(config: FinetuningConfig, machine: Machine | None = None) -> FinetuningConfig:
    """`config` with a precision "auto" chosen for `machine` (None: `probe_machine()`, once),
    and pre-training's start-of-run note where mixed_bfloat16 would run on a CPU without
    bfloat16 units (`device_defaults.warn_if_emulated_bf16`)."""
    machine = probe_machine() if machine is None else machine
    config = config.resolve(machine)
    warn_if_emulated_bf16(config.precision, machine, sys.stdout)
    return config


def run_finetuning(
    config: FinetuningConfig,
    pretrained: PretrainedModel | None = None,
    machine: Machine | None = None,
) -> list[dict[str, dict[str, float]]]:
    """Every trial: train (or restore), evaluate, write the results so far.

    `pretrained`: the config's init checkpoint, read (`prepare_finetuning`); when None, it is
    read at the first trial. Either way every trial starts from the one read. `machine`: what
    a precision "auto" resolves against (None: `probe_machine()`).
    """
    if config.num_trials < 1:
        raise ValueError("num_trials must be >= 1")
    config = resolve_precision(config, machine)
    tokenizer = make_tokenizer(config)
    tasks = get_tasks(config, tokenizer)
    if config.do_train:
        for trial in range(1, config.num_trials + 1):
            model_dir = config.model_dir(trial)
            if os.path.exists(model_dir) and os.listdir(model_dir) and not config.overwrite:
                raise FileExistsError(
                    f"{model_dir} exists; pass --hparams '{{\"overwrite\": true}}' to replace it"
                )
    results = []
    for trial in range(1, config.num_trials + 1):
        log(f"=== {config.tasks_str}: model={config.model_name}, trial {trial}/{config.num_trials}")
        model_dir = config.model_dir(trial)
        keras.utils.set_random_seed(config.seed + trial - 1)
        if config.do_train and os.path.exists(model_dir):
            shutil.rmtree(model_dir)  # checked above: empty, or `overwrite` is set
        os.makedirs(model_dir, exist_ok=True)
        pretrained = init_checkpoint(config, pretrained)
        runner = ModelRunner(config, tasks, model_dir, pretrained)
        if config.do_train:
            runner.train()
        else:
            latest = tf.train.latest_checkpoint(model_dir)
            if latest is None:
                raise FileNotFoundError(f"do_train is false but {model_dir} has no checkpoint")
            tf.train.Checkpoint(model=runner.model).restore(latest).expect_partial()
        if config.do_eval:
            results.append(runner.evaluate())
            write_results(config, results)
            if config.write_test_outputs and trial <= config.n_writes_test:
                runner.write_test_outputs(trial)
        if trial != config.num_trials and not config.keep_all_models:
            shutil.rmtree(model_dir)
    if results:
        for task, metrics in summarize(results).items():
            log(f"median {task}: " + " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items()))
    return results
