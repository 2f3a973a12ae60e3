"""Small helpers shared by the modeling layers: initializers, name maps, explicit builds."""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

from electra_tf.config import ModelConfig

# The model has no tensor-dependent Python control flow (every `if`/`for` is on config values),
# so AutoGraph's source rewriting would only cost tracing time. Decorating a train step is
# enough: layers called inside it inherit the disabled status. (Not for `call` itself: the
# wrapper's *args/**kwargs signature would make Keras pass `training`/`mask` to every layer.)
no_autograph = tf.autograph.experimental.do_not_convert

# TF1's `tf.contrib.layers.layer_norm` epsilon; every LayerNorm in the model uses it.
LAYER_NORM_EPSILON = 1e-12


def truncated_normal(config: ModelConfig) -> keras.initializers.Initializer:
    """The original's `create_initializer`: truncated normal (2 std cut-off), stddev 0.02."""
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def layer_norm(name: str = "LayerNorm", dtype=None) -> keras.layers.LayerNormalization:
    return keras.layers.LayerNormalization(
        axis=-1, epsilon=LAYER_NORM_EPSILON, name=name, dtype=dtype
    )


def build_sublayer(layer: keras.layers.Layer, input_shape) -> None:
    """Builds a sublayer now, under its own name scope, so variables exist before any call.

    Variables are created in a fixed order at construction of the parent, which keeps
    initial values reproducible under a fixed seed and lets `variable_map()` work early.
    """
    if not layer.built:
        with tf.name_scope(layer.name):
            layer.build(input_shape)


def require_built(layer: keras.layers.Layer) -> None:
    if not layer.built:
        raise ValueError(
            f"{layer.name}: variable_map() needs built variables; call the layer or build() first"
        )


def dense_map(prefix: str, dense: keras.layers.Dense) -> dict[str, tf.Variable]:
    """`<prefix>/kernel` ([in, out], as TF1 stores it) and `<prefix>/bias`."""
    return {f"{prefix}/kernel": dense.kernel, f"{prefix}/bias": dense.bias}


def layer_norm_map(prefix: str, norm: keras.layers.LayerNormalization) -> dict[str, tf.Variable]:
    return {f"{prefix}/gamma": norm.gamma, f"{prefix}/beta": norm.beta}


class ConfiguredLayer(keras.layers.Layer):
    """A layer built from one `ModelConfig` (kept as `self.config`): serialises it in
    `get_config` and rebuilds from it in `from_config`."""

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(ModelConfig.from_dict(config.pop("config")), **config)
