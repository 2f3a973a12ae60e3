"""The one-step check's project side: `ElectraPretrainer` on the scenario's config with every
weight perturbed, a masking draw of the wanted kind, the forward pass and the gradient of the
total loss, the weights exported in the original's layout, and one optimizer step the training
loop's way (check.py's docstring says what is compared).
"""

from __future__ import annotations

import os

from tools.original_parity.project_side import build_optimizer
from tools.original_parity.runtime import BASE_HPARAMS, BATCH, CLS, MASK, OPT_STEP, SEP


def _duplicates(out):
    pos = out["masked_lm_positions"].numpy()
    act = out["masked_lm_weights"].numpy() > 0
    smp = out["sampled_ids"].numpy()
    dup, dup_diff = [], []
    for b in range(pos.shape[0]):
        slots = [i for i in range(pos.shape[1]) if act[b, i]]
        for x in range(len(slots)):
            for y in range(x + 1, len(slots)):
                i, j = slots[x], slots[y]
                if pos[b, i] == pos[b, j]:
                    dup.append((b, i, j, int(pos[b, i])))
                    if smp[b, i] != smp[b, j]:
                        dup_diff.append((b, i, j, int(pos[b, i]), int(smp[b, i]), int(smp[b, j])))
    return dup, dup_diff


def _perturbed_model(scen, workdir, args, np, problems):
    """The scenario's pretrainer with every weight drawn anew; its config and variable map."""
    import electra_tf  # the public API survives moves of modules

    hp = dict(BASE_HPARAMS, **scen["hparams"])
    hp.update(precision="float32", jit_compile=False, seed=0)
    config = electra_tf.pretraining_config("parity", workdir, hparams=hp)
    model = electra_tf.ElectraPretrainer(config, cls_id=CLS, sep_id=SEP, mask_id=MASK)
    vmap = model.variable_map()
    names = sorted(vmap)
    trainable = {id(v) for v in model.trainable_variables}
    if trainable != {id(v) for v in vmap.values()} or len(model.trainable_variables) != len(vmap):
        problems.append("project: trainable_variables != variable_map() values")

    # Perturb every weight (LayerNorm gammas around 1) so biases, norms and gelu all matter.
    rs = np.random.RandomState(1234)
    for n in names:
        shape = vmap[n].shape.as_list()
        value = rs.normal(0.0, args.weight_std, size=shape)
        if n.endswith("LayerNorm/gamma"):
            value += 1.0
        vmap[n].assign(value.astype(np.float32))
    return config, model, vmap, names


def _choose_draw(scen, model, inputs, args, problems):
    """The project has no API to force positions: scan seeds of its masking/sampling RNG."""
    for seed in range(args.max_seed_scan):
        model.rng.reset_from_seed(seed)
        state = model.rng.state.numpy().copy()
        dup, dup_diff = _duplicates(model(inputs, training=True))
        ok = bool(dup_diff) if scen["want_duplicate"] else not dup
        if ok:
            return seed, state, dup, dup_diff
    problems.append(f"project: no seed < {args.max_seed_scan} gave the wanted masking draw")
    model.rng.reset_from_seed(0)
    return 0, model.rng.state.numpy().copy(), [], []


def _forward_and_grads(model, vmap, names, state, inputs, problems, tf):
    """Forward (training=True, dropout 0) and gradients of the total loss."""
    model.rng.reset(state)
    with tf.GradientTape() as tape:
        out = model(inputs, training=True)
        loss = out["loss"]
    grads = tape.gradient(loss, [vmap[n] for n in names])
    res = {k: v.numpy() for k, v in out.items()}
    res["grads"] = {}
    for n, g in zip(names, grads, strict=True):
        if g is None:
            problems.append(f"project: no gradient for {n}")
            g = tf.zeros_like(vmap[n])
        res["grads"][n] = tf.convert_to_tensor(g).numpy()
    return out, res


def _reproduced_noise(model, state, config, out, tf) -> dict:
    """The project's draws (for the side checks on the original's own mask/sampling)."""
    from electra_tf.pretraining.sampling import gumbel_uniform

    gen = tf.random.Generator.from_state(state, alg=model.rng.algorithm)
    seeds = gen.make_seeds(2)
    seed32 = tf.cast(seeds[:, 0], tf.int32)
    _, mask_seed = tf.unstack(tf.random.experimental.stateless_split(seed32, 2))
    return {
        "mask_uniform": tf.random.stateless_uniform(
            [BATCH, config.max_predictions_per_seq], mask_seed
        ).numpy(),
        "gumbel_uniform": gumbel_uniform(tf.shape(out["mlm_logits"]), seeds[:, 1]).numpy(),
    }


def _random_slots(slot_map, args, np) -> dict:
    rs_slots = np.random.RandomState(99)
    random_slots = {}
    for key in sorted(slot_map):
        shape = slot_map[key].shape.as_list()
        if key.endswith("/adam_m"):
            random_slots[key] = (args.slot_scale * rs_slots.normal(size=shape)).astype(np.float32)
        else:
            random_slots[key] = (
                (args.slot_scale * (0.5 + rs_slots.uniform(size=shape))) ** 2
            ).astype(np.float32)
    return random_slots


def _optimizer_steps(config, model, vmap, w0, state, inputs, res, args, np, tf):
    """One optimizer step, the training loop's way: build_optimizer + compile + train_update,
    from fresh and from random Adam slots."""
    names, problems = res["names"], res["problems"]
    optimizer = build_optimizer(config, model)
    model.compile(optimizer=optimizer)
    step_fn = tf.function(model.train_update)
    res["lr"] = float(optimizer._learning_rate(OPT_STEP))
    slot_map = optimizer.slot_map()
    res["random_slots"] = random_slots = _random_slots(slot_map, args, np)
    res["post"] = {}
    for mode in ("fresh", "random_slots"):
        for n in names:
            vmap[n].assign(w0[n])
        for key, var in slot_map.items():
            var.assign(
                random_slots[key] if mode == "random_slots" else np.zeros(var.shape, np.float32)
            )
        optimizer.iterations.assign(OPT_STEP)
        for metric in model.metrics:
            metric.reset_state()
        model.rng.reset(state)  # the same masking and samples as the forward above
        step_fn(inputs)
        if int(optimizer.iterations.numpy()) != OPT_STEP + 1:
            problems.append(
                f"project: iterations after the step = {int(optimizer.iterations.numpy())}"
            )
        values = {m.name: float(m.result()) for m in model.metrics}
        step_loss = values.get("loss")
        if step_loss is None or abs(step_loss - float(res["loss"])) > 1e-5 * abs(
            float(res["loss"])
        ):
            problems.append(
                f"project: train_update's loss {step_loss} != the forward's {float(res['loss'])} "
                "(not the same draw)"
            )
        res[f"step_lr_{mode}"] = values.get("learning_rate", float("nan"))
        res["post"][mode] = {n: vmap[n].numpy() for n in names}


def project_phase(scen, batch, workdir, args, np, tf):
    """Runs the project: forward + gradients, export, optimizer steps. Returns numpy results."""
    import electra_tf

    problems = []
    config, model, vmap, names = _perturbed_model(scen, workdir, args, np, problems)
    w0 = {n: vmap[n].numpy() for n in names}
    inputs = {k: tf.constant(v, tf.int32) for k, v in batch.items()}
    seed, state, dup, dup_diff = _choose_draw(scen, model, inputs, args, problems)
    out, res = _forward_and_grads(model, vmap, names, state, inputs, problems, tf)
    res.update(_reproduced_noise(model, state, config, out, tf))

    # Export the weights in the original layout with the project's converter.
    ckpt_dir = os.path.join(workdir, "original_ckpt")
    electra_tf.save_weights(model, ckpt_dir, "original", global_step=OPT_STEP)
    res["names"], res["problems"] = names, problems
    _optimizer_steps(config, model, vmap, w0, state, inputs, res, args, np, tf)
    res["w0"] = w0
    res["ckpt_prefix"] = os.path.join(ckpt_dir, f"model.ckpt-{OPT_STEP}")
    res["seed"] = seed
    res["dup"] = dup
    res["dup_diff"] = dup_diff
    res["config"] = {
        "disc": config.discriminator_config().to_dict(),
        "gen": config.generator_config().to_dict(),
        "max_predictions_per_seq": config.max_predictions_per_seq,
    }
    return res
