"""The pre-training run: build under a distribution strategy, train with resumable checkpoints.

`train(config)` is the original's `run_pretraining.py` with `do_train`; `evaluate(config)` is
`do_eval`. One code path from a 20-step debug run to a 1M-step run:

- The model's own `train_step` runs `iterations_per_loop` times inside ONE `tf.function` call
  (the original's TPU `iterations_per_loop`), so Python runs once per loop, not once per step.
- The step counter is the optimizer's `iterations` (the original's `global_step`); the LR
  schedule reads it, checkpoints are numbered by it and training stops when it reaches
  `num_train_steps`. A restart restores it with everything else and carries on.
  On a CPU (no accelerator, one worker) a call is sized to about two seconds instead, so
  progress lines come at least every 30 s and a signal is seen within a step (`cpu_calls`).
- SIGINT / SIGTERM finish the current call, save a checkpoint at the step reached, and return
  the signal number (the CLI exits with 128 + signal, i.e. 130 for Ctrl-C).
- `evaluate` (`pretraining_eval`) scores checkpoints: the original's `do_eval`.
- The machine is probed once (`device_defaults.probe_machine`), by the caller or here, and
  config fields still "auto" resolve against it.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, TextIO

import tensorflow as tf
import tf_keras as keras

from electra_tf.checkpoints.files import CONFIG_FILE
from electra_tf.checkpoints.recovery import holds_checkpoints
from electra_tf.checkpoints.resume_check import check_allowed_keys, check_resumable
from electra_tf.checkpoints.training_state import TrainingCheckpoints, write_run_config
from electra_tf.config import PretrainingConfig, ResolvedPretrainingConfig
from electra_tf.data.pretraining_input import InputDataError, check_input_files, match_files
from electra_tf.runs.cpu_calls import (
    HEARTBEAT_SECONDS,
    announce_cpu_run,
    next_boundary,
    next_steps_per_call,
    steps_per_call_limit,
)
from electra_tf.runs.pretraining_data import make_dataset, resumed_input, run_steps
from electra_tf.runs.pretraining_eval import evaluate
from electra_tf.runs.pretraining_model import (
    build_model,
    build_optimizer,
    current_learning_rate,
    load_init_checkpoint,
    make_train_function,
    metric_values,
    reset_metrics,
    stop_if_diverged,
)
from electra_tf.runs.progress import TENSORBOARD_DIR, ProgressReporter
from electra_tf.runs.signals import StopRequest
from electra_tf.runs.strategy import build_strategy, check_accumulation, worker_role
from electra_tf.runs.worker_agreement import check_workers_agree, worker_name, worker_settings
from electra_tf.runtime.device_defaults import Machine, probe_machine, warn_if_emulated_bf16
from electra_tf.runtime.run_lock import RunLock

__all__ = ["TrainResult", "evaluate", "resume_changes", "train"]


@dataclass
class TrainResult:
    """What a training run ended with."""

    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    checkpoint: str | None = None
    interrupted_by: int | None = None  # signal number when stopped by SIGINT / SIGTERM


@dataclass
class _Run:
    """What the training loop works with (`_build_run`)."""

    config: ResolvedPretrainingConfig
    model: keras.Model
    optimizer: Any
    iterator: Any
    checkpoints: TrainingCheckpoints
    restored: str | None  # the checkpoint resumed from, None when starting fresh
    files: list[str]
    num_workers: int


def train(
    config: PretrainingConfig,
    stream: TextIO | None = None,
    *,
    machine: Machine | None = None,
    strategy: tf.distribute.Strategy | None = None,
    allow_changes: Collection[str] = (),
) -> TrainResult:
    """Trains to `config.num_train_steps`, resuming from the latest checkpoint in the model dir.

    `machine`: the facts "auto" settings resolve against (None: `probe_machine()`, once).
    `strategy`: one built already (`build_strategy(config)`, before TensorFlow's context
    started, as multi-worker runs need); None builds it here. `allow_changes`: settings a
    resume may change besides those meant to (`checkpoints.resume_check`). The chief holds the
    model dir's lock for the whole run: a second writer is refused before it touches anything
    (`electra_tf.runtime.run_lock`). Several workers first check that they agree
    (`worker_agreement`)."""
    stream = stream or sys.stdout
    machine = probe_machine() if machine is None else machine
    if not isinstance(config, ResolvedPretrainingConfig):  # resolved once, for this machine
        config = config.resolve(machine)  # fields still "auto" get this machine's answer
    check_allowed_keys(allow_changes)
    warn_if_emulated_bf16(config.precision, machine, stream)
    keras.mixed_precision.set_global_policy(config.precision)
    # Not tf.random.set_seed alone: an unseeded tf_keras initializer draws its seed from
    # Python's `random`, so the initial weights changed from process to process.
    keras.utils.set_random_seed(config.seed)
    strategy = build_strategy(config) if strategy is None else strategy
    role = worker_role(strategy)
    model_dir = config.resolved_model_dir()
    lock = RunLock(model_dir, what="model dir") if role[0] else contextlib.nullcontext()
    with lock:
        os.makedirs(model_dir, exist_ok=True)
        files, problem = _input_files(config)
        if role[2] > 1:  # before anything is written, on every worker alike
            settings = worker_settings(config, files, problem and str(problem), allow_changes)
            check_workers_agree(strategy, worker_name(strategy), settings)
        changes = resume_changes(config, model_dir, allow_changes)
        if problem is not None:
            raise problem
        check_accumulation(config, strategy)
        if role[0]:  # only now: a refused run leaves the saved config as it was
            if changes:
                print(f"Resuming with changed settings: {'; '.join(changes)}", file=stream)
            write_run_config(config, model_dir)
        run = _build_run(config, strategy, role, stream, files)
        return _train(run, strategy, role[0], machine, stream)


def _input_files(config: ResolvedPretrainingConfig) -> tuple[list[str], Exception | None]:
    """The training files, checked (a bad one is named before the model is built); the error
    is returned, so that several workers can say which of them has it."""
    try:
        files = match_files(config.resolved_pretrain_tfrecords())
        check_input_files(files, config.max_seq_length, config.vocab_size)
    except (InputDataError, FileNotFoundError) as e:
        return [], e
    return files, None


def resume_changes(
    config: ResolvedPretrainingConfig, model_dir: str, allow_changes: Collection[str] = ()
) -> list[str]:
    """Refuses a resume that changes the model, or (unless allowed) what it computes, naming
    the keys; returns what else changed ("key: old -> new"), [] for a fresh run."""
    saved_config = os.path.join(model_dir, CONFIG_FILE)
    if holds_checkpoints(model_dir) and os.path.exists(saved_config):
        return check_resumable(saved_config, config, allow_changes)
    return []


def _build_run(
    config: ResolvedPretrainingConfig,
    strategy: tf.distribute.Strategy,
    role: tuple[bool, int, int],
    stream: TextIO,
    files: list[str],
) -> _Run:
    """The model, its optimizer (built once, here), the input and the checkpoints of a run,
    resumed from its latest checkpoint when it has one."""
    is_chief, worker_id, num_workers = role
    with strategy.scope():
        model = build_model(config)
        optimizer = build_optimizer(config, model)
        model.compile(optimizer=optimizer)
    pattern = config.resolved_pretrain_tfrecords()
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": optimizer.iterations}
    iterator = iter(make_dataset(config, strategy, pattern, config.train_batch_size, True))
    # The input's position is not saved (tf.distribute's iterators cannot be): the stream is a
    # function of the seed, and a resumed run starts it at its step's record (`resumed_input`).
    checkpoints = TrainingCheckpoints(
        config.resolved_model_dir(),
        config.keep_checkpoint_max,
        is_chief=is_chief,
        worker_id=worker_id,
        **state,
    )
    run = _Run(config, model, optimizer, iterator, checkpoints, None, files, num_workers)
    _resume(run, strategy, pattern, stream)
    return run


def _resume(run: _Run, strategy: tf.distribute.Strategy, pattern: str, stream: TextIO) -> None:
    """Restores the latest checkpoint of the model dir, else loads `init_checkpoint` if set;
    sets `run.restored` and the input at the restored step's position."""
    config, optimizer = run.config, run.optimizer
    run.restored = run.checkpoints.restore_latest(stream)
    if run.restored:
        print(
            f"Resuming from {run.restored} (step {int(optimizer.iterations.numpy())})",
            file=stream,
            flush=True,
        )
        run.iterator = resumed_input(config, strategy, pattern, optimizer, stream)
    elif config.init_checkpoint:
        _start_from_init_checkpoint(config, run.model, optimizer, stream)
        if int(optimizer.iterations.numpy()):
            # Step s reads from record s x batch, from `init_step` on as after any resume.
            run.iterator = resumed_input(config, strategy, pattern, optimizer, stream)


def _start_from_init_checkpoint(
    config: ResolvedPretrainingConfig, model: keras.Model, optimizer: Any, stream: TextIO
) -> None:
    """Continued pre-training: `init_checkpoint`'s weights, a fresh optimizer at `init_step`."""
    fmt = load_init_checkpoint(model, config)
    optimizer.iterations.assign(config.init_step or 0)
    print(
        f"Continuing pre-training from {config.init_checkpoint} ({fmt} weights, fresh "
        f"optimizer) at step {int(optimizer.iterations.numpy())}",
        file=stream,
        flush=True,
    )


def _train(
    run: _Run, strategy: tf.distribute.Strategy, is_chief: bool, machine: Machine, stream: TextIO
) -> TrainResult:
    config = run.config
    model_dir = config.resolved_model_dir()
    step, total = int(run.optimizer.iterations.numpy()), config.num_train_steps
    if step >= total:
        print(f"{model_dir} is already trained to step {step} >= {total}", file=stream)
        return TrainResult(step, {}, run.restored)
    log_every = config.log_every_steps or config.iterations_per_loop
    reporter = ProgressReporter(
        total,
        step,
        os.path.join(model_dir, TENSORBOARD_DIR, "train") if is_chief else None,
        stream if is_chief else io.StringIO(),  # other workers stay quiet
    )
    limit = steps_per_call_limit(config, machine)
    if limit is not None and is_chief:
        announce_cpu_run(step, total, log_every, stream, config.parallel_micro_batches)
    train_steps = make_train_function(run.model, strategy, config.jit_compile)
    with StopRequest(stream) as stop:
        result = _train_loop(run, train_steps, reporter, stop, limit, log_every)
    reporter.close()
    result.interrupted_by = stop.signum
    if stop.signum is not None:
        print(
            f"Stopped at step {result.step}; saved {result.checkpoint}. Run the same command "
            "again to resume.",
            file=stream,
            flush=True,
        )
    return result


def _train_loop(
    run: _Run,
    train_steps: Any,
    reporter: ProgressReporter,
    stop: StopRequest,
    limit: int | None,
    log_every: int,
) -> TrainResult:
    """Compiled calls until the last step or a signal: a report every `log_every` steps, a
    checkpoint every `save_checkpoints_steps` and at the end."""
    config, optimizer, checkpoints = run.config, run.optimizer, run.checkpoints
    step, total = int(optimizer.iterations.numpy()), config.num_train_steps
    result = TrainResult(step)
    tokens, saved_step = 0, step
    while step < total and stop.signum is None:
        num_steps = next_boundary(config, step, log_every) - step
        if limit is not None:
            num_steps = min(num_steps, limit)
        started = time.monotonic()
        local = run_steps(
            train_steps, run.iterator, num_steps, config, checkpoints, optimizer, saved_step,
            run.files,
        )  # fmt: skip
        if limit is not None:
            limit = next_steps_per_call(config, (time.monotonic() - started) / num_steps)
        tokens += local * run.num_workers
        previous, step = step, int(optimizer.iterations.numpy())
        stopping = step >= total or stop.signum is not None
        saving = step % config.save_checkpoints_steps == 0 or stopping
        stop_if_diverged(run.model, run.checkpoints, run.config, saving, previous, step)
        if step % log_every == 0 or stopping:
            lr = current_learning_rate(optimizer)
            result.metrics = reporter.report(step, metric_values(run.model), tokens, lr)
            reset_metrics(run.model)
            tokens = 0
        elif limit is not None:
            reporter.heartbeat(step, tokens, HEARTBEAT_SECONDS)
        if saving:
            result.checkpoint, saved_step = checkpoints.save(step), step
    if saved_step != step:  # a signal that arrived after the last boundary check
        stop_if_diverged(run.model, checkpoints, run.config, True, saved_step, step)
        result.checkpoint = checkpoints.save(step)
    result.step = step
    return result
