"""`TF_CONFIG`, checked before TensorFlow reads it.

TensorFlow's `TFConfigClusterResolver` turns a malformed `TF_CONFIG` into a raw traceback
(a JSONDecodeError, "The `task_id` 3 exceeds the maximum id of worker", or, for an `evaluator`
task, a failure deep inside the strategy). `read_tf_config` says what is wrong in one line
naming `TF_CONFIG` and its value. The tasks this project runs are `chief` and `worker`: every
task trains (docs/distributed.md); an evaluator or a parameter server has no part to play.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from electra_tf.config import ConfigError

TASK_TYPES = ("chief", "worker")


def _error(value: str, problem: str) -> ConfigError:
    shown = value if len(value) <= 300 else value[:300] + "..."
    return ConfigError(f"TF_CONFIG: {problem} (TF_CONFIG={shown})")


def read_tf_config(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The parsed `TF_CONFIG` of `environ` (default: os.environ), None when unset or empty.

    Raises ConfigError naming the problem and the value: not JSON, not an object, a cluster
    that is not {job: ["host:port", ...]}, a job or task type other than chief / worker, more
    than one chief, a task without an integer index, or an index outside its job."""
    value = (os.environ if environ is None else environ).get("TF_CONFIG", "")
    if not value.strip():
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise _error(value, f"not valid JSON ({e.msg} at character {e.pos})") from None
    if not isinstance(parsed, dict):
        raise _error(value, 'expected a JSON object with "cluster" and "task"')
    cluster = _check_cluster(value, parsed.get("cluster"))
    _check_task(value, parsed.get("task"), cluster)
    return parsed


def _check_cluster(value: str, cluster: Any) -> dict[str, list[str]]:
    if not isinstance(cluster, dict) or not cluster:
        raise _error(value, '"cluster" must be an object like {"worker": ["host:port", ...]}')
    for job, addresses in cluster.items():
        if job not in TASK_TYPES:
            raise _error(
                value, f"cluster job {job!r} is not supported: every task trains (chief, worker)"
            )
        if (
            not isinstance(addresses, list)
            or not addresses
            or not all(isinstance(a, str) and ":" in a for a in addresses)
        ):
            raise _error(value, f'cluster job {job!r} must be a list of "host:port" addresses')
    if len(cluster.get("chief", [])) > 1:
        raise _error(value, f"the cluster has {len(cluster['chief'])} chiefs; at most 1")
    return cluster


def _check_task(value: str, task: Any, cluster: dict[str, list[str]]) -> None:
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise _error(value, '"task" must be an object like {"type": "worker", "index": 0}')
    kind, index = task["type"], task["index"]
    if kind not in TASK_TYPES:
        raise _error(
            value, f"task type {kind!r} is not supported: every task trains (chief, worker)"
        )
    if kind not in cluster:
        raise _error(
            value, f"task type {kind!r} is not a job of the cluster ({', '.join(cluster)})"
        )
    if isinstance(index, bool) or not isinstance(index, int):
        raise _error(value, f"task index {index!r} is not an integer")
    count = len(cluster[kind])
    if not 0 <= index < count:
        raise _error(
            value,
            f"task index {index} is outside the cluster's {count} {kind!r} address"
            f"{'es' if count > 1 else ''} (0..{count - 1})",
        )
