"""The pre-training run's model, optimizer and compiled train function."""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf
import tf_keras as keras

from electra_tf.checkpoints.names import GENERATOR_SCOPES
from electra_tf.checkpoints.native import restore_weights
from electra_tf.config import ConfigError, ResolvedPretrainingConfig
from electra_tf.optimization import create_optimizer, for_precision


def special_token_ids(config: ResolvedPretrainingConfig) -> dict[str, int]:
    """[CLS], [SEP] and [MASK] ids from the run's vocabulary (not assumed from BERT's)."""
    from electra_tf.data.tokenization import load_vocab

    try:
        vocab = load_vocab(config.resolved_vocab_file())
    except (OSError, ValueError) as e:
        raise ConfigError(f"vocab_file: {e}") from e
    return {"cls_id": vocab["[CLS]"], "sep_id": vocab["[SEP]"], "mask_id": vocab["[MASK]"]}


def build_model(config: ResolvedPretrainingConfig) -> keras.Model:
    """The pretrainer with every variable created (call under the strategy's scope): its
    networks come from the one factory, `build_networks`, and are handed to it."""
    from electra_tf.pretraining.networks import build_networks
    from electra_tf.pretraining.pretrainer import ElectraPretrainer

    return ElectraPretrainer(config, build_networks(config), **special_token_ids(config))


def generator_lr_multipliers(
    variable_map: dict[str, tf.Variable], multiplier: float
) -> dict[str, float]:
    """`generator_lr_multiplier` for every generator-only variable (the masked-LM generator's,
    or the two-tower cloze model's of Electric); {} at 1.0 (the original)."""
    if multiplier == 1.0:
        return {}
    return {name: multiplier for name in variable_map if name.startswith(GENERATOR_SCOPES)}


def build_optimizer(
    config: ResolvedPretrainingConfig, model: keras.Model, initial_scale: float | None = None
) -> keras.optimizers.Optimizer:
    """AdamWeightDecay on the original's schedule; wrapped for loss scaling under float16
    (`initial_scale`: the loss scale it starts from, else tf_keras's default).

    The one place the run's optimizer is made: every optimization setting of the config
    (learning_rate, its warm-up and decay, weight decay, the generator's multiplier) is read
    here and nowhere else."""
    variable_map = model.variable_map()
    optimizer = create_optimizer(
        variable_map,
        lr_multipliers=generator_lr_multipliers(variable_map, config.generator_lr_multiplier),
        learning_rate=config.learning_rate,
        num_train_steps=config.num_train_steps,
        weight_decay_rate=config.weight_decay_rate,
        warmup_steps=config.num_warmup_steps,
        lr_decay_power=config.lr_decay_power,
        adam_bias_correction=config.adam_bias_correction,
    )
    optimizer = for_precision(optimizer, config.precision, initial_scale)
    # Slots exist before any restore, so a checkpoint fills them instead of deferring.
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    inner.build(model.trainable_variables)
    return optimizer


def current_learning_rate(optimizer: Any) -> float:
    """The learning rate the optimizer's schedule gives at its current step."""
    return float(getattr(optimizer, "inner_optimizer", optimizer).learning_rate.numpy())


def load_init_checkpoint(model: keras.Model, config: ResolvedPretrainingConfig) -> str:
    """Continued pre-training: the weights of `init_checkpoint`, no optimizer state."""
    path, fmt = config.init_checkpoint, config.init_checkpoint_format
    assert path is not None
    if fmt == "auto":
        from electra_tf.checkpoints import detect_format

        fmt = detect_format(path)
    if fmt == "native":
        restore_weights(model, path)
    else:
        # Original TF1 and Hugging Face weights go through the checkpoint converter's loader.
        from electra_tf.checkpoints import load_weights

        load_weights(model, path, fmt)
    return fmt


def metric_values(model: keras.Model) -> dict[str, float]:
    return {m.name: float(m.result()) for m in model.metrics}


class TrainingDiverged(RuntimeError):
    """The loss or the weights became NaN or Inf; nothing after the last good checkpoint was
    saved (the message says which it is and at which steps)."""


def divergence(model: keras.Model, check_weights: bool) -> str | None:
    """What became NaN or Inf, or None: the loss metrics (running means since the last report,
    so one bad step anywhere in them shows), and with `check_weights` every trainable weight,
    which a bad update can poison before any loss shows it (checked before each save)."""
    bad = [
        name
        for name, value in metric_values(model).items()
        if "loss" in name and not math.isfinite(value)
    ]
    if bad:
        return f"the {', '.join(bad)} became NaN or Inf"
    if check_weights:
        finite = [tf.reduce_all(tf.math.is_finite(v)) for v in model.trainable_variables]
        if not bool(tf.reduce_all(finite)):
            return "the weights became NaN or Inf"
    return None


def reset_metrics(model: keras.Model) -> None:
    for metric in model.metrics:
        metric.reset_state()


def make_replica_step(model: keras.Model, jit: bool) -> Any:
    """`fn(batch) -> real tokens in it`: one replica's train step, what `strategy.run` runs
    (and what TPUStrategy compiles whole with XLA); `jit` compiles the update with XLA."""
    # `train_update` (the pretrainer's) skips reading the metrics after every step.
    update = getattr(model, "train_update", model.train_step)
    step_fn = tf.function(update, jit_compile=True) if jit else update

    def replica_step(batch: dict[str, tf.Tensor]) -> tf.Tensor:
        step_fn(batch)
        return tf.reduce_sum(tf.cast(batch["input_mask"], tf.int64))

    return replica_step


def make_train_function(model: keras.Model, strategy: tf.distribute.Strategy, jit: bool) -> Any:
    """`fn(iterator, num_steps) -> real tokens seen`: many train steps per Python call."""
    replica_step = make_replica_step(model, jit)

    # Tokens are summed over this worker's replicas only: a cross-worker int64 all-reduce in
    # the loop made MultiWorkerMirroredStrategy workers disagree on collective instance keys.
    # The caller scales by the number of workers (a display figure).
    @tf.function
    def train_steps(iterator: Any, num_steps: tf.Tensor) -> tf.Tensor:
        tokens = tf.constant(0, tf.int64)
        for _ in tf.range(num_steps):
            per_replica = strategy.run(replica_step, args=(next(iterator),))
            tokens += tf.add_n(strategy.experimental_local_results(per_replica))
        return tokens

    return train_steps


def stop_if_diverged(
    model: keras.Model, checkpoints: Any, config: ResolvedPretrainingConfig, saving: bool, previous: int,
    step: int,
) -> None:  # fmt: skip
    """Raises TrainingDiverged before a NaN or Inf reaches a checkpoint: the last good one
    stays the latest, and rerunning (with a lower learning rate, say) resumes from it."""
    problem = divergence(model, check_weights=saving)
    if problem is None:
        return
    latest = checkpoints.latest()
    kept = f"the last checkpoint, {latest}, is kept" if latest else "no checkpoint was written"
    raise TrainingDiverged(
        f"{problem} at a step in {previous + 1}..{step}; stopped without saving: {kept}. "
        f"Lower learning_rate (now {config.learning_rate:g}) or check the data, then run "
        "the same command again to resume"
    )
