"""What a resumed run may change: the model dir's config.json against the new config.

Three kinds of setting (docs/configuration.md, "Resuming with other settings"):

- shape keys change the checkpoint's variables: refused, always (a restore would fail deep
  inside TensorFlow, or restore into another model);
- keys meant to change between the starts of one run (`ACCEPTED_ON_RESUME`: the steps, the
  logging and saving periods, the optimizer's rates, where the files are, the speed
  settings): accepted, and listed for the run to print;
- every other key changes what the run computes (the data: sequence length, batch size,
  vocabulary, seed; the masking; the objective; the precision): refused naming the key, the
  old and the new value, unless the caller allows it (`allowed`, the pretrain command's
  `--allow-config-change KEY[,KEY]`). A batch size changed so resumes at step s x the new batch
  (`runs/pretraining_data.resumed_input`): records are skipped or read twice, which is why it
  needs the option.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Collection, Mapping
from typing import Any

from electra_tf.config import (
    MASKED_LM_VARIANTS,
    ConfigError,
    PretrainingConfig,
    ResolvedPretrainingConfig,
    check_known_keys,
    config_from_values,
)

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
    "two_tower_generator",
    "untied_generator_embeddings",
    "untied_generator",
    "generator_layers",
    "generator_hidden_size",
    "objective_variant",
)

# Meant to change between the starts of one run: accepted on resume, and printed.
ACCEPTED_ON_RESUME = frozenset(
    {
        # How long, how often: the schedule's length reads num_train_steps, as the original's.
        "num_train_steps", "iterations_per_loop", "save_checkpoints_steps",
        "keep_checkpoint_max", "log_every_steps", "num_eval_steps", "eval_batch_size",
        "eval_tfrecords", "do_train", "do_eval", "debug",
        # The optimizer's rates (what a diverged run is resumed with, lowered).
        "learning_rate", "lr_decay_power", "weight_decay_rate", "num_warmup_steps",
        "generator_lr_multiplier",
        # Where things are, and how fast: the same arithmetic (docs/distributed.md).
        "data_dir", "model_dir", "model_name", "jit_compile", "parallel_micro_batches",
        "gradient_accumulation_steps", "intra_op_threads", "inter_op_threads",
        "distribution_strategy", "tpu", "worker_timeout_seconds",
        # Read only when a run starts without checkpoints.
        "init_checkpoint", "init_checkpoint_format", "init_step",
    }
)  # fmt: skip
_DERIVED = frozenset({"max_predictions_per_seq"})  # follows mask_prob and max_seq_length


def _uses_loss_scale(config: ResolvedPretrainingConfig) -> bool:
    # A LossScaleOptimizer wraps the optimizer: its checkpoint has a different structure.
    return config.precision == "mixed_float16"


def _shape_signature(config: ResolvedPretrainingConfig) -> dict[str, Any]:
    return {
        "discriminator": config.discriminator_config().to_dict(),
        "generator": config.generator_config().to_dict(),
        "electra_objective": config.electra_objective,
        "uniform_generator": config.uniform_generator,
        "two_tower_generator": config.two_tower_generator,
        "untied_generator_embeddings": config.untied_generator_embeddings,
        "loss_scaling": _uses_loss_scale(config),
        # The masked-LM variants swap the replaced-token head for their own heads ("electra"
        # and "electra_15" have the same variables: no difference here).
        "masked_lm_variant": (
            config.objective_variant if config.objective_variant in MASKED_LM_VARIANTS else None
        ),
    }


def config_from_saved(values: Mapping[str, Any], where: str) -> ResolvedPretrainingConfig:
    """A saved config.json back into a config, by `config.config_from_values`'s rule: an
    unknown key is an error naming the closest valid one; retired keys are ignored."""
    try:
        return config_from_values(values, "the saved run config")
    except ConfigError as e:
        raise ConfigError(f"{where}: not a valid pre-training config ({e})") from e


def check_allowed_keys(keys: Collection[str]) -> None:
    """`--allow-config-change` names settings: an unknown one is an error naming the closest."""
    valid = [f.name for f in dataclasses.fields(PretrainingConfig)]
    check_known_keys(keys, valid, lambda key: f"--allow-config-change: {key!r} is not a setting")


def check_resumable(
    saved_path: str, config: ResolvedPretrainingConfig, allowed: Collection[str] = ()
) -> list[str]:
    """Raises ConfigError (one line) naming every refused difference from the saved config;
    returns the accepted ones ("key: old -> new"), for the run to print."""
    try:
        with open(saved_path, encoding="utf-8") as f:
            saved_values = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{saved_path}: cannot read the saved run config ({e})") from e
    if not isinstance(saved_values, dict):
        raise ConfigError(f"{saved_path}: not a valid pre-training config (not a JSON object)")
    saved = config_from_saved(saved_values, saved_path)
    model_dir = os.path.dirname(saved_path)
    _check_shapes(model_dir, saved, config)
    # Through JSON, as config.json holds them: lists, not tuples.
    now = json.loads(json.dumps(config.to_dict()))
    changed = [
        (key, saved_values[key], now[key])
        for key in sorted(now)
        if key in saved_values and key not in _DERIVED and saved_values[key] != now[key]
    ]
    refused = [c for c in changed if c[0] not in ACCEPTED_ON_RESUME and c[0] not in allowed]
    if refused:
        differences = "; ".join(f"{key}: saved {old!r}, now {new!r}" for key, old, new in refused)
        keys = ",".join(key for key, _, _ in refused)
        raise ConfigError(
            f"{model_dir} holds checkpoints of a run with other settings; refusing to resume "
            f"with {differences}. These change the model's data or what it learns: use the "
            f"saved values, another model_name, or --allow-config-change {keys} to resume "
            "with the new ones"
        )
    return [f"{key}: {old!r} -> {new!r}" for key, old, new in changed]


def _check_shapes(
    model_dir: str, saved: ResolvedPretrainingConfig, config: ResolvedPretrainingConfig
) -> None:
    """Refuses, whatever is allowed, a config whose checkpoint variables differ."""
    if _shape_signature(saved) == _shape_signature(config):
        return
    differences = [
        f"{key}: saved {getattr(saved, key)!r}, now {getattr(config, key)!r}"
        for key in SHAPE_KEYS
        if getattr(saved, key) != getattr(config, key)
    ]
    if _uses_loss_scale(saved) != _uses_loss_scale(config):
        differences.append(f"precision: saved {saved.precision!r}, now {config.precision!r}")
    if not differences:  # e.g. a different vocab size picked up from a different vocab file
        differences = [f"derived model config: saved {_shape_signature(saved)}"]
    raise ConfigError(
        f"{model_dir} holds checkpoints of a differently shaped model; refusing to resume "
        f"with {'; '.join(differences)}. Use another model_name / model_dir, or the saved "
        "settings (no option allows this: the checkpoint's variables would not fit)"
    )
