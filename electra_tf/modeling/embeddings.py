"""The shared embedding block of ELECTRA (the original's `electra/embeddings` scope)."""

from __future__ import annotations

import tensorflow as tf

from electra_tf.checkpoints import names
from electra_tf.config import ModelConfig
from electra_tf.modeling.dropout import Dropout
from electra_tf.modeling.utils import (
    PLAIN_INFERENCE,
    ConfiguredLayer,
    InferenceOptions,
    apply_layer_norm,
    build_sublayer,
    layer_norm,
    layer_norm_map,
    require_built,
    truncated_normal,
)


class Embeddings(ConfiguredLayer):
    """Word + position + token-type embeddings at the embedding width, then LayerNorm, dropout.

    In ELECTRA this whole block (all three tables and the LayerNorm) is shared by the generator
    and the discriminator; pass one instance to both `TransformerEncoder`s. Its variables are
    `electra/embeddings/*` in the original checkpoints (docs/faithfulness.md, section 9
    'Checkpoint variable names').

    Args:
        config: the encoder config; tables are `config.embedding_width` wide.

    Call args:
        input_ids: int [batch, seq_len].
        segment_ids: int [batch, seq_len] token-type ids.
        training: enables dropout.
        inference_options: at inference, the LayerNorm's form (`InferenceOptions`).

    Returns:
        float [batch, seq_len, embedding_width].
    """

    def __init__(self, config: ModelConfig, **kwargs):
        kwargs.setdefault("name", "embeddings")
        super().__init__(**kwargs)
        self.config = config
        # Sublayers follow this layer's dtype policy (tf_keras does not propagate it).
        self.layer_norm = layer_norm(dtype=self.dtype_policy)
        self.dropout = Dropout(config.hidden_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        if self.built:
            return
        width = self.config.embedding_width
        # One initializer instance per table: an unseeded tf_keras initializer returns the same
        # values on every call.
        self.word_embeddings = self.add_weight(
            "word_embeddings",
            shape=[self.config.vocab_size, width],
            initializer=truncated_normal(self.config),
        )
        self.position_embeddings = self.add_weight(
            "position_embeddings",
            shape=[self.config.max_position_embeddings, width],
            initializer=truncated_normal(self.config),
        )
        self.token_type_embeddings = self.add_weight(
            "token_type_embeddings",
            shape=[self.config.type_vocab_size, width],
            initializer=truncated_normal(self.config),
        )
        build_sublayer(self.layer_norm, [None, None, width])
        super().build(input_shape)

    def call(
        self,
        input_ids,
        segment_ids,
        training=False,
        inference_options: InferenceOptions = PLAIN_INFERENCE,
    ):
        seq_len = tf.shape(input_ids)[1]
        words = tf.gather(self.word_embeddings, input_ids)  # [batch, seq_len, width]
        # The original uses a one-hot matmul for token types; a gather is the same numbers.
        types = tf.gather(self.token_type_embeddings, segment_ids)  # [batch, seq_len, width]
        positions = self.position_embeddings[:seq_len][tf.newaxis]  # [1, seq_len, width]
        embeddings = apply_layer_norm(
            self.layer_norm,
            words + types + positions,
            training,
            fused=inference_options.fused_layer_norms,
        )
        return self.dropout(embeddings, training=training)

    def variable_map(self, scope: str = "electra") -> dict[str, tf.Variable]:
        """Original checkpoint names (`<scope>/embeddings/...`) -> variables."""
        require_built(self)
        prefix = names.embeddings_prefix(scope)
        return {
            f"{prefix}/{names.WORD_EMBEDDINGS}": self.word_embeddings,
            f"{prefix}/{names.TOKEN_TYPE_EMBEDDINGS}": self.token_type_embeddings,
            f"{prefix}/{names.POSITION_EMBEDDINGS}": self.position_embeddings,
            **layer_norm_map(f"{scope}/{names.EMBEDDINGS_NORM}", self.layer_norm),
        }
