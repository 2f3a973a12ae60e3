"""Files of TF1 name-based checkpoints: finding the prefix, writing the `checkpoint` index
file. (Reading is `tf.train.load_checkpoint`; writing tensors is `tf.raw_ops.SaveV2`.)"""

from __future__ import annotations

import os
import re

import tensorflow as tf

from electra_tf.checkpoint_config import CheckpointError


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
        raise CheckpointError(
            f"{path}: no `checkpoint` file and {len(indexes)} checkpoint(s) "
            f"({', '.join(indexes) or 'none'}); pass a checkpoint prefix instead"
        )
    if os.path.exists(path + ".index"):
        return path
    raise CheckpointError(f"{path}: neither a directory nor a checkpoint prefix ({path}.index)")


def write_state_file(directory: str, prefix_name: str) -> None:
    # The `checkpoint` index file's text format; a relative path keeps the directory movable
    # (TF resolves it against the directory, the original's Estimator included).
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as f:
        f.write(f'model_checkpoint_path: "{prefix_name}"\n')
        f.write(f'all_model_checkpoint_paths: "{prefix_name}"\n')
