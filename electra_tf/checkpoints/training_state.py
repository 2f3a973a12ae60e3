"""Training checkpoints that resume a run exactly, and the run's saved config.

A training checkpoint is one object-based `tf.train.Checkpoint` holding the model (weights and
its sampling RNG `model.rng`), the optimizer (Adam slots, step counter, loss scale), the step
under the key `step` (what `electra_tf.checkpoints` reads). The data position is not saved:
the input stream is a function of the seed, and a restart starts it at the step's record
(`runs/pretraining_data.resumed_input`), so it continues where the last checkpoint left it.

Atomicity: a save writes the checkpoint's files first (TensorFlow writes the shards to a
temporary directory and merges them into `<prefix>.index` / `.data-*`), then rewrites the
`checkpoint` index file (a temporary file renamed over it) to name the new checkpoint and the
ones still kept, and only then deletes the checkpoints that fell out of `max_to_keep`. So a
process killed at any moment leaves an index whose every entry reads in full: a half-written
prefix is never named (it is overwritten when the run reaches that step again), and a deleted
one is never still listed; files orphaned by a kill after the index write go at the next save.
(`tf.train.CheckpointManager` writes the index, deletes, then writes the index again, so a kill
between its two index writes left entries naming deleted files.)
"""

from __future__ import annotations

import errno
import glob
import os
import re
import shutil
from typing import Any, TextIO

import tensorflow as tf

from electra_tf.checkpoints.files import CHECKPOINT_PREFIX, CONFIG_FILE, write_state_file
from electra_tf.checkpoints.recovery import checkpoint_problem, damage_error, resume_point
from electra_tf.checkpoints.resume_check import check_resumable  # noqa: F401 - re-exported
from electra_tf.config import ResolvedPretrainingConfig, save_config

# A kept prefix, or one of the files or temporary folders a save leaves: group 1 is the step.
_CHECKPOINT_FILE = re.compile(rf"^{CHECKPOINT_PREFIX}-(\d+)(\.index|\.data-\d+-of-\d+|_temp.*)?$")


def kept_checkpoints(model_dir: str) -> list[str]:
    """The checkpoint prefixes the `checkpoint` index names, oldest first ([] without one)."""
    state = tf.train.get_checkpoint_state(model_dir)
    return list(state.all_model_checkpoint_paths) if state else []


def write_run_config(config: ResolvedPretrainingConfig, model_dir: str) -> str:
    path = os.path.join(model_dir, CONFIG_FILE)
    save_config(config, path)  # atomic: temporary file + rename
    return path


class OutOfSpaceError(OSError):
    """A checkpoint did not fit on the disk; the partial one was removed (the message says
    where, how much was needed and which checkpoint is still the latest)."""

    def __str__(self) -> str:
        return str(self.strerror)


def _is_out_of_space(error: BaseException) -> bool:
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    text = str(error).lower()
    return isinstance(error, tf.errors.ResourceExhaustedError) or "no space left" in text


def _prefix_bytes(prefix: str) -> int:
    return sum(
        os.path.getsize(p) for p in glob.glob(glob.escape(prefix) + ".*") if os.path.isfile(p)
    )


class TrainingCheckpoints:
    """Saves and restores a run's full training state under `model_dir`.

    Args:
      model_dir: the run's directory (the `checkpoint` index file and ckpt-<step>.* live there).
      max_to_keep: checkpoints kept (the original's keep_checkpoint_max); 0 keeps every one,
        as TF1's Saver did.
      is_chief: under multi-worker training only the chief keeps checkpoints; the others must
        still take part in the save (it is collective), so they write to a scratch directory
        that is deleted right after.
      worker_id: the worker's task id, for its scratch directory.
      **objects: the trackables to save (model, optimizer, step, data, ...).
    """

    def __init__(
        self,
        model_dir: str,
        max_to_keep: int,
        is_chief: bool = True,
        worker_id: int = 0,
        **objects: Any,
    ):
        self.model_dir = model_dir
        self.max_to_keep = max_to_keep
        self.is_chief = is_chief
        self.checkpoint = tf.train.Checkpoint(**objects)
        self.directory = (
            model_dir if is_chief else os.path.join(model_dir, f".worker{worker_id}-tmp")
        )

    def latest(self) -> str | None:
        return tf.train.latest_checkpoint(self.model_dir)

    def restore_latest(self, stream: TextIO | None = None) -> str | None:
        """Restores the newest complete checkpoint (all saved objects must match); a damaged
        index is rebuilt first (`recovery.resume_point`, which says so on `stream`)."""
        path = resume_point(self.model_dir, write_index=self.is_chief, stream=stream)
        if path is None:
            return None
        try:
            self.checkpoint.read(path).assert_existing_objects_matched()
        except Exception as e:  # noqa: BLE001 - a truncated file raises IndexError, too
            problem = checkpoint_problem(path)
            if problem is not None:
                raise damage_error(path, problem) from None
            raise RuntimeError(
                f"{path}: cannot resume from this checkpoint ({type(e).__name__}: {e})"
            ) from e
        return path

    def save(self, step: int) -> str:
        """Writes ckpt-<step>, then the index, then deletes what fell out; returns the prefix."""
        os.makedirs(self.directory, exist_ok=True)
        name = f"{CHECKPOINT_PREFIX}-{step}"
        try:
            path = self.checkpoint.write(os.path.join(self.directory, name))
        except (tf.errors.OpError, OSError) as e:
            # A partial ckpt-N_temp kept the disk full, and a rerun then failed too.
            partial = self._remove_partial(name)
            if not _is_out_of_space(e):
                raise
            raise self._out_of_space(name, partial) from e
        if not self.is_chief:
            shutil.rmtree(self.directory, ignore_errors=True)
            return path
        kept = [os.path.basename(p) for p in kept_checkpoints(self.model_dir)]
        kept = [n for n in kept if n != name] + [name]
        if self.max_to_keep > 0:
            kept = kept[-self.max_to_keep :]
        write_state_file(self.model_dir, *kept)
        self._delete_older_than(kept)
        return path

    def _remove_partial(self, name: str) -> int:
        """Deletes what a failed write of `name` left (never a kept checkpoint); returns bytes."""
        if name in [os.path.basename(p) for p in kept_checkpoints(self.model_dir)]:
            return 0  # an earlier complete save of this step stays
        removed = 0
        for entry in os.listdir(self.directory):
            full = os.path.join(self.directory, entry)
            match = _CHECKPOINT_FILE.match(entry)
            if match is None or f"{CHECKPOINT_PREFIX}-{match.group(1)}" != name:
                continue
            if os.path.isdir(full):
                removed += sum(
                    os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(full) for f in fs
                )
                shutil.rmtree(full, ignore_errors=True)
            elif match.group(2):
                removed += os.path.getsize(full)
                os.remove(full)
        return removed

    def _out_of_space(self, name: str, partial: int) -> OutOfSpaceError:
        latest = self.latest()
        needed = _prefix_bytes(latest) if latest else 0
        free = shutil.disk_usage(self.directory).free
        kept = f"the latest complete checkpoint, {latest}, is kept" if latest else "no checkpoint"
        return OutOfSpaceError(
            errno.ENOSPC,
            f"no space left on {self.directory}: a checkpoint needs about "
            f"{max(needed, partial) / 1e6:,.1f} MB, {free / 1e6:,.1f} MB free; removed the "
            f"partial {name} ({partial / 1e6:,.1f} MB); {kept}. Free space (or lower "
            "keep_checkpoint_max) and run the same command again to resume",
        )

    def _delete_older_than(self, kept: list[str]) -> None:
        """Deletes this run's checkpoint files older than the oldest kept one.

        Only files named like our own checkpoints, and only steps below every kept one: a later
        step on disk (a half-written save the run will redo) is left to be overwritten.
        """
        steps = [int(m.group(1)) for m in map(_CHECKPOINT_FILE.match, kept) if m is not None]
        if not steps:
            return
        oldest = min(steps)
        for entry in os.listdir(self.model_dir):
            match = _CHECKPOINT_FILE.match(entry)
            if match is None or match.group(2) is None or int(match.group(1)) >= oldest:
                continue
            full = os.path.join(self.model_dir, entry)
            if os.path.isdir(full):
                shutil.rmtree(full, ignore_errors=True)
            else:
                try:
                    os.remove(full)
                except FileNotFoundError:
                    pass
