"""The project's side of the parity tools: the optimizer and the training checkpoint its
training run uses, and its pre-training step on the tiny shape (`ProjectSide`).

Each piece is imported from where the training run keeps it (`electra_tf.runs.pretraining_model`,
`electra_tf.checkpoints.training_state`): a piece that moves or breaks stops the tool with its
ImportError rather than letting it compare something else.
"""

from __future__ import annotations

from tools.original_parity.runtime import BATCH, CLS, MASK, SEP, SEQ


def build_optimizer(config, model):
    """The optimizer the project's training run builds for `model`."""
    from electra_tf.runs.pretraining_model import build_optimizer as build

    return build(config, model)


class ProjectSide:
    """The project's pre-training step on the tiny config (train_update in a tf.function)."""

    def __init__(self, hp: dict, workdir: str, tf, keras_seed: int = 0):
        import tf_keras as keras

        import electra_tf

        hp = dict(hp, precision="float32", jit_compile=False, seed=0)
        self.tf = tf
        self.config = electra_tf.pretraining_config("trajectory", workdir, hparams=hp)
        keras.utils.set_random_seed(keras_seed)
        self.model = electra_tf.ElectraPretrainer(self.config, cls_id=CLS, sep_id=SEP, mask_id=MASK)
        self.vmap = self.model.variable_map()
        self.names = sorted(self.vmap)
        self.optimizer = build_optimizer(self.config, self.model)
        self.model.compile(optimizer=self.optimizer)
        model = self.model
        spec = {
            k: tf.TensorSpec([BATCH, SEQ], tf.int32)
            for k in ("input_ids", "input_mask", "segment_ids")
        }
        self._forward = tf.function(
            lambda inputs: model(inputs, training=True), input_signature=[spec]
        )
        self._update = tf.function(model.train_update, input_signature=[spec])
        # Traced now: building the original's graph (tf_keras' legacy TF1 layers) afterwards
        # invalidates Keras layers for any later call in Python, not the traced functions.
        self._forward.get_concrete_function()
        self._update.get_concrete_function()

    def perturb_initial_weights(self, np, seed: int = 1234, std: float = 0.02) -> None:
        """Biases and LayerNorm parameters (zeros and ones at init) get N(0, std) added."""
        rs = np.random.RandomState(seed)
        for n in self.names:
            if n.endswith(("/bias", "/beta", "/gamma")) or n.endswith("output_bias"):
                var = self.vmap[n]
                var.assign(var.numpy() + rs.normal(0.0, std, size=var.shape).astype(np.float32))

    def weights(self) -> dict:
        return {n: self.vmap[n].numpy() for n in self.names}

    def step(self, batch: dict) -> dict:
        """One training step; the losses of its forward pass and its draws (numpy)."""
        tf = self.tf
        inputs = {k: tf.constant(v, tf.int32) for k, v in batch.items()}
        state = self.model.rng.state.numpy().copy()
        out = self._forward(inputs)
        self.model.rng.reset(state)  # train_update draws the same masking and samples
        for metric in self.model.metrics:
            metric.reset_state()
        self._update(inputs)
        logged = {m.name: float(m.result()) for m in self.model.metrics}
        res = {
            "total": float(out["loss"]),
            "generator": float(out["masked_lm_loss"]),
            "discriminator": float(out["disc_loss"]),
            "logged_loss": logged.get("loss", float("nan")),
            "lr": logged.get("learning_rate", float("nan")),
        }
        for key in (
            "masked_input_ids",
            "masked_lm_positions",
            "masked_lm_ids",
            "masked_lm_weights",
            "sampled_ids",
        ):
            res[key] = out[key].numpy()
        return res

    def checkpoints(self, directory: str):
        """The training run's checkpoint object (model with its RNG, optimizer, step)."""
        objects = {
            "model": self.model,
            "optimizer": self.optimizer,
            "step": self.optimizer.iterations,
        }
        from electra_tf.checkpoints.training_state import TrainingCheckpoints

        return TrainingCheckpoints(directory, 1, **objects)
