"""The whole runs `bench_train`'s `*-run` rows time: a command end to end, in the worker's
process, set beside the step that `bench/project_step.py` times.

- `run_whole_finetuning` (`finetune-run`, `finetune-run-csv`, `finetune-run-ckpt`):
  `python -m electra_tf.finetune` on a synthetic SST-2-format task, its evaluation beside the
  task's serving export, its training checkpoints timed (`timed_run`).
- `run_whole_pretraining` (`pretrain-run`): `python -m electra_tf.pretrain` on synthetic
  TFRecords, its time cut into phases (`timed_pretraining`, `phase_breakdown`): start-up to the
  first step, the first step's trace, the input pipeline, the steps, checkpoints, metrics and
  logging, evaluation (none: a training run of the command evaluates nothing), and the rest.

Nothing here imports TensorFlow at the module's top: the pre-training run's start-up counts
the imports the command itself pays.
"""

from __future__ import annotations

import atexit
import contextlib
import csv
import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from electra_tf.runtime.atomic_io import write_json


def whole_run(settings: dict[str, Any], args: Any) -> dict[str, Any]:
    """A `bench_train` worker's record of the whole run `settings` describes (its CONFIGS
    entry), at `args.batch` x `args.seq`; `args.run_steps` (pre-training: the run's steps, 0:
    the entry's) and `args.hparams` (pre-training: config fields over the small preset's, e.g.
    the tests' tiny model). A fine-tuning run reads only the entry's own hparams."""
    if settings["kind"] == "pretrain-run":
        return run_whole_pretraining(
            args.batch,
            args.seq,
            args.run_steps or settings["steps"],
            json.loads(args.hparams),
            checkpoints=settings["checkpoints"],
            log_every=settings["log_every"],
        )
    sizes = (settings["examples"], settings["dev"])
    return run_whole_finetuning(
        args.batch, args.seq, *sizes, user_csv=settings.get("csv", False),
        hparams=settings.get("hparams"),
    )  # fmt: skip


# ---------------------------------------------------------------------------------- fine-tuning
def write_run_data(data_dir: str, seq: int, examples: int, dev: int, user_csv: bool) -> str:
    """The whole run's vocabulary and synthetic task under `data_dir`; returns the task's name
    (`run_whole_finetuning`)."""
    from bench.project_step import write_bench_vocab

    write_bench_vocab(data_dir, 30522)
    task = "mine" if user_csv else "sst"
    task_dir = os.path.join(data_dir, "finetuning_data", task)
    os.makedirs(task_dir)
    rng = np.random.default_rng(0)
    for split, count in (("train", examples), ("dev", dev)):
        # seq - 2 one-token words: every sentence fills max_seq_length with [CLS] and [SEP].
        words = rng.integers(1000, 30000, size=(count, seq - 2))
        rows = [["sentence", "label"]] + [
            [" ".join(f"w{w}" for w in row), str(i % 2)] for i, row in enumerate(words)
        ]
        dialect = {"quoting": csv.QUOTE_ALL} if user_csv else {"dialect": "excel-tab"}
        path = os.path.join(task_dir, f"{split}.{'csv' if user_csv else 'tsv'}")
        with open(path, "w", newline="", encoding="utf-8") as f:
            csv.writer(f, lineterminator="\r\n" if user_csv else "\n", **dialect).writerows(rows)
    if user_csv:  # found by `--tasks mine`
        spec = dict(kind="classification", train="train.csv", dev="dev.csv", text="sentence")
        write_json(os.path.join(task_dir, "task.json"), spec)
    return task


def run_whole_finetuning(
    batch: int,
    seq: int,
    examples: int,
    dev: int,
    epochs: int = 3,
    user_csv: bool = False,
    hparams: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`python -m electra_tf.finetune` end to end (in this process, from its start: tokenizing,
    every epoch, the checkpoint, evaluation, the results) on a synthetic SST-2-format task of
    `examples` full-length train sentences and `dev` dev sentences (`user_csv`: as a user's
    quoted CSV task with its task.json), ELECTRA-Small randomly initialised, float32; a bench
    record of its training tokens/s over the whole run ("step_s": seconds per training step)
    and of its training checkpoints ("ckpt_ms": the median save, "ckpt_count"). `hparams`:
    settings over the run's (e.g. `save_checkpoints_steps`)."""
    from bench.serving_graph import time_task_export
    from electra_tf.cli import finetune
    from electra_tf.runtime.tf_startup import start_tensorflow

    data_dir = tempfile.mkdtemp(prefix="electra-bench-finetune-run-")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    task = write_run_data(data_dir, seq, examples, dev, user_csv)
    hparams = {"model_size": "small", "init_checkpoint": "", "max_seq_length": seq,
               "train_batch_size": batch, "num_train_epochs": epochs, "num_trials": 1,
               **(hparams or {})}  # fmt: skip
    argv = ["--data-dir", data_dir, "--model-name", "bench", "--tasks", task]
    # The thread pools `python -m electra_tf.finetune` sets as a program (main, called with
    # argv, leaves this process's alone).
    start_tensorflow(*finetune.layout_threads(json.dumps(hparams)))
    with timed_run() as (predict_seconds, checkpoint_seconds):
        start = time.perf_counter()
        if finetune.main([*argv, "--hparams", json.dumps(hparams)]):
            raise RuntimeError("the fine-tuning run failed (its output is above)")
        wall = time.perf_counter() - start
    steps = -(-examples // batch) * epochs  # the train split padded to whole batches
    # Evaluation's batches after the first (which traces), against the serving export of the
    # same model at the same batch, both in this process's thread pools (the run's layout).
    eval_ms = 1000 * float(np.median(predict_seconds[1:] or predict_seconds))
    export_ms = time_task_export(data_dir, batch, seq, task)  # bench/serving_graph.py
    return {"params": 0, "step_s": wall / steps, "tokens_per_s": steps * batch * seq / wall,
            "shape": [batch, seq], "build_s": 0.0, "precision": "float32", "jit_compile": False,
            "eval_ms": eval_ms, "export_ms": export_ms,
            "ckpt_ms": 1000 * float(np.median(checkpoint_seconds or [0.0])),
            "ckpt_count": len(checkpoint_seconds)}  # fmt: skip


@contextlib.contextmanager
def timed_run():
    """The seconds of every prediction call (`ModelRunner._predict`: one evaluation batch) and
    of every training checkpoint (`TrainingCheckpoints.save` of a state with an optimizer, not
    the final weights or the best model) of the runs made inside: (predictions, checkpoints)."""
    from electra_tf.checkpoints.training_state import TrainingCheckpoints
    from electra_tf.runs.finetuning import ModelRunner

    predictions: list[float] = []
    saves: list[float] = []
    init, save = ModelRunner.__init__, TrainingCheckpoints.save

    def timing_init(runner, *args, **kwargs):
        init(runner, *args, **kwargs)
        predict = runner._predict

        def timed(features):
            start = time.perf_counter()
            outputs = predict(features)
            predictions.append(time.perf_counter() - start)
            return outputs

        runner._predict = timed

    def timing_save(checkpoints, step):
        start = time.perf_counter()
        path = save(checkpoints, step)
        if getattr(checkpoints.checkpoint, "optimizer", None) is not None:
            saves.append(time.perf_counter() - start)
        return path

    ModelRunner.__init__, TrainingCheckpoints.save = timing_init, timing_save
    try:
        yield predictions, saves
    finally:
        ModelRunner.__init__, TrainingCheckpoints.save = init, save


# ---------------------------------------------------------------------------------- pre-training
def write_pretraining_data(data_dir: str, records: int, seq: int, vocab: int, shards: int = 4):
    """vocab.txt (`vocab` entries) and `records` full-length two-segment sequences in
    pretrain_tfrecords/pretrain_data.tfrecord-{0..shards-1}: [CLS] a [SEP] b [SEP], no padding,
    as `project_step.synthetic_batches` feeds the step (the run's default paths)."""
    import tensorflow as tf

    from bench.project_step import CLS_ID, SEP_ID, write_bench_vocab

    write_bench_vocab(data_dir, vocab)
    folder = os.path.join(data_dir, "pretrain_tfrecords")
    os.makedirs(folder)
    rng = np.random.default_rng(0)
    split = seq // 2
    segments = [0] * split + [1] * (seq - split)

    def feature(values: list[int]) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    for shard in range(shards):
        ids = rng.integers(min(1000, vocab // 2), vocab, size=(-(-records // shards), seq))
        ids[:, 0], ids[:, split - 1], ids[:, -1] = CLS_ID, SEP_ID, SEP_ID
        path = os.path.join(folder, f"pretrain_data.tfrecord-{shard}")
        with tf.io.TFRecordWriter(path) as writer:
            for row in ids.tolist():
                features = {"input_ids": feature(row), "input_mask": feature([1] * seq)}
                features["segment_ids"] = feature(segments)
                example = tf.train.Example(features=tf.train.Features(feature=features))
                writer.write(example.SerializeToString())


def run_whole_pretraining(
    batch: int,
    seq: int,
    steps: int,
    hparams: dict[str, Any] | None = None,
    checkpoints: int = 3,
    log_every: int = 10,
) -> dict[str, Any]:
    """`python -m electra_tf.pretrain --preset small` end to end in this process (`main`, as
    the command calls it): `steps` steps at `batch` x `seq`, a checkpoint every
    `steps // checkpoints` steps, a progress line every `log_every`, on full-length synthetic
    TFRecords, the settings the preset and this machine resolve ("auto" ones as the `default`
    step row resolves them) and `hparams` over them. A bench record: the whole run's tokens/s
    (the imports the command pays, to its exit), its training calls' tokens/s ("steady",
    after the first call), and its `phases` in seconds, which add up to its wall time."""
    started = time.perf_counter()
    # The imports the command pays before its first step, in its order: `electra_tf.cli`
    # first, whose start-up settings (`runtime/tf_startup.py`: the tf_keras line) keep
    # `import tensorflow` from importing Keras 3 as well (about 0.9 s on a 2-core Zen 4 that
    # `python -m electra_tf.pretrain` never pays), then TensorFlow and the run (inside main).
    from electra_tf.cli import pretrain  # noqa: I001 (first: the order is the point)

    import tensorflow  # noqa: F401
    import tf_keras  # noqa: F401

    from electra_tf.runs import pretraining  # noqa: F401

    imports = time.perf_counter() - started
    data_dir = tempfile.mkdtemp(prefix="electra-bench-pretrain-run-")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    values = {"train_batch_size": batch, "max_seq_length": seq, "num_train_steps": steps,
              "save_checkpoints_steps": max(1, steps // checkpoints),
              "log_every_steps": min(log_every, steps), **(hparams or {})}  # fmt: skip
    write_pretraining_data(data_dir, steps * batch, seq, values.get("vocab_size", 30522))
    argv = ["--data-dir", data_dir, "--model-name", "bench", "--preset", "small"]
    with timed_pretraining() as clock:
        start = time.perf_counter()
        if pretrain.main([*argv, "--hparams", json.dumps(values)]):
            raise RuntimeError("the pre-training run failed (its output is above)")
        end = time.perf_counter()
    per_batch = input_seconds_per_batch(clock)
    phases = phase_breakdown(clock, imports, end - start, start, per_batch)
    wall = imports + end - start
    steady = clock.calls[1:] or clock.calls
    steady_s, steady_steps = sum(c[1] for c in steady), sum(c[2] for c in steady)
    config = clock.dataset_call[1][0]  # make_dataset(config, ...): the run's resolved config
    from bench.project_step import resolved_layout

    return {"params": clock.params, "step_s": wall / steps,
            "tokens_per_s": steps * batch * seq / wall, "shape": [batch, seq], "build_s": 0.0,
            **resolved_layout(config, bool(config.jit_compile)),
            "steady_tokens_per_s": steady_steps * batch * seq / steady_s, "run_steps": steps,
            "wall_s": wall, "phases": phases, "input_ms": 1000 * per_batch,
            "call_steps": [c[2] for c in clock.calls],
            "ckpt_count": clock.counts["checkpoints"],
            "ckpt_ms": 1000 * clock.seconds["checkpoints"] / max(1, clock.counts["checkpoints"])}  # fmt: skip


class PhaseClock:
    """What `timed_pretraining` records: seconds and calls by phase, every compiled training
    call (start, seconds, steps), the trainable parameters, the run's `make_dataset` call."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.calls: list[tuple[float, float, int]] = []
        self.params = 0
        self.trace_s = 0.0  # the first call's Python trace (building its graph)
        self.dataset_call: tuple[Callable, tuple, dict] | None = None

    def timing(self, phase: str, function: Callable) -> Callable:
        """`function`, its time added to `phase`."""

        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start
                self.counts[phase] += 1

        return call

    def train_function(self, make: Callable) -> Callable:
        """`make_train_function`, its function's calls timed to their end (the tokens read)."""

        def made(model, *args, **kwargs):
            self.params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
            train_steps = make(model, *args, **kwargs)

            def timed_steps(iterator, num_steps):
                start = time.perf_counter()
                if not self.calls:  # the trace alone, before the first call reuses it
                    train_steps.get_concrete_function(iterator, num_steps)
                    self.trace_s = time.perf_counter() - start
                tokens = train_steps(iterator, num_steps)
                tokens.numpy()  # the call is over (the loop reads it next, as int)
                self.calls.append((start, time.perf_counter() - start, int(num_steps)))
                return tokens

            return timed_steps

        return made

    def dataset(self, make: Callable) -> Callable:
        def made(*args, **kwargs):
            self.dataset_call = (make, args, kwargs)
            return make(*args, **kwargs)

        return made


@contextlib.contextmanager
def timed_pretraining() -> Iterator[PhaseClock]:
    """The pre-training runs made inside, timed (a `PhaseClock`): their compiled training calls,
    checkpoint saves ("checkpoints"), and the Python between calls that reads the metrics,
    checks them and the weights for NaN, writes the progress line and TensorBoard's scalars
    ("metrics")."""
    from electra_tf.checkpoints.training_state import TrainingCheckpoints
    from electra_tf.runs import pretraining
    from electra_tf.runs.progress import ProgressReporter

    clock = PhaseClock()
    metrics = ("stop_if_diverged", "metric_values", "reset_metrics", "current_learning_rate")
    patches = [(pretraining, name, clock.timing("metrics", getattr(pretraining, name)))
               for name in metrics]  # fmt: skip
    patches += [(ProgressReporter, name, clock.timing("metrics", getattr(ProgressReporter, name)))
                for name in ("report", "heartbeat", "close")]  # fmt: skip
    patches += [
        (TrainingCheckpoints, "save", clock.timing("checkpoints", TrainingCheckpoints.save)),
        (pretraining, "make_train_function", clock.train_function(pretraining.make_train_function)),
        (pretraining, "make_dataset", clock.dataset(pretraining.make_dataset)),
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, patched in patches:
        setattr(owner, name, patched)
    try:
        yield clock
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def input_seconds_per_batch(clock: PhaseClock, batches: int = 20) -> float:
    """Seconds a batch of the run's own input pipeline (a fresh one, built by the run's
    `make_dataset` call) takes read alone, after its first batch (opening the files)."""
    make, args, kwargs = clock.dataset_call
    iterator = iter(make(*args, **kwargs))
    next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return (time.perf_counter() - start) / batches


def phase_breakdown(
    clock: PhaseClock, imports: float, main_s: float, main_start: float, per_batch: float
) -> dict[str, float]:
    """A run's wall time (`imports`, then `main_s` seconds of `main` from `main_start`) in
    phases: "start-up" (the imports, then main to its first training call), "first trace"
    (that call's Python trace, building its graph), "first call" (the rest of that call beyond
    the steps it ran, at the later calls' seconds a step: the graph optimiser, XLA's
    compilation of the fused clusters, the first allocations), "input" (the
    pipeline's own time, `per_batch` read alone, for each step after the first call: an upper
    bound of what those steps waited for it, taken out of "steps"), "steps", "checkpoints",
    "metrics and logging", "evaluation" (0: the command trains or evaluates), "other" (the
    rest: the loop's own Python, the end of the run; below 0 only where two phases overlap)."""
    (first_start, first_s, first_steps), *later = clock.calls
    later_s, later_steps = sum(c[1] for c in later), sum(c[2] for c in later)
    per_step = later_s / later_steps if later_steps else first_s / first_steps
    first_call = max(0.0, first_s - clock.trace_s - per_step * first_steps)
    input_s = min(later_s, per_batch * later_steps)
    phases = {
        "start-up": imports + first_start - main_start,
        "first trace": clock.trace_s,
        "first call": first_call,
        "input": input_s,
        "steps": first_s - clock.trace_s - first_call + later_s - input_s,
        "checkpoints": clock.seconds["checkpoints"],
        "metrics and logging": clock.seconds["metrics"],
        "evaluation": 0.0,
    }
    phases["other"] = imports + main_s - sum(phases.values())
    return phases
