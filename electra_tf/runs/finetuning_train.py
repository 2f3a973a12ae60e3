"""A fine-tuning trial's training that stops and resumes: checkpoints, dev metrics, best model.

The pre-training run's pieces, on Keras' `fit`:

- Checkpoints (`TrainingCheckpoints`: atomic, the last `keep_checkpoint_max` kept) hold the
  model, its dropout generator `model.rng` (`FinetuningModel(seed=...)`), the optimizer (Adam
  slots, step) and the best-model bookkeeping; one is written every `save_checkpoints_steps`,
  at each epoch's end and at a SIGINT / SIGTERM (`StopRequest`: the step under way finishes,
  the checkpoint is written, then the stop goes on as `Terminated` / KeyboardInterrupt).
- The data position is not saved: training reads `repeat -> shuffle(100, seed) -> batch`, a
  function of the seed, and a resumed trial skips the records of the steps done
  (`Preprocessor.prepare_train(start_step)`), as pre-training's `resumed_input` does.
- So a trial resumed from step s computes what the uninterrupted trial computed from s: the
  same batches, masks and updates (bit for bit in float32 on one thread,
  tests/test_finetune_resume.py).
- Dev metrics every `eval_every_steps` and/or each epoch, on the console and in TensorBoard
  (`<trial>/eval`); with `metric_for_best` the best evaluation's weights go to `<trial>/best`
  and `early_stopping_patience` evaluations without a better one end the trial.
The trial's last checkpoint holds the final weights only, as before (what export reads).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf
import tf_keras as keras

from electra_tf.checkpoints.files import CHECKPOINT_PREFIX
from electra_tf.checkpoints.training_state import TrainingCheckpoints
from electra_tf.config import ConfigError
from electra_tf.finetuning.config import BEST_CHECKPOINT_DIR
from electra_tf.finetuning.task import log
from electra_tf.runs.signals import StopRequest
from electra_tf.runtime.atomic_io import write_json
from electra_tf.runtime.run_lock import Terminated

BEST_DIR = BEST_CHECKPOINT_DIR  # the best evaluation's weights and best_metrics.json
BEST_METRICS_FILE = "best_metrics.json"
LOWER_IS_BETTER = ("loss", "mse")


@dataclass
class TrialOutcome:
    """What a trial's training ended with (`train_trial`)."""

    steps: int  # the step reached
    resumed_from: int | None = None  # the checkpoint's step a resumed trial started from
    best: dict[str, Any] | None = None  # {"step", "metric", "value", "metrics"} of <trial>/best
    early_stopped: bool = False
    evaluations: list[dict[str, Any]] = field(default_factory=list)


class BestTracker(tf.Module):
    """The best evaluation so far, as variables the training checkpoints hold (so that a resumed
    trial compares with what the stopped one had seen)."""

    def __init__(self) -> None:
        super().__init__()
        self.value = tf.Variable(math.nan, dtype=tf.float64, trainable=False)
        self.step = tf.Variable(-1, dtype=tf.int64, trainable=False)
        self.since = tf.Variable(0, dtype=tf.int64, trainable=False)  # evaluations since best


def best_value(config: Any, metrics: dict[str, dict[str, float]]) -> tuple[str, float]:
    """(metric name, value) that `metric_for_best` ranks evaluations by: the mean over tasks of
    the named metric ("auto": each task's first); ConfigError naming a metric a task lacks."""
    wanted = config.metric_for_best
    values = []
    for task, results in metrics.items():
        name = next(iter(results)) if wanted == "auto" else wanted
        if name not in results:
            raise ConfigError(
                f"metric_for_best: {wanted!r} is not a metric of {task} (it has "
                f"{', '.join(results)})"
            )
        values.append(results[name])
    return (wanted if wanted != "auto" else name), float(sum(values) / len(values))


def is_better(value: float, best: float, metric: str) -> bool:
    if math.isnan(best):
        return True
    return value < best if metric in LOWER_IS_BETTER else value > best


class TrialCallback(keras.callbacks.Callback):
    """Saves, evaluates and stops a `fit` at the right steps (the module docstring)."""

    def __init__(self, runner: Any, trial: TrialState, stop: StopRequest):
        super().__init__()
        self.runner, self.trial, self.stop = runner, trial, stop
        self.saved_step = -1

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        trial, config = self.trial, self.runner.config
        step = int(trial.optimizer.iterations.numpy())
        epoch_end = step % trial.batches_per_epoch == 0
        stop = False
        if (config.eval_every_steps and step % config.eval_every_steps == 0) or (
            config.eval_each_epoch and epoch_end
        ):
            stop = trial.evaluate(step)
        stop = stop or self.stop.signum is not None
        last = step >= trial.total
        if not last and (step % config.save_checkpoints_steps == 0 or epoch_end or stop):
            trial.checkpoints.save(step)
            self.saved_step = step
        if stop:
            self.model.stop_training = True


class TrialState:
    """A trial's model, optimizer, checkpoints and best-model bookkeeping (`train_trial`)."""

    def __init__(self, runner: Any, optimizer: Any, total: int, batches_per_epoch: int):
        self.runner, self.optimizer = runner, optimizer
        self.total, self.batches_per_epoch = total, batches_per_epoch
        self.best = BestTracker()
        config, model_dir = runner.config, runner.model_dir
        self.checkpoints = TrainingCheckpoints(
            model_dir,
            config.keep_checkpoint_max,
            model=runner.model,
            optimizer=optimizer,
            step=optimizer.iterations,
            best=self.best,
        )
        self.writer: Any = None
        self.evaluations: list[dict[str, Any]] = []

    def evaluate(self, step: int) -> bool:
        """Dev metrics at `step` (console, TensorBoard `<trial>/eval`); keeps the best weights.
        Returns whether early stopping ends the trial here."""
        runner, config = self.runner, self.runner.config
        metrics = runner.evaluate(quiet=True)
        for task, results in metrics.items():
            values = " - ".join(f"{k}: {v:.2f}" for k, v in results.items())
            log(f"step {step}/{self.total} | dev {task}: {values}")
        if self.writer is None:
            self.writer = tf.summary.create_file_writer(os.path.join(runner.model_dir, "eval"))
        with self.writer.as_default(step=step):
            for task, results in metrics.items():
                for name, value in results.items():
                    tf.summary.scalar(f"{task}/{name}", value)
        self.writer.flush()
        self.evaluations.append({"step": step, "metrics": metrics})
        if config.metric_for_best is None:
            return False
        metric, value = best_value(config, metrics)
        if is_better(value, float(self.best.value.numpy()), metric):
            self.best.value.assign(value)
            self.best.step.assign(step)
            self.best.since.assign(0)
            self.save_best(step, metric, value, metrics)
            return False
        self.best.since.assign_add(1)
        patience = config.early_stopping_patience
        if patience and int(self.best.since.numpy()) >= patience:
            log(f"Early stopping at step {step}: no better {metric} in {patience} evaluations")
            return True
        return False

    def save_best(self, step: int, metric: str, value: float, metrics: dict) -> None:
        best_dir = os.path.join(self.runner.model_dir, BEST_DIR)
        TrainingCheckpoints(best_dir, 1, model=self.runner.model).save(step)
        info = {"step": step, "metric": metric, "value": value, "metrics": metrics}
        write_json(os.path.join(best_dir, BEST_METRICS_FILE), info, indent=2)
        log(f"step {step}: best {metric} so far ({value:.2f}), kept in {best_dir}")

    def restore(self) -> int | None:
        """Resumes from the trial's latest checkpoint: its step, or None (a fresh trial)."""
        path = self.checkpoints.restore_latest(sys.stdout)
        if path is None:
            return None
        step = int(self.optimizer.iterations.numpy())
        log(f"Resuming {self.runner.model_dir} from {os.path.basename(path)} (step {step})")
        return step


def finished_step(model_dir: str) -> int | None:
    """The step of a trial's final (weights-only) checkpoint, None where it has none: the
    latest checkpoint named in the index, read by its name `ckpt-<step>`."""
    latest = tf.train.latest_checkpoint(model_dir)
    if latest is None:
        return None
    name = os.path.basename(latest)
    return int(name.split("-")[-1]) if name.startswith(f"{CHECKPOINT_PREFIX}-") else None


def train_trial(runner: Any) -> TrialOutcome:
    """Trains `runner`'s trial to its last step (or early stop), resuming from its latest
    checkpoint; the final weights are its last checkpoint. A signal saves and re-raises."""
    config, model = runner.config, runner.model
    steps, batches = runner.preprocessor.train_steps()
    done = finished_step(runner.model_dir)
    if done is not None and _is_final(runner.model_dir):
        # Trained to the end (or an early stop) before a stop during its evaluation.
        tf.train.Checkpoint(model=model).read(tf.train.latest_checkpoint(runner.model_dir))
        log(f"{runner.model_dir} is trained to step {done}: evaluating it")
        best = read_best(runner.model_dir) if config.metric_for_best else None
        return TrialOutcome(done, resumed_from=done, best=best)
    optimizer = runner.build_optimizer(steps)
    model.compile(optimizer=optimizer)
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    inner.build(model.trainable_variables)  # slots exist before a restore fills them
    trial = TrialState(runner, optimizer, steps, batches)
    start = trial.restore()
    outcome = TrialOutcome(steps, resumed_from=start)
    begin = start or 0
    dataset = runner.preprocessor.prepare_train(begin)[0]
    log(f"Training for {steps} steps" + (f" from step {begin}" if begin else ""))
    with StopRequest(sys.stdout) as stop:
        callback = TrialCallback(runner, trial, stop)
        progress = runner.progress(steps, optimizer, begin)
        if begin < steps:
            model.fit(
                dataset,
                epochs=1,
                steps_per_epoch=steps - begin,
                verbose=0,
                callbacks=[progress, callback],
            )
    step = int(optimizer.iterations.numpy())
    outcome.steps, outcome.evaluations = step, trial.evaluations
    if stop.signum is not None:
        if callback.saved_step != step:
            trial.checkpoints.save(step)
        log(f"Stopped at step {step}; saved. Run the same command again to resume.")
        raise Terminated() if stop.signum == signal.SIGTERM else KeyboardInterrupt()
    outcome.early_stopped = step < steps
    outcome.best = read_best(runner.model_dir) if config.metric_for_best else None
    runner.train_steps = step
    runner.save()  # the final weights (weights only) and the configs
    return outcome


def _is_final(model_dir: str) -> bool:
    """Whether the latest checkpoint is the weights-only final one (no optimizer in it)."""
    latest = tf.train.latest_checkpoint(model_dir)
    names = tf.train.list_variables(latest) if latest else []
    return not any(name.startswith("optimizer/") for name, _ in names)


def read_best(model_dir: str) -> dict[str, Any] | None:
    """`<trial>/best/best_metrics.json`, None without one."""
    path = os.path.join(model_dir, BEST_DIR, BEST_METRICS_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def restore_best(model: keras.Model, model_dir: str) -> str | None:
    """Loads `<trial>/best`'s weights into `model`; its prefix, or None without one."""
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, BEST_DIR))
    if latest is not None:
        tf.train.Checkpoint(model=model).read(latest).expect_partial()
    return latest
