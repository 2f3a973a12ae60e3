"""The ELECTRA transformer encoder (the original's `BertModel`, without a pooler)."""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

from electra_tf.checkpoints import names as checkpoint_names
from electra_tf.config import ModelConfig
from electra_tf.modeling.dense_forms import dense_rows
from electra_tf.modeling.embeddings import Embeddings
from electra_tf.modeling.transformer import TransformerLayer
from electra_tf.modeling.utils import (
    PLAIN_INFERENCE,
    ConfiguredLayer,
    InferenceOptions,
    build_sublayer,
    dense_map,
    require_built,
)

# Which keys a query may attend to: every key, keys at or before it, keys at or after it.
ATTENTION_DIRECTIONS = ("bidirectional", "ltr", "rtl")


class TransformerEncoder(ConfiguredLayer):
    """Embeddings (+ `embeddings_project` when E != H) followed by L post-LN transformer blocks.

    As the original `BertModel`: padded keys get an additive -10000 attention bias (padded
    queries are not masked), dropout is active only when training, and there is no pooler: the
    [CLS] output is simply `sequence_output[:, 0]`. All variables are created in the
    constructor, in a fixed order.

    Args:
        config: the encoder config.
        embeddings: an `Embeddings` layer to use instead of creating one. ELECTRA's generator
            gets the discriminator's, so the whole embedding block is shared. Its width must be
            `config.embedding_width`.
        name: the Keras layer name.
        attention_direction: "bidirectional" (BERT/ELECTRA), or the original's causal `ltr` /
            `rtl` (Electric's cloze towers): query i sees keys j <= i / j >= i only.

    Call args:
        inputs: dict with int `input_ids`, `input_mask`, `segment_ids`, each [batch, seq_len].
        training: enables dropout.
        inference_options: how inference is traced (`InferenceOptions`: the LayerNorms' form,
            the number of query groups); the default is the plain form. The serving
            signatures pass theirs (`serving.module.ServingModule`).

    Returns:
        dict with `sequence_output` [batch, seq_len, hidden], `cls_output` [batch, hidden] and
        `embedding_output` [batch, seq_len, embedding_width] (before the projection).

    A shared `embeddings` layer is not serialised: `from_config` builds its own block.
    """

    def __init__(
        self,
        config: ModelConfig,
        embeddings: Embeddings | None = None,
        name: str = "transformer_encoder",
        attention_direction: str = "bidirectional",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        if attention_direction not in ATTENTION_DIRECTIONS:
            raise ValueError(
                f"{name}: attention_direction {attention_direction!r} is not one of "
                f"{ATTENTION_DIRECTIONS}"
            )
        self.config = config
        self.attention_direction = attention_direction
        self.owns_embeddings = embeddings is None
        if embeddings is None:
            embeddings = Embeddings(config, dtype=self.dtype_policy)
        elif embeddings.config.embedding_width != config.embedding_width:
            raise ValueError(
                f"{name}: shared embeddings are {embeddings.config.embedding_width} wide but "
                f"config.embedding_width is {config.embedding_width}"
            )
        self.embeddings = embeddings
        self.embeddings_project = None
        if config.embedding_width != config.hidden_size:
            # tf.layers.dense's defaults in the original: Glorot-uniform kernel, no activation.
            self.embeddings_project = keras.layers.Dense(
                config.hidden_size, name="embeddings_project", dtype=self.dtype_policy
            )
        self.transformer_layers = [
            TransformerLayer(config, name=f"layer_{i}", dtype=self.dtype_policy)
            for i in range(config.num_hidden_layers)
        ]
        self.build()

    def build(self, input_shape=None):
        if self.built:
            return
        self.embeddings.build(None)
        if self.embeddings_project is not None:
            build_sublayer(self.embeddings_project, [None, self.config.embedding_width])
        for layer in self.transformer_layers:
            build_sublayer(layer, None)
        super().build(input_shape)

    def _first_layer_inputs(self, inputs, training, inference_options=PLAIN_INFERENCE):
        """(embedding output, the first layer's input, the additive attention bias)."""
        input_ids = tf.cast(inputs["input_ids"], tf.int32)
        segment_ids = tf.cast(inputs["segment_ids"], tf.int32)
        embedding_output = self.embeddings(
            input_ids, segment_ids, training=training, inference_options=inference_options
        )
        hidden = embedding_output
        if self.embeddings_project is not None:
            # On 2-D rows, so that the projection is one fusable MatMul + BiasAdd (see
            # TransformerLayer); [batch * seq_len, embedding_width] -> [batch, seq_len, hidden].
            rows = tf.reshape(hidden, [-1, self.config.embedding_width])
            shape = tf.concat([tf.shape(hidden)[:-1], [self.config.hidden_size]], 0)
            constant = inference_options.constant_kernels
            projected = dense_rows(self.embeddings_project, rows, training, None, constant)
            hidden = tf.reshape(projected, shape)
        # [batch, 1, 1, seq_len]: broadcast over heads and query positions.
        key_mask = tf.cast(inputs["input_mask"], hidden.dtype)[:, tf.newaxis, tf.newaxis, :]
        if self.attention_direction != "bidirectional":
            # As the original's BertModel(ltr/rtl): the 0/1 mask is the product of the padding
            # mask and a triangle, so a padded key outside the triangle is still -10000, once.
            seq_len = tf.shape(hidden)[1]
            ones = tf.ones([seq_len, seq_len], hidden.dtype)
            if self.attention_direction == "ltr":
                causal = tf.linalg.band_part(ones, -1, 0)  # [seq_q, seq_k]: keys j <= i
            else:
                causal = tf.linalg.band_part(ones, 0, -1)  # [seq_q, seq_k]: keys j >= i
            key_mask = key_mask * causal[tf.newaxis, tf.newaxis]  # [batch, 1, seq_q, seq_k]
        return embedding_output, hidden, (1.0 - key_mask) * -10000.0

    def attention_probs(self, inputs) -> list[tf.Tensor]:
        """Every layer's attention weights [batch, heads, seq_q, seq_k], inference mode."""
        _, hidden, attention_bias = self._first_layer_inputs(inputs, training=False)
        probs = []
        for layer in self.transformer_layers:
            probs.append(layer.attention_probs(hidden, attention_bias))
            hidden = layer(hidden, attention_bias, training=False)
        return probs

    def call(self, inputs, training=False, inference_options: InferenceOptions = PLAIN_INFERENCE):
        # Causal attention has per-query masks ([batch, 1, seq_q, seq_k]), which the groups'
        # shared key-only bias does not carry: those encoders keep the plain form.
        blocks = inference_options.blocks()
        if blocks > 1 and not training and self.attention_direction == "bidirectional":
            return self._call_in_blocks(inputs, blocks, inference_options)
        embedding_output, hidden, attention_bias = self._first_layer_inputs(
            inputs, training, inference_options
        )
        for layer in self.transformer_layers:
            hidden = layer(
                hidden, attention_bias, training=training, inference_options=inference_options
            )
        return {
            "sequence_output": hidden,
            "cls_output": hidden[:, 0],
            "embedding_output": embedding_output,
        }

    def _call_in_blocks(self, inputs, blocks: int, inference_options: InferenceOptions):
        """Inference with every layer on `blocks` consecutive groups of positions
        (`TransformerLayer.call_blocks`): the same outputs as `call`, in independent ops that
        an inter-op thread pool runs side by side (`InferenceOptions.query_blocks`)."""
        embedding_output, hidden, attention_bias = self._first_layer_inputs(
            inputs, False, inference_options
        )
        batch, seq_len, width = tf.shape(hidden)[0], tf.shape(hidden)[1], self.config.hidden_size
        bounds = [(seq_len * i) // blocks for i in range(blocks + 1)]
        spans = list(zip(bounds[:-1], bounds[1:], strict=True))
        lengths = [end - start for start, end in spans]
        # Each group stays [batch * length, hidden] rows from the first layer to the last.
        rows = [tf.reshape(hidden[:, start:end], [-1, width]) for start, end in spans]
        for layer in self.transformer_layers:
            rows = layer.call_blocks(rows, lengths, batch, attention_bias, inference_options)
        pieces = [tf.reshape(r, [batch, n, width]) for r, n in zip(rows, lengths, strict=True)]
        hidden = tf.concat(pieces, axis=1)
        return {
            "sequence_output": hidden,
            "cls_output": hidden[:, 0],
            "embedding_output": embedding_output,
        }

    def get_config(self):
        return {**super().get_config(), "attention_direction": self.attention_direction}

    def variable_map(
        self, scope: str = "electra", include_embeddings: bool = True
    ) -> dict[str, tf.Variable]:
        """Original checkpoint names -> variables (docs/faithfulness.md, section 9).

        Args:
            scope: "electra" for the discriminator, "generator" for the generator.
            include_embeddings: whether to list the embedding block. A shared block is always
                `electra/embeddings/*` (as the original's AUTO_REUSE scope); an encoder's own,
                untied block lives under `<scope>/embeddings/*`.
        """
        require_built(self)
        names: dict[str, tf.Variable] = {}
        if include_embeddings:
            shared = checkpoint_names.DISCRIMINATOR
            names.update(self.embeddings.variable_map(scope if self.owns_embeddings else shared))
        if self.embeddings_project is not None:
            projection = f"{scope}/{checkpoint_names.PROJECTION}"
            names.update(dense_map(projection, self.embeddings_project))
        for i, layer in enumerate(self.transformer_layers):
            names.update(layer.variable_map(checkpoint_names.layer_prefix(scope, i)))
        return names
