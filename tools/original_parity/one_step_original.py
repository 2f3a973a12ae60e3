"""The one-step check's original side: the original's `PretrainingModel` and
`create_optimizer` in one TF1 graph on the project's batch, weights and draws; its losses,
outputs, gradients, the side checks of its own `mask` / `sample_from_softmax` fed the project's
noise, and its weights after one update (check.py's docstring says what is compared).
"""

from __future__ import annotations

import contextlib
import os
import types

from tools.original_parity.original_side import project_draws
from tools.original_parity.runtime import BASE_HPARAMS, OPT_STEP, Proxy, patched, session_config


def _noise_proxy(proj, v1):
    """tf as the original's helpers see it, with `random.uniform` / `random.categorical`
    returning the project's draws (its mask uniforms, its Gumbel uniforms, its positions)."""
    N = proj["masked_lm_positions"].shape[1]

    def fake_uniform(shape, *a, **k):
        shape = list(shape)
        if len(shape) == 2:
            value = proj["mask_uniform"]
        else:
            value = proj["gumbel_uniform"]
        assert list(value.shape) == shape, (value.shape, shape)
        return v1.constant(value, v1.float32)

    def fake_categorical(logits, num_samples, dtype=None, *a, **k):
        assert num_samples == N
        return v1.constant(proj["masked_lm_positions"], dtype or v1.int64)

    random_proxy = Proxy(v1.random, uniform=fake_uniform, categorical=fake_categorical)
    return Proxy(v1, random=random_proxy)


def _capturing(rp, opt_mod, captured):
    """(object, name, wrapper) for the model's fake data, discriminator and cloze outputs and
    the optimizer's update: each wrapper records what the original built in `captured`."""
    real_fake_data = rp.PretrainingModel._get_fake_data
    real_disc_out = rp.PretrainingModel._get_discriminator_output
    real_cloze_out = rp.PretrainingModel._get_cloze_outputs

    def cap_fake_data(self, *a, **k):
        captured["fake"] = real_fake_data(self, *a, **k)
        return captured["fake"]

    def cap_disc_out(self, *a, **k):
        captured["disc"] = real_disc_out(self, *a, **k)
        return captured["disc"]

    def cap_cloze_out(self, *a, **k):
        captured["cloze"] = real_cloze_out(self, *a, **k)
        return captured["cloze"]

    real_apply = opt_mod.AdamWeightDecayOptimizer.apply_gradients

    def cap_apply(self, grads_and_vars, *a, **k):
        grads_and_vars = list(grads_and_vars)
        captured["lr"] = self.learning_rate
        captured["clipped"] = grads_and_vars
        # The optimizer's own update (clipped grads, Adam, decay) without create_optimizer's
        # global_step increment, which runs in a tf.group with no control dependency on the
        # learning rate's read of global_step (see the report's race note).
        captured["apply_op"] = real_apply(self, grads_and_vars, *a, **k)
        return captured["apply_op"]

    return [
        (rp.PretrainingModel, "_get_fake_data", cap_fake_data),
        (rp.PretrainingModel, "_get_discriminator_output", cap_disc_out),
        (rp.PretrainingModel, "_get_cloze_outputs", cap_cloze_out),
        (opt_mod.AdamWeightDecayOptimizer, "apply_gradients", cap_apply),
    ]


def _model(scen, batch, proj, orig, workdir, g, v1):
    """The original's model on the project's draws, and the side checks of its own masking."""
    rp, ph, pd = orig.run_pretraining, orig.pretrain_helpers, orig.pretrain_data
    real_mask, real_sample = ph.mask, ph.sample_from_softmax
    hp = dict(BASE_HPARAMS, **scen["hparams"])
    hp["vocab_file"] = os.path.join(workdir, "vocab.txt")
    tf_proxy = _noise_proxy(proj, v1)
    captured = g.captured

    def on_sample(logits, disallow):
        # Side check: the ORIGINAL sampler on the ORIGINAL logits, with the project's noise.
        with patched(ph, "tf", tf_proxy):
            captured["orig_sample_onehot"] = real_sample(logits, disallow=disallow)

    features = {k: v1.constant(v, v1.int32) for k, v in batch.items()}
    draws = {
        "masked_input_ids": v1.constant(proj["masked_input_ids"], v1.int32),
        "masked_lm_positions": v1.constant(proj["masked_lm_positions"], v1.int32),
        "masked_lm_ids": v1.constant(proj["masked_lm_ids"], v1.int32),
        "masked_lm_weights": v1.constant(proj["masked_lm_weights"], v1.float32),
        "sampled_ids": v1.constant(proj["sampled_ids"], v1.int32),
    }
    g.config = config = orig.configure_pretraining.PretrainingConfig("parity", workdir, **hp)
    with contextlib.ExitStack() as stack:
        stack.enter_context(project_draws(orig, draws, on_sample))
        for obj, name, wrapper in g.capture[:3]:
            stack.enter_context(patched(obj, name, wrapper))
        g.model = model = rp.PretrainingModel(config, features, True)
    g.bert_config = model._bert_config
    g.gen_config = rp.get_generator_config(config, g.bert_config)

    # Side checks: the original's own masking with the project's draws, and candidates.
    unmasked = pd.features_to_inputs(features)
    with patched(ph, "tf", tf_proxy):
        g.orig_masked = real_mask(config, unmasked, config.mask_prob)
    g.candidates = ph.get_candidates_mask(config, unmasked)


def _optimizer(orig, g, v1):
    """Gradients of the total loss, create_optimizer's train op, the Saver, and feeds for the
    Adam slots and global_step."""
    opt_mod, model, config = orig.optimization, g.model, g.config
    tvars = v1.trainable_variables()
    if len({id(v) for v in tvars}) != len(tvars):
        raise SystemExit("ERROR: a variable is listed twice in TRAINABLE_VARIABLES")
    grads = v1.gradients(model.total_loss, tvars)
    g.dense_grads = [
        v1.convert_to_tensor(grad) if grad is not None else v1.zeros_like(v)
        for grad, v in zip(grads, tvars, strict=True)
    ]
    g.missing_grads = [v.name for grad, v in zip(grads, tvars, strict=True) if grad is None]
    with patched(*g.capture[3]):
        # As run_pretraining.model_fn_builder calls it.
        g.train_op = opt_mod.create_optimizer(
            model.total_loss, config.learning_rate, config.num_train_steps,
            weight_decay_rate=config.weight_decay_rate, use_tpu=config.use_tpu,
            warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power,
        )  # fmt: skip
    g.model_vars = {v.name.split(":")[0]: v for v in tvars}
    g.global_step = v1.train.get_global_step()
    g.saver = v1.train.Saver(var_list={**g.model_vars, "global_step": g.global_step})
    g.slot_vars = {
        v.name.split(":")[0]: v
        for v in v1.global_variables()
        if v.name.split(":")[0].endswith(("/adam_m", "/adam_v"))
    }
    g.slot_feed = {}
    for name, var in g.slot_vars.items():
        ph_ = v1.placeholder(v1.float32, var.shape)
        g.slot_feed[name] = (ph_, var.assign(ph_))
    g.gs_value = v1.placeholder(v1.int64, [])
    g.gs_assign = g.global_step.assign(g.gs_value)
    g.init = v1.global_variables_initializer()


def _fetches(g, v1) -> dict:
    model, captured, orig_masked = g.model, g.captured, g.orig_masked
    fetch = {
        "mlm_loss": model.mlm_output.loss,
        "mlm_logits": model.mlm_output.logits,
        "mlm_per_example": model.mlm_output.per_example_loss,
        "total_loss": model.total_loss,
        "disc_loss": captured["disc"].loss,
        "disc_probs": captured["disc"].probs,
        # The input of the Sigmoid that makes `probs`: the logits the loss is taken of (with
        # Electric, energy + log q + the prior).
        "disc_logits": captured["disc"].probs.op.inputs[0],
        "disc_per_example": captured["disc"].per_example_loss,
        "disc_labels": captured["fake"].is_fake_tokens,
        "fake_input_ids": captured["fake"].inputs.input_ids,
        "orig_sample_ids": v1.argmax(captured["orig_sample_onehot"], -1, output_type=v1.int32),
        "orig_mask_input_ids": orig_masked.input_ids,
        "orig_mask_ids": orig_masked.masked_lm_ids,
        "orig_mask_weights": orig_masked.masked_lm_weights,
        "orig_mask_positions": orig_masked.masked_lm_positions,
        "candidates": g.candidates,
        "grads": dict(zip(g.model_vars, g.dense_grads, strict=True)),
        "global_step": g.global_step,
    }
    if "cloze" in captured:  # the two-tower generator (Electric)
        fetch["cloze_loss"] = captured["cloze"].loss
        fetch["cloze_logits"] = captured["cloze"].logits
        fetch["cloze_weights"] = captured["cloze"].weights
        fetch["cloze_per_position"] = captured["cloze"].per_example_loss
    return fetch


def _run(g, proj, args, np, v1) -> dict:
    """Restores the project's weights, runs the fetches, then one update per mode."""
    captured, saver = g.captured, g.saver
    res = {"missing_grads": g.missing_grads}
    with v1.Session(graph=g.graph, config=session_config(args.threads)) as sess:
        sess.run(g.init)
        ckpt_names = {n for n, _ in v1.train.list_variables(proj["ckpt_prefix"])}
        res["ckpt_extra"] = sorted(ckpt_names - set(g.model_vars) - {"global_step"})
        saver.restore(sess, proj["ckpt_prefix"])  # fails loudly on a missing name / shape
        res.update(sess.run(g.fetch))
        res["lr"] = float(sess.run(captured["lr"]))
        sess.run(g.gs_assign, {g.gs_value: OPT_STEP + 1})  # the schedule one step later
        res["lr_next"] = float(sess.run(captured["lr"]))
        res["global_norm"] = float(
            np.sqrt(sum(float(np.sum(x.astype(np.float64) ** 2)) for x in res["grads"].values()))
        )
        res["post"] = {}
        # "fresh" / "random_slots": the optimizer's update op at global_step = OPT_STEP;
        # "train_op": create_optimizer's whole train op (update + racing step increment).
        for mode in ("fresh", "random_slots", "train_op"):
            saver.restore(sess, proj["ckpt_prefix"])  # weights and global_step = OPT_STEP
            feed = {}
            for name, (ph_, _) in g.slot_feed.items():
                if mode == "random_slots":
                    feed[ph_] = proj["random_slots"][name]
                else:
                    feed[ph_] = np.zeros(ph_.shape.as_list(), np.float32)
            sess.run([op for _, op in g.slot_feed.values()], feed)
            sess.run(g.train_op if mode == "train_op" else captured["apply_op"])
            res["post"][mode] = sess.run(g.model_vars)
            res[f"global_step_after_{mode}"] = int(sess.run(g.global_step))
    return res


def original_phase(scen, batch, proj, orig, workdir, args, np, tf):
    """Runs the original on the project's batch, weights and draws. Returns numpy results."""
    import tensorflow.compat.v1 as v1

    g = types.SimpleNamespace(captured={})
    g.capture = _capturing(orig.run_pretraining, orig.optimization, g.captured)
    g.graph = v1.Graph()
    with g.graph.as_default():
        _model(scen, batch, proj, orig, workdir, g, v1)
        _optimizer(orig, g, v1)
        g.fetch = _fetches(g, v1)
        g.graph.finalize()
    res = _run(g, proj, args, np, v1)
    res["names"] = sorted(g.model_vars)
    res["slot_names"] = sorted(g.slot_vars)
    res["bert_config"] = dict(g.bert_config.__dict__)
    res["gen_config"] = dict(g.gen_config.__dict__)
    res["embedding_size"] = g.config.embedding_size
    res["max_predictions_per_seq"] = g.config.max_predictions_per_seq
    return res
