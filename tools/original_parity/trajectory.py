"""Trajectory parity: many training steps of electra_tf next to the ORIGINAL google-research/electra.

    .venv/bin/python -m tools.original_parity.trajectory --mirror <git copy of google-research/electra>
        [--steps 1000] [--json out.json] [--csv per_step.csv] [--mutation NAME]

Both sides start from the same weights (the project's initial weights, every bias and LayerNorm
parameter moved by N(0, 0.02) so that they matter, exported with the project's converter and
restored into the original's graph with a TF1 Saver) and see the same fixed stream of
synthetic batches (`batch_at`: batch 4, length 32, two segments, padding, Zipf-distributed
tokens). At every step the project draws its masking and its generator samples
(`ElectraPretrainer`'s own RNG) and the original gets exactly those (original_side's
`project_draws`: its `pretrain_helpers.mask` / `sample_from_softmax` return the project's), so
the two runs differ only by how they compute.

- The project: `ElectraPretrainer(config, ...)`, the optimizer its training run builds
  (`build_optimizer`: AdamWeightDecay on the original's schedule), one `train_update` per step
  in a `tf.function` (the training loop's step); the losses are those of the step's forward pass
  on the step's draws (checked against what `train_update` logs).
- The original: its own `run_pretraining.PretrainingModel` and `optimization.create_optimizer`
  (warm-up times polynomial decay read from global_step, global-norm clipping at 1.0,
  AdamWeightDecayOptimizer without bias correction, decay skipped for LayerNorm/bias), its code
  unchanged under tf.compat.v1. Its train op groups the update with the global_step increment
  without ordering them (check.py's docstring); here the increment runs after the update
  (a control dependency), so step k uses the rate of step k on both sides.

Tolerance (the float32 drift rule). A second copy of the original runs the same steps with the
same draws, except that after the restore and after every update each of its weights is moved
by one float32 ulp in a random direction: rounding noise injected at every step. Its distance
from the unperturbed original, per step, is how far two float32 computations of the same
training drift apart (the original is the copy perturbed because it takes its samples fed; a
perturbed project would draw its own, and a sample flipped by a near-tie is a jump, not drift).
The band at step t is

    tol(t) = factor x max_{s <= t} drift(s) + floor

per quantity (each loss: |original - perturbed original|, floor --loss-rtol x |loss|; weights:
max |difference| over all weights, floor --weight-floor), factor --tol-factor (10). PARITY OK
needs, at every step, every loss deviation |project - original| and the max weight distance
inside their bands.

Resume: the project's run saves its training checkpoint (model with its RNG, optimizer with its
Adam slots and step counter: `TrainingCheckpoints`, as the training loop) after step N/2, a NEW
process (`--resume-child`) restores it and runs the remaining steps; its losses at every step
and its final weights must match the uninterrupted run's within the same band (the report says
whether they are bit-identical).

Exit status 0: PARITY OK; 1: a deviation beyond the band (a failing report); 2: usage errors.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from tools.original_parity.original_side import OriginalSide, import_original, install_shims
from tools.original_parity.project_side import ProjectSide
from tools.original_parity.runtime import (
    BASE_HPARAMS,
    BATCH,
    CLS,
    DEFAULT_MIRROR,
    REPO_ROOT,
    SEP,
    SEQ,
    VOCAB_SIZE,
    child_env,
    extract_original,
    log,
    resolve_mirror,
    setup_tf,
    write_vocab,
)
from tools.original_parity.trajectory_verdict import (  # noqa: F401 (re-exported)
    LOSSES,
    evaluate,
    max_distance,
    outside,
    report,
    running_max,
    tolerance_band,
    verdict_line,
    write_csv,
)

# Tiny shape: runtime.BASE_HPARAMS (disc 4 x 64, 4 heads, embedding 32, vocab 200, length 32,
# batch 4, dropout 0) with its B_proj generator (16 wide: its own embeddings_project).
GENERATOR_HIDDEN_SIZE = 0.25
DATA_SEED = 20_000


# ============================================================================ pure helpers
def hparams(steps: int, warmup: int | None = None) -> dict:
    """The run's hyperparameters (shared by both sides); the schedule spans the run."""
    hp = dict(BASE_HPARAMS)
    hp["model_hparam_overrides"] = dict(hp["model_hparam_overrides"])
    hp.update(
        generator_hidden_size=GENERATOR_HIDDEN_SIZE,
        num_train_steps=steps,
        num_warmup_steps=max(1, steps // 10) if warmup is None else warmup,
    )
    return hp


def batch_at(step: int, np, seed: int = DATA_SEED) -> dict:
    """The stream's batch for `step` (a pure function of both): [CLS] a [SEP] b [SEP] + padding,
    lengths 9..32, tokens Zipf-distributed over the 96 ordinary ids (so the losses can fall)."""
    rs = np.random.RandomState(seed + step)
    words = np.arange(104, VOCAB_SIZE)
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    B, S = BATCH, SEQ
    ids = np.zeros([B, S], np.int32)
    mask = np.zeros([B, S], np.int32)
    seg = np.zeros([B, S], np.int32)
    for b in range(B):
        n = S if b == 0 else int(rs.randint(9, S + 1))
        len_a = (n - 3) // 2
        len_b = n - 3 - len_a
        a = rs.choice(words, size=len_a, p=p)
        bb = rs.choice(words, size=len_b, p=p)
        ids[b, :n] = [CLS, *a, SEP, *bb, SEP]
        mask[b, :n] = 1
        seg[b, len_a + 2 : n] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": seg}


def resume_child(args) -> int:
    """In a new process: restore the project's checkpoint, run the remaining steps, save the
    per-step losses and the final weights to --out (npz)."""
    np, tf = setup_tf(args.threads, args.gpu)
    if args.mutation:
        from tools.original_parity import mutations

        mutations.apply(args.mutation)
    workdir = os.path.dirname(args.resume_child.rstrip("/"))
    project = ProjectSide(hparams(args.steps, args.warmup), workdir, tf)
    path = project.checkpoints(args.resume_child).restore_latest()
    start = int(project.optimizer.iterations.numpy())
    losses = {name: [] for name in LOSSES}
    for t in range(start, args.steps):
        res = project.step(batch_at(t, np))
        for name in LOSSES:
            losses[name].append(res[name])
    w = project.weights()
    np.savez(
        args.out,
        start=start,
        restored=path,
        **{f"loss_{k}": np.array(v) for k, v in losses.items()},
        **{f"w/{n}": w[n] for n in w},
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--mirror",
        default=DEFAULT_MIRROR,
        help="git copy of google-research/electra (default $ELECTRA_ORIGINAL_MIRROR)",
    )
    p.add_argument("--rev", default="HEAD")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--warmup", type=int, help="warm-up steps (default steps // 10)")
    p.add_argument(
        "--tol-factor", type=float, default=10.0, help="band = factor x running max drift + floor"
    )
    p.add_argument(
        "--loss-rtol", type=float, default=1e-5, help="loss band floor, relative to the loss"
    )
    p.add_argument("--weight-floor", type=float, default=1e-6, help="weight band floor (absolute)")
    p.add_argument("--no-resume", action="store_true", help="skip the checkpoint/resume leg")
    p.add_argument(
        "--mutation", help="inject one of mutations.ALL into the project side (mutations.py)"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--print-every", type=int, help="table rows (default: 20 rows)")
    p.add_argument("--json", help="write the per-step curves and the verdict here")
    p.add_argument("--csv", help="write the per-step table here")
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--resume-child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.steps < 2:
        p.error("--steps must be at least 2")
    if args.mutation:
        from tools.original_parity import mutations

        if args.mutation not in mutations.ALL:
            p.error(f"--mutation: {args.mutation!r} is not one of {', '.join(mutations.ALL)}")
    if args.resume_child:
        return resume_child(args)
    mirror = resolve_mirror(args.mirror)  # SystemExit naming how to get one
    t_start = time.time()
    np, tf = setup_tf(args.threads, args.gpu)
    if args.mutation:
        from tools.original_parity import mutations

        mutations.apply(args.mutation)
    tmp = tempfile.mkdtemp(prefix="electra_trajectory_")
    try:
        result = _run(args, mirror, tmp, t_start, np, tf)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report(result, args.tol_factor)


def _sides(args, orig, workdir, hp, np, tf):
    """The project and the original (and its perturbed copy) from the same initial weights;
    the distance of the original's restored weights from the project's."""
    import electra_tf

    project = ProjectSide(hp, workdir, tf)
    project.perturb_initial_weights(np)
    w_init = project.weights()
    export_dir = os.path.join(workdir, "init_original")
    electra_tf.save_weights(project.model, export_dir, "original", global_step=0)
    prefix = os.path.join(export_dir, "model.ckpt-0")
    original = OriginalSide(orig, hp, workdir, prefix, args.threads)
    reference = OriginalSide(orig, hp, workdir, prefix, args.threads, perturb_seed=777)
    w0 = original.weights()
    if set(w0) != set(w_init):
        raise SystemExit(f"ERROR: variable names differ: {sorted(set(w0) ^ set(w_init))[:8]}")
    return project, original, reference, max_distance(w_init, w0, np)


def _loop(args, hp, commit, sides, ckpt_dir, np):
    """Every step on both sides; the per-step curves, problems and time split."""
    project, original, reference = sides
    half = args.steps // 2
    curves = {f"{side}_{n}": [] for side in ("project", "original", "reference") for n in LOSSES}
    curves.update(weight_distance=[], reference_weight_distance=[], lr_project=[], lr_original=[])
    problems = []
    print_every = args.print_every or max(1, args.steps // 20)
    log(f"trajectory: {args.steps} steps, warm-up {hp['num_warmup_steps']}, peak lr {hp['learning_rate']:g}, "
        f"original google-research/electra {commit[:12]}, mutation {args.mutation or 'none'}")  # fmt: skip
    log(f"{'step':>5s} {'lr':>9s} | {'total P':>10s} {'total O':>10s} {'|dP-O|':>8s} | {'gen P':>8s} {'gen O':>8s} "
        f"{'|dP-O|':>8s} | {'disc P':>8s} {'disc O':>8s} {'|dP-O|':>8s} | {'w dist':>8s} {'w drift':>8s}")  # fmt: skip
    split = {"project": 0.0, "original": 0.0, "weights": 0.0}
    for t in range(args.steps):
        batch = batch_at(t, np)
        t0 = time.time()
        pr = project.step(batch)
        t1 = time.time()
        draws = {k: pr[k] for k in original.draws}
        orr = original.step(batch, draws)
        rr = reference.step(batch, draws)
        t2 = time.time()
        split["project"] += t1 - t0
        split["original"] += t2 - t1
        if not abs(pr["logged_loss"] - pr["total"]) <= 1e-5 * abs(pr["total"]):
            problems.append(
                f"step {t}: train_update logged loss {pr['logged_loss']} != its forward's {pr['total']}"
            )
        wp, wo, wr = project.weights(), original.weights(), reference.weights()
        for n in LOSSES:
            curves[f"project_{n}"].append(pr[n])
            curves[f"original_{n}"].append(orr[n])
            curves[f"reference_{n}"].append(rr[n])
        curves["weight_distance"].append(max_distance(wp, wo, np))
        curves["reference_weight_distance"].append(max_distance(wr, wo, np))
        split["weights"] += time.time() - t2
        curves["lr_project"].append(pr["lr"])
        curves["lr_original"].append(orr["lr"])
        if t % print_every == 0 or t == args.steps - 1:
            log(f"{t:5d} {orr['lr']:9.3e} | {pr['total']:10.5f} {orr['total']:10.5f} {abs(pr['total'] - orr['total']):8.1e} | "
                f"{pr['generator']:8.5f} {orr['generator']:8.5f} {abs(pr['generator'] - orr['generator']):8.1e} | "
                f"{pr['discriminator']:8.5f} {orr['discriminator']:8.5f} {abs(pr['discriminator'] - orr['discriminator']):8.1e} | "
                f"{curves['weight_distance'][-1]:8.1e} {curves['reference_weight_distance'][-1]:8.1e}")  # fmt: skip
        if t + 1 == half and not args.no_resume:
            project.checkpoints(ckpt_dir).save(half)
    return curves, problems, split


def _run(args, mirror, tmp, t_start, np, tf) -> dict:
    """Both sides for --steps, the resume leg; the verdict's result (logged, and --json/--csv)."""
    orig_dir = os.path.join(tmp, "electra_original")
    commit = extract_original(mirror, args.rev, orig_dir)
    shims = install_shims(tf)
    orig = import_original(orig_dir)
    workdir = os.path.join(tmp, "run")
    os.makedirs(workdir)
    write_vocab(os.path.join(workdir, "vocab.txt"))
    hp = hparams(args.steps, args.warmup)
    project, original, reference, init_distance = _sides(args, orig, workdir, hp, np, tf)
    half = args.steps // 2
    ckpt_dir = os.path.join(workdir, "project_ckpt")
    t_loop = time.time()
    curves, problems, split = _loop(args, hp, commit, (project, original, reference), ckpt_dir, np)
    loop_s = time.time() - t_loop
    result = evaluate(curves, args.tol_factor, args.loss_rtol, args.weight_floor)
    lr_diff = max(
        abs(a - b) for a, b in zip(curves["lr_project"], curves["lr_original"], strict=True)
    )
    if not lr_diff <= 1e-6 * hp["learning_rate"]:
        result["failures"].append(
            f"learning rate: max|project - original| {lr_diff:.3e} over the run"
        )
    if init_distance != 0.0:
        result["failures"].append(f"initial weights differ by {init_distance:.3e} after the export")
    result["failures"] += problems

    resume = None
    if not args.no_resume:
        resume = run_resume_child(args, ckpt_dir, half, curves, result, project.weights(), np)
        result["failures"] += resume["failures"]
    # Per-step table.
    if args.csv:
        write_csv(args.csv, curves, result)
    meta = {
        "original": f"google-research/electra {commit}",
        "tensorflow": tf.__version__,
        "steps": args.steps,
        "warmup": hp["num_warmup_steps"],
        "mutation": args.mutation,
        "loop_seconds": round(loop_s, 1),
        "seconds_per_step": round(loop_s / args.steps, 4),
        "total_seconds": round(time.time() - t_start, 1),
        "shims": shims,
    }
    if resume:
        meta["resume"] = {k: v for k, v in resume.items() if k != "failures"}
    _log_summary(args, lr_diff, resume, half, loop_s, split, meta)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"verdict": verdict_line(result, args.tol_factor), "failures": result["failures"],
                       "curves": curves, "bands": result["bands"], "meta": meta}, f, indent=1)  # fmt: skip
    return result


def _log_summary(args, lr_diff, resume, half, loop_s, split, meta) -> None:
    log(f"\nlearning rate: max|project - original| {lr_diff:.2e} over the run")
    if resume:
        log(f"resume: checkpoint after step {half}, {args.steps - half} steps in a new process "
            f"({resume['child_seconds']:.0f} s): max loss deviation from the uninterrupted run "
            f"{resume['max_loss_deviation']:.3e}, final weights {resume['final_weight_distance']:.3e} "
            f"({'bit-identical' if resume['bit_identical'] else 'not bit-identical'})")  # fmt: skip
    log(f"time: {loop_s:.0f} s for {args.steps} steps ({1000 * loop_s / args.steps:.0f} ms/step: project, "
        f"original and perturbed original), {meta['total_seconds']:.0f} s in all; per step: "
        + ", ".join(f"{k} {1000 * v / args.steps:.0f} ms" for k, v in split.items()))  # fmt: skip


def run_resume_child(args, ckpt_dir, half, curves, result, final_weights, np) -> dict:
    out = os.path.join(ckpt_dir, "child.npz")
    cmd = [sys.executable, "-m", "tools.original_parity.trajectory", "--resume-child", ckpt_dir,
           "--out", out, "--steps", str(args.steps), "--threads", str(args.threads)]  # fmt: skip
    if args.warmup is not None:
        cmd += ["--warmup", str(args.warmup)]
    if args.mutation:
        cmd += ["--mutation", args.mutation]
    if args.gpu:
        cmd += ["--gpu"]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True)
    res = {"child_seconds": time.time() - t0, "failures": [], "max_loss_deviation": float("nan"),
           "final_weight_distance": float("nan"), "bit_identical": False}  # fmt: skip
    if r.returncode != 0:
        res["failures"].append(
            f"resume: the child process failed (exit {r.returncode}): {r.stderr.strip()[-800:]}"
        )
        return res
    data = np.load(out)
    if int(data["start"]) != half:
        res["failures"].append(f"resume: restored step {int(data['start'])}, expected {half}")
        return res
    worst, identical = 0.0, True
    for name in LOSSES:
        got = data[f"loss_{name}"]
        ref = curves[f"project_{name}"][half:]
        band = result["bands"][name][half:]
        dev = [abs(float(a) - b) for a, b in zip(got, ref, strict=True)]
        identical &= all(d == 0.0 for d in dev)
        worst = max(worst, max(dev, default=0.0))
        bad = [i for i, d in enumerate(dev) if not d <= band[i]]
        if bad:
            i = bad[0]
            res["failures"].append(
                f"resume: {name} loss at step {half + i}: resumed {float(got[i]):.6f} vs uninterrupted {ref[i]:.6f} (tol {band[i]:.2e})"
            )
    wd = max(
        float(np.max(np.abs(data[f"w/{n}"].astype(np.float64) - final_weights[n])))
        for n in final_weights
    )
    identical &= wd == 0.0
    if not wd <= result["bands"]["weights"][-1]:
        res["failures"].append(
            f"resume: final weights differ from the uninterrupted run's by {wd:.3e}"
        )
    res.update(max_loss_deviation=worst, final_weight_distance=wd, bit_identical=identical)
    return res


if __name__ == "__main__":
    sys.exit(main())
