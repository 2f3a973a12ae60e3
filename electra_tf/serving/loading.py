"""`electra_tf.serving.load(path)`: an export loaded in Python with the thread counts it needs.

TensorFlow's default thread pools (intra-op and inter-op threads = the cores) are the slow
setting for this project's exports: on 2 cores the default export answered a batch of one text
1.7-1.9x slower than with (1, 2) (docs/serving.md, "Threads"). The pools are fixed when
TensorFlow's runtime starts, at the first op or device query of the process, so they must be
set before that: `load` sets them (the export's recommendation for this machine,
`device_defaults.serving_threads`) and then loads. Where the runtime has started already, it
cannot: it warns, naming the environment variables that set them at process start, and loads
anyway. Thread counts the environment sets (`TF_NUM_INTRAOP_THREADS`,
`TF_NUM_INTEROP_THREADS`) are the user's choice and are left alone.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

from electra_tf.config import query_blocks_problem
from electra_tf.runtime import device_defaults
from electra_tf.serving.saved_model import EXPORT_INFO_FILE, ExportError

THREAD_ENV = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def export_info(path: str) -> dict[str, Any]:
    """The export's `assets/export.json` ({} for a SavedModel without one), its thread keys
    checked: `load` starts one inter-op thread per query block, so an edited or damaged
    `query_blocks` (3000, "two") is an ExportError naming the file and the key."""
    info_file = os.path.join(path, "assets", EXPORT_INFO_FILE)
    if not os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise ExportError(f"{path}: no saved_model.pb (not a SavedModel version directory)")
    if not os.path.isfile(info_file):
        return {}
    try:
        with open(info_file, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ExportError(f"{info_file}: not readable as JSON ({e})") from None
    if not isinstance(info, dict):
        raise ExportError(f"{info_file}: expected a JSON object, got {type(info).__name__}")
    problem = query_blocks_problem(info.get("query_blocks", 1))
    if problem:
        raise ExportError(f"{info_file}: query_blocks {problem}")
    if not isinstance(info.get("jit_compile", False), bool):
        raise ExportError(f"{info_file}: jit_compile {info['jit_compile']!r} is not true/false")
    return info


def recommended_threads(info: dict[str, Any], cpu_count: int | None = None) -> tuple[int, int]:
    """(intra-op, inter-op) for this export on this machine (or on `cpu_count` cores); `info`
    as `export_info` returns it (checked)."""
    cores = device_defaults.cpu_count() if cpu_count is None else cpu_count
    return device_defaults.serving_threads(
        cores, info.get("query_blocks", 1), info.get("jit_compile", False)
    )


def apply_threads(intra_op: int, inter_op: int) -> bool:
    """Sets TensorFlow's pools to (intra_op, inter_op) threads; True when they are set (or
    already were), False (with a warning) where the runtime has started with others."""
    import tensorflow as tf

    threading = tf.config.threading
    try:
        threading.set_intra_op_parallelism_threads(intra_op)
        threading.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError:
        warnings.warn(
            f"electra_tf.serving.load: threads ({intra_op}, {inter_op}) not applied: "
            "TensorFlow's runtime had started in this process, and its thread pools are "
            "fixed then. Call load() before anything else uses TensorFlow, or start the "
            f"process with {THREAD_ENV[0]}={intra_op} {THREAD_ENV[1]}={inter_op}.",
            stacklevel=3,
        )
        return False
    return True


def load(path: str, threads: tuple[int, int] | str | None = "auto") -> Any:
    """Loads the SavedModel at `path` (a version directory) with `tf.saved_model.load`, after
    setting TensorFlow's thread pools.

    Args:
        path: `<output_dir>/<name>/<version>`, as the export command prints it.
        threads: "auto": the export's recommendation for this machine's cores (what its
            `serving_flags.txt` says for the exporting machine); (intra_op, inter_op) to
            choose; None to leave TensorFlow's pools alone. Either environment variable of
            `THREAD_ENV` being set also leaves them alone.

    Returns:
        The loaded object: `model.signatures["serving_default"](text=tf.constant([...]))`.
    """
    info = export_info(path)
    if threads == "auto":
        threads = recommended_threads(info)
    if threads is not None and not any(os.environ.get(name) for name in THREAD_ENV):
        apply_threads(*threads)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    return tf.saved_model.load(path)
