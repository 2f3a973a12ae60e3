"""Evaluating pre-training checkpoints: the original's `do_eval`."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

import tensorflow as tf
import tf_keras as keras

from electra_tf.config import ResolvedPretrainingConfig
from electra_tf.runs.pretraining_data import make_dataset
from electra_tf.runs.pretraining_model import build_model, metric_values, reset_metrics
from electra_tf.runs.progress import TENSORBOARD_DIR, ProgressReporter
from electra_tf.runs.strategy import build_strategy, worker_role
from electra_tf.runtime.atomic_io import write_json
from electra_tf.runtime.run_lock import ensure_writable

RESULTS_DIR = "results"


def evaluate(
    config: ResolvedPretrainingConfig,
    checkpoint: str | None = None,
    stream: TextIO | None = None,
    *,
    strategy: tf.distribute.Strategy | None = None,
) -> dict[str, float]:
    """`num_eval_steps` batches of `eval_tfrecords` (default: the training files) through the
    model's `test_step`; prints the metrics and writes `<model_dir>/results/eval_step<N>.json`.
    `strategy`: one built already (see `train`); None builds it here.

    The corruption is drawn from `seed`, the same for every checkpoint (the original drew it
    afresh at each evaluation)."""
    stream = stream or sys.stdout
    model_dir = config.resolved_model_dir()
    keras.mixed_precision.set_global_policy(config.precision)
    tf.random.set_seed(config.seed)
    prefix = checkpoint or tf.train.latest_checkpoint(model_dir)
    if prefix is None:
        raise FileNotFoundError(f"do_eval: no checkpoint in {model_dir}")
    strategy = build_strategy(config) if strategy is None else strategy
    is_chief = worker_role(strategy)[0]
    if is_chief:
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
    start = time.monotonic()
    batches = _eval_batches(config, strategy, model)
    metrics = metric_values(model)
    results = {**metrics, "global_step": step, "eval_batches": batches}
    seconds = time.monotonic() - start
    line = " | ".join(f"{k} {v:.4f}" for k, v in metrics.items())
    print(f"eval step {step} ({batches} batches, {seconds:.1f}s): {line}", file=stream, flush=True)
    if is_chief:
        _write_eval_results(model_dir, step, prefix, results, metrics)
    return results


def _eval_batches(
    config: ResolvedPretrainingConfig, strategy: tf.distribute.Strategy, model: keras.Model
) -> int:
    """Runs up to `num_eval_steps` evaluation batches into the model's metrics; their count."""
    pattern = config.eval_tfrecords or config.resolved_pretrain_tfrecords()
    dataset = make_dataset(config, strategy, pattern, config.eval_batch_size, False)

    @tf.function
    def eval_step(batch: dict[str, tf.Tensor]) -> None:
        strategy.run(model.test_step, args=(batch,))

    reset_metrics(model)
    batches = 0
    for batch in dataset:
        if batches >= config.num_eval_steps:
            break
        eval_step(batch)
        batches += 1
    return batches


def _write_eval_results(
    model_dir: str, step: int, prefix: str, results: dict, metrics: dict[str, float]
) -> None:
    """`results/eval_step<N>.json` and the eval TensorBoard scalars (the chief's)."""
    out = os.path.join(model_dir, RESULTS_DIR, f"eval_step{step}.json")
    write_json(out, {**results, "checkpoint": prefix}, indent=2, sort_keys=True)
    reporter = ProgressReporter(0, step, os.path.join(model_dir, TENSORBOARD_DIR, "eval"))
    reporter.write_scalars(step, metrics)
    reporter.close()
