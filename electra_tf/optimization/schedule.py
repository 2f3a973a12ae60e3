"""The original's learning-rate schedule (`ElectraSchedule`), importable from
`electra_tf.optimization` as before: polynomial decay to 0 multiplied by a linear warm-up."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras as keras


@keras.utils.register_keras_serializable(package="electra_tf")
class ElectraSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The original's pre-training / fine-tuning learning rate.

    `lr(step) = peak * (1 - min(s, T) / T) ** power * min(1, s / warmup)` with `s = step +
    start_step`, `T = num_train_steps` and `warmup = max(T * warmup_proportion, warmup_steps)`.
    With warmup 0 the ramp factor is 1.

    Args:
      learning_rate: peak learning rate.
      num_train_steps: T, the step at which the rate reaches 0.
      warmup_steps: warmup length in steps.
      warmup_proportion: warmup length as a fraction of T; the larger of the two wins.
      power: polynomial decay power (the original's `lr_decay_power`).
      start_step: added to the optimizer's step before evaluating the schedule, for a fresh
        optimizer that continues a run that already took `start_step` steps.
    """

    def __init__(
        self,
        learning_rate: float,
        num_train_steps: int,
        warmup_steps: int = 0,
        warmup_proportion: float = 0.0,
        power: float = 1.0,
        start_step: int = 0,
    ):
        if num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be > 0, got {num_train_steps}")
        self.learning_rate = float(learning_rate)
        self.num_train_steps = int(num_train_steps)
        self.warmup_steps = int(warmup_steps)
        self.warmup_proportion = float(warmup_proportion)
        self.power = float(power)
        self.start_step = int(start_step)

    @property
    def warmup(self) -> float:
        return max(self.num_train_steps * self.warmup_proportion, float(self.warmup_steps))

    def __call__(self, step: Any) -> tf.Tensor:
        step = tf.cast(step, tf.float32) + float(self.start_step)
        total = float(self.num_train_steps)
        decayed = self.learning_rate * tf.pow(1.0 - tf.minimum(step, total) / total, self.power)
        if self.warmup > 0:
            decayed *= tf.minimum(1.0, step / self.warmup)
        return decayed

    def get_config(self) -> dict[str, Any]:
        return {
            "learning_rate": self.learning_rate,
            "num_train_steps": self.num_train_steps,
            "warmup_steps": self.warmup_steps,
            "warmup_proportion": self.warmup_proportion,
            "power": self.power,
            "start_step": self.start_step,
        }
