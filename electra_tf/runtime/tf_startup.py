"""TensorFlow start-up without its CPU-only noise on the console.

On a machine with no NVIDIA driver, TensorFlow's CUDA build still probes for one and logs an
ERROR line (`failed call to cuInit: ... CUDA error`) at its first device query: the first
screen a new user saw. `TF_CPP_MIN_LOG_LEVEL=3` would hide it, and every real error with it.
Instead, on such machines the first device query runs with file descriptor 2 captured, and
the captured lines are written back except the few known to mean only "there is no GPU here".
Where a driver exists nothing is filtered: there a CUDA error is a real one. The filter is
`device_defaults.cpu_only_noise_filtered`, which `device_defaults.probe_machine`'s device query
(often the first) uses too.

CLIs call `start_tensorflow()` after parsing their arguments (`--help` imports no TensorFlow).
Whatever must happen before TensorFlow's context starts (the thread pools; a
MultiWorkerMirroredStrategy, which configures collective ops) happens inside it, in that order.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TypeVar

# The filter lives with the device queries (core: config resolution uses it too).
from electra_tf.runtime.device_defaults import cpu_only_noise_filtered

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # INFO and WARNING; ERRORs still show
# The project is on the tf_keras line. Without this, `import tensorflow` also imports Keras 3
# (for `tf.keras`), and Keras 3 imports matplotlib: 3.7 s of a command's start-up on a 2-core
# machine (8.8 against 5.1 s for `import tensorflow, tf_keras`), for a package no command uses.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

T = TypeVar("T")


def start_tensorflow(
    intra_op_threads: int = 0,
    inter_op_threads: int = 0,
    before_start: Callable[[], T] | None = None,
) -> T | None:
    """Imports TensorFlow and starts its context, keeping CPU-only noise off stderr.

    Non-zero thread counts set TensorFlow's intra-op / inter-op pools first (they are fixed
    when the context starts; where TensorFlow already started, a warning says they were not
    applied); 0 keeps TensorFlow's default. `before_start` runs next, still before the context
    starts (a distribution strategy: MultiWorkerMirroredStrategy must configure collective ops
    first); its result is returned.
    """
    if "tensorflow" in sys.modules and getattr(start_tensorflow, "done", False):
        return before_start() if before_start is not None else None
    with cpu_only_noise_filtered():
        import tensorflow as tf

        _set_threads(tf, intra_op_threads, inter_op_threads)
        result = before_start() if before_start is not None else None
        tf.config.list_logical_devices()
        # The training forms of GELU, LayerNorm and dropout are XLA clusters, and XLA logs one
        # INFO line at its first compile whatever the log level: spent here, in the filter
        # (a trivial cluster, 0.06 s).
        tf.function(lambda x: x + 1, jit_compile=True)(tf.constant(0.0))
    start_tensorflow.done = True  # type: ignore[attr-defined]
    return result


def _set_threads(tf, intra_op_threads: int, inter_op_threads: int) -> None:
    """Sets the pools asked for; where TensorFlow already runs in this process (a caller that
    used it before calling a CLI's `main`) they are fixed, and it says so and goes on."""
    threading = tf.config.threading
    for name, value, get, set_ in (
        ("intra_op_threads", intra_op_threads, threading.get_intra_op_parallelism_threads,
         threading.set_intra_op_parallelism_threads),
        ("inter_op_threads", inter_op_threads, threading.get_inter_op_parallelism_threads,
         threading.set_inter_op_parallelism_threads),
    ):  # fmt: skip
        if not value or get() == value:
            continue
        try:
            set_(value)
        except RuntimeError:
            print(
                f"warning: {name} {value} not applied: TensorFlow was already started in this "
                "process, and its thread pools are fixed at start",
                file=sys.stderr,
                flush=True,
            )
