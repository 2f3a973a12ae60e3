"""A pytest plugin that injects ONE known bug into electra_tf before any test module imports it
(`-p tools.mutation_plugin`, with $ELECTRA_MUTATION naming the bug); `tools/mutation_check.py` runs
the tests once per bug. Each entry says what it breaks; the injections are deliberately crude
and live here only, never in the package."""

from __future__ import annotations

import os

MUTATIONS = {
    "gelu_tanh": "the tanh approximation of GELU in every gelu layer (the original: erf)",
    "decay_all": "weight decay on LayerNorm parameters and biases too",
    "lr_next_step": "the learning rate of step k+1 applied at step k",
    "dup_no_floor_average": "a duplicated masked position keeps its last sample (no floor-average)",
    "no_clipping": "no global-norm gradient clipping",
    "generator_own_embeddings": "the generator gets its own embedding tables (not shared)",
    "disc_weight_1": "the discriminator loss weighted 1 instead of disc_weight (50)",
}


_OPTIMIZER_MUTATIONS = ("decay_all", "lr_next_step", "no_clipping")


def _inject(name: str) -> None:
    if name not in MUTATIONS:
        raise ValueError(f"unknown mutation {name!r}; known: {sorted(MUTATIONS)}")
    if name in _OPTIMIZER_MUTATIONS:
        _inject_optimizer(name)
    else:
        _inject_model(name)


def _inject_optimizer(name: str) -> None:
    import tensorflow as tf

    from electra_tf import optimization

    if name == "decay_all":
        optimization.AdamWeightDecay.uses_weight_decay = lambda self, variable: bool(
            self.weight_decay_rate
        )
    elif name == "lr_next_step":
        schedule_call = optimization.ElectraSchedule.__call__
        optimization.ElectraSchedule.__call__ = lambda self, step: schedule_call(
            self, tf.cast(step, tf.float32) + 1.0
        )
    elif name == "no_clipping":
        optimizer_init = optimization.AdamWeightDecay.__init__

        def without_clipping(self, *args, **kwargs):
            kwargs["clip_norm"] = None
            optimizer_init(self, *args, **kwargs)

        optimization.AdamWeightDecay.__init__ = without_clipping


def _inject_model(name: str) -> None:
    import tensorflow as tf
    import tf_keras as keras

    from electra_tf.modeling import encoder as encoder_module
    from electra_tf.pretraining import losses, pretrainer, sampling

    if name == "gelu_tanh":
        dense_init = keras.layers.Dense.__init__

        def dense_with_tanh_gelu(self, units, activation=None, **kwargs):
            if activation == "gelu":
                activation = lambda x: tf.nn.gelu(x, approximate=True)  # noqa: E731
            dense_init(self, units, activation=activation, **kwargs)

        keras.layers.Dense.__init__ = dense_with_tanh_gelu
    elif name == "dup_no_floor_average":
        original = sampling.scatter_update

        def last_sample_wins(sequence, updates, positions):
            out, mask = original(sequence, updates, positions)
            rows = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, None], tf.shape(positions))
            index = tf.stack([rows, tf.cast(positions, tf.int32)], -1)  # [batch, N, 2]
            last = tf.tensor_scatter_nd_update(sequence, index, tf.cast(updates, sequence.dtype))
            return tf.where(mask > 0, last, out), mask

        sampling.scatter_update = pretrainer.scatter_update = last_sample_wins
    elif name == "generator_own_embeddings":
        encoder_init = encoder_module.TransformerEncoder.__init__

        def own_tables(self, config, embeddings=None, **kwargs):
            if kwargs.get("name") == "generator":
                embeddings = None
            encoder_init(self, config, embeddings=embeddings, **kwargs)

        encoder_module.TransformerEncoder.__init__ = own_tables
    elif name == "disc_weight_1":
        loss = losses.electra_loss

        def weight_one(*args, **kwargs):
            kwargs["disc_weight"] = 1.0
            return loss(*args, **kwargs)

        losses.electra_loss = pretrainer.electra_loss = weight_one


def pytest_configure(config) -> None:
    name = os.environ.get("ELECTRA_MUTATION")
    if name:
        _inject(name)
