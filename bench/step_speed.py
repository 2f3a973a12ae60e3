"""Tokens/s of the project's own train step for any pre-training config, on synthetic batches.

    python -m bench.step_speed '{"model_hparam_overrides": {"hidden_size": 256, ...}, ...}' [STEPS]

The config is the dataclass defaults plus the JSON given (as `--hparams`); the step is the
training loop's own `make_train_function`, run 5 steps to warm up, then STEPS (default 20) in
one call. Used to choose the shipped Gutenberg model's shape (bench/README.md has the figure)
and to compare the ELECTRA step with the masked-LM baseline's (`"electra_objective": false`).
Not a benchmark against a peer (that is `make bench`); run it alone on the machine.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # `python bench/step_speed.py`: bench is a package
    raise SystemExit("run it from the repository root as: python -m bench.step_speed")

import atexit
import json
import os
import shutil
import sys
import tempfile
import time

import tensorflow as tf

from bench.project_step import apply_config_threads, project_train_steps, write_bench_vocab
from electra_tf.config import ConfigError, pretraining_config
from electra_tf.device_defaults import probe_machine


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    data_dir = tempfile.mkdtemp(prefix="electra-step-speed-")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    try:
        hparams = json.loads(argv[0]) if argv else {}
        steps = int(argv[1]) if len(argv) > 1 else 20
        config = pretraining_config("speed", data_dir, hparams=hparams, machine=probe_machine())
    except (ValueError, ConfigError) as error:  # JSONDecodeError is a ValueError
        print(f"error: {error} (usage: python -m bench.step_speed 'JSON' [STEPS])", file=sys.stderr)
        return 2
    apply_config_threads(config)  # as the pre-training command would
    write_bench_vocab(data_dir, config.vocab_size)
    _, train_steps, iterator = project_train_steps(config)
    train_steps(iterator, tf.constant(5)).numpy()
    start = time.perf_counter()
    train_steps(iterator, tf.constant(steps)).numpy()
    seconds = (time.perf_counter() - start) / steps
    tokens = config.train_batch_size * config.max_seq_length / seconds
    print(
        f"{tokens:,.0f} tokens/s, {seconds * 1000:.0f} ms/step ({config.precision}, "
        f"XLA {bool(config.jit_compile)}, parallel_micro_batches "
        f"{getattr(config, 'parallel_micro_batches', 1)}, threads "
        f"({tf.config.threading.get_intra_op_parallelism_threads()}, "
        f"{tf.config.threading.get_inter_op_parallelism_threads()}), "
        f"load average {os.getloadavg()[0]:.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
