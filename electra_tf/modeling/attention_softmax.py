"""The attention softmax and the dropout on its output in a bfloat16 training step: oneDNN's
bfloat16 softmax forward, and the backward of both as one XLA cluster.

A bfloat16 step computed the attention weights as the float32 step does, with casts around
them: scores cast to float32, oneDNN's softmax, the weights cast back to bfloat16, the dropout's
cluster; backward the dropout's cluster, a cast to float32, four TensorFlow ops of the softmax's
gradient (each a pass over [batch, heads, seq, seq]) and a cast back. Here the forward is
oneDNN's softmax on the bfloat16 scores where TensorFlow runs bfloat16 through oneDNN on the
CPU (it computes in float32 and rounds once: the values of the float32 softmax cast to
bfloat16, equal to the last bit on a Zen 5; elsewhere, and on a GPU, a TPU or inside XLA, the
float32 softmax with its casts), then the dropout's cluster; the backward reads the bfloat16
weights and the upstream gradient once and writes the scores' gradient, the dropout mask made
again inside it from the call's seed (`dropout.kept`) and the arithmetic in float32:

    g = dropout(dy),   dscores = p * (g - sum(g * p, over keys)).

On a 2-core AMD EPYC Zen 5 (AVX512_BF16), one thread, [16, 4, 128, 128], forward and backward
took 3.0 ms against 4.3 ms in the form before (`python -m bench.fusion_micro --rounds 1 --intra
1`, its attention rows), and the bfloat16 ELECTRA-Small step (batch 32) 2.5% less time. The
gradient is checked against float64 (tests/test_bf16_training_forms.py): the weights are
rounded to bfloat16 once, the dropped gradient not at all.

float32 steps and inference keep the form they had (`softmax_probs`, then the dropout layer).
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from electra_tf.modeling.dropout import drop, kept, threshold_tensor
from electra_tf.modeling.utils import fused
from electra_tf.runtime.device_defaults import accelerator, onednn_runs_bfloat16


def softmax_probs(scores: tf.Tensor) -> tf.Tensor:
    """Softmax over the last axis of float32 or bfloat16 scores, in their dtype, computed in
    float32 (so that mixed precision does not lose the -10000 padding bias): a cast to float32
    and back around the softmax, which for float32 are no ops."""
    return tf.cast(tf.nn.softmax(tf.cast(scores, tf.float32), axis=-1), scores.dtype)


def softmax_dropout_train(scores: tf.Tensor, seed: tf.Tensor | None, rate: float) -> tf.Tensor:
    """dropout(softmax(scores)) over the last axis for bfloat16 scores in a training step, with
    the backward of both in one cluster (module docstring).

    Args:
        scores: bfloat16 [batch, heads, seq_q, seq_k], scaled and masked.
        seed: int32 [2], the attention dropout's seed for this call (`Dropout.call_seed`);
            None: no dropout.
        rate: the dropout rate (unused without a seed).

    Returns:
        bfloat16 like `scores`: the dropped attention weights.
    """
    if _onednn_softmax_here():
        # oneDNN's bfloat16 softmax: float32 inside, one rounding out.
        probs_of = lambda s: tf.nn.softmax(s, axis=-1)  # noqa: E731
    else:
        probs_of = softmax_probs

    @tf.custom_gradient
    def forward(scores):
        with tf.name_scope("attention_softmax_train"):
            probs = probs_of(scores)
            output = probs if seed is None else drop(probs, seed, rate)

        def backward(dy):
            with tf.name_scope("attention_softmax_train_grad"):
                if seed is None:
                    return _backward(probs, dy)
                # The forward's scale, rounded to bfloat16 as `drop` rounds it.
                scale = tf.cast(tf.constant(1.0 / (1.0 - rate), probs.dtype), tf.float32)
                return _dropped_backward(probs, dy, seed, threshold_tensor(rate), scale)

        return output, backward

    return forward(scores)


def _onednn_softmax_here() -> bool:
    """Whether a bfloat16 softmax traced here runs as oneDNN's kernel: TensorFlow runs bfloat16
    through oneDNN, the process runs on the CPU (`accelerator`: no GPU, no TPU, local or named
    by `ELECTRA_ACCELERATOR`), and it is not inside a function compiled by XLA (`jit_compile`),
    whose own bfloat16 softmax rounds its exponentials and their sum to bfloat16 before
    dividing."""
    graph = tf.compat.v1.get_default_graph()
    return (
        onednn_runs_bfloat16()
        and accelerator()[0] == "cpu"
        and not control_flow_util.GraphOrParentsInXlaContext(graph)
    )


def _softmax_grad32(probs, upstream32):
    """The softmax's gradient in float32 from bfloat16 `probs` and the float32 gradient of its
    output, cast to the weights' dtype."""
    p32 = tf.cast(probs, tf.float32)
    weighted = upstream32 * p32
    dscores = weighted - p32 * tf.reduce_sum(weighted, axis=-1, keepdims=True)
    return tf.cast(dscores, probs.dtype)


@fused
def _backward(probs, dy):
    return _softmax_grad32(probs, tf.cast(dy, tf.float32))


@fused
def _dropped_backward(probs, dy, seed, threshold, scale):
    keep = kept(dy, seed, threshold)
    return _softmax_grad32(probs, tf.where(keep, tf.cast(dy, tf.float32) * scale, 0.0))
