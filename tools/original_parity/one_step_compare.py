"""The one-step check's comparison: every quantity of the project's run against the original's
(`compare`), gated at check.py's tolerances, and the report tables (`print_report`).
"""

from __future__ import annotations

from tools.original_parity.runtime import OPT_STEP, log

PADDING_CLOZE_RTOL = 1e-3  # cloze logits at padding positions (see compare())


def group_of(name: str) -> str:
    for prefix, label in (
        ("electra/embeddings/", "shared embeddings"),
        ("electra/embeddings_project/", "disc embeddings_project"),
        ("electra/encoder/", "disc encoder"),
        ("generator/embeddings/", "gen own embeddings"),
        ("generator/embeddings_project/", "gen embeddings_project"),
        ("generator/encoder/", "gen encoder"),
        ("generator_predictions/", "generator_predictions"),
        ("discriminator_predictions/", "discriminator_predictions"),
        ("generator_ltr/embeddings/", "ltr tower own embeddings"),
        ("generator_ltr/embeddings_project/", "ltr tower embeddings_project"),
        ("generator_ltr/encoder/", "ltr tower encoder"),
        ("generator_rtl/embeddings/", "rtl tower own embeddings"),
        ("generator_rtl/embeddings_project/", "rtl tower embeddings_project"),
        ("generator_rtl/encoder/", "rtl tower encoder"),
        ("cloze_predictions/", "cloze_predictions"),
    ):
        if name.startswith(prefix):
            return label
    return "other"


class Report:
    """The gated rows and failures of every scenario, and the per-variable and race numbers
    (for --json)."""

    def __init__(self, rtol):
        self.rtol = rtol
        self.rows = []
        self.failures = []
        self.per_var = {}
        self.race = {}

    def close(self, label, got, ref, rtol=None, floor=0.0):
        import numpy as np

        rtol = self.rtol if rtol is None else rtol
        got = np.asarray(got, np.float64)
        ref = np.asarray(ref, np.float64)
        if got.shape != ref.shape:
            self.fail(label, f"shape {got.shape} != {ref.shape}")
            return None
        diff = float(np.max(np.abs(got - ref))) if got.size else 0.0
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        ok = diff <= rtol * max(scale, floor)
        self.rows.append((label, diff, scale, diff / scale if scale else 0.0, ok))
        if not ok:
            self.failures.append(
                f"{label}: max|diff| {diff:.3e} > {rtol:g} x {max(scale, floor):.3e}"
            )
        return diff

    def exact(self, label, got, ref):
        import numpy as np

        got, ref = np.asarray(got), np.asarray(ref)
        if got.shape != ref.shape:
            self.fail(label, f"shape {got.shape} != {ref.shape}")
            return
        bad = int(np.sum(got != ref))
        diff = float(np.max(np.abs(got.astype(np.float64) - ref))) if got.size else 0.0
        self.rows.append((label + " (exact)", diff, float(np.max(np.abs(ref))), bad, bad == 0))
        if bad:
            self.failures.append(f"{label}: {bad} of {got.size} entries differ")

    def fail(self, label, msg):
        self.rows.append((label, float("nan"), float("nan"), float("nan"), False))
        self.failures.append(f"{label}: {msg}")


def compare(scen, proj, orig, rep, args, np):
    """Every gated comparison of one scenario into `rep`; the per-group table's numbers."""
    tag = scen["name"]
    _configs_and_names(tag, proj, orig, rep)
    _side_checks(tag, proj, orig, rep, np)
    _outputs(tag, proj, orig, rep, np)
    groups = _gradients_and_steps(tag, proj, orig, rep, args, np)
    _race(tag, proj, orig, rep, np)
    return groups


def _configs_and_names(tag, proj, orig, rep):
    keys = [
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "intermediate_size", "hidden_act", "hidden_dropout_prob",
        "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
        "initializer_range",
    ]  # fmt: skip
    for which, mine, theirs in (
        ("disc", proj["config"]["disc"], orig["bert_config"]),
        ("gen", proj["config"]["gen"], orig["gen_config"]),
    ):
        diffs = {k: (mine.get(k), theirs.get(k)) for k in keys if mine.get(k) != theirs.get(k)}
        if diffs:
            rep.fail(f"{tag} {which} config", f"project vs original {diffs}")
    if proj["config"]["disc"]["embedding_size"] != orig["embedding_size"]:
        rep.fail(
            f"{tag} embedding_size",
            f"{proj['config']['disc']['embedding_size']} vs {orig['embedding_size']}",
        )
    if proj["config"]["max_predictions_per_seq"] != orig["max_predictions_per_seq"]:
        rep.fail(f"{tag} max_predictions_per_seq", "differs")
    # Names.
    pn, on = set(proj["names"]), set(orig["names"])
    if pn != on:
        rep.fail(
            f"{tag} variable names",
            f"only project: {sorted(pn - on)[:8]}; only original: {sorted(on - pn)[:8]}",
        )
    if orig["ckpt_extra"]:
        rep.fail(f"{tag} checkpoint", f"names the original graph lacks: {orig['ckpt_extra'][:8]}")
    if orig["missing_grads"]:
        rep.fail(f"{tag} original grads", f"None for {orig['missing_grads'][:8]}")
    for p in proj["problems"]:
        rep.fail(f"{tag} project", p)


def _side_checks(tag, proj, orig, rep, np):
    """The original's own random helpers fed the project's draws."""
    pos, w = proj["masked_lm_positions"], proj["masked_lm_weights"]
    cand = orig["candidates"]
    not_cand = [(b, i, int(pos[b, i])) for b in range(pos.shape[0]) for i in range(pos.shape[1])
                if w[b, i] > 0 and not cand[b, pos[b, i]]]  # fmt: skip
    if not_cand:
        rep.fail(f"{tag} masked positions", f"not original candidates: {not_cand}")
    rep.exact(
        f"{tag} side: original mask() weights", proj["masked_lm_weights"], orig["orig_mask_weights"]
    )
    rep.exact(
        f"{tag} side: original mask() positions",
        proj["masked_lm_positions"],
        orig["orig_mask_positions"],
    )
    rep.exact(
        f"{tag} side: original mask() masked_lm_ids", proj["masked_lm_ids"], orig["orig_mask_ids"]
    )
    rep.exact(
        f"{tag} side: original mask() input ids",
        proj["masked_input_ids"],
        orig["orig_mask_input_ids"],
    )
    # Sampling: first confirm the reproduced noise explains the project's own samples.
    u = proj["gumbel_uniform"].astype(np.float32)
    gumbel = -np.log(-np.log(u + np.float32(1e-9)) + np.float32(1e-9))
    own = np.argmax(proj["mlm_logits"] / 1.0 + gumbel, -1)
    if np.array_equal(own, proj["sampled_ids"]):
        rep.exact(
            f"{tag} side: original sample_from_softmax ids",
            proj["sampled_ids"],
            orig["orig_sample_ids"],
        )
    else:
        rep.rows.append((f"{tag} side: sampler (noise not reproducible: skipped)", 0, 0, 0, True))


def _outputs(tag, proj, orig, rep, np):
    """Losses, logits, labels, the learning rate (and Electric's cloze outputs)."""
    rep.close(f"{tag} generator MLM loss", proj["masked_lm_loss"], orig["mlm_loss"])
    rep.close(f"{tag} discriminator loss", proj["disc_loss"], orig["disc_loss"])
    rep.close(f"{tag} total loss", proj["loss"], orig["total_loss"])
    rep.close(f"{tag} MLM logits", proj["mlm_logits"], orig["mlm_logits"])
    rep.close(f"{tag} MLM per-slot losses", proj["masked_lm_losses"], orig["mlm_per_example"])
    probs = 1.0 / (1.0 + np.exp(-proj["disc_logits"].astype(np.float64)))
    rep.close(f"{tag} disc logits", proj["disc_logits"], orig["disc_logits"])
    rep.close(f"{tag} disc probabilities", probs, orig["disc_probs"])
    mask = proj["_input_mask"].astype(np.float64)
    per_seq = (proj["disc_losses"] * mask).sum(-1) / (1e-6 + mask.sum(-1))
    rep.close(f"{tag} disc per-sequence losses", per_seq, orig["disc_per_example"])
    rep.exact(f"{tag} fake input ids", proj["fake_input_ids"], orig["fake_input_ids"])
    rep.exact(f"{tag} disc labels", proj["disc_labels"], orig["disc_labels"])
    _cloze(tag, proj, orig, rep)
    rep.close(f"{tag} learning rate at step {OPT_STEP}", proj["lr"], orig["lr"], rtol=1e-6)
    rep.close(f"{tag} lr train_update logged", proj["step_lr_fresh"], orig["lr"], rtol=1e-6)
    if orig["global_step_after_train_op"] != OPT_STEP + 1:
        rep.fail(f"{tag} original global_step", str(orig["global_step_after_train_op"]))


def _cloze(tag, proj, orig, rep):
    if "cloze_loss" in orig or "cloze_loss" in proj:  # Electric's two-tower generator
        if "cloze_loss" not in orig or "cloze_loss" not in proj:
            where = "the project" if "cloze_loss" in orig else "the original"
            rep.fail(f"{tag} cloze outputs", f"{where} has no two-tower cloze model")
        else:
            # The generator's training loss, over every masking candidate of the clean input.
            rep.close(f"{tag} cloze loss", proj["cloze_loss"], orig["cloze_loss"])
            real = proj["_input_mask"].astype(bool)
            rep.close(
                f"{tag} cloze logits (real tokens)",
                proj["cloze_logits"][real],
                orig["cloze_logits"][real],
            )
            # Padding positions: no loss reads them, and there the right-to-left tower's query
            # sees no key, so every score carries the attention mask's -10000 (float32 ulp
            # 2^-10 ~ 1e-3): both sides' softmax weights there are rounding at the 1e-3 level.
            rep.close(
                f"{tag} cloze logits (padding)",
                proj["cloze_logits"][~real], orig["cloze_logits"][~real], rtol=PADDING_CLOZE_RTOL,
            )  # fmt: skip
            rep.close(
                f"{tag} cloze per-position losses",
                proj["cloze_losses"] * orig["cloze_weights"],
                orig["cloze_per_position"] * orig["cloze_weights"],
            )
            rep.exact(
                f"{tag} cloze weights (candidates)", proj["cloze_weights"], orig["cloze_weights"]
            )


def _grad_scale(n, orig, np):
    """The scale a variable's gradient difference is compared at."""
    s = float(np.max(np.abs(orig["grads"][n])))
    if "/attention/self/query/" in n or "/attention/self/key/" in n:
        # Query and key weights get their gradient through the softmax only: the upstream
        # gradient (the attention output's, whose scale the value kernel's gradient shows)
        # times the softmax Jacobian. Where the scores barely move the loss (the top layer
        # here) that product is small and its rounding stays at the upstream scale; a key
        # bias's gradient is even 0 analytically (it shifts all of a query's scores
        # alike). So they are compared at the scale of their attention block's kernels.
        block = n[: n.index("/attention/self/")] + "/attention/self/"
        s = max(
            s,
            *(
                float(np.max(np.abs(orig["grads"][f"{block}{w}/kernel"])))
                for w in ("query", "key", "value")
            ),
        )
    return s


def _gradients_and_steps(tag, proj, orig, rep, args, np):
    """Gradients and post-step weights, per variable (gate) and per group (table)."""
    names = sorted(set(proj["names"]) & set(orig["names"]))
    groups = {}
    for n in names:
        gp, go = proj["grads"][n], orig["grads"][n]
        d = float(np.max(np.abs(gp.astype(np.float64) - go)))
        s = _grad_scale(n, orig, np)
        if not d <= args.rtol * s and not (d == 0.0):
            rep.failures.append(f"{tag} grad {n}: max|diff| {d:.3e} > {args.rtol:g} x {s:.3e}")
        per_var = rep.per_var
        per_var.setdefault(tag, {})[n] = {"grad_diff": d, "grad_scale": s}
        g = groups.setdefault(
            group_of(n), {"n": 0, "grad_diff": 0.0, "grad_scale": 0.0, "grad_rel": 0.0}
        )
        g["n"] += 1
        g["grad_diff"] = max(g["grad_diff"], d)
        g["grad_scale"] = max(g["grad_scale"], s)
        g["grad_rel"] = max(g["grad_rel"], d / s if s else (0.0 if d == 0 else float("inf")))
        for mode in ("fresh", "random_slots"):
            wp, wo, w0 = proj["post"][mode][n], orig["post"][mode][n], proj["w0"][n]
            d = float(np.max(np.abs(wp.astype(np.float64) - wo)))
            step = float(np.max(np.abs(wo.astype(np.float64) - w0)))
            per_var[tag][n][f"w_{mode}"] = d
            per_var[tag][n][f"upd_{mode}"] = step
            # An Adam step moves a weight by ~lr whatever its gradient; a variable whose update
            # is far below lr (a gradient at rounding level) is compared at the scale lr.
            if not d <= args.step_rtol * max(step, orig["lr"]):
                rep.failures.append(
                    f"{tag} post-step ({mode}) {n}: max|diff| {d:.3e} > {args.step_rtol:g} x "
                    f"max(max|update| {step:.3e}, lr {orig['lr']:.3e})"
                )
            g[f"w_{mode}"] = max(g.get(f"w_{mode}", 0.0), d)
            g[f"step_{mode}"] = max(g.get(f"step_{mode}", 0.0), step)
            g[f"wrel_{mode}"] = max(g.get(f"wrel_{mode}", 0.0), d / max(step, orig["lr"]))
    return groups


def _race(tag, proj, orig, rep, np):
    """The original's whole train op (informational): which step's learning rate it used."""
    names = sorted(set(proj["names"]) & set(orig["names"]))
    num = sum(
        float(np.abs(orig["post"]["train_op"][n].astype(np.float64) - proj["w0"][n]).sum())
        for n in names
    )
    den = sum(
        float(np.abs(orig["post"]["fresh"][n].astype(np.float64) - proj["w0"][n]).sum())
        for n in names
    )
    ratio = num / den if den else float("nan")
    diff_full = max(
        float(
            np.max(
                np.abs(orig["post"]["train_op"][n].astype(np.float64) - proj["post"]["fresh"][n])
            )
        )
        for n in names
    )
    rep.race[tag] = {
        "lr_k": orig["lr"],
        "effective_lr_train_op": ratio * orig["lr"],
        "lr_k_plus_1": orig["lr_next"],
        "max_abs_diff_project_vs_full_train_op": diff_full,
    }


def print_report(rep, all_groups, meta):
    log("\n== scalar / tensor checks (max abs diff; rel = diff / max|original|) ==")
    log(f"{'check':58s} {'max|diff|':>10s} {'max|ref|':>10s} {'rel/#bad':>10s}  ok")
    for label, diff, scale, rel, ok in rep.rows:
        rel_s = f"{rel:10d}" if isinstance(rel, int) else f"{rel:10.2e}"
        log(f"{label:58s} {diff:10.2e} {scale:10.2e} {rel_s}  {'ok' if ok else 'FAIL'}")
    for tag, groups in all_groups.items():
        log(f"\n== {tag}: gradients of the total loss and weights after one step, per group ==")
        log(
            f"{'group':26s} {'vars':>4s} {'grad diff':>10s} {'max|grad|':>10s} {'max rel':>9s} "
            f"{'w fresh':>9s} {'upd rel':>8s} {'w rndslot':>9s} {'upd rel':>8s}"
        )
        for name in sorted(groups):
            g = groups[name]
            log(
                f"{name:26s} {g['n']:4d} {g['grad_diff']:10.2e} {g['grad_scale']:10.2e} "
                f"{g['grad_rel']:9.1e} {g['w_fresh']:9.1e} {g['wrel_fresh']:8.1e} "
                f"{g['w_random_slots']:9.1e} {g['wrel_random_slots']:8.1e}"
            )
    log(
        "\n(per group, max over its variables: 'grad diff' max|project - original| of the "
        "gradient, 'max rel' that over the variable's max|gradient| (a key bias: its layer's key "
        "kernel's); 'w' max|project - original| of the weights after one step from fresh Adam "
        "slots / from random (identical) slots, 'upd rel' that over max(the variable's max|update|, lr))"
    )
    for tag, r in rep.race.items():
        log(
            f"{tag}: original create_optimizer train op (update + global_step increment in one "
            f"tf.group): effective lr {r['effective_lr_train_op']:.6g} vs lr(step {OPT_STEP}) "
            f"{r['lr_k']:.6g}, lr(step {OPT_STEP + 1}) {r['lr_k_plus_1']:.6g}; project (lr(step "
            f"{OPT_STEP})) vs that train op: max|diff| {r['max_abs_diff_project_vs_full_train_op']:.2e} "
            "(informational, not gated)"
        )
    for k, v in meta.items():
        log(f"{k}: {v}")
