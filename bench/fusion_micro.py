"""Forward + backward of one LayerNorm and one GELU, in the forms the train step could use
(issue #16): the Keras layer / activation with automatic differentiation, the project's
training forms with hand-written gradients (`electra_tf/modeling/utils.py`), and each compiled
with XLA on its own. Prints ms per call and the largest difference from the Keras form. Then
the generator's vocabulary-wide work at the masked slots (`--slots` rows of `--per-seq` per
sequence): its logits as the einsum and as the MatMul + BiasAdd the head now uses, and its
cross-entropy as TensorFlow's sparse kernel and as `losses.masked_lm_losses` (one softmax and
a written-out gradient). Then
one optimizer update (`AdamWeightDecay.apply_gradients`, clipping and weight decay included)
of ELECTRA-Small's variables (`--layers` discriminator layers of `--hidden`/`--ffn`, a generator
a quarter as wide, a `--vocab` x `--embedding` table), written out op by op and as one ApplyAdam
kernel per variable (`fused`), with the largest difference of the updated weights. Last,
dropout at rate 0.1 on the attention probabilities of half the batch and on `--rows` / 2 rows
of the hidden width (the step's two halves), as Keras draws it (a float32 uniform per element)
and as `electra_tf.modeling.dropout` does (the bits made in the kernel that applies the
mask), with the kept fraction. Last, the attention weights' softmax and dropout in a bfloat16
step: a float32 softmax with casts and the dropout apart (the form before), and
`electra_tf.modeling.attention_softmax` (oneDNN's bfloat16 softmax, one backward cluster).

    python -m bench.fusion_micro [--rows 4096] [--hidden 256] [--ffn 1024] [--layers 12]
        [--vocab 30522] [--embedding 128] [--slots 608] [--per-seq 19] [--calls 30] [--rounds 2]
        [--intra 0]

A micro-benchmark for choosing a form, not a speed figure of the step (that is `make bench`);
run it alone on the machine.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # `python bench/fusion_micro.py`: bench is a package
    raise SystemExit("run it from the repository root as: python -m bench.fusion_micro")

import argparse
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf
import tf_keras as keras

from electra_tf.modeling.dropout import Dropout
from electra_tf.modeling.utils import _gelu_train, _layer_norm_train, layer_norm
from electra_tf.optimization import AdamWeightDecay
from electra_tf.pretraining.losses import masked_lm_losses


def layer_norm_forms(width: int) -> tuple[keras.layers.Layer, dict[str, Callable]]:
    norm = layer_norm()
    norm.build([None, width])
    rng = np.random.default_rng(1)
    norm.gamma.assign(rng.normal(1.0, 0.2, width))
    norm.beta.assign(rng.normal(0.0, 0.2, width))

    def trained(x):
        return _layer_norm_train(x, norm.gamma, norm.beta, norm.epsilon)

    xla_keras = tf.function(lambda x: norm(x), jit_compile=True)
    xla_trained = tf.function(trained, jit_compile=True)
    forms = {
        "keras": norm,
        "hand-written gradient": trained,
        "keras, XLA": xla_keras,
        "hand-written gradient, XLA": xla_trained,
    }
    return norm, forms


def gelu_forms() -> dict[str, Callable]:
    return {
        "keras": keras.activations.gelu,
        "hand-written gradient": _gelu_train,
        "keras, XLA": tf.function(keras.activations.gelu, jit_compile=True),
        "hand-written gradient, XLA": tf.function(_gelu_train, jit_compile=True),
    }


def vocabulary_forms(vocab: int, embedding: int) -> tuple[list, dict, dict]:
    """The tied table and output bias, the two logits forms and the two cross-entropy forms."""
    rng = np.random.default_rng(4)
    table = tf.Variable(rng.normal(0.0, 0.02, (vocab, embedding)).astype(np.float32))
    bias = tf.Variable(rng.normal(0.0, 0.02, vocab).astype(np.float32))

    def einsum(h):  # the head before 2026-11-27
        return tf.einsum("bne,ve->bnv", h, table) + bias

    def matmul(h):  # the head now
        rows = tf.reshape(h, [-1, embedding])
        logits = tf.nn.bias_add(tf.matmul(rows, table, transpose_b=True), bias)
        return tf.reshape(logits, tf.concat([tf.shape(h)[:-1], [vocab]], axis=0))

    targets = tf.constant(rng.integers(0, vocab, 1 << 16), tf.int32)

    def target_ids(logits):
        return tf.reshape(targets[: tf.reduce_prod(tf.shape(logits)[:-1])], tf.shape(logits)[:-1])

    def sparse(logits):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(target_ids(logits), logits)

    logits_forms = {"einsum": einsum, "MatMul + BiasAdd": matmul}
    loss_forms = {
        "sparse cross-entropy": sparse,
        "softmax, written gradient": lambda z: masked_lm_losses(z, target_ids(z)),
    }
    return [table, bias], logits_forms, loss_forms


def time_form(f: Callable, x: tf.Tensor, variables: list, calls: int) -> tuple[float, list]:
    """ms per forward + backward call, and [y, dx, d(variables)...]."""
    shape = f(x).shape
    dy = tf.constant(np.random.default_rng(2).normal(size=shape), tf.float32)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
            loss = tf.reduce_sum(y * dy)
        return [y, *tape.gradient(loss, [x, *variables])]

    out = step(x)
    for _ in range(3):
        step(x)
    start = time.perf_counter()
    for _ in range(calls):
        step(x)
    return (time.perf_counter() - start) / calls * 1e3, [t.numpy() for t in out]


def print_row(name: str, ms: float, out: list, reference: list | None) -> list:
    """Prints one timed form and its largest relative difference from the first form's
    outputs; returns the reference (these outputs when there was none yet)."""
    reference = out if reference is None else reference
    diff = max(
        float(np.abs(a - b).max() / (np.abs(b).max() + 1e-30))
        for a, b in zip(out, reference, strict=True)
    )
    print(f"  {name:28s} {ms:8.2f} ms   {diff:.1e}", flush=True)
    return reference


def compare(
    title: str, forms: dict[str, Callable], x: tf.Tensor, variables: list, calls: int, first="Keras"
):
    print(f"{title}: forward + backward, ms per call; largest difference from the {first} form")
    reference = None
    for name, f in forms.items():
        ms, out = time_form(f, x, variables, calls)
        reference = print_row(name, ms, out, reference)


def small_shapes(hidden: int, ffn: int, layers: int, vocab: int, embedding: int) -> list:
    """Variable shapes of an ELECTRA-Small-like pair: encoder layers at two widths, one table."""
    shapes = [(vocab, embedding), (512, embedding), (2, embedding), (embedding,), (embedding,)]
    for width, inner in ((hidden, ffn), (max(hidden // 4, 1), max(ffn // 4, 1))):
        shapes += [(embedding, width), (width,)]
        for _ in range(layers):
            shapes += [(width, width), (width,)] * 4
            shapes += [(width, inner), (inner,), (inner, width), (width,)]
            shapes += [(width,)] * 4  # two LayerNorms
    return shapes


def compare_adam(shapes: list, calls: int) -> None:
    print("AdamWeightDecay.apply_gradients, ms per call; largest difference of the weights")
    rng = np.random.default_rng(3)
    start = [rng.normal(0, 0.02, s).astype(np.float32) for s in shapes]
    grads = [tf.constant(rng.normal(0, 1e-3, s).astype(np.float32)) for s in shapes]
    names = [f"layer/{i}/{'bias' if len(s) == 1 else 'kernel'}" for i, s in enumerate(shapes)]
    reference = None
    for label, fused in (("written out", False), ("ApplyAdam kernel", True)):
        variables = [tf.Variable(x) for x in start]
        optimizer = AdamWeightDecay(
            1e-4,
            weight_decay_rate=0.01,
            variable_map=dict(zip(names, variables, strict=True)),
            fused=fused,
        )

        @tf.function
        def step(grads, optimizer=optimizer, variables=variables):
            optimizer.apply_gradients(zip(grads, variables, strict=True))

        step(grads)
        after = [v.numpy() for v in variables]
        for _ in range(2):
            step(grads)
        begin = time.perf_counter()
        for _ in range(calls):
            step(grads)
        ms = (time.perf_counter() - begin) / calls * 1e3
        reference = print_row(label, ms, after, reference)


def compare_dropout(shapes: list, calls: int) -> None:
    print("Dropout 0.1: forward + backward, ms per call; fraction kept")
    rng = np.random.default_rng(4)
    for shape in shapes:
        x = tf.constant(rng.normal(size=shape), tf.float32)
        for label, layer in (
            ("Keras", keras.layers.Dropout(0.1)),
            ("in-kernel masks", Dropout(0.1)),
        ):
            ms, out = time_form(lambda x, layer=layer: layer(x, training=True), x, [], calls)
            kept = float(np.mean(out[0] != 0))
            print(f"  {label + ' ' + str(list(shape)):36s} {ms:8.2f} ms   {kept:.4f}", flush=True)


def compare_attention_softmax(shape: tuple, calls: int) -> None:
    """The attention weights' softmax and dropout 0.1 of a bfloat16 step, both forms from the
    same bfloat16 scores (the casts from and to float32 around them are in both)."""
    from electra_tf.modeling.attention_softmax import softmax_dropout_train, softmax_probs
    from electra_tf.modeling.dropout import drop

    scores = np.random.default_rng(5).normal(0.0, 3.0, shape)
    scores[..., -shape[-1] // 4 :] -= 10000.0  # padded keys
    seed = tf.constant([1, 2])
    forms = {
        "float32 softmax, casts": lambda s: drop(softmax_probs(s), seed, 0.1),
        "attention_softmax": lambda s: softmax_dropout_train(s, seed, 0.1),
    }
    title = f"Attention softmax + dropout 0.1, bfloat16 {list(shape)}"
    wrapped = {
        name: lambda x, f=f: tf.cast(f(tf.cast(x, tf.bfloat16)), tf.float32)
        for name, f in forms.items()
    }
    compare(title, wrapped, tf.constant(scores, tf.float32), [], calls, first="float32 softmax")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096, help="batch x sequence length")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12, help="encoder layers (Adam)")
    parser.add_argument("--vocab", type=int, default=30522, help="embedding rows (Adam)")
    parser.add_argument("--embedding", type=int, default=128, help="embedding width (Adam)")
    parser.add_argument("--slots", type=int, default=608, help="masked slots (batch x N)")
    parser.add_argument("--per-seq", type=int, default=19, help="masked slots per sequence")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--intra", type=int, default=0, help="intra-op threads (0: TF default; 1: the step's)"
    )
    args = parser.parse_args(argv)
    if args.intra:  # a fresh process only: TensorFlow fixes its pools when it starts
        tf.config.threading.set_intra_op_parallelism_threads(args.intra)
    rng = np.random.default_rng(0)
    # Rows with a mean away from 0, as the residual sums a post-LN block normalises.
    x = tf.constant(rng.normal(0.3, 2.0, size=(args.rows, args.hidden)), tf.float32)
    h = tf.constant(rng.normal(0.0, 2.0, size=(args.rows, args.ffn)), tf.float32)
    norm, ln_forms = layer_norm_forms(args.hidden)
    for r in range(args.rounds):
        print(f"round {r + 1}")
        compare(
            f"LayerNorm [{args.rows}, {args.hidden}]",
            ln_forms,
            x,
            [norm.gamma, norm.beta],
            args.calls,
        )
        compare(f"GELU [{args.rows}, {args.ffn}]", gelu_forms(), h, [], args.calls)
        seqs = args.slots // args.per_seq
        slots = tf.constant(rng.normal(0.0, 1.0, (seqs, args.per_seq, args.embedding)), tf.float32)
        head, logits_forms, loss_forms = vocabulary_forms(args.vocab, args.embedding)
        title = f"Vocabulary logits [{seqs}, {args.per_seq}, {args.embedding}] x table"
        compare(title, logits_forms, slots, head, args.calls, first="einsum")
        z = tf.constant(rng.normal(0.0, 3.0, (seqs, args.per_seq, args.vocab)), tf.float32)
        title = f"Generator cross-entropy [{seqs}, {args.per_seq}, {args.vocab}]"
        compare(title, loss_forms, z, [], args.calls, first="sparse kernel")
        shapes = small_shapes(args.hidden, args.ffn, args.layers, args.vocab, args.embedding)
        compare_adam(shapes, args.calls)
        heads = max(args.hidden // 64, 1)
        half = args.rows // 2
        seq = min(128, half)
        compare_dropout([(half // seq, heads, seq, seq), (half, args.hidden)], args.calls)
        compare_attention_softmax((half // seq, heads, seq, seq), args.calls)
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    print(f"intra-op threads {intra or 'TF default'}, load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
