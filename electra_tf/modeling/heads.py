"""The pre-training heads: the generator's tied masked-LM head (also Electric's cloze head) and
the discriminator's replaced-token-detection head."""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

from electra_tf.checkpoints.names import DISCRIMINATOR_HEAD
from electra_tf.config import ModelConfig
from electra_tf.modeling.dense_forms import dense_train_rows
from electra_tf.modeling.embeddings import Embeddings
from electra_tf.modeling.graph_values import true_value
from electra_tf.modeling.utils import (
    ConfiguredLayer,
    build_sublayer,
    dense_map,
    layer_norm,
    layer_norm_map,
    require_built,
    truncated_normal,
)


class GeneratorHead(keras.layers.Layer):
    """Masked-LM head tied to the input embeddings (the original's `generator_predictions`,
    and, with `positions=None`, Electric's `cloze_predictions`; both are `get_token_logits`).

    Gathers the generator's hidden states at the masked positions FIRST (so the vocabulary
    projection only runs on N slots, not L), then dense(E, gelu) -> LayerNorm ->
    logits = h . word_embeddings^T + output_bias.

    Args:
        config: the generator's encoder config (hidden size in, embedding width out).
        embeddings: the `Embeddings` whose word table the output layer is tied to.
        input_width: width of the features fed in; default `config.hidden_size` (the cloze
            head gets the two towers' features concatenated, 2 x hidden).

    Call args:
        sequence_output: float [batch, seq_len, input_width].
        positions: int [batch, num_masked] masked positions, or None for every position.
        training: True in a training step (a bfloat16 step then takes `dense_train_rows`).

    Returns:
        float logits [batch, num_masked, vocab] (or [batch, seq_len, vocab]) in the layer's
        compute dtype.
    """

    def __init__(
        self, config: ModelConfig, embeddings: Embeddings, input_width: int | None = None, **kwargs
    ):
        kwargs.setdefault("name", "generator_predictions")
        super().__init__(**kwargs)
        self.config = config
        self.embeddings = embeddings
        self.input_width = input_width or config.hidden_size
        self.dense = keras.layers.Dense(
            config.embedding_width,
            activation=config.hidden_act,
            kernel_initializer=truncated_normal(config),
            name="dense",
            dtype=self.dtype_policy,
        )
        self.layer_norm = layer_norm(dtype=self.dtype_policy)
        self.build()

    def build(self, input_shape=None):
        if self.built:
            return
        build_sublayer(self.dense, [None, None, self.input_width])
        build_sublayer(self.layer_norm, [None, None, self.config.embedding_width])
        self.output_bias = self.add_weight(
            "output_bias", shape=[self.config.vocab_size], initializer="zeros"
        )
        super().build(input_shape)

    def call(self, sequence_output, positions=None, training=None):
        hidden = sequence_output
        if positions is not None:
            # [batch, num_masked, input_width]
            hidden = tf.gather(sequence_output, positions, batch_dims=1)
        # In a bfloat16 training step the dense layer's bias gradient is summed in float32.
        hidden = self.layer_norm(dense_train_rows(self.dense, hidden, training))
        table = tf.cast(self.embeddings.word_embeddings, hidden.dtype)  # [vocab, width]
        # One MatMul against the transposed table on [rows, width], the bias added by BiasAdd,
        # which Grappler fuses into it: with its two gradient products 10-20% faster than the
        # einsum over [batch, num_masked, width] (bench/fusion_micro.py), the same
        # values.
        shape = tf.shape(hidden)
        rows = tf.reshape(hidden, [-1, shape[-1]])
        product = tf.matmul(rows, table, transpose_b=True)  # [rows, vocab]
        if product.dtype == tf.bfloat16:
            # Fused, the bfloat16 product would take oneDNN's inner product, which does not use
            # AMX (`modeling.dense_forms.dense_rows`). The logits leave in float32, where the losses
            # and the sampler compute: the bias is added there, after the one cast they need.
            logits = tf.nn.bias_add(tf.cast(product, tf.float32), true_value(self.output_bias))
        else:
            logits = tf.nn.bias_add(product, tf.cast(self.output_bias, hidden.dtype))
        # [batch, num_masked, vocab]
        return tf.reshape(logits, tf.concat([shape[:-1], [self.config.vocab_size]], axis=0))

    def variable_map(self, scope: str | None = None) -> dict[str, tf.Variable]:
        """The head's own variables under `scope` (default: the layer's name, i.e.
        `generator_predictions` / `cloze_predictions`); the tied table is listed by the encoder
        that owns it."""
        require_built(self)
        scope = scope or self.name
        return {
            **dense_map(f"{scope}/dense", self.dense),
            **layer_norm_map(f"{scope}/LayerNorm", self.layer_norm),
            f"{scope}/output_bias": self.output_bias,
        }


class DiscriminatorHead(ConfiguredLayer):
    """Replaced-token-detection head (the original's `discriminator_predictions`).

    dense(H, gelu, truncated normal) -> dense(1, Glorot-uniform as tf.layers.dense's default)
    -> squeeze.

    Args:
        config: the discriminator's encoder config.

    Call args:
        sequence_output: float [batch, seq_len, hidden].
        training: True in a training step (a bfloat16 step then takes `dense_train_rows`).

    Returns:
        float logits [batch, seq_len] in the layer's compute dtype.
    """

    def __init__(self, config: ModelConfig, **kwargs):
        kwargs.setdefault("name", "discriminator_predictions")
        super().__init__(**kwargs)
        self.config = config
        self.dense = keras.layers.Dense(
            config.hidden_size,
            activation=config.hidden_act,
            kernel_initializer=truncated_normal(config),
            name="dense",
            dtype=self.dtype_policy,
        )
        self.dense_1 = keras.layers.Dense(1, name="dense_1", dtype=self.dtype_policy)
        self.build()

    def build(self, input_shape=None):
        if self.built:
            return
        build_sublayer(self.dense, [None, self.config.hidden_size])
        build_sublayer(self.dense_1, [None, self.config.hidden_size])
        super().build(input_shape)

    def call(self, sequence_output, training=None):
        # On [batch * seq_len, hidden] rows: each dense is then one fusable MatMul + BiasAdd
        # (+ GELU) instead of tensordot's reshapes around a MatMul (see TransformerLayer).
        rows = tf.reshape(sequence_output, [-1, self.config.hidden_size])
        hidden = dense_train_rows(self.dense, rows, training)
        logits = dense_train_rows(self.dense_1, hidden, training)  # [batch * seq_len, 1]
        return tf.reshape(logits, tf.shape(sequence_output)[:-1])  # [batch, seq_len]

    def variable_map(self, scope: str = DISCRIMINATOR_HEAD) -> dict[str, tf.Variable]:
        require_built(self)
        return {
            **dense_map(f"{scope}/dense", self.dense),
            **dense_map(f"{scope}/dense_1", self.dense_1),
        }
