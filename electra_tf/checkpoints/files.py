"""What every checkpoint format shares: the error, the config file's name, finding a
checkpoint's prefix and writing the `checkpoint` index file. (Reading tensors is
`tf.train.load_checkpoint`; writing them is `tf.raw_ops.SaveV2` or `tf.train.Checkpoint`.)"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import re
from collections.abc import Iterator

import tensorflow as tf

from electra_tf.runtime.atomic_io import write_text

# The resolved PretrainingConfig beside a native checkpoint (and in every run's model dir).
CONFIG_FILE = "config.json"
CHECKPOINT_PREFIX = "ckpt"  # the file prefix: ckpt-<step>.index, ckpt-<step>.data-*, ...
STATE_FILE = "checkpoint"  # the CheckpointState text file tf.train.latest_checkpoint reads


class CheckpointError(ValueError):
    """Weights that do not fit a model or a format; the message lists every offending name."""


def open_checkpoint(prefix: str):
    """`tf.train.load_checkpoint`, with a truncated or foreign file as a one-line error that
    names it (TF raises "not an sstable" / "Read less bytes than requested" with a traceback)."""
    try:
        return tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(f"{prefix}: not a readable checkpoint ({first_line(e)})") from None


def read_tensor(reader, prefix: str, name: str):
    """One tensor of an open checkpoint; a truncated data file is a one-line error."""
    try:
        return reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, IndexError) as e:  # IndexError: a truncated file
        raise CheckpointError(f"{prefix}: cannot read {name} ({first_line(e)})") from None


def first_line(error: BaseException, limit: int = 300) -> str:
    """An exception's first line, capped: TF's messages can hold whole arrays."""
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:limit]


@contextlib.contextmanager
def quiet_tf_warnings() -> Iterator[None]:
    """Silences TF's Python warnings, for a restore whose failure is reported on its own: a
    failed `Checkpoint.read` otherwise logs every unrestored value when it is collected."""
    logger = logging.getLogger("tensorflow")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        gc.collect()
        logger.setLevel(level)


def resolve_prefix(path: str) -> str:
    """A tf.train checkpoint prefix from a prefix or a directory (its latest checkpoint)."""
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        indexes = sorted(f[: -len(".index")] for f in os.listdir(path) if f.endswith(".index"))
        if len(indexes) == 1:
            return os.path.join(path, indexes[0])

        def step(name: str) -> int:
            match = re.search(r"-(\d+)$", name)
            return int(match.group(1)) if match else -1

        numbered = [name for name in indexes if step(name) >= 0]
        if numbered:
            return os.path.join(path, max(numbered, key=step))
        if os.path.isfile(os.path.join(path, "saved_model.pb")):
            raise CheckpointError(
                f"{path} is a SavedModel (a serving export), not a checkpoint: use the run "
                "folder or checkpoint it was exported from (its assets/export.json names it "
                "under `source`)"
            )
        raise CheckpointError(
            f"{path}: no `checkpoint` file and {len(indexes)} checkpoint(s) "
            f"({', '.join(indexes) or 'none'}); pass a checkpoint prefix instead"
        )
    if os.path.exists(path + ".index"):
        return path
    raise CheckpointError(f"{path}: neither a directory nor a checkpoint prefix ({path}.index)")


def write_state_file(directory: str, *kept: str) -> None:
    """Writes the `checkpoint` index file (atomically) naming `kept`, oldest first; the last is
    the latest. Names are relative to `directory`, which keeps it movable (TF resolves them
    against the directory, the original's Estimator included)."""
    if not kept:
        raise ValueError(f"{directory}: an index file must name at least one checkpoint")
    lines = [f"model_checkpoint_path: {json.dumps(kept[-1])}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(name)}" for name in kept]
    write_text(os.path.join(directory, STATE_FILE), "\n".join(lines) + "\n", sync=True)
