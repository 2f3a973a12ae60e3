"""How many steps one compiled call runs, and what a CPU run says before its first step.

On an accelerator (or in a distributed run) a call runs up to `iterations_per_loop` steps (the
original's TPU loop). On a CPU 200 steps were one graph call of minutes to hours, and Python
(progress lines, Ctrl-C, SIGTERM) only runs between calls: there the first call runs one step
and each later one about `CALL_SECONDS`, from the time a step took. The steps run, their order
and the checkpoints are the same either way.
"""

from __future__ import annotations

from typing import TextIO

import tensorflow as tf

from electra_tf.config import PretrainingConfig
from electra_tf.runtime.device_defaults import Machine

CALL_SECONDS = 2.0  # CPU: the longest a compiled call should run before Python looks again
HEARTBEAT_SECONDS = 30.0  # CPU: a progress line at least this often


def steps_per_call_limit(config: PretrainingConfig, machine: Machine) -> int | None:
    """None: run `iterations_per_loop` steps per compiled call (accelerators, distributed runs).
    Otherwise the steps of the first call (1); `next_steps_per_call` sizes the later ones."""
    if config.distribution_strategy != "default":
        return None  # every worker must make the same calls (collectives)
    if machine.accelerator != "cpu":
        return None
    return 1


def next_steps_per_call(config: PretrainingConfig, seconds_per_step: float) -> int:
    """The steps of the next call on a CPU: about CALL_SECONDS, at most iterations_per_loop."""
    return int(max(1, min(config.iterations_per_loop, CALL_SECONDS / seconds_per_step)))


def next_boundary(config: PretrainingConfig, step: int, log_every: int) -> int:
    """The first step after `step` at which the loop must return to Python: the end of an
    `iterations_per_loop` loop, a log line, a checkpoint or the last step."""
    return min(
        step + config.iterations_per_loop,
        (step // log_every + 1) * log_every,
        (step // config.save_checkpoints_steps + 1) * config.save_checkpoints_steps,
        config.num_train_steps,
    )


def announce_cpu_run(step: int, total: int, log_every: int, stream: TextIO, parts: int = 1) -> None:
    """The line before a CPU run's first step: the layout, the thread pools, what comes when."""
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
