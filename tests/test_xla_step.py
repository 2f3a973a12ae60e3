"""The pre-training step as an accelerator compiles it, checked on a CPU (no GPU or TPU runs).

`make_train_function(model, strategy, jit=True)` wraps the pretrainer's `train_update` in
`tf.function(jit_compile=True)`: the step a GPU or TPU run gets ("auto" resolves `jit_compile`
to true there). TPUStrategy goes further: `strategy.run` compiles the whole replica step
(`make_replica_step`) into one XLA program with static shapes, and only the input pipeline
and the step loop stay on the host. What a CPU can show of that, tested here:

- the XLA-compiled step trains as the graph step does: the same losses and updated weights,
  within float32 rounding, for one update;
- every tensor inside the compiled step has a fully known shape (what TPU compilation needs);
- the step loop holds no host-only op (Python calls, printing, summaries, string ops; tf.data
  only as the loop's input), every op inside the step has an XLA kernel, and the replica step
  lowers to HLO with `experimental_get_compiler_ir`.

The CPU build of TensorFlow registers XLA kernels for XLA_CPU_JIT, not XLA_TPU_JIT (those come
with libtpu): whether every op here is also in the TPU set, only a TPU run settles.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from helpers_pretrainer import TINY_RUN_HPARAMS, write_bert_layout_vocab
from tensorflow.python.framework import kernels

from electra_tf.config import pretraining_config
from electra_tf.runs import pretraining_model
from electra_tf.runtime.device_defaults import Machine

TPU_HOST = Machine(accelerator="tpu", cpu_count=2)
BATCH, SEQ_LEN, STEPS = 4, 16, 3
# Host-side ops that must never sit inside a compiled step: Python calls, printing and string
# formatting, summaries, assertions that need the host, tf.data.
HOST_OP_MARKERS = ("PyFunc", "Print", "StringFormat", "Summary", "Assert", "Dataset", "Iterator")
# The input's get-next is the one host op the loop body may hold (TPUStrategy feeds it).
LOOP_INPUT_OPS = {"IteratorGetNext", "IteratorGetNextAsOptional"}


def _config(tmp_path, **overrides):
    write_bert_layout_vocab(str(tmp_path))
    hparams = {k: v for k, v in TINY_RUN_HPARAMS.items() if k != "jit_compile"}
    hparams.update(train_batch_size=BATCH, max_seq_length=SEQ_LEN, **overrides)
    # Every "auto" setting resolved as on a TPU host: XLA on, one micro-batch.
    return pretraining_config("xla", str(tmp_path), hparams=hparams, machine=TPU_HOST)


def _dataset(num_batches=STEPS, seed=0):
    rng = np.random.default_rng(seed)
    n = BATCH * num_batches
    ids = rng.integers(1, 100, size=(n, SEQ_LEN)).astype(np.int32)
    lengths = rng.integers(SEQ_LEN // 2, SEQ_LEN + 1, size=n)
    mask = (np.arange(SEQ_LEN)[None] < lengths[:, None]).astype(np.int32)
    ids[:, 0] = 101
    ids[np.arange(n), lengths - 1] = 102
    features = {"input_ids": ids * mask, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    # drop_remainder: a static batch dimension, as the pre-training input pipeline batches.
    return tf.data.Dataset.from_tensor_slices(features).batch(BATCH, drop_remainder=True)


def _compiled_model(config):
    model = pretraining_model.build_model(config)
    model.compile(optimizer=pretraining_model.build_optimizer(config, model))
    return model


# ---------------------------------------------------------------- same numbers under XLA
def _hash_uniform(shape, seed, dtype=tf.float32, **_):
    """Uniform [0, 1) float32 of `shape` from `seed` by integer hashing: the same bits with or
    without XLA (XLA's stateless RNG kernels give other numbers than TensorFlow's for one
    seed, so the real draws would make the two steps mask different tokens)."""
    if dtype != tf.float32:
        raise TypeError(f"only float32 draws are replaced here, got {dtype}")
    low32 = tf.constant(0xFFFFFFFF, tf.int64)
    xor, shift, bits = tf.bitwise.bitwise_xor, tf.bitwise.right_shift, tf.bitwise.bitwise_and

    def mix(x):  # a 32-bit integer finaliser, in int64 so that every product fits
        x = bits(xor(x, shift(x, 16)) * 0x45D9F3B, low32)
        x = bits(xor(x, shift(x, 16)) * 0x45D9F3B, low32)
        return xor(x, shift(x, 16))

    seed = bits(tf.cast(seed, tf.int64), low32)  # [2]
    count = tf.reduce_prod(tf.cast(shape, tf.int64))
    x = mix(xor(mix(bits(tf.range(count, dtype=tf.int64) + seed[0], low32)), seed[1]))
    uniform = (tf.cast(shift(x, 8), tf.float32) + 0.5) / 2.0**24  # (0, 1), exact in float32
    return tf.reshape(uniform, shape)


def _hash_categorical(logits, num_samples, seed, dtype=tf.int64, **_):
    """`stateless_categorical` by the Gumbel-max trick over `_hash_uniform` draws."""
    batch, classes = logits.shape
    uniform = _hash_uniform([batch, num_samples, classes], seed)
    gumbel = -tf.math.log(-tf.math.log(uniform))
    return tf.argmax(logits[:, tf.newaxis, :] + gumbel, axis=-1, output_type=dtype)


@contextlib.contextmanager
def _device_independent_draws():
    """The masking and sampling draws from `_hash_uniform` while steps are traced (the rest
    of the step is the real one)."""
    real = tf.random.stateless_uniform, tf.random.stateless_categorical
    tf.random.stateless_uniform, tf.random.stateless_categorical = (
        _hash_uniform,
        _hash_categorical,
    )
    try:
        yield
    finally:
        tf.random.stateless_uniform, tf.random.stateless_categorical = real


def _train_one_step(config, initial_weights, jit):
    model = _compiled_model(config)
    model.set_weights(initial_weights)
    before = [v.numpy() for v in model.trainable_variables]
    train_steps = pretraining_model.make_train_function(model, tf.distribute.get_strategy(), jit)
    train_steps(iter(_dataset()), tf.constant(1))
    values = pretraining_model.metric_values(model)
    losses = np.array([values["loss"], values["masked_lm_loss"], values["disc_loss"]])
    return losses, before, [v.numpy() for v in model.trainable_variables]


def test_the_xla_compiled_step_trains_as_the_graph_step(tmp_path):
    config = _config(tmp_path, precision="float32")  # dropout is off in TINY_RUN_HPARAMS
    assert config.jit_compile is True and config.parallel_micro_batches == 1
    tf.random.set_seed(0)
    initial = _compiled_model(config).get_weights()
    with _device_independent_draws():
        graph_losses, before, graph_weights = _train_one_step(config, initial, jit=False)
        xla_losses, _, xla_weights = _train_one_step(config, initial, jit=True)
    # Only the order XLA sums in differs: float32 rounding. Measured: losses 1e-7 relative
    # apart, weights 8e-8, while the update moved them by up to 3.2e-3 (about 3 x the
    # learning rate: Adam's first step without bias correction).
    np.testing.assert_allclose(xla_losses, graph_losses, rtol=1e-5)
    moved = max(float(np.max(np.abs(w - w0))) for w, w0 in zip(graph_weights, before, strict=True))
    assert moved > 2e-3  # the step did train
    for name, xla, graph in zip(_names(config), xla_weights, graph_weights, strict=True):
        np.testing.assert_allclose(xla, graph, rtol=0, atol=1e-6, err_msg=name)


def _names(config):
    return [v.name for v in _compiled_model(config).trainable_variables]


# ---------------------------------------------------------------- what a TPU needs
@pytest.fixture(scope="module")
def tpu_like_step(tmp_path_factory):
    """The train function traced as a TPU run would build it: "auto" precision
    (mixed_bfloat16 there) and dropout on; its concrete loop function and the model."""
    config = _config(
        tmp_path_factory.mktemp("tpu"),
        precision="auto",
        model_hparam_overrides=dict(
            TINY_RUN_HPARAMS["model_hparam_overrides"],
            hidden_dropout_prob=0.1,
            attention_probs_dropout_prob=0.1,
        ),
    )
    assert config.precision == "mixed_bfloat16" and config.jit_compile is True
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(config.precision)
    try:
        model = _compiled_model(config)
        train_steps = pretraining_model.make_train_function(
            model, tf.distribute.get_strategy(), config.jit_compile
        )
        loop = train_steps.get_concrete_function(iter(_dataset()), tf.constant(1))
        yield model, loop, config
    finally:
        keras.mixed_precision.set_global_policy(previous)


def _functions(graph):
    """{name: (graph, XLA must-compile)} of every function `graph` calls, nested ones too."""
    found = {}
    for name, function in graph._functions.items():
        must_compile = function.definition.attr.get("_XlaMustCompile")
        found[name] = (function.graph, bool(must_compile and must_compile.b))
        found.update(_functions(function.graph))
    return found


def _compiled_graphs(loop):
    """The graphs of the XLA-compiled step and of everything it calls."""
    functions = _functions(loop.graph)
    compiled = [name for name, (_, must) in functions.items() if must]
    # The training forms of GELU, LayerNorm and dropout's scaling are XLA clusters of their own
    # (modeling/utils.py); called inside the compiled step, they are compiled with it.
    nested = {name for root in compiled for name in _functions(functions[root][0])}
    roots = [name for name in compiled if name not in nested]
    assert len(roots) == 1, f"expected one XLA-compiled step in the loop, got {roots}"
    graph = functions[roots[0]][0]
    return [graph, *(g for g, _ in _functions(graph).values())]


def test_every_tensor_of_the_compiled_step_has_a_static_shape(tpu_like_step):
    _, loop, _ = tpu_like_step
    ops = [op for graph in _compiled_graphs(loop) for op in graph.get_operations()]
    assert len(ops) > 1000  # the whole step: forward, backward, optimizer, metrics
    dynamic = [
        f"{op.type} {op.name}: {out.shape}"
        for op in ops
        for out in op.outputs
        if out.dtype != tf.resource and not out.shape.is_fully_defined()
    ]
    assert not dynamic, f"{len(dynamic)} tensors of unknown shape, e.g. {dynamic[:5]}"


def test_the_step_loop_holds_no_host_op_and_the_step_lowers_to_hlo(tpu_like_step):
    model, loop, _ = tpu_like_step
    compiled = _compiled_graphs(loop)
    compiled_types = {op.type for graph in compiled for op in graph.get_operations()}
    loop_types = {
        op.type for graph, _ in _functions(loop.graph).values() for op in graph.get_operations()
    }
    host = sorted(t for t in loop_types - LOOP_INPUT_OPS if any(m in t for m in HOST_OP_MARKERS))
    assert not host, f"host-only ops in the train loop: {host}"
    inputs_inside = sorted(compiled_types & LOOP_INPUT_OPS)
    assert not inputs_inside, f"input ops inside the compiled step: {inputs_inside}"
    # Every op type of the step has an XLA kernel (the CPU build's XLA_CPU_JIT registry).
    framework = {"Placeholder", "NoOp", "StatefulPartitionedCall", "PartitionedCall"}
    without_xla = sorted(
        t
        for t in compiled_types - framework
        if not any(
            k.device_type == "XLA_CPU_JIT" for k in kernels.get_registered_kernels_for_op(t).kernel
        )
    )
    assert not without_xla, f"ops with no XLA kernel in the step: {without_xla}"

    # TPUStrategy.run compiles the whole replica step; lower it to HLO the same way.
    replica_step = tf.function(
        pretraining_model.make_replica_step(model, jit=True), jit_compile=True
    )
    batch = next(iter(_dataset(1)))
    hlo = replica_step.experimental_get_compiler_ir(batch)(stage="hlo")
    assert "ENTRY" in hlo and " dot(" in hlo and "bf16[" in hlo
