"""How long one pre-training step of a config takes: the pilot of `compare_objectives`.

    python -m electra_tf.evaluation.pilot --data-dir D --preset P --hparams H.json --out pilot.json \\
        [--warmup-steps 5] [--timed-steps 30] [--launched-at EPOCH_SECONDS]

Builds exactly what `python -m electra_tf.pretrain` builds for the same arguments (the config
through the CLI's own `build_config`, the model, optimizer, input pipeline and compiled
multi-step train function of `electra_tf.runs.pretraining_model`), runs `--warmup-steps` steps, then
times `--timed-steps` more. Nothing is written to the model directory. The JSON it writes:

- `seconds_per_step`: the timed steps' wall time over their number;
- `startup_seconds`: from `--launched-at` (the launcher's clock when it started this process;
  default: when this module was imported) to the end of the first step, i.e. interpreter and
  TensorFlow start-up, input pipeline, model build and graph tracing: what a real run pays once;
- `pilot_seconds`: from `--launched-at` to the end of the timed steps;
- `real_tokens_per_step`: mean tokens with `input_mask` 1 per step over the timed steps;
- `config`: the resolved config (what the comparison reads shapes, vocabulary and batch from).

Run it in the conditions the real run will have (same thread settings, same core pinning,
the same neighbour on the other core): a step's time depends on them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

STARTED = time.time()  # before TensorFlow is imported: start-up counts


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--model-name", default="pilot", help="only names the config")
    parser.add_argument("--preset", default=None)
    parser.add_argument("--hparams", default="{}")
    parser.add_argument("--out", required=True, help="where the JSON result goes")
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--timed-steps", type=int, default=30)
    parser.add_argument("--launched-at", type=float, default=None)
    args = parser.parse_args(argv)
    if args.warmup_steps < 1 or args.timed_steps < 1:
        parser.error("--warmup-steps and --timed-steps must be >= 1")
    return args


def measure(config: Any, warmup_steps: int, timed_steps: int, launched_at: float) -> dict:
    """Step timings of `config`'s training step (see the module docstring)."""
    import tensorflow as tf
    import tf_keras as keras

    from electra_tf.data.pretraining_input import check_input_files, match_files
    from electra_tf.runs import pretraining_data, pretraining_model
    from electra_tf.runs import strategy as strategy_module

    # Bad input files fail here, naming the file, as they do in a real run.
    files = match_files(config.resolved_pretrain_tfrecords())
    check_input_files(files, config.max_seq_length, config.vocab_size)
    keras.mixed_precision.set_global_policy(config.precision)
    keras.utils.set_random_seed(config.seed)
    strategy = strategy_module.build_strategy(config)
    with strategy.scope():
        model = pretraining_model.build_model(config)
        optimizer = pretraining_model.build_optimizer(config, model)
        model.compile(optimizer=optimizer)
    pattern = config.resolved_pretrain_tfrecords()
    dataset = pretraining_data.make_dataset(
        config, strategy, pattern, config.train_batch_size, True
    )
    iterator = iter(dataset)
    train_steps = pretraining_model.make_train_function(model, strategy, config.jit_compile)

    # One step first, alone: the real loop's first call is one step too, and it is the one that
    # traces the graph, so its end marks where a run's fixed cost stops.
    int(train_steps(iterator, tf.constant(1)))
    first_step_done = time.time()
    if warmup_steps > 1:
        int(train_steps(iterator, tf.constant(warmup_steps - 1)))
    # The timed steps run as one call of the compiled loop: the real loop's calls on a CPU are
    # sized to ~2 s, so Python between calls is noise next to the steps themselves.
    start = time.perf_counter()
    tokens = int(train_steps(iterator, tf.constant(timed_steps)))
    seconds = time.perf_counter() - start
    return {
        "seconds_per_step": seconds / timed_steps,
        "startup_seconds": first_step_done - launched_at,
        "pilot_seconds": time.time() - launched_at,
        "warmup_steps": warmup_steps,
        "timed_steps": timed_steps,
        "real_tokens_per_step": tokens / timed_steps,
        "steps_run": int(optimizer.iterations.numpy()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    launched_at = args.launched_at if args.launched_at is not None else STARTED
    from electra_tf.cli.pretrain import build_config
    from electra_tf.config import ConfigError
    from electra_tf.runtime.device_defaults import probe_machine

    try:
        # The machine's "auto" choices, as the pre-training command makes them.
        config = build_config(args, probe_machine())
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from electra_tf.runtime.tf_startup import start_tensorflow

    start_tensorflow()
    from electra_tf.data.pretraining_input import InputDataError

    try:
        result = measure(config, args.warmup_steps, args.timed_steps, launched_at)
    except (ConfigError, FileNotFoundError, InputDataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result["config"] = config.to_dict()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    from electra_tf.runtime.atomic_io import write_json

    write_json(args.out, result, indent=2, sort_keys=True)
    print(
        f"pilot: {result['seconds_per_step'] * 1000:.1f} ms/step over {args.timed_steps} steps, "
        f"start-up {result['startup_seconds']:.1f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
