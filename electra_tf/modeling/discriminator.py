"""The pre-trained discriminator on its own: the model behind the "discriminator" export, and
a fluency / error detector in user code."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras as keras

from electra_tf.config import ModelConfig
from electra_tf.modeling.encoder import TransformerEncoder
from electra_tf.modeling.heads import DiscriminatorHead
from electra_tf.modeling.utils import PLAIN_INFERENCE, InferenceOptions


class ElectraDiscriminator(keras.Model):
    """The ELECTRA discriminator: `TransformerEncoder` (scope `electra`) + `DiscriminatorHead`.

    Args:
        config: the discriminator's encoder config.

    Call: `model({"input_ids", "input_mask", "segment_ids"} int [B, L], training,
    inference_options)` (the encoder's `InferenceOptions`, default the plain form) -> dict with the
    encoder's `sequence_output` [B, L, H] and `cls_output` [B, H], plus `logits` [B, L]
    (replaced-token logits; sigmoid gives the probability that a token was replaced). From an
    Electric model, `logits` is the energy E instead: -E estimates log p(token | the rest)
    (`pretraining.electric_scoring`), and sigmoid(E) is no probability.
    """

    def __init__(self, config: ModelConfig, **kwargs: Any):
        super().__init__(**kwargs)
        self.config = config
        self.encoder = TransformerEncoder(config, name="electra")
        self.head = DiscriminatorHead(config)

    def call(self, inputs, training=False, inference_options: InferenceOptions = PLAIN_INFERENCE):
        outputs = self.encoder(inputs, training=training, inference_options=inference_options)
        return {**outputs, "logits": self.head(outputs["sequence_output"])}

    def variable_map(self) -> dict[str, tf.Variable]:
        return {**self.encoder.variable_map("electra"), **self.head.variable_map()}


def dummy_inputs(batch: int = 1, length: int = 2) -> dict[str, tf.Tensor]:
    """All-ones ids [batch, length]: calling a model on them once creates its variables."""
    ones = tf.ones([batch, length], tf.int32)
    return {"input_ids": ones, "input_mask": ones, "segment_ids": tf.zeros_like(ones)}
