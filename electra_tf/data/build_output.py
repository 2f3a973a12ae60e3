"""The output directory of a pre-training TFRecord build (`tfrecord_builder`): which files are
the build's own, the scratch folders of a build under way, and the swap-in that replaces the
previous build's files with a finished one's, so that a stopped build never leaves a mix of two.
"""

from __future__ import annotations

import json
import os
import re
import shutil

from electra_tf.data.corpus import CorpusError
from electra_tf.runtime.atomic_io import write_json

SUMMARY_FILE = "build_summary.json"
_OUR_FILES = re.compile(r"^pretrain_data\.tfrecord-\d+-of-\d+$|^build_summary\.json$")
SPOOL_PREFIX = ".spool-"
SWAP_RECORD = ".swap-in.json"  # the files of a swap-in under way, for finishing it
STAGING_PREFIX = ".staging-"
LOCK_FILE = ".build.lock"
# A build's own outputs (records, summary, lock, swap record): never read back as corpus text.
OWN_OUTPUTS = re.compile(
    f"{_OUR_FILES.pattern}|^{re.escape(LOCK_FILE)}$|^{re.escape(SWAP_RECORD)}$"
)


def check_output_dir(output_dir: str, overwrite: bool) -> None:
    """Refuses a file, or a non-empty directory unless `overwrite`; touches nothing."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise FileExistsError(f"output path exists and is not a directory: {output_dir}")
    ours = (LOCK_FILE, SWAP_RECORD)
    entries = sorted(e for e in _listdir(output_dir) if not _is_scratch(e) and e not in ours)
    if entries and not overwrite:
        raise FileExistsError(
            f"output directory {output_dir} is not empty ({len(entries)} entries, e.g. "
            f"{entries[0]!r}); pass --overwrite to replace the files this tool writes there "
            "(pretrain_data.tfrecord-*, build_summary.json); other files are never deleted"
        )


def _listdir(path: str) -> list[str]:
    return os.listdir(path) if os.path.isdir(path) else []


def _is_scratch(entry: str) -> bool:
    return entry.startswith((SPOOL_PREFIX, STAGING_PREFIX))


def remove_scratch(output_dir: str) -> None:
    """A killed build's staging and spool folders (only ever ours; the lock is held)."""
    for entry in _listdir(output_dir):
        path = os.path.join(output_dir, entry)
        if _is_scratch(entry) and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)


def swap_in(staging: str, output_dir: str) -> None:
    """Moves the finished build over the previous one. The list of its files is recorded
    first, so a swap-in stopped half-way is finished by `complete_swap_in`."""
    new = sorted(e for e in os.listdir(staging) if _OUR_FILES.match(e))
    record = {"staging": os.path.basename(staging), "files": new}
    write_json(os.path.join(output_dir, SWAP_RECORD), record)
    _finish_swap(output_dir, record)


def _finish_swap(output_dir: str, record: dict) -> None:
    """New files renamed over old names (each rename atomic), the summary last; then old
    files the new build does not have are removed, and the record."""
    staging = os.path.join(output_dir, record["staging"])
    lost = [
        e
        for e in record["files"]
        if not os.path.exists(os.path.join(staging, e))
        and not os.path.exists(os.path.join(output_dir, e))
    ]
    if lost:
        raise CorpusError(
            f"{output_dir}: an interrupted swap-in lost {len(lost)} file(s) (e.g. {lost[0]}) "
            f"from {staging}; rebuild into a new folder"
        )
    for entry in sorted(record["files"], key=lambda e: e == SUMMARY_FILE):
        source = os.path.join(staging, entry)
        if os.path.exists(source):  # else moved before the stop
            os.replace(source, os.path.join(output_dir, entry))
    for entry in _listdir(output_dir):
        path = os.path.join(output_dir, entry)
        if _OUR_FILES.match(entry) and entry not in record["files"] and os.path.isfile(path):
            os.remove(path)
    os.remove(os.path.join(output_dir, SWAP_RECORD))


def complete_swap_in(output_dir: str) -> bool:
    """Finishes a swap-in that was stopped half-way (call under the directory's lock);
    True if there was one. The staging folder then holds the rest of that build's files."""
    path = os.path.join(output_dir, SWAP_RECORD)
    if not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as f:
        _finish_swap(output_dir, json.load(f))
    return True


def is_complete(output_dir: str) -> bool:
    """Whether `output_dir` holds one whole build (its summary, and no swap-in to finish)."""
    summary = os.path.join(output_dir, SUMMARY_FILE)
    return os.path.isfile(summary) and not os.path.exists(os.path.join(output_dir, SWAP_RECORD))
