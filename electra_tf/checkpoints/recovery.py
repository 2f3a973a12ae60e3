"""Which checkpoint a run resumes from when its folder is damaged, losing nothing.

A run folder's `checkpoint` index names the checkpoints kept; TensorFlow's own reader
(`tf.train.latest_checkpoint`) answers "no checkpoint" when that index is missing, unreadable,
or names a checkpoint whose files are gone, and a run that believed it started fresh would then
overwrite the older checkpoints as it reached their steps. Here, a folder that holds checkpoint
files is never treated as empty:

- index missing, empty, garbled, or naming files that are gone: the index is rebuilt from the
  checkpoints on disk that are complete and read in full (every tensor, so checksums too), and
  the run says so. When a newer checkpoint on disk is damaged, nothing is rebuilt: the error
  names its file and what is wrong, so the user decides (moving it aside, then rerunning).
- the indexed latest checkpoint fails to restore (a truncated or corrupted file): the error
  names the file, says what is wrong, names the newest older checkpoint that reads in full and
  how to resume from it.
Nothing here deletes or overwrites a checkpoint file.
"""

from __future__ import annotations

import os
import re
from typing import TextIO

import tensorflow as tf

from electra_tf.checkpoints.files import CHECKPOINT_PREFIX, STATE_FILE, write_state_file

_INDEX_FILE = re.compile(rf"^{CHECKPOINT_PREFIX}-(\d+)\.index$")
_DATA_FILE = re.compile(r"\.data-(\d+)-of-(\d+)$")


class CheckpointDamageError(OSError):
    """A checkpoint the run needs cannot be read; nothing in the folder was changed. The message
    names the file, what is wrong, and what the user can do."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def checkpoints_on_disk(model_dir: str) -> list[str]:
    """Prefixes of this project's checkpoints that have an `.index` file, oldest step first."""
    try:
        entries = os.listdir(model_dir)
    except FileNotFoundError:
        return []
    steps = sorted(int(m.group(1)) for m in map(_INDEX_FILE.match, entries) if m)
    return [os.path.join(model_dir, f"{CHECKPOINT_PREFIX}-{step}") for step in steps]


def _first_line(error: BaseException) -> str:
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return text.strip().splitlines()[0]


def checkpoint_problem(prefix: str) -> str | None:
    """What is wrong with the checkpoint at `prefix` (a line naming the file), or None when its
    index and every data shard are present and every tensor reads with a matching checksum."""
    index = prefix + ".index"
    if not os.path.isfile(index):
        return f"{index} is missing"
    shards = [
        _DATA_FILE.search(name)
        for name in os.listdir(os.path.dirname(prefix) or ".")
        if name.startswith(os.path.basename(prefix) + ".data-")
    ]
    counts = {int(m.group(2)) for m in shards if m}
    expected = counts.pop() if len(counts) == 1 else 1
    for shard in range(expected):
        data = f"{prefix}.data-{shard:05d}-of-{expected:05d}"
        if not os.path.isfile(data):
            return f"{data} is missing"
    try:
        dtypes = tf.train.load_checkpoint(prefix).get_variable_to_dtype_map()
        for name, dtype in dtypes.items():
            # RestoreV2 reads any dtype (the input iterator's state is a variant, which the
            # reader's get_tensor cannot convert) and checks each tensor's checksum; one tensor
            # at a time keeps a large model's checkpoint out of memory.
            tf.raw_ops.RestoreV2(
                prefix=prefix, tensor_names=[name], shape_and_slices=[""], dtypes=[dtype]
            )
    except Exception as e:  # noqa: BLE001 - truncation surfaces as IndexError, DataLoss, ...
        size = sum(
            os.path.getsize(f"{prefix}.data-{s:05d}-of-{expected:05d}") for s in range(expected)
        )
        return (
            f"{prefix}.index / .data ({size:,} bytes of data) do not read back: "
            f"{type(e).__name__}: {_first_line(e)} (truncated or corrupted)"
        )
    return None


def _index_problem(model_dir: str) -> tuple[str | None, str | None]:
    """(the indexed latest checkpoint, None) when the index is sound; else (None, why not)."""
    index = os.path.join(model_dir, STATE_FILE)
    if not os.path.exists(index):
        return None, f"{index} is missing"
    try:
        state = tf.train.get_checkpoint_state(model_dir)
    except Exception as e:  # noqa: BLE001 - a garbled text proto raises a parse error
        return None, f"{index} is unreadable ({_first_line(e)})"
    if state is None or not state.model_checkpoint_path:
        return None, f"{index} names no checkpoint"
    latest = state.model_checkpoint_path  # TensorFlow joined a relative name to model_dir
    if not os.path.isfile(latest + ".index"):
        return None, f"{index} names {os.path.basename(latest)}, whose files are gone"
    return latest, None


def newest_readable(prefixes: list[str], below: str | None = None) -> str | None:
    """The newest of `prefixes` (oldest first) older than `below` that reads in full."""
    if below is not None and below not in prefixes:
        return None  # a checkpoint of another naming (the original's model.ckpt-N)
    candidates = prefixes if below is None else prefixes[: prefixes.index(below)]
    return next((p for p in reversed(candidates) if checkpoint_problem(p) is None), None)


def resume_point(model_dir: str, write_index: bool, stream: TextIO | None = None) -> str | None:
    """The checkpoint a run in `model_dir` resumes from, or None for a folder without any.

    A sound index is trusted (its latest is checked when it is restored, see `damage_error`).
    Otherwise, with checkpoint files on disk, the index is rebuilt from the complete ones when
    the newest of them reads in full (written only when `write_index`: the chief of a
    multi-worker run), and a line on `stream` says so; else CheckpointDamageError.
    """
    latest, problem = _index_problem(model_dir)
    if latest is not None:
        return latest
    on_disk = checkpoints_on_disk(model_dir)
    if not on_disk:
        return None
    damaged = checkpoint_problem(on_disk[-1])
    if damaged is not None:
        raise damage_error(on_disk[-1], damaged, on_disk, f"{problem}, and the newest checkpoint")
    readable = [p for p in on_disk if checkpoint_problem(p) is None]
    names = [os.path.basename(p) for p in readable]
    if write_index:
        write_state_file(model_dir, *names)
    skipped = sorted(set(map(os.path.basename, on_disk)) - set(names))
    note = f"; left alone, unreadable: {', '.join(skipped)}" if skipped else ""
    print(
        f"warning: {problem}; rebuilt it from the complete checkpoints on disk "
        f"({', '.join(reversed(names))}), resuming from {names[-1]}{note}",
        file=stream,
        flush=True,
    )
    return readable[-1]


def damage_error(
    prefix: str, problem: str, on_disk: list[str] | None = None, context: str = ""
) -> CheckpointDamageError:
    """The error for a checkpoint that cannot be restored: the file, what is wrong, and the
    newest older checkpoint that reads in full with how to resume from it."""
    model_dir = os.path.dirname(prefix)
    on_disk = on_disk if on_disk is not None else checkpoints_on_disk(model_dir)
    older = newest_readable(on_disk, below=prefix) if prefix in on_disk else None
    name = os.path.basename(prefix)
    if older is not None:
        way = (
            f"{os.path.basename(older)} is the newest older checkpoint that reads in full: to "
            f"resume from it, move {name}.* out of {model_dir} and run the same command again "
            "(the index is rebuilt from the checkpoints left)"
        )
    else:
        way = (
            "no older checkpoint reads in full: to start over, use another model_name (or move "
            f"the {CHECKPOINT_PREFIX}-* files and the {STATE_FILE} index out of {model_dir})"
        )
    lead = f"{context} " if context else ""
    return CheckpointDamageError(
        f"{lead}{name} cannot be used: {problem}. Nothing was changed; {way}"
    )


def holds_checkpoints(model_dir: str) -> bool:
    """Whether a run in `model_dir` would resume: checkpoint files of ours on disk, or an index
    naming any checkpoint (a foreign layout such as the original's `model.ckpt-N`)."""
    if checkpoints_on_disk(model_dir):
        return True
    try:
        return tf.train.latest_checkpoint(model_dir) is not None
    except Exception:  # noqa: BLE001 - a garbled index with nothing of ours beside it
        return False
