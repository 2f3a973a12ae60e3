"""TensorFlow start-up without its CPU-only noise on the console.

On a machine with no NVIDIA driver, TensorFlow's CUDA build still probes for one and logs an
ERROR line (`failed call to cuInit: ... CUDA error`) at its first device query: the first
screen a new user saw. `TF_CPP_MIN_LOG_LEVEL=3` would hide it, and every real error with it.
Instead, on such machines the first device query runs with file descriptor 2 captured, and
the captured lines are written back except the few known to mean only "there is no GPU here".
Where a driver exists nothing is filtered: there a CUDA error is a real one. The filter is
`device_defaults.cpu_only_noise_filtered`, which config resolution's device query (often the
first) uses too.

CLIs call `start_tensorflow()` after parsing their arguments (`--help` imports no TensorFlow).
"""

from __future__ import annotations

import os
import sys

# The filter lives with the device queries (core: config resolution uses it too).
from electra_tf.device_defaults import cpu_only_noise_filtered

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # INFO and WARNING; ERRORs still show


def start_tensorflow(intra_op_threads: int = 0, inter_op_threads: int = 0) -> None:
    """Imports TensorFlow and makes its first device query, keeping CPU-only noise off stderr.

    Non-zero thread counts set TensorFlow's intra-op / inter-op pools first (they are fixed at
    the first device query; where TensorFlow already started, a warning says they were not
    applied); 0 keeps TensorFlow's default.
    """
    if "tensorflow" in sys.modules and getattr(start_tensorflow, "done", False):
        return
    with cpu_only_noise_filtered():
        import tensorflow as tf

        _set_threads(tf, intra_op_threads, inter_op_threads)
        tf.config.list_logical_devices()
    start_tensorflow.done = True  # type: ignore[attr-defined]


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
