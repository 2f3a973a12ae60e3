"""The run's distribution strategy and this process's role in it."""

from __future__ import annotations

import tensorflow as tf

from electra_tf.config import ConfigError, PretrainingConfig


def build_strategy(config: PretrainingConfig) -> tf.distribute.Strategy:
    """The strategy named by `config.distribution_strategy` (multi-worker reads TF_CONFIG).

    MultiWorkerMirroredStrategy configures TensorFlow's collective ops, which is possible only
    before TensorFlow's context starts: build it first (`tf_startup.start_tensorflow`'s
    `before_start`)."""
    name = config.distribution_strategy
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=config.tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ConfigError(
        f"distribution_strategy: {name!r} is not default/mirrored/multi_worker_mirrored/tpu"
    )


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
