"""The project's own pre-training train step timed in one process, on synthetic batches: one
config's speed, or two configs' ratio timed in turn.

    python -m bench.step_speed '{"model_hparam_overrides": {"hidden_size": 256, ...}, ...}' [STEPS]
    python -m bench.step_speed ab [--a JSON] [--b JSON] [--rounds 10] [--steps 10] [--batch 32]
        [--warmup-rounds 2]

A config is the dataclass defaults plus the JSON given (as `--hparams`); the step is the
training loop's own `make_train_function`.

One config: 5 steps to warm up, then STEPS (default 20) in one call; tokens/s. Used to choose
the shipped Gutenberg model's shape (bench/README.md has the figure) and to compare the ELECTRA
step with the masked-LM baseline's (`"electra_objective": false`).

`ab`: A and B both at `--batch` (default `{"precision": "float32"}` against
`{"precision": "mixed_bfloat16"}`: the bfloat16 step's speed-up), each model built and its train
function traced under its own precision policy, from the same seed. `--warmup-rounds` rounds
run untimed: on a Zen 5 a float32 step was still 15% slower in its second and third rounds.
Then every round times `--steps` steps of each, the order alternating from round to round, in
wall time and in the process's CPU time (both cores; the time another process or the hypervisor
takes is not in it). Prints each round and the medians of the per-round ratios B / A, with their
range: for telling a few percent apart, where separate processes (`bench_train`, `make bench`)
drift by more.

Not a benchmark against a peer (that is `make bench`); run it alone on the machine.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # `python bench/step_speed.py`: bench is a package
    raise SystemExit("run it from the repository root as: python -m bench.step_speed")

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf
import tf_keras as keras

from bench.machine import header, load_average, measure_peak
from bench.project_step import apply_config_threads, project_train_steps, write_bench_vocab
from electra_tf.config import ConfigError, pretraining_config
from electra_tf.runtime.device_defaults import probe_machine


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv and argv[0] == "ab":
        return ab_main(argv[1:])
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


# ------------------------------------------------------------------------------------------ ab


def build_step(config):
    """(train function, batch iterator) of one side's resolved config, traced once (3 untimed
    steps)."""
    keras.utils.set_random_seed(1)
    _, steps, iterator = project_train_steps(config)
    steps(iterator, tf.constant(3)).numpy()
    return steps, iterator


def timed(steps, iterator, count: int) -> tuple[float, float]:
    """(wall, CPU) seconds per step over `count` steps."""
    cpu, wall = time.process_time(), time.perf_counter()
    steps(iterator, tf.constant(count)).numpy()
    return (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count


def ab_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.step_speed ab",
        description="Two pre-training configs' train steps timed in one process, in turn.",
    )
    parser.add_argument("--a", default='{"precision": "float32"}', help="config A (JSON)")
    parser.add_argument("--b", default='{"precision": "mixed_bfloat16"}', help="config B (JSON)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per side and round")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup-rounds", type=int, default=2, help="untimed rounds first")
    return parser


def ab_configs(parser, args, data_dir: str) -> tuple[dict, dict]:
    """({side: hparams}, {side: resolved config}); a side that is not JSON, or that the project
    refuses, is a usage error naming it (before the peak is measured)."""
    machine = probe_machine()
    sides, configs = {}, {}
    for name, text in (("A", args.a), ("B", args.b)):
        try:
            hparams = json.loads(text)
        except json.JSONDecodeError as error:
            parser.error(f"--{name.lower()}: not JSON ({error}): {text}")
        sides[name] = {"train_batch_size": args.batch, **hparams}
        try:
            configs[name] = pretraining_config("ab", data_dir, hparams=sides[name], machine=machine)
        except ConfigError as error:
            parser.error(f"--{name.lower()}: {error}")
    return sides, configs


def ab_main(argv: list[str] | None = None) -> int:
    parser = ab_parser()
    args = parser.parse_args(argv)
    data_dir = tempfile.mkdtemp(prefix="electra-ab-step-")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    sides, configs = ab_configs(parser, args, data_dir)
    load_start = load_average()
    peak = measure_peak()  # in a subprocess, with TensorFlow's default threads
    first = configs["A"]
    apply_config_threads(first)  # as the pre-training command would, before any op runs
    write_bench_vocab(data_dir, first.vocab_size)
    built = {}
    for name, hparams in sides.items():
        config = configs[name]
        threads = (config.intra_op_threads, config.inter_op_threads)
        if threads != (first.intra_op_threads, first.inter_op_threads):
            parser.error(
                f"A and B resolve to different thread counts; one process has one: {threads}"
            )
        built[name] = build_step(config)
        print(f"{name}: {json.dumps(hparams)} ({config.precision})", flush=True)
    times = time_rounds(built, args)
    for label, index in (("wall", 0), ("CPU", 1)):
        a = np.array([t[index] for t in times["A"]])
        b = np.array([t[index] for t in times["B"]])
        ratios = b / a
        print(
            f"{label}: A {np.median(a) * 1e3:.0f} ms, B {np.median(b) * 1e3:.0f} ms a step"
            f" (medians); B/A median {np.median(ratios):.3f}, rounds"
            f" {ratios.min():.3f}-{ratios.max():.3f}; A/B {np.median(1 / ratios):.3f}"
        )
    print(header(peak, load_start, load_average()))
    return 0


def time_rounds(built: dict, args) -> dict[str, list[tuple[float, float]]]:
    """{side: [(wall, CPU) seconds a step, a round each]}: `--warmup-rounds` untimed, then
    `--rounds` in alternating order, each round printed."""
    for _ in range(args.warmup_rounds):
        for name in ("A", "B"):
            timed(*built[name], args.steps)
    times: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
    for round_index in range(args.rounds):
        order = ("A", "B") if round_index % 2 == 0 else ("B", "A")
        for name in order:
            times[name].append(timed(*built[name], args.steps))
        (wall_a, cpu_a), (wall_b, cpu_b) = times["A"][-1], times["B"][-1]
        print(
            f"round {round_index + 1}: A {wall_a * 1e3:.0f} ms, B {wall_b * 1e3:.0f} ms a step"
            f" (B/A {wall_b / wall_a:.3f}); CPU A {cpu_a * 1e3:.0f}, B {cpu_b * 1e3:.0f} ms"
            f" (B/A {cpu_b / cpu_a:.3f})",
            flush=True,
        )
    return times


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
