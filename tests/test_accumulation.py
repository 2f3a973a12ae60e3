"""Gradient accumulation: k micro-batches then one update equals one pass over the batch."""

import numpy as np
import pytest
import tensorflow as tf
from helpers_pretrainer import (
    SPECIAL_IDS,
    batch_split_invariant_objective,
    tiny_batch,
    tiny_config,
)

from electra_tf.config import ConfigError
from electra_tf.pretraining.pretrainer import ElectraPretrainer
from electra_tf.runs.pretraining_model import build_optimizer

BATCH = 8


def _config(steps, **extra):
    extra.setdefault("parallel_micro_batches", 1)  # the one-pass step unless a test says
    overrides = dict(
        tiny_config().model_hparam_overrides,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return tiny_config(
        model_hparam_overrides=overrides,
        gradient_accumulation_steps=steps,
        train_batch_size=BATCH,
        learning_rate=1e-3,
        num_warmup_steps=0,
        **extra,
    )


def _train(steps, batches, initial_weights=None, **extra):
    config = _config(steps, **extra)
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    if initial_weights is not None:
        model.set_weights(initial_weights)
    weights = model.get_weights()
    initial = [v.numpy() for v in model.trainable_variables]
    model.compile(optimizer=build_optimizer(config, model))
    train_step = tf.function(model.train_step)
    logs = []
    for batch in batches:
        values = train_step({key: tf.constant(value) for key, value in batch.items()})
        logs.append({name: float(value) for name, value in values.items()})
        for metric in model.metrics:
            metric.reset_state()
    final = [v.numpy() for v in model.trainable_variables]
    change = max(float(np.max(np.abs(a - b))) for a, b in zip(initial, final, strict=True))
    return weights, logs, final, change


def _assert_same_training(logs, expected_logs, final, expected_final, electric):
    """The same logged metrics at every step and the same final weights as the reference."""
    names = ["loss", "masked_lm_loss", "disc_loss", "masked_lm_accuracy", "disc_accuracy"]
    for name in names + (["cloze_loss"] if electric else []):
        np.testing.assert_allclose(
            [log[name] for log in logs],
            [log[name] for log in expected_logs],
            rtol=1e-5,
            atol=1e-6,
            err_msg=name,
        )
    for a, b in zip(expected_final, final, strict=True):
        np.testing.assert_allclose(b, a, atol=2e-6)


ACCUMULATED, PARALLEL = {"steps": 4}, {"steps": 1, "parallel_micro_batches": 4}


@pytest.mark.parametrize(
    "electric, split",
    [
        pytest.param(False, ACCUMULATED, id="electra-accumulated"),
        pytest.param(False, PARALLEL, id="electra-parallel"),
        pytest.param(True, ACCUMULATED, id="electric-accumulated"),
        pytest.param(True, PARALLEL, id="electric-parallel", marks=pytest.mark.slow),
    ],
)
def test_micro_batches_give_the_full_batch_update(electric, split):
    # Rows of different lengths: the micro-batches have different token and masked-slot
    # counts, so averaging per-micro-batch means would NOT give the batch loss; dividing by
    # the whole batch's denominators does (Electric's cloze loss: its candidate count).
    batches = [tiny_batch(batch=BATCH, seed=seed) for seed in (0, 1, 2)]
    extra = {"electric_objective": True} if electric else {}
    with batch_split_invariant_objective():
        weights, whole, whole_final, change = _train(1, batches, **extra)
        split = dict(split)
        _, accumulated, accumulated_final, _ = _train(split.pop("steps"), batches, weights,
                                                      **split, **extra)  # fmt: skip
    assert whole[0]["loss"] != whole[-1]["loss"], "training did not change the loss"
    assert change > 1e-4
    _assert_same_training(accumulated, whole, accumulated_final, whole_final, electric)


@pytest.mark.parametrize(
    "electric, steps, parts",
    [
        pytest.param(False, 1, 2, id="electra-2"),
        pytest.param(False, 1, 4, id="electra-4"),
        pytest.param(False, 4, 1, id="electra-accumulated-4"),
        pytest.param(True, 1, 2, id="electric-2"),
        pytest.param(True, 1, 4, id="electric-4", marks=pytest.mark.slow),
    ],
)
def test_parallel_micro_batches_draw_what_the_one_pass_step_draws(electric, steps, parts):
    # The real masking and Gumbel sampling this time (no batch-split-invariant objective): the
    # parallel (and the accumulating) step draws the masking and where each row's Gumbel noise
    # starts in the seed's stream once for the whole batch and slices them, so from the same
    # RNG state it corrupts every batch as the one-pass step does and (no dropout) makes the
    # same updates, step after step.
    batches = [tiny_batch(batch=BATCH, seed=seed) for seed in (0, 1, 2)]
    extra = {"electric_objective": True} if electric else {}
    weights, whole, whole_final, change = _train(1, batches, **extra)
    _, parallel, parallel_final, _ = _train(
        steps, batches, weights, parallel_micro_batches=parts, **extra
    )
    assert change > 1e-4
    _assert_same_training(parallel, whole, parallel_final, whole_final, electric)


def test_accumulation_steps_must_divide_the_batch():
    with pytest.raises(ConfigError, match="gradient_accumulation_steps.*train_batch_size 8"):
        _config(3)
    with pytest.raises(ConfigError, match="gradient_accumulation_steps"):
        _config(0)


def test_parallel_micro_batches_are_checked():
    with pytest.raises(ConfigError, match="parallel_micro_batches: 3 must .*train_batch_size 8"):
        _config(1, parallel_micro_batches=3)
    with pytest.raises(ConfigError, match="parallel_micro_batches: > 1 with gradient_acc"):
        _config(2, parallel_micro_batches=2)
    with pytest.raises(ConfigError, match="inter_op_threads: -1 must be an integer >= 0"):
        _config(1, inter_op_threads=-1)


def _calls(graph) -> list:
    return [op for op in graph.get_operations() if op.type.endswith("PartitionedCall")]


def _upstream(op) -> set:
    """Every op `op` waits for (data and control inputs, transitively)."""
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        for parent in [t.op for t in current.inputs] + list(current.control_inputs):
            if parent.name not in seen:
                seen.add(parent.name)
                stack.append(parent)
    return seen


def test_parallel_micro_batches_run_as_independent_ops():
    """No loop: the micro-batches are calls of ONE traced function (its forward and backward
    traced once), neither waiting for the other, so an inter-op pool runs them at once (the
    point of the option); the function draws nothing random of its own (its dropout seed is an
    argument), so its calls cannot repeat one stateful op's masks."""
    overrides = dict(tiny_config().model_hparam_overrides, hidden_dropout_prob=0.1)
    config = tiny_config(
        model_hparam_overrides=dict(overrides, attention_probs_dropout_prob=0.1),
        train_batch_size=BATCH,
        parallel_micro_batches=2,
    )
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    model.compile(optimizer=build_optimizer(config, model))
    batch = {key: tf.constant(value) for key, value in tiny_batch(batch=BATCH, seed=0).items()}
    graph = tf.function(model.train_step).get_concrete_function(batch).graph
    types = [op.type for op in graph.get_operations()]
    assert "While" not in types and "StatelessWhile" not in types
    calls = [op for op in _calls(graph) if "part_gradients" in op.get_attr("f").name]
    assert len(calls) == 2
    assert calls[0].get_attr("f").name == calls[1].get_attr("f").name
    assert calls[0].name not in _upstream(calls[1]) and calls[1].name not in _upstream(calls[0])
    body = graph._functions[calls[0].get_attr("f").name]
    body_types = [op.type for op in body.graph.get_operations()]
    # The body holds a whole forward pass: as many Softmax ops as the one-pass step's.
    one = _config(1)
    single = ElectraPretrainer(one, **SPECIAL_IDS)
    single.compile(optimizer=build_optimizer(one, single))
    single_types = [
        op.type for op in tf.function(single.train_step).get_concrete_function(batch).graph
        .get_operations()
    ]  # fmt: skip
    assert body_types.count("Softmax") == single_types.count("Softmax") > 0
    stateful_random = {
        "RandomUniform",
        "RandomUniformInt",
        "RandomStandardNormal",
        "StatefulUniform",
        "StatefulUniformFullInt",
        "RngReadAndSkip",
    }
    assert not stateful_random & set(_all_types(body.graph)), "the body draws its own numbers"


def _all_types(graph) -> list[str]:
    """Op types of `graph` and of the functions it calls (cond branches, fused kernels)."""
    types = [op.type for op in graph.get_operations()]
    for function in graph._functions.values():
        types += _all_types(function.graph) if hasattr(function, "graph") else []
    return types


def test_start_tensorflow_sets_the_thread_pools():
    import subprocess
    import sys

    code = (
        "from electra_tf.runtime.tf_startup import start_tensorflow; start_tensorflow(1, 3); "
        "import tensorflow as tf; t = tf.config.threading; "
        "print(t.get_intra_op_parallelism_threads(), t.get_inter_op_parallelism_threads())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["1", "3"]
