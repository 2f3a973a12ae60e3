"""Peer baseline for `make bench`: TF Model Garden's ElectraPretrainer, one full train step.

Same shapes and step as the peer harness the project was asked to beat (ELECTRA-Small:
discriminator 12 x 256 with 4 heads and FFN 1024, generator 12 x 64 with 1 head and FFN 256,
embedding width 128, vocab 30522; Model Garden's legacy AdamWeightDecay; MLM + 50 x RTD loss;
global-norm clipping). Model Garden is only a benchmark peer here: the project never imports it.

`build_peer_step(batch, seq, jit, vocab)` returns `(step_fn, inputs)`; the bench worker times
`step_fn(inputs)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras as keras


def build_peer_step(
    batch: int, seq: int, jit: bool = False, vocab: int = 30522
) -> tuple[Callable[[dict[str, tf.Tensor]], tf.Tensor], dict[str, tf.Tensor], int]:
    """Model Garden's ElectraPretrainer step at ELECTRA-Small shape.

    Returns the compiled step, its (fixed) inputs and the number of trainable parameters.
    """
    # Imported here so that project-only bench workers never pay for Model Garden's imports.
    from official.modeling.optimization import legacy_adamw
    from official.nlp.modeling import models, networks

    num_predictions = int((0.15 + 0.005) * seq)

    def initializer() -> keras.initializers.Initializer:
        return keras.initializers.TruncatedNormal(stddev=0.02)

    common: dict[str, Any] = dict(
        vocab_size=vocab,
        max_sequence_length=512,
        type_vocab_size=2,
        embedding_width=128,
        dict_outputs=True,
    )
    discriminator = networks.BertEncoder(
        hidden_size=256,
        num_layers=12,
        num_attention_heads=4,
        inner_dim=1024,
        initializer=initializer(),
        **common,
    )
    # Model Garden ties only the word-embedding layer (see PEERS.md section 2).
    generator = networks.BertEncoder(
        hidden_size=64,
        num_layers=12,
        num_attention_heads=1,
        inner_dim=256,
        initializer=initializer(),
        embedding_layer=discriminator.get_embedding_layer(),
        **common,
    )
    model = models.ElectraPretrainer(
        generator_network=generator,
        discriminator_network=discriminator,
        vocab_size=vocab,
        num_classes=2,
        num_token_predictions=num_predictions,
        mlm_activation=keras.activations.gelu,
        mlm_initializer=initializer(),
        disallow_correct=False,
    )
    optimizer = legacy_adamw.AdamWeightDecay(
        learning_rate=5e-4,
        weight_decay_rate=0.01,
        exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"],
    )

    rng = np.random.default_rng(0)
    ids = rng.integers(1000, vocab, size=(batch, seq)).astype(np.int32)
    # Static masking (Model Garden reads positions from the TFRecords): sorted, no duplicates.
    positions = np.stack(
        [np.sort(rng.choice(seq, num_predictions, replace=False)) for _ in range(batch)]
    ).astype(np.int32)  # [batch, num_predictions]
    inputs = {
        "input_word_ids": tf.constant(ids),
        "input_mask": tf.ones((batch, seq), tf.int32),
        "input_type_ids": tf.zeros((batch, seq), tf.int32),
        "masked_lm_positions": tf.constant(positions),
        # [batch, num_predictions]
        "masked_lm_ids": tf.constant(np.take_along_axis(ids, positions, axis=1)),
        "masked_lm_weights": tf.ones((batch, num_predictions), tf.float32),
    }

    @tf.function(jit_compile=jit)
    def step(x: dict[str, tf.Tensor]) -> tf.Tensor:
        with tf.GradientTape() as tape:
            outputs = model(x, training=True)
            lm_logits = tf.cast(outputs["lm_outputs"], tf.float32)
            mlm = keras.losses.sparse_categorical_crossentropy(
                x["masked_lm_ids"], lm_logits, from_logits=True
            )
            weights = x["masked_lm_weights"]
            mlm_loss = tf.reduce_sum(mlm * weights) / tf.reduce_sum(weights)
            rtd = tf.nn.sigmoid_cross_entropy_with_logits(
                logits=tf.cast(outputs["disc_logits"], tf.float32),
                labels=tf.cast(outputs["disc_label"], tf.float32),
            )
            loss = mlm_loss + 50.0 * tf.reduce_mean(rtd)
        grads = tape.gradient(loss, model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    step(inputs)  # builds the variables
    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return step, inputs, params
