"""Training checkpoints that resume a run exactly, and the run's saved config.

A training checkpoint is one object-based `tf.train.Checkpoint` holding the model (weights and
its sampling RNG `model.rng`), the optimizer (Adam slots, step counter, loss scale), the step
under the key `step` (what `electra_tf.checkpoints` reads), and the tf.data iterator, so a
restart continues the data stream where the last checkpoint left it.

Atomicity: `tf.train.CheckpointManager` first writes the checkpoint's files (TensorFlow writes
the shards to a temporary directory and merges them into `<prefix>.index` / `.data-*`), and only
then rewrites the `checkpoint` index file, itself written to a temporary file and renamed. So a
process killed during a save leaves the index pointing at the previous complete checkpoint; the
half-written prefix is never read and is overwritten when the run reaches that step again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from electra_tf.config import ConfigError, PretrainingConfig, save_config

CONFIG_FILE = "config.json"  # the resolved config beside the checkpoints (electra_tf.checkpoints)
CHECKPOINT_PREFIX = "ckpt"  # CheckpointManager's file prefix: ckpt-<step>.index, ...

# Settings that change the checkpoint's variables or their shapes. Resuming with a different
# value would fail deep inside the restore, or worse, silently restore into a different model.
SHAPE_KEYS = (
    "model_size",
    "model_hparam_overrides",
    "embedding_size",
    "vocab_size",
    "max_seq_length",
    "electra_objective",
    "uniform_generator",
    "untied_generator_embeddings",
    "untied_generator",
    "generator_layers",
    "generator_hidden_size",
)


def _uses_loss_scale(config: PretrainingConfig) -> bool:
    # A LossScaleOptimizer wraps the optimizer: its checkpoint has a different structure.
    return config.precision == "mixed_float16"


def _shape_signature(config: PretrainingConfig) -> dict[str, Any]:
    return {
        "discriminator": config.discriminator_config().to_dict(),
        "generator": config.generator_config().to_dict(),
        "electra_objective": config.electra_objective,
        "uniform_generator": config.uniform_generator,
        "untied_generator_embeddings": config.untied_generator_embeddings,
        "loss_scaling": _uses_loss_scale(config),
    }


def config_from_saved(values: Mapping[str, Any], where: str) -> PretrainingConfig:
    """A saved config.json back into a PretrainingConfig (keys we no longer know are ignored)."""
    known = {f.name for f in dataclasses.fields(PretrainingConfig)}
    try:
        return dataclasses.replace(
            PretrainingConfig(), **{k: v for k, v in values.items() if k in known}
        ).resolve()
    except (TypeError, ConfigError) as e:
        raise ConfigError(f"{where}: not a valid pre-training config ({e})") from e


def check_resumable(saved_path: str, config: PretrainingConfig) -> None:
    """Raises ConfigError listing every shape-relevant difference from the saved config."""
    try:
        with open(saved_path, encoding="utf-8") as f:
            saved_values = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{saved_path}: cannot read the saved run config ({e})") from e
    saved = config_from_saved(saved_values, saved_path)
    if _shape_signature(saved) == _shape_signature(config):
        return
    lines = [
        f"  {key}: saved {getattr(saved, key)!r}, now {getattr(config, key)!r}"
        for key in SHAPE_KEYS
        if getattr(saved, key) != getattr(config, key)
    ]
    if _uses_loss_scale(saved) != _uses_loss_scale(config):
        lines.append(f"  precision: saved {saved.precision!r}, now {config.precision!r}")
    if not lines:  # e.g. a different vocab size picked up from a different vocab file
        lines = [f"  derived model config: saved {_shape_signature(saved)}"]
    raise ConfigError(
        f"{os.path.dirname(saved_path)} holds checkpoints of a differently shaped model; "
        "refusing to resume. Differences:\n"
        + "\n".join(lines)
        + "\nUse another model_name / model_dir, or the saved settings."
    )


def write_run_config(config: PretrainingConfig, model_dir: str) -> str:
    path = os.path.join(model_dir, CONFIG_FILE)
    save_config(config, path)  # atomic: temporary file + rename
    return path


class TrainingCheckpoints:
    """Saves and restores a run's full training state under `model_dir`.

    Args:
      model_dir: the run's directory (the `checkpoint` index file and ckpt-<step>.* live there).
      max_to_keep: checkpoints kept (the original's keep_checkpoint_max).
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
        self.is_chief = is_chief
        self.checkpoint = tf.train.Checkpoint(**objects)
        directory = model_dir if is_chief else os.path.join(model_dir, f".worker{worker_id}-tmp")
        self.manager = tf.train.CheckpointManager(
            self.checkpoint,
            directory,
            max_to_keep=max_to_keep,
            checkpoint_name=CHECKPOINT_PREFIX,
        )

    def latest(self) -> str | None:
        return tf.train.latest_checkpoint(self.model_dir)

    def restore_latest(self) -> str | None:
        """Restores the newest complete checkpoint (all saved objects must match)."""
        path = self.latest()
        if path is None:
            return None
        try:
            self.checkpoint.read(path).assert_existing_objects_matched()
        except (AssertionError, tf.errors.OpError, ValueError) as e:
            raise RuntimeError(
                f"{path}: cannot resume from this checkpoint ({type(e).__name__}: {e})"
            ) from e
        return path

    def save(self, step: int) -> str:
        path = self.manager.save(checkpoint_number=step)
        if not self.is_chief:
            shutil.rmtree(self.manager.directory, ignore_errors=True)
        return path


def restore_weights(model: Any, path: str) -> None:
    """Loads only a native checkpoint's model weights (continued pre-training: no slots)."""
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None:
        raise FileNotFoundError(f"init_checkpoint: no checkpoint in {path}")
    status = tf.train.Checkpoint(model=model).read(prefix)
    status.expect_partial()  # the optimizer, step and data iterator are deliberately left out
    status.assert_existing_objects_matched()
