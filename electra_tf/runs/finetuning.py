"""Train / evaluate / write results for `num_trials` trials (the original's `run_finetuning`).

Each trial trains a fresh model (encoder from the init checkpoint, new heads) in
`models/<model>/finetuning_models/<tasks>_model_<trial>`, evaluates the dev split, and rewrites
`results/<tasks>_results.{txt,json}` with every trial so far and their median. Every trial
starts from the run's one plan (`runs.finetuning_plan`: config, encoder config, weights).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import statistics
import sys
from collections.abc import Iterator
from typing import Any

import tensorflow as tf
import tf_keras as keras

from electra_tf import checkpoints, optimization
from electra_tf.checkpoints import PretrainedModel
from electra_tf.checkpoints.training_state import TrainingCheckpoints
from electra_tf.finetuning.config import (
    FINETUNING_CONFIG_FILE,
    MODEL_CONFIG_FILE,
    FinetuningConfig,
    save_finetuning_config,
)
from electra_tf.finetuning.data_check import check_task_data
from electra_tf.finetuning.model import FinetuningModel, feature_signature
from electra_tf.finetuning.preprocessing import Preprocessor
from electra_tf.finetuning.registry import get_tasks, make_tokenizer
from electra_tf.finetuning.task import Task, log
from electra_tf.modeling.utils import InferenceOptions
from electra_tf.runs.cpu_calls import HEARTBEAT_SECONDS

# The plan's names, also importable from here (where they were before the plan had a module).
from electra_tf.runs.finetuning_plan import (  # noqa: F401 - re-exported
    FINETUNING_MODEL_FIELDS,
    FinetuningPlan,
    as_plan,
    check_model_size,
    check_positions,
    check_vocab_matches,
    check_vocab_size,
    init_checkpoint,
    plan_finetuning,
    prepare_finetuning,
    read_init_checkpoint,
    resolve_encoder,
)
from electra_tf.runs.finetuning_resume import (
    begin_trial,
    check_trials,
    finished_trial,
    record_path,
    write_trial_record,
)
from electra_tf.runs.finetuning_train import TrialOutcome, restore_best, train_trial
from electra_tf.runs.pretraining_model import current_learning_rate
from electra_tf.runs.progress import FitProgress, ProgressReporter
from electra_tf.runtime.atomic_io import write_json, write_text
from electra_tf.runtime.device_defaults import Machine, probe_machine, warn_if_emulated_bf16


class ModelRunner:
    """One trial: a model, its optimizer, its training and its evaluation."""

    def __init__(
        self,
        config: FinetuningConfig | FinetuningPlan,
        tasks: list[Task],
        model_dir: str,
        pretrained: PretrainedModel | None = None,
        seed: int | None = None,
    ):
        """`config`: the run's plan (`prepare_finetuning`), or a config alone, planned here
        (`as_plan`: `pretrained`, its init checkpoint already read, else read now). `seed`:
        the trial's dropout stream, checkpointed so that a trial resumes (else Keras's)."""
        plan = as_plan(config, pretrained)
        config = plan.config.resolve()  # a precision still "auto" (no machine probed): float32
        self.config, self.tasks, self.model_dir = config, tasks, model_dir
        self.preprocessor = Preprocessor(config, tasks)
        model_config, source = plan.model_config, plan.weights()
        check_vocab_size(config, model_config, source, tasks)
        check_vocab_matches(config, source, tasks)
        parts = (
            config.parallel_micro_batches if isinstance(config.parallel_micro_batches, int) else 1
        )
        self.model = FinetuningModel(
            model_config,
            tasks,
            self.preprocessor.specs,
            parallel_micro_batches=parts,
            seed=seed,
            dtype=config.precision,
        )
        if source is not None:
            result = checkpoints.assign(
                self.model.variable_map(), source, where="fine-tuning model"
            )
            log(f"Loaded {len(result.loaded)} variables from {result.path} ({result.fmt})")
        self.train_steps = 0
        # Prediction as the serving export computes: the queries in as many groups side by side
        # as the step has micro-batches (one per inter-op thread), fused inference LayerNorms.
        # Traced once for any batch and length, as the export's signatures are: the kernels
        # chosen for unknown shapes ran 8% faster here than for the static batch shape.
        options = InferenceOptions(fused_layer_norms=True, query_blocks=parts)
        self._predict = tf.function(
            lambda f: self.model(f, training=False, inference_options=options),
            input_signature=[feature_signature(self.preprocessor.specs)],
        )

    def train(self) -> TrialOutcome:
        """Fits the model on the train split (one pass over all epochs' batches), resuming
        from the trial's latest checkpoint, then saves (`finetuning_train.train_trial`)."""
        return train_trial(self)

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

    def progress(
        self, steps: int, optimizer: keras.optimizers.Optimizer, start: int = 0
    ) -> FitProgress:
        """The console line (pre-training's, with examples/s) and TensorBoard scalars under
        `<model_dir>/train`, every `log_every_steps` (0: min(iterations_per_loop, 100))."""
        config = self.config
        every = config.log_every_steps or min(config.iterations_per_loop, 100)
        reporter = ProgressReporter(steps, start, os.path.join(self.model_dir, "train"), sys.stdout)
        learning_rate = functools.partial(current_learning_rate, optimizer)
        return FitProgress(
            reporter, every, config.train_batch_size, learning_rate, HEARTBEAT_SECONDS, start
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

    def evaluate(self, quiet: bool = False) -> dict[str, dict[str, float]]:
        """Every task's dev metrics, logged (unless `quiet`) and returned by task name."""
        results = {}
        for task in self.tasks:
            scorer = self.evaluate_task(task)
            results[task.name] = {k: float(v) for k, v in scorer.get_results()}
            if not quiet:
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


def write_results(
    config: FinetuningConfig,
    results: list[dict[str, dict[str, float]]],
    runs: list[dict[str, Any]] | None = None,
) -> None:
    """`results/<tasks>_results.txt` (every trial, then the medians) and `.json` (+ config);
    `runs`: how each trial ran (`trial_info`: resumed from which step, the best step), shown
    where a trial resumed or was chosen by `metric_for_best`."""
    median = summarize(results)
    lines = []
    runs = runs or [{} for _ in results]
    for trial, (trial_results, run) in enumerate(zip(results, runs, strict=True), start=1):
        for task, metrics in trial_results.items():
            values = " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items())
            lines.append(f"trial {trial} {task}: {values}")
        if run.get("resumed_from_step") is not None:
            lines.append(f"trial {trial} resumed from step {run['resumed_from_step']}")
        if run.get("best_step") is not None:
            lines.append(f"trial {trial} best {run['best_metric']} at step {run['best_step']}")
    for task, metrics in median.items():
        values = " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items())
        lines.append(f"median of {len(results)} {task}: {values}")
    write_text(config.results_path("txt"), "\n".join(lines) + "\n")
    payload = {"trials": results, "median": median, "runs": runs, "config": config.to_dict()}
    write_json(config.results_path("json"), payload, indent=2, default=str)
    log(f"Wrote results to {config.results_path('txt')}")


def resolve_precision(config: FinetuningConfig, machine: Machine | None = None) -> FinetuningConfig:
    """`config` with every "auto" (precision, the CPU layout) chosen for `machine` (None:
    `probe_machine()`, once), and pre-training's start-of-run note where mixed_bfloat16 would run on a CPU without
    bfloat16 units (`device_defaults.warn_if_emulated_bf16`)."""
    machine = probe_machine() if machine is None else machine
    config = config.resolve(machine)
    warn_if_emulated_bf16(config.precision, machine, sys.stdout)
    return config


def trial_info(trial: int, outcome: TrialOutcome | None) -> dict[str, Any]:
    """How a trial ran, for the results: resumed from which step, its steps, its best step."""
    info: dict[str, Any] = {"trial": trial, "resumed_from_step": None}
    if outcome is not None:
        info.update(resumed_from_step=outcome.resumed_from, steps=outcome.steps)
        info["early_stopped"] = outcome.early_stopped
        if outcome.best:
            info.update(best_step=outcome.best["step"], best_metric=outcome.best["metric"])
    return info


def run_finetuning(
    config: FinetuningConfig | FinetuningPlan,
    pretrained: PretrainedModel | None = None,
    machine: Machine | None = None,
    *,
    data_checked: bool = False,
) -> list[dict[str, dict[str, float]]]:
    """Every trial: train (or restore), evaluate, write the results so far.

    Args:
        config: the run's plan (`prepare_finetuning`), or a config alone with `pretrained`, its
            init checkpoint already read (None: read at the first trial). Either way every
            trial starts from the one plan.
        pretrained: see `config`.
        machine: what a precision "auto" resolves against (None: `probe_machine()`).
        data_checked: the caller ran `check_task_data` on these files already (the command,
            before its lock); the run then does not read them again. False: the run checks
            every file it will read before it writes anything (a DataError naming file:line).

    Returns:
        The dev metrics of every trial that has them, {task: {metric: value}} (trials kept
        from an earlier start of the run included).
    """
    if not isinstance(config, FinetuningPlan):
        config = FinetuningPlan(config, None, pretrained)  # planned at the first trial
    if config.config.num_trials < 1:
        raise ValueError("num_trials must be >= 1")
    plan = dataclasses.replace(config, config=resolve_precision(config.config, machine))
    config = plan.config
    tasks = get_tasks(config, make_tokenizer(config))
    if not data_checked:  # every file the run reads, checked before anything is written
        check_task_data(config, tasks)
    check_trials(config, tasks)  # before any trial: a changed run is named, not mixed
    results: list[dict[str, dict[str, float]]] = []
    runs: list[dict[str, Any]] = []
    for trial in range(1, config.num_trials + 1):
        log(f"=== {config.tasks_str}: model={config.model_name}, trial {trial}/{config.num_trials}")
        record = finished_trial(config, trial)
        if record is not None:  # finished by an earlier start of this command: kept
            log(f"Trial {trial} was finished: kept ({record_path(config, trial)})")
            if record.get("metrics"):
                results.append(record["metrics"])
                runs.append(record["run"])
            continue
        plan = as_plan(plan)  # the first trial reads an init checkpoint not read before
        metrics, info = run_trial(plan, tasks, trial)
        if metrics is not None:
            results.append(metrics)
            runs.append(info)
            write_results(config, results, runs)
        write_trial_record(config, trial, tasks, {"metrics": metrics, "run": info})
        if trial != config.num_trials and not config.keep_all_models:
            shutil.rmtree(config.model_dir(trial))
    if results:
        for task, metrics in summarize(results).items():
            log(f"median {task}: " + " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items()))
    return results


def run_trial(
    plan: FinetuningPlan, tasks: list[Task], trial: int
) -> tuple[dict[str, dict[str, float]] | None, dict[str, Any]]:
    """Trains (resuming where it stopped) or restores trial `trial`, evaluates it with the
    weights the results use (the best evaluation's with `metric_for_best`, else the final
    ones), writes its test predictions; (dev metrics or None, `trial_info`)."""
    config = plan.config
    model_dir = config.model_dir(trial)
    keras.utils.set_random_seed(config.seed + trial - 1)
    if config.do_train and config.overwrite and os.path.exists(model_dir):
        shutil.rmtree(model_dir)  # `overwrite`: the trial starts over
    os.makedirs(model_dir, exist_ok=True)
    runner = ModelRunner(plan, tasks, model_dir, seed=config.seed + trial - 1)
    outcome = None
    if config.do_train:
        begin_trial(config, tasks, model_dir)
        outcome = runner.train()
    else:
        latest = tf.train.latest_checkpoint(model_dir)
        if latest is None:
            raise FileNotFoundError(f"do_train is false but {model_dir} has no checkpoint")
        tf.train.Checkpoint(model=runner.model).restore(latest).expect_partial()
    if config.metric_for_best is not None and restore_best(runner.model, model_dir):
        log(f"Using the best evaluation's weights ({model_dir}/best)")
    info = trial_info(trial, outcome)
    if not config.do_eval:
        return None, info
    metrics = runner.evaluate()
    if config.write_test_outputs and trial <= config.n_writes_test:
        runner.write_test_outputs(trial)
    return metrics, info
