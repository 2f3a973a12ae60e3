"""Several workers agree on the run before its first step, or all stop naming what differs.

Every worker of a MultiWorkerMirroredStrategy run builds its model from its own command line:
workers started with different learning rates trained a mixed model (both exited 0), with
different `--data-dir`s a mix of two corpora, with different batch sizes they died of a raw
shape error. At start-up each worker describes the settings that must be equal
(`worker_settings`: the resolved config without its per-host paths and thread counts, the
training files' names and sizes, the vocabulary's digest, the checkpoint it resumes from, the
result of its input checks), the workers all-gather the descriptions (two small collectives:
the lengths, then the bytes), and each compares them (`disagreements`, pure): all stop with
the same one-line error naming the keys, the values and the workers.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection

import numpy as np
import tensorflow as tf

from electra_tf.config import ConfigError, PretrainingConfig
from electra_tf.runs.strategy import WorkerLostError

# Settings that may differ between hosts: where the files are (their content is compared
# instead), how many threads a host runs, how long it waits for the others.
PER_HOST_KEYS = frozenset(
    {
        "data_dir",
        "model_dir",
        "vocab_file",
        "pretrain_tfrecords",
        "eval_tfrecords",
        "intra_op_threads",
        "inter_op_threads",
        "worker_timeout_seconds",
        "tpu",
    }
)
_SHOWN = 160  # characters of a value in the error


def describe_training_files(files: list[str]) -> str:
    """The training files as compared between workers: names and sizes, with a digest."""
    sizes = [(os.path.basename(path), os.path.getsize(path)) for path in files]
    digest = hashlib.sha256(json.dumps(sizes).encode()).hexdigest()[:12]
    total = sum(size for _, size in sizes)
    names = ", ".join(name for name, _ in sizes[:3]) + (", ..." if len(sizes) > 3 else "")
    return f"{len(sizes)} files ({names}), {total:,} bytes, digest {digest}"


def describe_vocab(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return f"unreadable ({e.strerror})"
    return f"{len(data):,} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]}"


def worker_settings(
    config: PretrainingConfig,
    files: list[str],
    input_problem: str | None,
    allow_changes: Collection[str],
) -> dict[str, str]:
    """{setting: value as text} of this worker, for `disagreements`."""
    values = {
        key: json.dumps(value, sort_keys=True)
        for key, value in config.to_dict().items()
        if key not in PER_HOST_KEYS
    }
    latest = tf.train.latest_checkpoint(config.resolved_model_dir())
    values.update(
        {
            "training data": describe_training_files(files) if files else "none",
            "vocabulary": describe_vocab(config.resolved_vocab_file()),
            "resumes from": os.path.basename(latest) if latest else "a fresh start",
            "--allow-config-change": ",".join(sorted(allow_changes)) or "none",
            "input check": input_problem or "passed",
        }
    )
    return values


def disagreements(workers: dict[str, dict[str, str]]) -> list[str]:
    """'key: value on worker 0; other value on worker 1' for each setting that differs.

    `workers`: {worker name: `worker_settings`}, in task order."""
    keys = sorted({key for settings in workers.values() for key in settings})
    found = []
    for key in keys:
        groups: dict[str, list[str]] = {}
        for name, settings in workers.items():
            groups.setdefault(settings.get(key, "(not set)"), []).append(name)
        if len(groups) > 1:
            parts = [f"{_shorten(value)} on {_names(names)}" for value, names in groups.items()]
            found.append(f"{key}: {'; '.join(parts)}")
    return found


def _shorten(value: str) -> str:
    return value if len(value) <= _SHOWN else value[:_SHOWN] + "..."


def _names(names: list[str]) -> str:
    """'worker 0' / 'workers 0, 2' / 'chief 0, workers 1, 2'."""
    kinds: dict[str, list[str]] = {}
    for name in names:
        kind, index = name.split()
        kinds.setdefault(kind, []).append(index)
    return ", ".join(
        f"{kind}{'s' if len(indexes) > 1 else ''} {', '.join(indexes)}"
        for kind, indexes in kinds.items()
    )


def check_workers_agree(
    strategy: tf.distribute.Strategy, me: str, settings: dict[str, str]
) -> None:
    """All-gathers every worker's `settings` (`me`: "worker 1"); raises ConfigError, on every
    worker alike, when any differ."""
    payload = json.dumps({"worker": me, "settings": settings}, sort_keys=True).encode()
    try:
        gathered = [json.loads(raw) for raw in _all_gather_bytes(strategy, payload)]
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError) as e:
        raise WorkerLostError(
            f"another worker stopped before the first step ({type(e).__name__}); its own "
            "output says why. Fix that, then start every worker again with the same command"
        ) from None
    # One entry per replica: a worker with several devices appears once per device.
    workers = {entry["worker"]: entry["settings"] for entry in gathered}
    found = disagreements(dict(sorted(workers.items(), key=lambda item: _task_order(item[0]))))
    if found:
        raise ConfigError(
            f"the {len(workers)} workers disagree on settings that must be equal: "
            + " | ".join(found)
            + ". Start every worker with the same settings and data (only TF_CONFIG's task "
            "index differs); nothing was trained or written"
        )


def _task_order(name: str) -> tuple[int, int]:
    kind, index = name.split()
    return (0 if kind == "chief" else 1, int(index))


def _all_gather_bytes(strategy: tf.distribute.Strategy, payload: bytes) -> list[bytes]:
    """Every replica's `payload`: its length first, then the bytes padded to the longest."""

    def gather(values: np.ndarray) -> np.ndarray:
        distributed = strategy.experimental_distribute_values_from_function(
            lambda _: tf.constant(values)
        )
        return strategy.gather(distributed, axis=0).numpy()  # [replicas, width]

    lengths = gather(np.array([[len(payload)]], np.int32))[:, 0]
    padded = np.zeros([1, int(lengths.max())], np.int32)
    padded[0, : len(payload)] = np.frombuffer(payload, np.uint8)
    rows = gather(padded)
    return [bytes(row[:length].astype(np.uint8)) for row, length in zip(rows, lengths, strict=True)]


def worker_name(strategy: tf.distribute.Strategy) -> str:
    resolver = strategy.cluster_resolver  # type: ignore[attr-defined]
    return f"{resolver.task_type} {resolver.task_id or 0}"
