"""The end of a transformer sublayer in a bfloat16 training step as one XLA cluster each way:
LayerNorm(residual + dropout(product + bias)), the product a dense layer's plain MatMul.

In a bfloat16 step the dense layer's bias cannot ride on the product (Grappler's fused
MatMul + BiasAdd is oneDNN's inner product, which does not use AMX: `dense_forms.dense_rows`), so
the bias add, the dropout's scaling, the residual add and the LayerNorm were four passes over
the activations forward and as many back, three of them TensorFlow's bfloat16 element-wise
kernels (each converts every operand on its own), plus a bfloat16 BiasAddGrad. Here the
forward reads the product, the residual and the dropout mask once and writes the normalised
rows; the backward recomputes the sum from the same inputs and returns the gradients of the
product, the bias (summed over rows in float32), the residual, gamma and beta. The dropout
mask is made inside both clusters from the hidden dropout layer's seed for the call
(`dropout.kept`, the mask its own call would apply), so it is never written to memory.

The function is the one the separate ops compute, in float32 from the bfloat16 product and
residual, without the intermediate bfloat16 roundings of the bias add, the scaled dropout and
the sum (so it is closer to float32: `tests/test_bf16_training_forms.py` checks values and
gradients against float64). float32 steps keep the separate ops.
"""

from __future__ import annotations

import tensorflow as tf

from electra_tf.modeling.dropout import kept, threshold_tensor
from electra_tf.modeling.utils import fused, layer_norm_grads32, normalise32


def residual_norm_train(
    product: tf.Tensor,
    bias: tf.Tensor,
    seed: tf.Tensor | None,
    rate: float,
    residual: tf.Tensor,
    gamma: tf.Tensor,
    beta: tf.Tensor,
    epsilon: float,
) -> tf.Tensor:
    """LayerNorm(residual + dropout(product + bias)) with its gradient written out.

    Args:
        product: bfloat16 [n, width], the dense layer's product without its bias.
        bias: float32 [width], the dense layer's bias.
        seed: int32 [2], the dropout mask's seed for this call (`Dropout.call_seed`; None: no
            dropout).
        rate: the dropout rate (unused without a seed).
        residual: bfloat16 [n, width], the sublayer's input.
        gamma, beta: float32 [width], the LayerNorm's variables; epsilon its epsilon.

    Returns:
        bfloat16 [n, width].
    """
    mask = None if seed is None else (seed, threshold_tensor(rate), 1.0 / (1.0 - rate))

    @tf.custom_gradient
    def forward(product, bias, residual, gamma, beta):
        with tf.name_scope("residual_norm_train"):
            output = _forward(product, bias, mask, residual, gamma, beta, epsilon)

        def backward(dy):
            with tf.name_scope("residual_norm_train_grad"):
                return _backward(product, bias, mask, residual, gamma, dy, epsilon)

        return output, backward

    return forward(product, bias, residual, gamma, beta)


def _keep_and_scale(product, mask):
    """(bool [n, width] where the dropout `mask` (seed, threshold, scale) keeps, the scale);
    (None, 1.0) without dropout."""
    if mask is None:
        return None, 1.0
    seed, threshold, scale = mask
    return kept(product, seed, threshold), scale


def _sum32(product, bias, keep, scale, residual):
    """float32 [n, width]: residual + dropout(product + bias), `keep` None without dropout."""
    pre = tf.cast(product, tf.float32) + bias
    if keep is not None:
        pre = tf.where(keep, pre * scale, tf.zeros_like(pre))
    return tf.cast(residual, tf.float32) + pre


@fused
def _forward(product, bias, mask, residual, gamma, beta, epsilon):
    keep, scale = _keep_and_scale(product, mask)
    normalised, _ = normalise32(_sum32(product, bias, keep, scale, residual), epsilon)
    return tf.cast(normalised * gamma + beta, residual.dtype)


@fused
def _backward(product, bias, mask, residual, gamma, dy, epsilon):
    keep, scale = _keep_and_scale(product, mask)
    normalised, inverse = normalise32(_sum32(product, bias, keep, scale, residual), epsilon)
    dsum, dgamma, dbeta = layer_norm_grads32(normalised, inverse, gamma, tf.cast(dy, tf.float32))
    dpre = dsum if keep is None else tf.where(keep, dsum * scale, tf.zeros_like(dsum))
    dbias = tf.reduce_sum(dpre, axis=0)  # [width]
    return (
        tf.cast(dpre, product.dtype),
        dbias,
        tf.cast(dsum, residual.dtype),
        dgamma,
        dbeta,
    )
