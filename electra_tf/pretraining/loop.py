"""The pre-training run: build under a distribution strategy, train with resumable checkpoints.

`train(config)` is the original's `run_pretraining.py` with `do_train`; `evaluate(config)` is
`do_eval`. One code path from a 20-step debug run to a 1M-step run:

- The model's own `train_step` runs `iterations_per_loop` times inside ONE `tf.function` call
  (the original's TPU `iterations_per_loop`), so Python runs once per loop, not once per step.
- The step counter is the optimizer's `iterations` (the original's `global_step`); the LR
  schedule reads it, checkpoints are numbered by it and training stops when it reaches
  `num_train_steps`. A restart restores it with everything else and carries on.
  On a CPU (no accelerator, one worker) a call is sized to about two seconds instead, so
  progress lines come at least every 30 s and a signal is seen within a step.
- SIGINT / SIGTERM finish the current call, save a checkpoint at the step reached, and return
  the signal number (the CLI exits with 128 + signal, i.e. 130 for Ctrl-C).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

import tensorflow as tf
import tf_keras as keras

from electra_tf.atomic_io import write_json
from electra_tf.checkpoints.files import CONFIG_FILE
from electra_tf.checkpoints.native import restore_weights
from electra_tf.checkpoints.recovery import holds_checkpoints
from electra_tf.checkpoints.training_state import (
    TrainingCheckpoints,
    check_resumable,
    write_run_config,
)
from electra_tf.config import ConfigError, PretrainingConfig
from electra_tf.data.pretraining_input import (
    InputDataError,
    check_input_files,
    locate_corrupt_record,
    match_files,
)
from electra_tf.optimization import create_optimizer
from electra_tf.pretraining.progress import ProgressReporter
from electra_tf.run_lock import RunLock, ensure_writable

TENSORBOARD_DIR = "tensorboard"
RESULTS_DIR = "results"


@dataclass
class TrainResult:
    """What a training run ended with."""

    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    checkpoint: str | None = None
    interrupted_by: int | None = None  # signal number when stopped by SIGINT / SIGTERM


# ---------------------------------------------------------------------- distribution
def build_strategy(config: PretrainingConfig) -> tf.distribute.Strategy:
    """The strategy named by `config.distribution_strategy` (multi-worker reads TF_CONFIG)."""
    name = config.distribution_strategy
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=config.tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ConfigError(
        f"distribution_strategy: {name!r} is not default/mirrored/multi_worker_mirrored/tpu"
    )


def worker_role(strategy: tf.distribute.Strategy) -> tuple[bool, int, int]:
    """(is_chief, task id, number of workers): only the chief writes checkpoints, logs and
    TensorBoard."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return True, 0, 1
    task_type, task_id = resolver.task_type, resolver.task_id or 0
    cluster = resolver.cluster_spec().as_dict()
    has_chief = "chief" in cluster
    is_chief = task_type == "chief" or (not has_chief and task_type == "worker" and task_id == 0)
    num_workers = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
    return is_chief, task_id, num_workers


# ---------------------------------------------------------------------- building blocks
def make_dataset(
    config: PretrainingConfig,
    strategy: tf.distribute.Strategy,
    file_pattern: str,
    global_batch_size: int,
    is_training: bool,
    seed: int | None = None,
) -> Any:
    """The pre-training input, batched per replica when distributed (seed: config.seed)."""
    from electra_tf.data.pretraining_input import pretraining_dataset

    def dataset_fn(context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        batch = global_batch_size
        if context is not None:
            batch = context.get_per_replica_batch_size(global_batch_size)
        return pretraining_dataset(
            file_pattern,
            batch,
            config.max_seq_length,
            is_training=is_training,
            seed=config.seed if seed is None else seed,
            input_context=context,
        )

    if strategy.num_replicas_in_sync == 1 and not isinstance(
        strategy, tf.distribute.TPUStrategy | tf.distribute.MultiWorkerMirroredStrategy
    ):
        return dataset_fn()
    return strategy.distribute_datasets_from_function(dataset_fn)


def special_token_ids(config: PretrainingConfig) -> dict[str, int]:
    """[CLS], [SEP] and [MASK] ids from the run's vocabulary (not assumed from BERT's)."""
    from electra_tf.data.tokenization import load_vocab

    try:
        vocab = load_vocab(config.resolved_vocab_file())
    except (OSError, ValueError) as e:
        raise ConfigError(f"vocab_file: {e}") from e
    return {"cls_id": vocab["[CLS]"], "sep_id": vocab["[SEP]"], "mask_id": vocab["[MASK]"]}


def build_model(config: PretrainingConfig) -> keras.Model:
    """The pretrainer with every variable created (call under the strategy's scope)."""
    from electra_tf.pretraining.pretrainer import ElectraPretrainer

    model = ElectraPretrainer(config, **special_token_ids(config))
    if hasattr(model, "build_variables"):
        model.build_variables()
    return model


def generator_lr_multipliers(
    variable_map: dict[str, tf.Variable], multiplier: float
) -> dict[str, float]:
    """`generator_lr_multiplier` for every generator-only variable (the masked-LM generator's,
    or the two-tower cloze model's of Electric); {} at 1.0 (the original)."""
    if multiplier == 1.0:
        return {}
    prefixes = (
        "generator/",
        "generator_predictions/",
        "generator_ltr/",
        "generator_rtl/",
        "cloze_predictions/",
    )
    return {name: multiplier for name in variable_map if name.startswith(prefixes)}


def build_optimizer(config: PretrainingConfig, model: keras.Model) -> keras.optimizers.Optimizer:
    """AdamWeightDecay on the original's schedule; wrapped for loss scaling under float16."""
    variable_map = model.variable_map()
    optimizer = create_optimizer(
        variable_map,
        lr_multipliers=generator_lr_multipliers(variable_map, config.generator_lr_multiplier),
        learning_rate=config.learning_rate,
        num_train_steps=config.num_train_steps,
        weight_decay_rate=config.weight_decay_rate,
        warmup_steps=config.num_warmup_steps,
        lr_decay_power=config.lr_decay_power,
        adam_bias_correction=config.adam_bias_correction,
    )
    if config.precision == "mixed_float16":
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
    # Slots exist before any restore, so a checkpoint fills them instead of deferring.
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    inner.build(model.trainable_variables)
    return optimizer


def load_init_checkpoint(model: keras.Model, config: PretrainingConfig) -> str:
    """Continued pre-training: the weights of `init_checkpoint`, no optimizer state."""
    path, fmt = config.init_checkpoint, config.init_checkpoint_format
    assert path is not None
    if fmt == "auto":
        from electra_tf.checkpoints import detect_format

        fmt = detect_format(path)
    if fmt == "native":
        restore_weights(model, path)
    else:
        # Original TF1 and Hugging Face weights go through the checkpoint converter's loader.
        from electra_tf.checkpoints import load_weights

        load_weights(model, path, fmt)
    return fmt


def _metric_values(model: keras.Model) -> dict[str, float]:
    return {m.name: float(m.result()) for m in model.metrics}


def _reset_metrics(model: keras.Model) -> None:
    for metric in model.metrics:
        metric.reset_state()


def make_train_function(model: keras.Model, strategy: tf.distribute.Strategy, jit: bool) -> Any:
    """`fn(iterator, num_steps) -> real tokens seen`: many train steps per Python call."""
    # `train_update` (the pretrainer's) skips reading the metrics after every step.
    update = getattr(model, "train_update", model.train_step)
    step_fn = tf.function(update, jit_compile=True) if jit else update

    def replica_step(batch: dict[str, tf.Tensor]) -> tf.Tensor:
        step_fn(batch)
        return tf.reduce_sum(tf.cast(batch["input_mask"], tf.int64))

    # Tokens are summed over this worker's replicas only: a cross-worker int64 all-reduce in
    # the loop made MultiWorkerMirroredStrategy workers disagree on collective instance keys.
    # The caller scales by the number of workers (a display figure).
    @tf.function
    def train_steps(iterator: Any, num_steps: tf.Tensor) -> tf.Tensor:
        tokens = tf.constant(0, tf.int64)
        for _ in tf.range(num_steps):
            per_replica = strategy.run(replica_step, args=(next(iterator),))
            tokens += tf.add_n(strategy.experimental_local_results(per_replica))
        return tokens

    return train_steps


class _StopRequest:
    """Turns the first SIGINT/SIGTERM into a request to save and stop; a second one aborts."""

    def __init__(self, stream: TextIO):
        self.signum: int | None = None
        self.stream = stream
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopRequest:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum
        print(
            f"\n{signal.Signals(signum).name} received: saving a checkpoint after the current "
            "step(s), then stopping (send it again to abort without saving).",
            file=self.stream,
            flush=True,
        )
        signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))


# ---------------------------------------------------------------------- training
def check_accumulation(config: PretrainingConfig, strategy: tf.distribute.Strategy) -> None:
    """Each replica's batch must split into `gradient_accumulation_steps` equal micro-batches."""
    per_replica = config.train_batch_size // strategy.num_replicas_in_sync
    if per_replica % config.gradient_accumulation_steps:
        raise ConfigError(
            f"gradient_accumulation_steps {config.gradient_accumulation_steps} does not divide "
            f"the per-replica batch {per_replica} (train_batch_size {config.train_batch_size} "
            f"over {strategy.num_replicas_in_sync} replicas)"
        )


def prepare_model_dir(config: PretrainingConfig, model_dir: str, is_chief: bool) -> None:
    """Refuses to resume a differently shaped model; the chief writes the run's config."""
    resuming = holds_checkpoints(model_dir)
    saved_config = os.path.join(model_dir, CONFIG_FILE)
    if resuming and os.path.exists(saved_config):
        check_resumable(saved_config, config)
    if is_chief:
        write_run_config(config, model_dir)


def next_boundary(config: PretrainingConfig, step: int, log_every: int) -> int:
    """The first step after `step` at which the loop must return to Python: the end of an
    `iterations_per_loop` loop, a log line, a checkpoint or the last step."""
    return min(
        step + config.iterations_per_loop,
        (step // log_every + 1) * log_every,
        (step // config.save_checkpoints_steps + 1) * config.save_checkpoints_steps,
        config.num_train_steps,
    )


def _resume(
    config: PretrainingConfig,
    checkpoints: TrainingCheckpoints,
    model: keras.Model,
    optimizer: Any,
    strategy: tf.distribute.Strategy,
    pattern: str,
    iterator: Any,
    track_data: bool,
    stream: TextIO,
) -> tuple[str | None, Any]:
    """Restores the latest checkpoint of the model dir, else loads `init_checkpoint` if set.
    Returns the restored prefix (None when starting fresh) and the input iterator to use."""
    restored = checkpoints.restore_latest(stream)
    if restored:
        print(
            f"Resuming from {restored} (step {int(optimizer.iterations.numpy())})",
            file=stream,
            flush=True,
        )
        if not track_data:
            iterator = _restarted_input(config, strategy, pattern, optimizer, stream)
    elif config.init_checkpoint:
        _start_from_init_checkpoint(config, model, optimizer, stream)
    return restored, iterator


def _restarted_input(
    config: PretrainingConfig,
    strategy: tf.distribute.Strategy,
    pattern: str,
    optimizer: Any,
    stream: TextIO,
) -> Any:
    """A new input stream, reseeded by the step, for inputs whose position cannot be restored."""
    seed = config.seed + int(optimizer.iterations.numpy())
    iterator = iter(make_dataset(config, strategy, pattern, config.train_batch_size, True, seed))
    print(f"Input restarted with seed {seed} (position not restorable)", file=stream)
    return iterator


def _start_from_init_checkpoint(
    config: PretrainingConfig, model: keras.Model, optimizer: Any, stream: TextIO
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


def train(config: PretrainingConfig, stream: TextIO | None = None) -> TrainResult:
    """Trains to `config.num_train_steps`, resuming from the latest checkpoint in the model dir.

    The chief holds the model dir's lock for the whole run: a second writer is refused before
    it touches anything (`electra_tf.run_lock`)."""
    stream = stream or sys.stdout
    keras.mixed_precision.set_global_policy(config.precision)
    # Not tf.random.set_seed alone: an unseeded tf_keras initializer draws its seed from
    # Python's `random`, so the initial weights changed from process to process.
    keras.utils.set_random_seed(config.seed)
    strategy = build_strategy(config)
    is_chief, worker_id, num_workers = worker_role(strategy)
    check_accumulation(config, strategy)
    model_dir = config.resolved_model_dir()
    lock = RunLock(model_dir, what="model dir") if is_chief else contextlib.nullcontext()
    with lock:
        os.makedirs(model_dir, exist_ok=True)
        # Bad input files fail here, naming the file, before the model is built.
        files = match_files(config.resolved_pretrain_tfrecords())
        check_input_files(files, config.max_seq_length, config.vocab_size)
        prepare_model_dir(config, model_dir, is_chief)
        return _train(config, stream, strategy, (is_chief, worker_id, num_workers), files)


def steps_per_call_limit(config: PretrainingConfig) -> int | None:
    """None: run `iterations_per_loop` steps per compiled call (accelerators, distributed runs).
    Otherwise the steps of the first call (1); the loop then sizes each call to about
    `CALL_SECONDS` from the time a step took. On a CPU 200 steps were one graph call of minutes
    to hours, and Python (progress lines, Ctrl-C, SIGTERM) only runs between calls. The steps
    run, their order and the checkpoints are the same either way."""
    if config.distribution_strategy != "default":
        return None  # every worker must make the same calls (collectives)
    if tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"):
        return None
    return 1


CALL_SECONDS = 2.0  # CPU: the longest a compiled call should run before Python looks again
HEARTBEAT_SECONDS = 30.0  # CPU: a progress line at least this often


def _build_run(
    config: PretrainingConfig,
    strategy: tf.distribute.Strategy,
    role: tuple[bool, int, int],
    stream: TextIO,
) -> tuple[Any, Any, Any, TrainingCheckpoints, str | None]:
    """(model, optimizer, input iterator, checkpoints, restored checkpoint) of a run, resumed
    from its latest checkpoint when it has one."""
    is_chief, worker_id, _ = role
    with strategy.scope():
        model = build_model(config)
        optimizer = build_optimizer(config, model)
        model.compile(optimizer=optimizer)
    pattern = config.resolved_pretrain_tfrecords()
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": optimizer.iterations}
    iterator = iter(make_dataset(config, strategy, pattern, config.train_batch_size, True))
    # tf.data iterators are checkpointable, tf.distribute's are not: under a strategy with
    # several replicas the input restarts on resume (as the original's), reseeded by the step.
    track_data = isinstance(iterator, tf.data.Iterator)
    if track_data:
        state["data"] = iterator
    checkpoints = TrainingCheckpoints(
        config.resolved_model_dir(),
        config.keep_checkpoint_max,
        is_chief=is_chief,
        worker_id=worker_id,
        **state,
    )
    restored, iterator = _resume(
        config, checkpoints, model, optimizer, strategy, pattern, iterator, track_data, stream
    )
    return model, optimizer, iterator, checkpoints, restored


def _run_steps(
    train_steps: Any,
    iterator: Any,
    num_steps: int,
    config: PretrainingConfig,
    checkpoints: TrainingCheckpoints,
    optimizer: Any,
    saved_step: int,
    files: list[str],
) -> int:
    """One call of the compiled loop: the steps this worker ran, or a one-line error naming the
    data (after saving the steps reached before a corrupt record)."""
    try:
        return int(train_steps(iterator, tf.constant(num_steps)))
    except tf.errors.OutOfRangeError as e:
        raise RuntimeError(
            f"{config.resolved_pretrain_tfrecords()}: the training data ran out"
        ) from e
    except tf.errors.DataLossError as e:
        saved = _save_reached(checkpoints, optimizer, saved_step)
        raise InputDataError(f"{locate_corrupt_record(files) or e.message}; {saved}") from None


def _announce_cpu_run(
    step: int, total: int, log_every: int, stream: TextIO, parts: int = 1
) -> None:
    threading = tf.config.threading
    pools = (
        f"TensorFlow threads intra-op {threading.get_intra_op_parallelism_threads()} / "
        f"inter-op {threading.get_inter_op_parallelism_threads()} (0 = its default)"
    )
    layout = f"the batch as {parts} micro-batches side by side, " if parts > 1 else ""
    print(
        f"Training steps {step}..{total} on CPU ({layout}{pools}): the first step builds the "
        f"graph (up to a minute); then a line every {log_every} steps, and a progress line at "
        f"least every {HEARTBEAT_SECONDS:.0f} s. Ctrl-C saves and stops after the current step.",
        file=stream,
        flush=True,
    )


def _train(
    config: PretrainingConfig,
    stream: TextIO,
    strategy: tf.distribute.Strategy,
    role: tuple[bool, int, int],
    files: list[str],
) -> TrainResult:
    is_chief, worker_id, num_workers = role
    model_dir = config.resolved_model_dir()
    model, optimizer, iterator, checkpoints, restored = _build_run(config, strategy, role, stream)
    step = int(optimizer.iterations.numpy())
    total = config.num_train_steps
    if step >= total:
        print(f"{model_dir} is already trained to step {step} >= {total}", file=stream)
        return TrainResult(step, {}, restored)
    log_every = config.log_every_steps or config.iterations_per_loop
    train_steps = make_train_function(model, strategy, config.jit_compile)
    reporter = ProgressReporter(
        total,
        step,
        os.path.join(model_dir, TENSORBOARD_DIR, "train") if is_chief else None,
        stream if is_chief else io.StringIO(),  # other workers stay quiet
    )
    limit = steps_per_call_limit(config)
    if limit is not None and is_chief:
        _announce_cpu_run(step, total, log_every, stream, config.parallel_micro_batches)
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    result = TrainResult(step)
    tokens, saved_step = 0, step
    with _StopRequest(stream) as stop:
        while step < total and stop.signum is None:
            num_steps = next_boundary(config, step, log_every) - step
            if limit is not None:
                num_steps = min(num_steps, limit)
            started = time.monotonic()
            local = _run_steps(
                train_steps, iterator, num_steps, config, checkpoints, optimizer, saved_step, files
            )
            if limit is not None:
                seconds_per_step = (time.monotonic() - started) / num_steps
                limit = int(
                    max(1, min(config.iterations_per_loop, CALL_SECONDS / seconds_per_step))
                )
            tokens += local * num_workers
            step = int(optimizer.iterations.numpy())
            stopping = step >= total or stop.signum is not None
            if step % log_every == 0 or stopping:
                lr = float(inner.learning_rate.numpy())
                result.metrics = reporter.report(step, _metric_values(model), tokens, lr)
                _reset_metrics(model)
                tokens = 0
            elif limit is not None:
                reporter.heartbeat(step, tokens, HEARTBEAT_SECONDS)
            if step % config.save_checkpoints_steps == 0 or stopping:
                result.checkpoint, saved_step = checkpoints.save(step), step
        if saved_step != step:  # a signal that arrived after the last boundary check
            result.checkpoint = checkpoints.save(step)
    reporter.close()
    result.step = step
    result.interrupted_by = stop.signum
    if stop.signum is not None:
        print(
            f"Stopped at step {step}; saved {result.checkpoint}. Run the same command again "
            "to resume.",
            file=stream,
            flush=True,
        )
    return result


def _save_reached(checkpoints: TrainingCheckpoints, optimizer: Any, saved_step: int) -> str:
    """Saves the step reached before an input error; says what was kept."""
    step = int(optimizer.iterations.numpy())
    if step == saved_step:
        return f"the last checkpoint is at step {step}"
    try:
        return f"saved {checkpoints.save(step)} (step {step}) first"
    except Exception as e:  # the run is failing already: report, do not mask the input error
        return f"could not save step {step} ({type(e).__name__})"


# ---------------------------------------------------------------------- evaluation
def evaluate(
    config: PretrainingConfig, checkpoint: str | None = None, stream: TextIO | None = None
) -> dict[str, float]:
    """`num_eval_steps` batches of `eval_tfrecords` (default: the training files) through the
    model's `test_step`; prints the metrics and writes `<model_dir>/results/eval_step<N>.json`.

    The corruption is drawn from `seed`, the same for every checkpoint (the original drew it
    afresh at each evaluation)."""
    stream = stream or sys.stdout
    model_dir = config.resolved_model_dir()
    keras.mixed_precision.set_global_policy(config.precision)
    tf.random.set_seed(config.seed)
    prefix = checkpoint or tf.train.latest_checkpoint(model_dir)
    if prefix is None:
        raise FileNotFoundError(f"do_eval: no checkpoint in {model_dir}")
    strategy = build_strategy(config)
    if worker_role(strategy)[0]:
        # Fail before evaluating, not after printing the metrics, when results/ is not writable.
        ensure_writable(os.path.join(model_dir, RESULTS_DIR), "results directory")
    with strategy.scope():
        # Not compiled: compile() would attach a default optimizer that the checkpoint's
        # `model/optimizer` entry does not match.
        model = build_model(config)
    status = tf.train.Checkpoint(model=model).read(prefix)
    status.expect_partial()  # optimizer and data position are not needed to evaluate
    status.assert_existing_objects_matched()
    # The restored sampling RNG is the training stream's, at a different state in every
    # checkpoint; reseeding it scores every checkpoint on the same masked positions and Gumbel
    # noise, so differences between checkpoints are the model's, not the draw's.
    model.rng.reset_from_seed(config.seed)
    step = int(tf.train.load_checkpoint(prefix).get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))
    pattern = config.eval_tfrecords or config.resolved_pretrain_tfrecords()
    dataset = make_dataset(config, strategy, pattern, config.eval_batch_size, False)

    @tf.function
    def eval_step(batch: dict[str, tf.Tensor]) -> None:
        strategy.run(model.test_step, args=(batch,))

    _reset_metrics(model)
    start, batches = time.monotonic(), 0
    for batch in dataset:
        if batches >= config.num_eval_steps:
            break
        eval_step(batch)
        batches += 1
    metrics = _metric_values(model)
    results = {**metrics, "global_step": step, "eval_batches": batches}
    seconds = time.monotonic() - start
    line = " | ".join(f"{k} {v:.4f}" for k, v in metrics.items())
    print(f"eval step {step} ({batches} batches, {seconds:.1f}s): {line}", file=stream, flush=True)
    is_chief, _, _ = worker_role(strategy)
    if is_chief:
        out = os.path.join(model_dir, RESULTS_DIR, f"eval_step{step}.json")
        write_json(out, {**results, "checkpoint": prefix}, indent=2, sort_keys=True)
        reporter = ProgressReporter(0, step, os.path.join(model_dir, TENSORBOARD_DIR, "eval"))
        reporter.write_scalars(step, metrics)
        reporter.close()
    return results
