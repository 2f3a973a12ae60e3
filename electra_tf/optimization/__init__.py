"""The original's optimizer: Adam without bias correction, decoupled weight decay, its LR schedule.

Reference: google-research/electra `model/optimization.py` (docs/faithfulness.md, section 7
'Optimizer and schedule'). Three pieces:

- `AdamWeightDecay`: BERT's `AdamWeightDecayOptimizer` as a tf_keras optimizer (new API).
  Unlike Keras' `Adam`/`AdamW` and Model Garden's `AdamWeightDecay` (both apply Adam's bias
  correction), the update is `m / (sqrt(v) + eps)` with raw moments, so the first steps move
  each weight by up to ~3x the LR; the original relies on its warmup for that.
- `ElectraSchedule`: polynomial decay to 0 MULTIPLIED by `min(1, step / warmup)`; warmup and
  decay overlap (not BERT's "replace the decay with a ramp during warmup").
- `layerwise_lr_multipliers`: the fine-tuning layer-wise LR decay (`_get_layer_lrs`); it lives
  in `electra_tf.optimization.layerwise_lr` and is importable from here as before
  (`ElectraSchedule` lives in `electra_tf.optimization.schedule`, importable from here too).

Every per-variable decision (weight-decay exclusion, LR multiplier) is made on the variable's
ORIGINAL TF1 name, taken from a model's `variable_map()`, so that it matches the original exactly
whatever Keras calls the variable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras as keras

from electra_tf.optimization.layerwise_lr import layerwise_lr_multipliers
from electra_tf.optimization.schedule import ElectraSchedule

# Substrings of an original variable name that exempt it from weight decay (as the original).
DEFAULT_WEIGHT_DECAY_EXCLUSIONS = ("LayerNorm", "layer_norm", "bias")


def _strip_device_suffix(name: str) -> str:
    return name[:-2] if re.search(r":\d+$", name) else name


def _plain(value: Any) -> Any:
    """NumPy scalars (from a variable's value) -> Python floats, so configs stay JSON-friendly."""
    return value if isinstance(value, dict) else float(value)


def fused_constants(beta_1: float, beta_2: float, epsilon: float) -> tuple[float, float]:
    """(lr factor, epsilon) that make ApplyAdam's update the written-out form's.

    ApplyAdam forms its moment weights in float32 as `1 - beta` (for beta_2 = 0.999 that is
    0.00099998713, 1.3e-5 under the 0.001 the original multiplies by), so its m and v are the
    original's times k1 = (1 - f32(b1)) / f32(1 - b1) and k2 (the same for b2), at every step:
    both forms decay by the same f32(beta). Then
    lr * sqrt(k2) / k1 * m' / (sqrt(v') + eps * sqrt(k2)) = lr * m / (sqrt(v) + eps)
    exactly, so only rounding separates the two updates; the slots hold m * k1, v * k2.
    """
    f32 = np.float32

    def k(beta: float) -> float:
        return float(f32(1.0) - f32(beta)) / float(f32(1.0 - beta))

    k1, k2 = k(beta_1), k(beta_2)
    return math.sqrt(k2) / k1, epsilon * math.sqrt(k2)


@keras.utils.register_keras_serializable(package="electra_tf")
class AdamWeightDecay(keras.optimizers.Optimizer):
    """Adam with decoupled weight decay and NO bias correction (the original's optimizer).

    Per variable `p` with gradient `g` (after global-norm clipping of all gradients):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g^2
        u = m / (sqrt(v) + eps)  (+ weight_decay_rate * p unless the name is excluded)
        p -= lr_t * lr_multiplier(p) * u

    `bias_correction=True` (ours; default off, the original's) divides m by (1 - b1^t) and v by
    (1 - b2^t) at step t = 1, 2, ... before forming u, as Adam's paper does. Without it the first
    few hundred steps move each weight 2-6x further than the learning rate says
    ((1 - b1^t) / sqrt(1 - b2^t) for a steady gradient), which Mosbach et al. (ICLR 2021) tie
    to failed BERT fine-tuning runs on small data sets.

    Clipping uses tf_keras' `global_clipnorm`, which `apply_gradients` applies after it has
    all-reduced the gradients across replicas, so under tf.distribute the norm is the norm of the
    global gradient (the same number on every replica). Sparse gradients (embedding lookups) are
    densified before clipping, so the norm is the summed gradient's and every row's moments decay
    each step, as with the original's dense gradients.

    Args:
      learning_rate: float or `LearningRateSchedule` (e.g. `ElectraSchedule`).
      weight_decay_rate: decoupled decay coefficient (0.01 in pre-training).
      beta_1, beta_2, epsilon: Adam constants; the original's defaults.
      exclude_from_weight_decay: substrings of the original name that skip weight decay.
      clip_norm: global-norm clipping threshold; None disables it.
      variable_map: original TF1 name -> variable (a model's `variable_map()`); variables not in
        it fall back to their Keras name (without the ":0" suffix).
      lr_multipliers: original name -> LR factor (`layerwise_lr_multipliers`); absent -> 1.
      bias_correction: Adam's bias correction of m and v (ours; the original has none).
      fused: without bias correction, each variable's update is one `ApplyAdam` kernel (one
        pass over the variable, its moments and gradient) after the weight decay's own
        multiply, instead of the dozen elementwise ops of the written-out form. The same update
        up to float32 rounding, with the lr and epsilon it is given adjusted for how ApplyAdam
        weights its moments (`fused_constants`); `fused=False` keeps the written-out form, the
        reference the tests hold the kernel to.
    """

    def __init__(
        self,
        learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = 1e-3,
        weight_decay_rate: float = 0.0,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        exclude_from_weight_decay: Iterable[str] = DEFAULT_WEIGHT_DECAY_EXCLUSIONS,
        clip_norm: float | None = 1.0,
        variable_map: Mapping[str, tf.Variable] | None = None,
        lr_multipliers: Mapping[str, float] | None = None,
        bias_correction: bool = False,
        fused: bool = True,
        name: str = "AdamWeightDecay",
        jit_compile: bool = False,
        **kwargs: Any,
    ):
        kwargs.pop("global_clipnorm", None)
        kwargs.pop("weight_decay", None)
        # The base class's own weight decay is disabled: ours is part of the Adam update.
        super().__init__(
            name=name,
            weight_decay=None,
            global_clipnorm=clip_norm,
            jit_compile=jit_compile,
            **kwargs,
        )
        self._learning_rate = self._build_learning_rate(learning_rate)
        self.weight_decay_rate = float(weight_decay_rate)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.exclude_from_weight_decay_names = tuple(exclude_from_weight_decay)
        self.clip_norm = clip_norm
        self.lr_multipliers = dict(lr_multipliers or {})
        self.bias_correction = bool(bias_correction)
        self.fused = bool(fused)
        self._fused_lr_factor, self._fused_epsilon = fused_constants(
            self.beta_1, self.beta_2, self.epsilon
        )
        self._original_names: dict[Any, str] = self._no_dependency({})
        # The scalars every variable's update shares (the rate, the decay factor, ApplyAdam's
        # constants), made once per `apply_gradients` (`_shared`), not once per variable.
        self._scalars: dict[tuple, tf.Tensor] = self._no_dependency({})
        if variable_map is not None:
            self.set_variable_map(variable_map)

    @property
    def learning_rate_schedule(self) -> keras.optimizers.schedules.LearningRateSchedule | None:
        """The schedule the optimizer was built with (e.g. `ElectraSchedule`), or None for a
        constant rate. Call it with a step to get that step's rate; `learning_rate` gives
        only the current one."""
        schedule = self._learning_rate
        if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            return schedule
        return None

    # ------------------------------------------------------------------ names
    def set_variable_map(self, variable_map: Mapping[str, tf.Variable]) -> None:
        """Registers the original names; call before the first `apply_gradients`."""
        if getattr(self, "_built", False):
            raise ValueError("set_variable_map must be called before the optimizer is built")
        self._original_names.clear()
        for name, variable in variable_map.items():
            self._original_names[self._var_key(variable)] = name
        unknown = set(self.lr_multipliers) - set(variable_map)
        if unknown:
            raise ValueError(
                f"lr_multipliers names variables not in the variable map: {sorted(unknown)[:5]}"
            )

    def original_name(self, variable: tf.Variable) -> str:
        return self._original_names.get(
            self._var_key(variable), _strip_device_suffix(variable.name)
        )

    def uses_weight_decay(self, variable: tf.Variable) -> bool:
        if not self.weight_decay_rate:
            return False
        name = self.original_name(variable)
        return not any(part in name for part in self.exclude_from_weight_decay_names)

    def lr_multiplier(self, variable: tf.Variable) -> float:
        return float(self.lr_multipliers.get(self.original_name(variable), 1.0))

    # ------------------------------------------------------------------ state
    def build(self, var_list: list[tf.Variable]) -> None:
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self._built = True
        # The original's slot names are `<var>/adam_m` / `<var>/adam_v`; `slot_map()` gives them.
        self._m = [self.add_variable_from_reference(v, "adam_m") for v in var_list]
        self._v = [self.add_variable_from_reference(v, "adam_v") for v in var_list]
        self._slot_names = [self.original_name(v) for v in var_list]

    def slot_map(self) -> dict[str, tf.Variable]:
        """`<original name>/adam_m` and `/adam_v` -> slot variable (the original's names)."""
        slots: dict[str, tf.Variable] = {}
        for name, m, v in zip(self._slot_names, self._m, self._v, strict=True):
            slots[f"{name}/adam_m"] = m
            slots[f"{name}/adam_v"] = v
        return slots

    # ------------------------------------------------------------------ update
    def apply_gradients(self, grads_and_vars: Any, name: str | None = None, **kwargs) -> Any:
        # tf_keras clips BEFORE it sums the duplicate rows of a sparse (embedding-lookup)
        # gradient, so each occurrence would count separately in the global norm: the
        # token-type table's 2 rows looked up at every position inflated the norm and shrank
        # every clipped update. The original's gradients are dense (its token-type lookup is
        # a one-hot matmul), so the norm is that of the summed gradient: densify first.
        dense = [
            (tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g, v)
            for g, v in grads_and_vars
        ]
        try:
            return super().apply_gradients(dense, name=name, **kwargs)
        finally:
            self._scalars.clear()  # this update's tensors: none outlives it

    def _shared(self, key: tuple, variable: tf.Variable, make: Any) -> tf.Tensor:
        """`make()`, made once per `apply_gradients` for every variable of `variable`'s dtype
        and device in the graph being built: the same value each variable's update computed
        for itself before, as one op instead of one per variable (about 400 in pre-training:
        each op costs the trace, the graph optimizer and the executor of every step)."""
        key = (*key, variable.dtype, variable.device, id(tf.compat.v1.get_default_graph()))
        if key not in self._scalars:
            self._scalars[key] = make()
        return self._scalars[key]

    def update_step(self, gradient: Any, variable: tf.Variable) -> None:
        index = self._index_dict[self._var_key(variable)]
        m, v = self._m[index], self._v[index]
        gradient = tf.cast(gradient, variable.dtype)
        multiplier = self.lr_multiplier(variable)
        lr = self._shared(
            ("lr", multiplier),
            variable,
            lambda: tf.cast(self.learning_rate, variable.dtype) * multiplier,
        )
        if self.fused and not self.bias_correction:
            self._fused_update(gradient, variable, m, v, lr, multiplier)
            return
        next_m = self.beta_1 * m + (1.0 - self.beta_1) * gradient
        next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(gradient)
        if self.bias_correction:
            # `iterations` counts the updates already applied: this one is number t.
            t = tf.cast(self.iterations + 1, variable.dtype)
            update = (next_m / (1.0 - tf.pow(self.beta_1, t))) / (
                tf.sqrt(next_v / (1.0 - tf.pow(self.beta_2, t))) + self.epsilon
            )
        else:
            update = next_m / (tf.sqrt(next_v) + self.epsilon)
        if self.uses_weight_decay(variable):
            # Decoupled decay: added to the Adam direction, scaled by the same (multiplied) LR.
            update += self.weight_decay_rate * tf.convert_to_tensor(variable)
        m.assign(next_m)
        v.assign(next_v)
        variable.assign_sub(lr * update)

    def _fused_update(self, gradient, variable, m, v, lr, multiplier: float) -> None:
        # p - lr * (adam + wd * p) = p * (1 - lr * wd) - lr * adam: the decay first, on the
        # old weights, then ApplyAdam, whose step size lr * sqrt(1 - b2^t) / (1 - b1^t) is lr
        # itself when both powers are 0: no bias correction, as the original.
        def shared(name: str, make: Any) -> tf.Tensor:
            return self._shared((name, multiplier), variable, make)

        dtype = variable.dtype
        if self.uses_weight_decay(variable):
            variable.assign(variable * shared("decay", lambda: 1.0 - lr * self.weight_decay_rate))
        zero = shared("zero", lambda: tf.constant(0.0, dtype))
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=m.handle,
            v=v.handle,
            beta1_power=zero,
            beta2_power=zero,
            lr=shared("fused_lr", lambda: lr * self._fused_lr_factor),
            beta1=shared("beta1", lambda: tf.constant(self.beta_1, dtype)),
            beta2=shared("beta2", lambda: tf.constant(self.beta_2, dtype)),
            epsilon=shared("epsilon", lambda: tf.constant(self._fused_epsilon, dtype)),
            grad=gradient,
            use_locking=False,
        )

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.pop("weight_decay", None)
        config.pop("global_clipnorm", None)
        config.update(
            {
                "learning_rate": _plain(self._serialize_hyperparameter(self._learning_rate)),
                "weight_decay_rate": self.weight_decay_rate,
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "exclude_from_weight_decay": list(self.exclude_from_weight_decay_names),
                "clip_norm": self.clip_norm,
                "lr_multipliers": dict(self.lr_multipliers),
                "bias_correction": self.bias_correction,
                "fused": self.fused,
            }
        )
        return config


def learning_rate_schedule(
    optimizer: keras.optimizers.Optimizer | None,
) -> keras.optimizers.schedules.LearningRateSchedule | None:
    """The learning-rate schedule `optimizer` steps on, or None (a constant rate, no optimizer).

    A `LossScaleOptimizer` is looked through to the optimizer it wraps (`inner_optimizer`).
    `AdamWeightDecay` answers with its `learning_rate_schedule`; any other tf_keras optimizer
    (`keras.optimizers.Adam(schedule)` in user code) keeps its schedule in `_learning_rate`
    and has no public accessor, so that attribute is read here, the one place that does.

    Args:
        optimizer: a tf_keras optimizer (new API), possibly loss-scaled, or None.

    Returns:
        The `LearningRateSchedule` (call it with `optimizer.iterations` for the rate of the
        step about to be applied), or None.
    """
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    if isinstance(optimizer, AdamWeightDecay):
        return optimizer.learning_rate_schedule
    schedule = getattr(optimizer, "_learning_rate", None)
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return schedule
    return None


def create_optimizer(
    variable_map: Mapping[str, tf.Variable],
    learning_rate: float,
    num_train_steps: int,
    weight_decay_rate: float = 0.0,
    warmup_steps: int = 0,
    warmup_proportion: float = 0,
    lr_decay_power: float = 1.0,
    layerwise_lr_decay_power: float = -1,
    n_transformer_layers: int | None = None,
    fix_layerwise_top_layer: bool = False,
    start_step: int = 0,
    lr_multipliers: Mapping[str, float] | None = None,
    adam_bias_correction: bool = False,
) -> AdamWeightDecay:
    """The original's `create_optimizer`, returning the optimizer instead of a train op.

    Clipping (global norm 1.0) happens inside the optimizer. `layerwise_lr_decay_power > 0`
    turns on layer-wise LR decay and needs `n_transformer_layers`. `lr_multipliers` (original
    name -> factor) scales further variables; it multiplies with the layer-wise factors.
    `adam_bias_correction` turns on Adam's bias correction (ours; the original has none).
    """
    schedule = ElectraSchedule(
        learning_rate,
        num_train_steps,
        warmup_steps=warmup_steps,
        warmup_proportion=warmup_proportion,
        power=lr_decay_power,
        start_step=start_step,
    )
    multipliers = dict(lr_multipliers) if lr_multipliers else None
    if layerwise_lr_decay_power > 0:
        if n_transformer_layers is None:
            raise ValueError("layerwise_lr_decay_power > 0 needs n_transformer_layers")
        layerwise = layerwise_lr_multipliers(
            variable_map,
            n_transformer_layers,
            layerwise_lr_decay_power,
            fix_top_layer=fix_layerwise_top_layer,
        )
        for name, factor in (multipliers or {}).items():
            layerwise[name] = layerwise.get(name, 1.0) * factor
        multipliers = layerwise
    return AdamWeightDecay(
        learning_rate=schedule,
        weight_decay_rate=weight_decay_rate,
        variable_map=variable_map,
        lr_multipliers=multipliers,
        bias_correction=adam_bias_correction,
    )


def for_precision(
    optimizer: keras.optimizers.Optimizer, precision: str, initial_scale: float | None = None
) -> keras.optimizers.Optimizer:
    """`optimizer` for a run in `precision` (resolved, not "auto"): under mixed_float16 wrapped
    in tf_keras's `LossScaleOptimizer` (dynamic loss scaling, starting at `initial_scale`, else
    tf_keras's default 2^15), whose presence makes the pre-training and fine-tuning steps scale
    the loss; under any other precision unchanged (bfloat16 has float32's exponent range)."""
    if precision != "mixed_float16":
        return optimizer
    scale = {} if initial_scale is None else {"initial_scale": initial_scale}
    return keras.mixed_precision.LossScaleOptimizer(optimizer, **scale)
