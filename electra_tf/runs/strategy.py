"""The run's distribution strategy and this process's role in it.

Several workers (MultiWorkerMirroredStrategy, TF_CONFIG) wait for each other at start and
watch each other while they run: a worker that cannot reach the others within
`worker_timeout_seconds` is ended with a message naming them instead of hanging, and one
whose peer died mid-run gets `WorkerLostError` (docs/distributed.md).
"""

from __future__ import annotations

import os
import subprocess
import sys

import tensorflow as tf

from electra_tf.config import ConfigError, PretrainingConfig
from electra_tf.runs.tf_config import read_tf_config


class WorkerLostError(ConnectionError):
    """A worker stopped answering mid-run; the message says how to resume."""


def build_strategy(config: PretrainingConfig) -> tf.distribute.Strategy:
    """The strategy named by `config.distribution_strategy` (multi-worker reads TF_CONFIG).

    MultiWorkerMirroredStrategy configures TensorFlow's collective ops, which is possible only
    before TensorFlow's context starts: build it first (`tf_startup.start_tensorflow`'s
    `before_start`)."""
    name = config.distribution_strategy
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(_local_devices())
    if name == "multi_worker_mirrored":
        read_tf_config()  # a malformed TF_CONFIG: one line naming it, not TensorFlow's traceback
        return _multi_worker_strategy(config.worker_timeout_seconds)
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=config.tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ConfigError(
        f"distribution_strategy: {name!r} is not default/mirrored/multi_worker_mirrored/tpu"
    )


def _local_devices() -> list[str] | None:
    """Every GPU (MirroredStrategy's default), else every logical CPU device when the CPU was
    split into several (`tf.config.set_logical_device_configuration`, before start-up)."""
    if tf.config.list_physical_devices("GPU"):
        return None
    cpus = [device.name for device in tf.config.list_logical_devices("CPU")]
    return cpus if len(cpus) > 1 else None


# The watchdog of `_multi_worker_strategy`: a separate process, because the blocked
# constructor holds Python's GIL (no thread of the worker runs until it returns).
_WATCHDOG = """
import os, signal, sys, time
time.sleep(float(sys.argv[1]))
if os.getppid() == int(sys.argv[2]):
    line = (sys.argv[3] + "\\n").encode()
    os.write(1, line)  # stdout: fd 2 of a worker is captured during TensorFlow's start-up
    os.write(2, line)
    os.kill(int(sys.argv[2]), signal.SIGKILL)
"""


def _multi_worker_strategy(timeout: float) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy that gives up on unreachable workers after `timeout` s.

    Its constructor waits for every worker of TF_CONFIG without a time limit, deaf to
    SIGTERM and holding the GIL: a watchdog process prints a message naming the workers and
    ends the worker (SIGKILL, exit status 137) if it is not built in time. Once built,
    the coordination service's heartbeats (or, without it, TensorFlow's health check, scaled
    the same way) find a peer dead after `timeout` s of silence, or a broken connection
    at once; the collectives are aborted, which `run_steps` turns into `WorkerLostError`."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import collective_all_reduce_strategy, multi_worker_util
    from tensorflow.python.eager import context

    # Class attributes are the only handle TensorFlow gives on its health check.
    extended = collective_all_reduce_strategy.CollectiveAllReduceExtended
    extended._check_health_interval = max(1, min(30, int(timeout / 4)))
    extended._check_health_timeout = max(1, min(10, int(timeout / 12)))
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec = resolver.cluster_spec()
    cluster = spec.as_dict()
    if resolver.task_type in ("chief", "worker"):
        # The coordination service (which the strategy would configure with TensorFlow's
        # 10 s heartbeat timeout, and which then replaces the health check above) declares
        # a worker dead after `timeout` s without a heartbeat: a busy worker is not one.
        context.context().configure_coordination_service(
            service_type="standalone",
            service_leader=multi_worker_util.coordination_leader(spec),
            coordinated_jobs=[
                coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
                for job in ("chief", "worker")
                if job in spec.jobs
            ],
            heartbeat_timeout_in_ms=int(timeout * 1000),
        )
    me = f"{resolver.task_type} {resolver.task_id}"
    others = [
        f"{job} {index} ({address})"
        for job, addresses in sorted(cluster.items())
        for index, address in enumerate(addresses)
        if (job, index) != (resolver.task_type, resolver.task_id)
    ]
    message = (
        f"error: {me} could not reach every other worker of TF_CONFIG within "
        f"{timeout:g} s (worker_timeout_seconds): {', '.join(others) or 'none listed'}. "
        "Start every worker with the same command, each with its own task index, and check "
        "the addresses and ports."
    )
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(timeout), str(os.getpid()), message]
    )
    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    finally:
        watchdog.kill()
        watchdog.wait()


def worker_role(strategy: tf.distribute.Strategy) -> tuple[bool, int, int]:
    """(is_chief, task id, number of workers): only the chief writes checkpoints, logs and
    TensorBoard."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return True, 0, 1
    task_type, task_id = resolver.task_type, resolver.task_id or 0
    cluster = resolver.cluster_spec().as_dict()
    has_chief = "chief" in cluster
    is_chief = task_type == "chief" or (not has_chief and task_type == "worker" and task_id == 0)
    num_workers = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
    return is_chief, task_id, num_workers


def check_accumulation(config: PretrainingConfig, strategy: tf.distribute.Strategy) -> None:
    """Each replica's batch must split into `gradient_accumulation_steps` equal micro-batches."""
    per_replica = config.train_batch_size // strategy.num_replicas_in_sync
    if per_replica % config.gradient_accumulation_steps:
        raise ConfigError(
            f"gradient_accumulation_steps {config.gradient_accumulation_steps} does not divide "
            f"the per-replica batch {per_replica} (train_batch_size {config.train_batch_size} "
            f"over {strategy.num_replicas_in_sync} replicas)"
        )
