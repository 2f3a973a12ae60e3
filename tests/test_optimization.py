"""AdamWeightDecay, ElectraSchedule and layer-wise LR decay against independent references.

References: a NumPy re-derivation of the original's formulas, TF's own `ApplyAdam` kernel with
the bias-correction powers set to 0 (which turns its bias correction off), and Keras'
`PolynomialDecay` for the post-warmup part of the schedule. Model Garden's AdamWeightDecay is not
a reference: it applies bias correction, which the original does not.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from electra_tf.optimization import (
    AdamWeightDecay,
    ElectraSchedule,
    create_optimizer,
    layerwise_lr_multipliers,
    learning_rate_schedule,
)

B1, B2, EPS = 0.9, 0.999, 1e-6


def numpy_adamw(
    params, grads_per_step, lrs, wd, decayed, multipliers, clip=1.0, bias_correction=False
):
    """The original's AdamWeightDecayOptimizer + clip_by_global_norm, in NumPy (float64).

    `bias_correction`: Adam's paper (Kingma & Ba, Algorithm 1): m / (1 - b1^t), v / (1 - b2^t).
    """
    params = [p.astype(np.float64).copy() for p in params]
    ms = [np.zeros_like(p) for p in params]
    vs = [np.zeros_like(p) for p in params]
    for t, (grads, lr) in enumerate(zip(grads_per_step, lrs, strict=True), start=1):
        grads = [g.astype(np.float64) for g in grads]
        norm = np.sqrt(sum(np.sum(g * g) for g in grads))
        if clip is not None and norm > clip:
            grads = [g * clip / norm for g in grads]
        for i, g in enumerate(grads):
            ms[i] = B1 * ms[i] + (1 - B1) * g
            vs[i] = B2 * vs[i] + (1 - B2) * g * g
            if bias_correction:
                m_hat, v_hat = ms[i] / (1 - B1**t), vs[i] / (1 - B2**t)
            else:
                m_hat, v_hat = ms[i], vs[i]
            update = m_hat / (np.sqrt(v_hat) + EPS)
            if decayed[i]:
                update = update + wd * params[i]
            params[i] = params[i] - lr * multipliers[i] * update
    return params, ms, vs


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(3, 4), (4,), (4,), (2, 2)]
    params = [rng.normal(size=s).astype(np.float32) for s in shapes]
    # Norm well above 1 so that clipping is active on every step.
    grads = [[rng.normal(scale=3.0, size=s).astype(np.float32) for s in shapes] for _ in range(4)]
    return params, grads


def _variables(params):
    # Keras names deliberately differ from the original names: decisions must use the latter.
    return [tf.Variable(p, name=f"keras_var_{i}") for i, p in enumerate(params)]


@pytest.mark.parametrize("fused", [True, False])
def test_several_steps_match_numpy_with_clipping_decay_and_multipliers(fused):
    params, grads = _problem()
    variables = _variables(params)
    variable_map = {
        "electra/encoder/layer_0/intermediate/dense/kernel": variables[0],  # decayed
        "electra/encoder/layer_0/intermediate/dense/bias": variables[1],  # "bias": not decayed
        "electra/encoder/layer_0/output/LayerNorm/gamma": variables[2],  # not decayed
        # variables[3] is absent: falls back to its Keras name "keras_var_3" (decayed).
    }
    multipliers = {"electra/encoder/layer_0/intermediate/dense/kernel": 0.5}
    wd = 0.1
    optimizer = AdamWeightDecay(
        learning_rate=0.01,
        weight_decay_rate=wd,
        variable_map=variable_map,
        lr_multipliers=multipliers,
        fused=fused,
    )
    for step_grads in grads:
        optimizer.apply_gradients(zip([tf.constant(g) for g in step_grads], variables, strict=True))
    expected, ms, vs = numpy_adamw(
        params, grads, [0.01] * 4, wd, [True, False, False, True], [0.5, 1, 1, 1]
    )
    for var, want in zip(variables, expected, strict=True):
        np.testing.assert_allclose(var.numpy(), want, rtol=1e-5, atol=1e-6)
    unclipped, _, _ = numpy_adamw(
        params, grads, [0.01] * 4, wd, [True, False, False, True], [0.5, 1, 1, 1], clip=None
    )
    assert np.max(np.abs(unclipped[0] - expected[0])) > 1e-4  # clipping changed the result
    assert optimizer.iterations.numpy() == 4
    slots = optimizer.slot_map()
    # ApplyAdam (the fused path) weights the new gradient by 1 - f32(beta), not f32(1 - beta)
    # as the original: its moments are the original's times these factors (v: 1 - 1.3e-5), and
    # the step size and epsilon it gets make up for them (the weights above).
    k1, k2 = ((1 - np.float32(b)) / np.float32(1 - b) if fused else 1.0 for b in (B1, B2))
    np.testing.assert_allclose(
        slots["electra/encoder/layer_0/intermediate/dense/kernel/adam_m"].numpy(),
        ms[0] * k1,
        rtol=1e-5,
    )
    np.testing.assert_allclose(slots["keras_var_3/adam_v"].numpy(), vs[3] * k2, rtol=1e-5)


def test_schedule_drives_the_step_size():
    params, grads = _problem(1)
    variables = _variables(params)
    schedule = ElectraSchedule(1e-2, num_train_steps=10, warmup_steps=2)
    optimizer = AdamWeightDecay(learning_rate=schedule, weight_decay_rate=0.01)
    for step_grads in grads:
        optimizer.apply_gradients(zip([tf.constant(g) for g in step_grads], variables, strict=True))
    # The schedule is read at the step BEFORE the increment, as the original's global_step:
    # the first update has lr 0.
    lrs = [float(schedule(s)) for s in range(4)]
    assert lrs[0] == 0.0
    expected, _, _ = numpy_adamw(params, grads, lrs, 0.01, [True] * 4, [1] * 4)
    for var, want in zip(variables, expected, strict=True):
        np.testing.assert_allclose(var.numpy(), want, rtol=1e-5, atol=1e-6)


def test_written_out_form_matches_tf_apply_adam_with_bias_correction_switched_off():
    params, grads = _problem(2)
    variables = _variables(params)
    optimizer = AdamWeightDecay(
        learning_rate=0.05, weight_decay_rate=0.0, clip_norm=None, fused=False
    )
    reference = [tf.Variable(p) for p in params]
    ref_m = [tf.Variable(tf.zeros_like(p)) for p in params]
    ref_v = [tf.Variable(tf.zeros_like(p)) for p in params]
    for step_grads in grads:
        optimizer.apply_gradients(zip([tf.constant(g) for g in step_grads], variables, strict=True))
        for var, m, v, g in zip(reference, ref_m, ref_v, step_grads, strict=True):
            # beta1_power = beta2_power = 0 makes ApplyAdam's lr_t = lr * sqrt(1-0) / (1-0) = lr.
            tf.raw_ops.ResourceApplyAdam(
                var=var.handle,
                m=m.handle,
                v=v.handle,
                beta1_power=0.0,
                beta2_power=0.0,
                lr=0.05,
                beta1=B1,
                beta2=B2,
                epsilon=EPS,
                grad=g,
            )
    # ApplyAdam rearranges the moment updates (m += (g - m) * (1 - b1)): float32 rounding only.
    for var, ref in zip(variables, reference, strict=True):
        np.testing.assert_allclose(var.numpy(), ref.numpy(), rtol=1e-5, atol=2e-5)


def test_fused_update_runs_one_apply_adam_per_variable_and_matches_the_written_out_form():
    rng = np.random.default_rng(5)
    shapes = [(64, 32), (32,), (32,), (16, 8)]
    params = [rng.normal(scale=0.02, size=s).astype(np.float32) for s in shapes]
    names = ["dense/kernel", "dense/bias", "LayerNorm/gamma", "other/kernel"]
    steps = [
        [tf.constant(rng.normal(size=s).astype(np.float32) * 0.1) for s in shapes]
        for _ in range(30)
    ]
    schedule = ElectraSchedule(1e-3, 40, warmup_steps=5)
    finals, ops = [], []
    for fused in (True, False):
        variables = [tf.Variable(p) for p in params]
        optimizer = AdamWeightDecay(
            learning_rate=schedule,
            weight_decay_rate=0.01,
            variable_map=dict(zip(names, variables, strict=True)),
            lr_multipliers={"other/kernel": 0.3},
            fused=fused,
        )

        @tf.function
        def step(grads, optimizer=optimizer, variables=variables):
            optimizer.apply_gradients(zip(grads, variables, strict=True))

        for grads in steps:
            step(grads)
        graph = step.get_concrete_function(steps[0]).graph
        ops.append([op.type for op in graph.get_operations()])
        finals.append([v.numpy() for v in variables])
    assert ops[0].count("ResourceApplyAdam") == len(shapes)
    assert "ResourceApplyAdam" not in ops[1]
    assert len(ops[0]) < len(ops[1])
    lrs = [float(schedule(t)) for t in range(len(steps))]
    expected, _, _ = numpy_adamw(
        params,
        [[g.numpy() for g in grads] for grads in steps],
        lrs,
        0.01,
        [True, False, False, True],
        [1.0, 1.0, 1.0, 0.3],
    )
    # Both forms against float64: the kernel's float32 rounding is of the written-out form's size.
    errors = [
        max(float(np.max(np.abs(a - want))) for a, want in zip(final, expected, strict=True))
        for final in finals
    ]
    assert errors[0] < 1e-6 and errors[1] < 1e-6, errors
    assert errors[0] < 2 * errors[1] + 1e-8, errors
    # The 30 steps moved the weights: the comparison is not between two untouched copies.
    assert np.max(np.abs(finals[0][0] - params[0])) > 1e-3


def test_sparse_gradients_are_densified_like_the_original():
    table = tf.Variable(np.ones((5, 3), np.float32), name="table")
    optimizer = AdamWeightDecay(
        learning_rate=0.1,
        clip_norm=None,
        variable_map={"electra/embeddings/word_embeddings": table},
    )
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [1, 1, 3]))  # [3, 3]
    (grad,) = tape.gradient(loss, [table])
    assert isinstance(grad, tf.IndexedSlices)
    optimizer.apply_gradients([(grad, table)])
    dense = np.zeros((5, 3))
    dense[1] = 2.0
    dense[3] = 1.0
    expected, _, _ = numpy_adamw([np.ones((5, 3))], [[dense]], [0.1], 0.0, [False], [1], clip=None)
    np.testing.assert_allclose(table.numpy(), expected[0], rtol=1e-5)


def test_clipping_uses_the_norm_of_the_summed_sparse_gradient():
    # A token-type-like table: 2 rows looked up at 40 positions, per-occurrence values 1: the
    # summed dense gradient is 20 per entry (squared norm 2400), the per-occurrence values
    # have squared norm 120. The original (dense one-hot lookup) clips by the former. Two
    # steps of different sizes, so the clipped magnitudes (not just signs) reach the weights.
    table = tf.Variable(np.zeros((2, 3), np.float32), name="table")
    other = tf.Variable(np.zeros((4,), np.float32), name="other")
    optimizer = AdamWeightDecay(
        learning_rate=0.1,
        clip_norm=1.0,
        variable_map={"electra/embeddings/token_type_embeddings": table, "other": other},
    )
    dense_steps = []
    for scale, other_grad in ((1.0, 30.0), (0.1, 2.0)):
        with tf.GradientTape() as tape:
            rows = tf.gather(table, [0, 1] * 20)  # [40, 3]
            loss = scale * tf.reduce_sum(rows) + tf.reduce_sum(other * [other_grad, 0, 0, 0])
        grads = tape.gradient(loss, [table, other])
        assert isinstance(grads[0], tf.IndexedSlices)
        optimizer.apply_gradients(zip(grads, [table, other], strict=True))
        dense_steps.append([np.full((2, 3), 20.0 * scale), np.array([other_grad, 0, 0, 0])])
    expected, _, _ = numpy_adamw(
        [np.zeros((2, 3)), np.zeros(4)], dense_steps, [0.1, 0.1], 0.0, [False] * 2, [1, 1]
    )
    np.testing.assert_allclose(table.numpy(), expected[0], rtol=1e-5)
    np.testing.assert_allclose(other.numpy(), expected[1], rtol=1e-5, atol=1e-7)


def test_checkpoint_round_trip_continues_identically():
    params, grads = _problem(3)

    def run(variables, optimizer, step_grads_list):
        for step_grads in step_grads_list:
            optimizer.apply_gradients(
                zip([tf.constant(g) for g in step_grads], variables, strict=True)
            )

    straight = _variables(params)
    opt = AdamWeightDecay(learning_rate=ElectraSchedule(0.01, 10, warmup_steps=1))
    run(straight, opt, grads)

    first = _variables(params)
    opt1 = AdamWeightDecay(learning_rate=ElectraSchedule(0.01, 10, warmup_steps=1))
    run(first, opt1, grads[:2])
    ckpt_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"opt_ckpt_{os.getpid()}")
    path = tf.train.Checkpoint(vars=first, optimizer=opt1).write(os.path.join(ckpt_dir, "c"))

    second = _variables([np.zeros_like(p) for p in params])
    opt2 = AdamWeightDecay(learning_rate=ElectraSchedule(0.01, 10, warmup_steps=1))
    opt2.build(second)  # slots must exist for the restore to fill them
    tf.train.Checkpoint(vars=second, optimizer=opt2).read(path).assert_consumed()
    assert opt2.iterations.numpy() == 2
    run(second, opt2, grads[2:])
    for a, b in zip(straight, second, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def test_model_compile_and_fit():
    inputs = keras.Input((3,))
    outputs = keras.layers.Dense(1, name="head")(inputs)
    model = keras.Model(inputs, outputs)
    kernel, bias = model.layers[1].kernel, model.layers[1].bias
    optimizer = AdamWeightDecay(
        learning_rate=0.01,
        weight_decay_rate=0.01,
        variable_map={"task_specific/t/dense/kernel": kernel, "task_specific/t/dense/bias": bias},
    )
    model.compile(optimizer=optimizer, loss="mse")
    x = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    before = [kernel.numpy(), bias.numpy()]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    step_grads = [g.numpy() for g in tape.gradient(loss, [kernel, bias])]
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    expected, _, _ = numpy_adamw(before, [step_grads], [0.01], 0.01, [True, False], [1, 1])
    np.testing.assert_allclose(kernel.numpy(), expected[0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(bias.numpy(), expected[1], rtol=1e-4, atol=1e-6)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(restored, AdamWeightDecay)
    assert restored.weight_decay_rate == 0.01 and restored.epsilon == EPS


def test_loss_scale_optimizer_wrapping_gives_the_same_step():
    params, grads = _problem(4)
    plain_vars, scaled_vars = _variables(params), _variables(params)
    plain = AdamWeightDecay(learning_rate=0.01, weight_decay_rate=0.01)
    wrapped = keras.mixed_precision.LossScaleOptimizer(
        AdamWeightDecay(learning_rate=0.01, weight_decay_rate=0.01), dynamic=False, initial_scale=8
    )
    targets = [tf.constant(g) for g in grads[0]]
    for variables, optimizer in ((plain_vars, plain), (scaled_vars, wrapped)):
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(v * t) for v, t in zip(variables, targets, strict=True)])
        optimizer.minimize(loss, variables, tape=tape)
    for a, b in zip(plain_vars, scaled_vars, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    assert wrapped.iterations.numpy() == 1


def test_learning_rate_schedule_is_public_through_a_loss_scale_wrapper():
    schedule = ElectraSchedule(1e-3, num_train_steps=10)
    plain = AdamWeightDecay(learning_rate=schedule)
    assert plain.learning_rate_schedule is schedule
    assert AdamWeightDecay(learning_rate=0.01).learning_rate_schedule is None
    wrapped = keras.mixed_precision.LossScaleOptimizer(AdamWeightDecay(learning_rate=schedule))
    assert learning_rate_schedule(plain) is schedule
    assert learning_rate_schedule(wrapped) is schedule
    # Other tf_keras optimizers (user code), wrapped or not; constant rates and no optimizer.
    decay = keras.optimizers.schedules.PolynomialDecay(1e-3, 10)
    assert learning_rate_schedule(keras.optimizers.Adam(decay)) is decay
    adam = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(decay))
    assert learning_rate_schedule(adam) is decay
    assert learning_rate_schedule(keras.optimizers.Adam(1e-3)) is None
    assert learning_rate_schedule(None) is None


def test_schedule_hand_values():
    schedule = ElectraSchedule(1.0, num_train_steps=100, warmup_steps=10)
    values = {s: float(schedule(s)) for s in (0, 5, 10, 50, 100, 150)}
    # step 5: warmup factor 0.5 times the (overlapping) linear decay 0.95.
    expected = {0: 0.0, 5: 0.5 * 0.95, 10: 0.9, 50: 0.5, 100: 0.0, 150: 0.0}
    for step, want in expected.items():
        assert values[step] == pytest.approx(want, abs=1e-7), step
    # warmup = max(T * proportion, warmup_steps) = 20.
    assert float(ElectraSchedule(1.0, 100, 10, 0.2)(5)) == pytest.approx(0.25 * 0.95)
    assert float(ElectraSchedule(1.0, 100, power=2.0)(50)) == pytest.approx(0.25)
    assert float(ElectraSchedule(1.0, 100, 10, start_step=5)(0)) == pytest.approx(0.475)
    assert float(ElectraSchedule(2e-4, 100)(0)) == pytest.approx(2e-4)  # no warmup: no ramp


def test_schedule_after_warmup_equals_keras_polynomial_decay_and_round_trips():
    schedule = ElectraSchedule(5e-4, num_train_steps=1000, warmup_steps=100, power=1.5)
    reference = keras.optimizers.schedules.PolynomialDecay(5e-4, 1000, 0.0, power=1.5)
    for step in (100, 250, 777, 1000):
        assert float(schedule(step)) == pytest.approx(float(reference(step)), rel=1e-5)
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert restored.get_config() == schedule.get_config()


def _encoder_names(n_layers, scope="electra"):
    names = [f"{scope}/embeddings/word_embeddings", f"{scope}/embeddings/LayerNorm/gamma"]
    names.append(f"{scope}/embeddings_project/kernel")
    for i in range(n_layers):
        names.append(f"{scope}/encoder/layer_{i}/attention/self/query/kernel")
        names.append(f"{scope}/encoder/layer_{i}/output/LayerNorm/beta")
    names.append("task_specific/sst/dense/kernel")
    return {name: None for name in names}


def test_layerwise_multipliers_as_the_original():
    mult = layerwise_lr_multipliers(_encoder_names(12), n_layers=12, decay=0.8)
    assert mult["task_specific/sst/dense/kernel"] == pytest.approx(1.0)
    assert mult["electra/encoder/layer_11/attention/self/query/kernel"] == pytest.approx(0.64)
    assert mult["electra/encoder/layer_1/output/LayerNorm/beta"] == pytest.approx(0.8**12)
    assert mult["electra/encoder/layer_0/output/LayerNorm/beta"] == pytest.approx(0.8**13)
    assert mult["electra/embeddings/word_embeddings"] == pytest.approx(0.8**14)
    assert mult["electra/embeddings_project/kernel"] == pytest.approx(0.8**14)


def test_layerwise_multipliers_fixed_top_layer():
    mult = layerwise_lr_multipliers(_encoder_names(12), 12, 0.8, fix_top_layer=True)
    assert mult["task_specific/sst/dense/kernel"] == pytest.approx(1.0)
    assert mult["electra/encoder/layer_11/attention/self/query/kernel"] == pytest.approx(0.8)
    assert mult["electra/encoder/layer_0/output/LayerNorm/beta"] == pytest.approx(0.8**12)
    assert mult["electra/embeddings/word_embeddings"] == pytest.approx(0.8**13)


def test_layerwise_unmatched_name_is_an_error_naming_it():
    names = _encoder_names(2)
    names["discriminator_predictions/dense/kernel"] = None
    with pytest.raises(ValueError, match="discriminator_predictions/dense/kernel"):
        layerwise_lr_multipliers(names, 2, 0.8)
    # Without the leading scope the original's "/embeddings/" key does not match either.
    with pytest.raises(ValueError, match="'embeddings/word_embeddings'"):
        layerwise_lr_multipliers({"embeddings/word_embeddings": None}, 2, 0.8)


def test_bias_correction_matches_adams_paper_and_tf_apply_adam():
    params, grads = _problem(3)
    variables = _variables(params)
    optimizer = AdamWeightDecay(
        learning_rate=0.01, weight_decay_rate=0.1, bias_correction=True, variable_map={}
    )
    for step_grads in grads:
        optimizer.apply_gradients(zip([tf.constant(g) for g in step_grads], variables, strict=True))
    expected, _, _ = numpy_adamw(
        params, grads, [0.01] * 4, 0.1, [True] * 4, [1] * 4, bias_correction=True
    )
    uncorrected, _, _ = numpy_adamw(params, grads, [0.01] * 4, 0.1, [True] * 4, [1] * 4)
    for var, want in zip(variables, expected, strict=True):
        np.testing.assert_allclose(var.numpy(), want, rtol=1e-5, atol=1e-6)
    # Without the correction the first steps move 2-6x further, so the two paths part clearly.
    assert np.max(np.abs(uncorrected[0] - expected[0])) > 1e-2
    assert optimizer.get_config()["bias_correction"] is True

    # TF's ApplyAdam kernel with the true beta powers. It adds epsilon to the uncorrected
    # sqrt(v), so both sides use a negligible epsilon; clipping is off (norms differ per step).
    variables = _variables(params)
    optimizer = AdamWeightDecay(
        learning_rate=0.01, epsilon=1e-12, bias_correction=True, clip_norm=None
    )
    reference = [tf.Variable(p) for p in params]
    ref_m = [tf.Variable(tf.zeros_like(p)) for p in params]
    ref_v = [tf.Variable(tf.zeros_like(p)) for p in params]
    for t, step_grads in enumerate(grads, start=1):
        optimizer.apply_gradients(zip([tf.constant(g) for g in step_grads], variables, strict=True))
        for var, m, v, g in zip(reference, ref_m, ref_v, step_grads, strict=True):
            tf.raw_ops.ResourceApplyAdam(
                var=var.handle,
                m=m.handle,
                v=v.handle,
                beta1_power=B1**t,
                beta2_power=B2**t,
                lr=0.01,
                beta1=B1,
                beta2=B2,
                epsilon=1e-12,
                grad=g,
            )
    for var, ref in zip(variables, reference, strict=True):
        np.testing.assert_allclose(var.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_create_optimizer_wires_schedule_decay_and_multipliers():
    kernel = tf.Variable(tf.ones((2, 2)))
    head = tf.Variable(tf.ones((2,)))
    variable_map = {
        "electra/encoder/layer_0/output/dense/kernel": kernel,
        "task_specific/sst/dense/bias": head,
    }
    optimizer = create_optimizer(
        variable_map,
        1e-4,
        num_train_steps=100,
        weight_decay_rate=0.01,
        warmup_proportion=0.1,
        layerwise_lr_decay_power=0.5,
        n_transformer_layers=1,
    )
    assert optimizer.lr_multiplier(kernel) == pytest.approx(0.25)
    assert optimizer.lr_multiplier(head) == pytest.approx(1.0)
    assert optimizer.uses_weight_decay(kernel) and not optimizer.uses_weight_decay(head)
    assert float(optimizer._learning_rate(5)) == pytest.approx(1e-4 * 0.5 * 0.95)
    assert not optimizer.bias_correction
    # Extra multipliers multiply with the layer-wise factors; bias correction is passed on.
    combined = create_optimizer(
        variable_map,
        1e-4,
        num_train_steps=100,
        layerwise_lr_decay_power=0.5,
        n_transformer_layers=1,
        lr_multipliers={"electra/encoder/layer_0/output/dense/kernel": 3.0},
        adam_bias_correction=True,
    )
    assert combined.lr_multiplier(kernel) == pytest.approx(0.25 * 3.0)
    assert combined.lr_multiplier(head) == pytest.approx(1.0)
    assert combined.bias_correction
    with pytest.raises(ValueError, match="n_transformer_layers"):
        create_optimizer(variable_map, 1e-4, 100, layerwise_lr_decay_power=0.8)


MIRRORED_SCRIPT = textwrap.dedent(
    """
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from electra_tf.optimization import AdamWeightDecay
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        var = tf.Variable([1.0, -2.0, 3.0])
        opt = AdamWeightDecay(0.1, weight_decay_rate=0.01, variable_map={"w/kernel": var})
    grads = tf.constant(%r, tf.float32)  # [steps, replicas, 3]

    @tf.function
    def step(i):
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            opt.apply_gradients([(grads[i, rid], var)])
        strategy.run(fn)

    for i in range(2):
        step(tf.constant(i))
    print("RESULT", ",".join(repr(float(x)) for x in var.numpy()))
    """
)
# Two steps whose per-replica norms differ, so clipping before vs after the sum changes Adam's
# direction on the second step.
REPLICA_GRADS = [[[3.0, 0.0, 4.0], [0.0, 2.0, -1.0]], [[0.1, 0.1, 0.1], [1.0, -1.0, 0.1]]]


def test_clipping_is_global_after_the_cross_replica_sum():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root
    script = MIRRORED_SCRIPT % (REPLICA_GRADS,)
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")][0]
    got = np.array([float(x) for x in line.split()[1].split(",")])
    start = [np.array([1.0, -2.0, 3.0])]
    summed = [[np.sum(np.array(step), axis=0)] for step in REPLICA_GRADS]
    expected, _, _ = numpy_adamw(start, summed, [0.1, 0.1], 0.01, [True], [1])
    np.testing.assert_allclose(got, expected[0], rtol=1e-5)
    # The test can tell the orders apart: clipping each replica's gradient first differs.
    per_replica = [
        [sum(np.array(g) * min(1.0, 1.0 / np.linalg.norm(g)) for g in step)]
        for step in REPLICA_GRADS
    ]
    wrong, _, _ = numpy_adamw(start, per_replica, [0.1, 0.1], 0.01, [True], [1])
    assert np.max(np.abs(wrong[0] - expected[0])) > 1e-3


def test_the_steps_scalars_are_made_once_per_apply_not_once_per_variable():
    """A variable's fused update adds only its own ops (its clipping, decay and ApplyAdam): the
    rate, the decay factor and ApplyAdam's constants are shared by every variable of a dtype
    and multiplier. Made per variable they were 25 graph ops a variable instead of 12, about
    5,000 more ops for pre-training's ~400 variables to trace and optimise before step one."""

    def ops_for(n):
        variables = [tf.Variable(np.ones((4, 4), np.float32)) for _ in range(n)]
        names = [f"layer_{i}/kernel" for i in range(n)]
        optimizer = AdamWeightDecay(
            learning_rate=ElectraSchedule(1e-3, 40, warmup_steps=5),
            weight_decay_rate=0.01,
            variable_map=dict(zip(names, variables, strict=True)),
        )
        grads = [tf.ones((4, 4)) for _ in range(n)]

        @tf.function
        def step(grads):
            optimizer.apply_gradients(zip(grads, variables, strict=True))

        step(grads)
        return [op.type for op in step.get_concrete_function(grads).graph.get_operations()]

    few, many = ops_for(4), ops_for(8)
    assert many.count("ResourceApplyAdam") == 8
    assert (len(many) - len(few)) / 4 <= 12
    # One each of ApplyAdam's constants, however many variables.
    assert many.count("Const") - few.count("Const") <= 4 * 2  # each clipped gradient's own
