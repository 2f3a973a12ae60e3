"""The multi-task `FinetuningModel` (the original's); the Keras models for a user's own code
(`ElectraClassifier`, `ElectraTagger`) are in `finetuning/keras_models/`.

`FinetuningModel` shares one discriminator encoder (scope `electra`) between the tasks' heads
(scope `task_specific/<task>`). Its loss is the original's
`sum(stack(task_losses, -1) * one_hot(task_id, n_tasks))`: a SUM over the batch, where each
example contributes only its own task's loss and padding examples (`task_id == n_tasks`) get an
all-zero one-hot and contribute nothing.

Under a mixed precision policy (`FinetuningConfig.precision`, passed as the model's `dtype`) the
encoder and heads compute in 16 bits with float32 variables, the losses are float32 (the heads
cast their logits), and `train_step` scales the loss when the optimizer is a
`LossScaleOptimizer` (mixed_float16), as the pre-training step does (`pretraining.gradients`).

With `parallel_micro_batches` k > 1 a step computes the gradients of k slices of the batch as
independent ops of one graph (an executor with k inter-op threads runs them side by side, as
pre-training's `parallel_gradients`) and applies their sum: the batch's gradient, the loss
being a sum over examples; each slice draws its own dropout.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras as keras

from electra_tf.config import ModelConfig
from electra_tf.finetuning.task import FeatureSpec, Task
from electra_tf.modeling import TransformerEncoder
from electra_tf.modeling.dropout import draw_seeds_from
from electra_tf.modeling.utils import PLAIN_INFERENCE, InferenceOptions
from electra_tf.pretraining.gradients import add_gradients


def feature_dtype(spec: FeatureSpec) -> tf.DType:
    """A batch's dtype for a feature (`Preprocessor.decode`: integers as int32)."""
    return tf.int32 if spec.is_int else tf.float32


def feature_signature(specs: list[FeatureSpec]) -> dict[str, tf.TensorSpec]:
    """Every feature of a batch, for any batch size and length (as an export's signatures)."""
    return {s.name: tf.TensorSpec([None] * (1 + len(s.shape)), feature_dtype(s)) for s in specs}


def dummy_features(specs: list[FeatureSpec], batch_size: int = 1) -> dict[str, tf.Tensor]:
    """A zero batch with every feature, used to build the heads' variables."""
    out = {}
    for spec in specs:
        out[spec.name] = tf.zeros((batch_size, *spec.shape), feature_dtype(spec))
    out["input_mask"] = tf.ones_like(out["input_mask"])
    return out


class FinetuningModel(keras.Model):
    """Encoder + one head per task; `fit` on the dicts of `Preprocessor.dataset`.

    Args:
        model_config: the encoder config (the pre-trained discriminator's).
        tasks: the tasks, in `task_names` order (their index is their `task_id`).
        feature_specs: every feature of a batch (to build the heads with a dummy batch).
        parallel_micro_batches: the slices of a training batch whose gradients are
            independent ops (1: one pass over the batch).
        seed: where given, every dropout mask's seed is a draw of `self.rng`, a
            `tf.random.Generator` seeded with it that checkpoints with the model, so that a
            resumed run continues the masks where they stopped (`dropout.draw_seeds_from`);
            None: Keras's generators (not resumable), as before.
        dtype (keyword): the dtype policy of the encoder and every head, e.g. "mixed_bfloat16"
            (None: Keras' global policy, which the bfloat16 export sets).

    Call: `model(features, training, inference_options)` -> `(per_example_loss [B], outputs)`,
    `outputs[task]` the task head's dict and `outputs["task_id"]` [B]; `inference_options`: the
    encoder's form at inference (`InferenceOptions`, e.g. groups of queries side by side).
    """

    def __init__(
        self,
        model_config: ModelConfig,
        tasks: list[Task],
        feature_specs: list[FeatureSpec],
        parallel_micro_batches: int = 1,
        seed: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.model_config = model_config
        self.parallel_micro_batches = parallel_micro_batches
        self.task_names = [t.name for t in tasks]
        self.encoder = TransformerEncoder(model_config, name="electra", dtype=self.dtype_policy)
        self.task_heads = [t.make_head(dtype=self.dtype_policy) for t in tasks]
        self.loss_tracker = keras.metrics.Mean(name="loss")
        if seed is not None:
            self.rng = tf.random.Generator.from_seed(seed)
            draw_seeds_from(self, self.rng)
        self(dummy_features(feature_specs), training=False)

    def call(self, features, training=False, inference_options: InferenceOptions = PLAIN_INFERENCE):
        encoder_outputs = self.encoder(
            features, training=training, inference_options=inference_options
        )
        losses, outputs = [], {"task_id": features["task_id"]}
        for name, head in zip(self.task_names, self.task_heads, strict=True):
            task_losses, task_outputs = head(encoder_outputs, features, training=training)
            losses.append(task_losses)
            outputs[name] = task_outputs
        routing = tf.one_hot(features["task_id"], len(self.task_names), dtype=losses[0].dtype)
        per_example = tf.reduce_sum(tf.stack(losses, -1) * routing, axis=-1)  # [B]
        return per_example, outputs

    def train_step(self, data):
        """One update; returns the running mean loss and the batch's real `tokens` (the
        progress line's tok/s)."""
        optimizer = self.optimizer
        # float16 gradients would underflow unscaled: the scale multiplies the loss before the
        # backward pass and is divided out of the gradients after (dynamic, as tf_keras's).
        scaling = isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)
        parts = self.parallel_micro_batches
        if parts > 1:
            grads, loss = self._parallel_gradients(data, parts, scaling)
        else:
            with tf.GradientTape() as tape:
                per_example, _ = self(data, training=True)
                loss = tf.reduce_sum(per_example)
                scaled = optimizer.get_scaled_loss(loss) if scaling else loss
            grads = tape.gradient(scaled, self.trainable_variables)
        if scaling:
            grads = optimizer.get_unscaled_gradients(grads)
        optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
        self.loss_tracker.update_state(loss)
        tokens = tf.reduce_sum(tf.cast(data["input_mask"], tf.int64))
        return {"loss": self.loss_tracker.result(), "tokens": tokens}

    def _parallel_gradients(self, data, parts: int, scaling: bool) -> tuple[list, tf.Tensor]:
        """The summed (still scaled) gradients of `parts` slices of `data` and the batch loss."""
        size = tf.shape(data["input_ids"])[0] // parts
        sums, loss = None, 0.0
        for index in range(parts):
            part = {key: value[index * size : (index + 1) * size] for key, value in data.items()}
            with tf.GradientTape() as tape:
                per_example, _ = self(part, training=True)
                part_loss = tf.reduce_sum(per_example)
                scaled = self.optimizer.get_scaled_loss(part_loss) if scaling else part_loss
            sums = add_gradients(sums, tape.gradient(scaled, self.trainable_variables))
            loss = loss + part_loss
        return sums, loss

    def test_step(self, data):
        per_example, _ = self(data, training=False)
        self.loss_tracker.update_state(tf.reduce_sum(per_example))
        return {"loss": self.loss_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker]

    def variable_map(self) -> dict[str, tf.Variable]:
        """Original names: `electra/...` for the encoder, `task_specific/<task>/...` heads."""
        names = dict(self.encoder.variable_map("electra"))
        for head in self.task_heads:
            names.update(head.variable_map())
        return names
