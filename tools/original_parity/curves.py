"""Curve parity: learning curves of electra_tf and of the ORIGINAL google-research/electra, each
with its OWN randomness, on real text.

    .venv/bin/python -m tools.original_parity.curves --mirror <git copy of google-research/electra>
        --data-dir data/default [--seeds 3] [--steps 2000] [--json out.json] [--csv out.csv]
        [--png out.png (default: beside --json)] [--runs-dir DIR [--report-only]]
        [--mutation NAME] [--original-from earlier.json] [--jobs 1]

check.py and trajectory.py feed the original the PROJECT's masks and samples, so they cannot see
a bug in how those are drawn (a masking rate, the [MASK] share, the sampler's noise). Here
nothing is shared but the data and the hyperparameters:

- the original: its whole pre-training graph under tf.compat.v1, unchanged (original_side's shims):
  its input function and feature parsing (`pretrain_data.get_input_fn`, reading the TFRecords),
  `run_pretraining.PretrainingModel` with its own dynamic masking (`pretrain_helpers.mask`),
  Gumbel sampling and losses, `optimization.create_optimizer` (warm-up x linear decay, clipping,
  AdamWeightDecay; its train op as `model_fn_builder` makes it), its own initializers, dropout
  and graph seed (`tf.set_random_seed(seed)`);
- the project: its training run's pieces (`build_model`, `build_optimizer`, the compiled
  `make_train_function` over `ElectraPretrainer.train_update`, `make_dataset`), seeded with
  `seed` (config and Keras), its own masking, sampling, initializers and dropout;

`--seeds` runs per side (each in its own process), the same tiny shape, batch, learning rate,
warm-up and schedule (see `hparams`). Dropout is the default 0.1 on both sides: each side runs as
it normally trains, and dropout is part of the randomness being compared.

Every `--every` (100) steps both sides are scored on one FIXED held-out set: the first
EVAL_BATCHES x EVAL_BATCH records of `<data-dir>/eval_tfrecords`, masked ONCE by the original's
own `pretrain_helpers.mask` (graph seed EVAL_SEED; the same positions and [MASK]s for every
run and step), with the generator's Gumbel noise fixed too (uniform draws from EVAL_SEED, fed to
the original's `sample_from_softmax` and to the project's `gumbel_sample`). So the differences
between evaluations are the weights', not the draw's. Metrics (`eval_metrics`, the original's
`metric_fn` definitions, computed in numpy from each side's raw outputs; on the original's side
its own metric_fn is run too and must agree): total loss (mean over the batches), generator
masked-LM accuracy, discriminator accuracy, discriminator AUC (tf.metrics.auc: 200 thresholds,
padding counted as negatives scored 0).

Band rule (`band_check`), per metric and step: with m_O, m_P the means over seeds and s_O, s_P
the seed standard deviations, the project's mean is inside when it lies in the original's seed
range [min_O, max_O] OR within k x SE of m_O, SE = sqrt(s_O^2/n_O + s_P^2/n_P) the standard
error of the DIFFERENCE of the two means (k = --k, 3). The verdict (`verdict`): CURVES OK when,
for every metric, at most --max-outside (half) of the sample points are outside. Why not the
original's SE alone and not every point: with 3 seeds per side and identical distributions, a
3-seed mean of the project falls outside [min_O, max_O] or 2 SE of the original's mean at
29% of points (simulated), and seed effects persist along a curve; see docs/parity.md.

Exit status 0: CURVES OK; 1: CURVES FAILED; 2: usage errors.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from electra_tf.runtime import atomic_io
from tools.original_parity.curves_metrics import (  # noqa: F401 (re-exported)
    EXTRA_METRICS,
    METRICS,
    ORIGINAL_EVAL_KEYS,
    auc_thresholded,
    band_check,
    calibrate,
    eval_metrics,
    simulated_seeds,
    summary_lines,
    table_lines,
    verdict,
    write_csv,
)
from tools.original_parity.curves_runs import (  # noqa: F401 (re-exported)
    EVAL_BATCH,
    EVAL_BATCHES,
    EVAL_SEED,
    MUTATIONS,
    apply_mutation,
    max_predictions,
    prepare_eval_set,
    run_original,
    run_project,
)
from tools.original_parity.runtime import (
    BASE_HPARAMS,
    DEFAULT_MIRROR,
    REPO_ROOT,
    child_env,
    log,
    resolve_mirror,
)

DEFAULT_DATA_DIR = "data/default"


# ============================================================================ pure helpers
def hparams(steps: int, batch: int, warmup: int | None = None, vocab_size: int = 30522) -> dict:
    """Both sides' hyperparameters: trajectory.py's tiny model (discriminator 4 x 64, 4 heads,
    embedding 32, generator 16 wide with its projection, 2 layers) on the default corpus'
    vocabulary and sequence length, default dropout, the schedule spanning the run."""
    hp = dict(BASE_HPARAMS)
    hp["model_hparam_overrides"] = {
        k: v for k, v in hp["model_hparam_overrides"].items() if not k.endswith("dropout_prob")
    }
    hp.update(
        vocab_size=vocab_size,
        max_seq_length=128,
        generator_hidden_size=0.25,
        train_batch_size=batch,
        num_train_steps=steps,
        num_warmup_steps=max(1, steps // 10) if warmup is None else warmup,
    )
    return hp


# ============================================================================ orchestration
def vocab_size_of(data_dir: str) -> int:
    with open(os.path.join(data_dir, "vocab.txt"), encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def check_data_dir(data_dir: str) -> None:
    needed = ["vocab.txt", "pretrain_tfrecords", "eval_tfrecords"]
    missing = [n for n in needed if not os.path.exists(os.path.join(data_dir, n))]
    if missing:
        raise SystemExit(
            f"ERROR: {data_dir}: no {', '.join(missing)}; build the default corpus with "
            f"`make default-data` (python data_prep/build_default_corpus.py --data-dir "
            f"{DEFAULT_DATA_DIR}) or pass --data-dir"
        )


def _child_cmd(args, role: str, seed: int, out: str, mutation: str | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "tools.original_parity.curves", "--child", role,
           "--seed", str(seed), "--out", out, "--mirror", args.mirror, "--rev", args.rev,
           "--data-dir", args.data_dir, "--steps", str(args.steps), "--every", str(args.every),
           "--batch", str(args.batch), "--threads", str(args.threads),
           "--eval-set", args.eval_set, "--workdir", args.workdir]  # fmt: skip
    if args.warmup is not None:
        cmd += ["--warmup", str(args.warmup)]
    if mutation:
        cmd += ["--mutation", mutation]
    if role == "project":
        cmd += ["--project-precision", args.project_precision]
    return cmd


def run_children(args, jobs: list[tuple]) -> list[dict]:
    """Each (side, seed, mutation) in its own process, --jobs at a time; their results."""
    pending, running, results = list(jobs), [], []
    while pending or running:
        while pending and len(running) < args.jobs:
            side, seed, mutation = pending.pop(0)
            out = os.path.join(args.runs_dir, f"{side}_{mutation or 'clean'}_seed{seed}.json")
            cmd = _child_cmd(args, side, seed, out, mutation)
            proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=child_env())
            running.append((proc, side, seed, out))
        time.sleep(1.0)
        for item in list(running):
            proc, side, seed, out = item
            if proc.poll() is None:
                continue
            running.remove(item)
            if proc.returncode != 0:
                for other in running:
                    other[0].kill()
                raise SystemExit(
                    f"ERROR: the {side} run with seed {seed} failed (exit {proc.returncode})"
                )
            with open(out, encoding="utf-8") as f:
                results.append(json.load(f))
    return results


def child_main(args) -> int:
    hp = hparams(args.steps, args.batch, args.warmup, vocab_size_of(args.data_dir))
    if args.child == "prepare":
        prepare_eval_set(args, hp, args.out)
        return 0
    if args.child == "original":
        run_original(args, hp)
    else:
        run_project(args, hp)
    return 0


def load_runs(runs_dir: str) -> list[dict]:
    """The runs' curves in `runs_dir`, cut to the sample steps that every run has reached
    (runs still going, or stopped, leave their curve so far)."""
    runs = []
    for name in sorted(os.listdir(runs_dir)):
        if name.endswith(".json"):
            with open(os.path.join(runs_dir, name), encoding="utf-8") as f:
                run = json.load(f)
            # Other JSON there (the report, when --json points into --runs-dir) is not a run.
            if isinstance(run, dict) and {"side", "steps", "values"} <= run.keys():
                runs.append(run)
    if not runs:
        raise SystemExit(f"ERROR: no run results (*.json) in {runs_dir}")
    points = min(len(r["steps"]) for r in runs)
    for r in runs:
        r["steps"] = r["steps"][:points]
        r["values"] = {k: v[:points] for k, v in r["values"].items()}
    return runs


def execute(args, hp: dict, previous: dict | None) -> list[dict]:
    """Prepares the eval set, runs every (side, seed, mutation) child; their results."""
    args.workdir = tempfile.mkdtemp(prefix="electra_curves_")
    args.runs_dir = os.path.abspath(args.runs_dir or args.workdir)
    os.makedirs(args.runs_dir, exist_ok=True)
    try:
        args.eval_set = os.path.join(args.workdir, "eval_set.npz")
        r = subprocess.run(_child_cmd(args, "prepare", 0, args.eval_set), cwd=REPO_ROOT,
                           env=child_env())  # fmt: skip
        if r.returncode != 0:
            raise SystemExit("ERROR: preparing the evaluation set failed")
        log(
            f"curves: {args.seeds} seed(s) per side, {args.steps} steps (warm-up "
            f"{hp['num_warmup_steps']}), batch {args.batch} x {hp['max_seq_length']}, eval every "
            f"{args.every} on {EVAL_BATCHES} x {EVAL_BATCH} held-out records, mutation "
            f"{args.mutation or 'none'}"
            + (f", also under {', '.join(args.also_mutation)}" if args.also_mutation else "")
        )
        seeds = range(1, args.seeds + 1)
        jobs = [("original", s, None) for s in seeds] if previous is None else []
        for mutation in [args.mutation, *args.also_mutation]:
            jobs += [("project", s, mutation) for s in seeds]
        runs = run_children(args, jobs)
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    if previous is not None:
        runs += [r for r in previous["runs"] if r["side"] == "original"]
    return runs


def collect(runs: list[dict], mutation: str | None = None) -> tuple[dict, list[int]]:
    """{"original"|"project": {metric: [seeds][points]}} (the project's runs under `mutation`)
    and the sample steps (which must agree)."""
    curves = {"original": {}, "project": {}}
    steps = None
    for run in sorted(runs, key=lambda r: (r["side"], r["seed"])):
        if run["side"] == "project" and run.get("mutation") != mutation:
            continue
        if steps is None:
            steps = run["steps"]
        elif run["steps"] != steps:
            raise SystemExit(f"ERROR: the {run['side']} seed {run['seed']} run sampled other steps")
        for name in METRICS + EXTRA_METRICS:
            curves[run["side"]].setdefault(name, []).append(run["values"][name])
    for side, runs_of_side in curves.items():
        if not runs_of_side:  # e.g. --report-only before the first project run has a point
            under = f" under {mutation}" if side == "project" and mutation else ""
            raise SystemExit(f"ERROR: no {side} run{under} among the runs to compare")
    return curves, steps or []


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--mirror", default=DEFAULT_MIRROR,
                   help="git copy of google-research/electra (default $ELECTRA_ORIGINAL_MIRROR)")  # fmt: skip
    p.add_argument("--rev", default="HEAD")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="vocab.txt, pretrain_tfrecords/, eval_tfrecords/ (make default-data)")  # fmt: skip
    p.add_argument("--seeds", type=int, default=3, help="runs per side")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--every", type=int, default=100, help="evaluate every N steps")
    p.add_argument("--batch", type=int, default=4, help="training batch size (both sides)")
    p.add_argument("--warmup", type=int, help="warm-up steps (default steps // 10)")
    p.add_argument("--k", type=float, default=3.0, help="band: original mean +- k x SE")
    p.add_argument("--max-outside", type=float, default=0.5,
                   help="fraction of a metric's points allowed outside the band")  # fmt: skip
    names = ", ".join(MUTATIONS) + " or one of mutations.py's"
    p.add_argument("--mutation", help=f"inject a bug into the project side: {names}")
    p.add_argument("--project-precision", default="float32",
                   choices=("float32", "mixed_bfloat16", "mixed_float16"),
                   help="the project side's precision (the original's is float32): with "
                        "mixed_bfloat16, whether bf16 training stays in float32's band")  # fmt: skip
    p.add_argument("--also-mutation", action="append", default=[],
                   help="also run the project under this bug (repeatable) and report whether "
                   "the band check catches it; the exit status stays the clean run's")  # fmt: skip
    p.add_argument("--original-from", help="reuse the original's runs from an earlier --json")
    p.add_argument("--runs-dir", help="keep each run's curves here (default: a temporary dir)")
    p.add_argument("--report-only", action="store_true",
                   help="no runs: the report from the runs already in --runs-dir")  # fmt: skip
    p.add_argument("--jobs", type=int, default=1, help="runs at once")
    p.add_argument("--threads", type=int, default=1, help="TensorFlow threads per run")
    p.add_argument("--json", help="write every curve, band and the verdict here")
    p.add_argument("--csv", help="write one row per metric and sample step here")
    p.add_argument("--png", help="draw the curves here (default: beside --json, as .png)")
    p.add_argument("--print-every", type=int, default=5, help="table: every n-th sample point")
    p.add_argument("--calibrate", action="store_true",
                   help="only simulate the band rule on seeds from one distribution (no mirror)")  # fmt: skip
    for hidden in ("--child", "--out", "--eval-set", "--workdir"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    problem = atomic_io.make_parents(args.json, args.csv, args.png)
    if problem:
        p.error(problem)
    if args.child:
        return child_main(args)
    if args.calibrate:
        for key, value in calibrate(k=args.k, max_outside=args.max_outside).items():
            log(f"{key}: {value:.1%}")
        return 0
    _check_arguments(p, args)
    if not args.report_only:  # a report from finished runs needs no copy of the original
        args.mirror = resolve_mirror(args.mirror)
    check_data_dir(args.data_dir)
    args.data_dir = os.path.abspath(args.data_dir)
    hp = hparams(args.steps, args.batch, args.warmup, vocab_size_of(args.data_dir))
    previous = None
    if args.original_from:
        with open(args.original_from, encoding="utf-8") as f:
            previous = json.load(f)
        if previous["meta"]["hparams"] != json.loads(json.dumps(hp)):
            raise SystemExit(f"ERROR: {args.original_from} was run with other hyperparameters")
    t0 = time.time()
    if args.report_only:
        if not args.runs_dir:
            p.error("--report-only needs --runs-dir")
        runs = load_runs(args.runs_dir)
    else:
        runs = execute(args, hp, previous)
    return _report(args, hp, runs, t0)


def _check_arguments(p, args) -> None:
    if args.steps < 1 or args.every < 1 or args.seeds < 1 or args.jobs < 1:
        p.error("--steps, --every, --seeds and --jobs must be at least 1")
    from tools.original_parity import mutations

    for name in filter(None, [args.mutation, *args.also_mutation]):
        if name not in MUTATIONS and name not in mutations.ALL:
            p.error(f"--mutation: {name!r} is not one of {', '.join([*MUTATIONS, *mutations.ALL])}")


def _report(args, hp: dict, runs: list[dict], t0: float) -> int:
    """The comparison of the runs (and of each --also-mutation's), printed, written to --json,
    --csv and the picture; the exit status."""
    curves, steps = collect(runs, args.mutation)
    result = verdict(curves, steps, args.k, args.max_outside)
    partial = not all(r.get("complete", True) for r in runs)
    log("\n" + "\n".join(table_lines(result, args.print_every)))
    log("(original mean +- half the band width, project mean; * outside the band)\n")
    log("\n".join(summary_lines(result)))
    line = _verdict_line(result, args)
    if partial:
        line += (
            f" [PARTIAL: the runs compared up to step {steps[-1] if steps else 0} of {args.steps}]"
        )
    extra = _also_mutations(args, runs, steps, partial)
    meta = {
        "hparams": hp, "seeds": args.seeds, "k": args.k, "max_outside": args.max_outside,
        "mutation": args.mutation, "eval": f"{EVAL_BATCHES} x {EVAL_BATCH} records",
        "partial": partial,
        "seconds": round(time.time() - t0, 1),
        "cpu_seconds": {f"{r['side']}_{r.get('mutation') or 'clean'}_{r['seed']}": r["cpu_seconds"] for r in runs},
    }  # fmt: skip
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"verdict": line, "failures": result["failures"], "steps": steps,
                       "curves": curves, "bands": result["bands"], "runs": runs,
                       "also_mutations": extra, "meta": meta}, f, indent=1)  # fmt: skip
    if args.csv:
        write_csv(args.csv, result, curves)
    from electra_tf.evaluation import plots

    png = plots.png_path(args.png, args.json)
    if png:
        draw(png, result, curves, extra, line, args.mutation)
        log(f"picture: {png}")
    log("")
    for failure in result["failures"]:
        log(f"  - {failure}")
    log(line)
    log(f"time: {meta['seconds']:.0f} s")
    return 1 if result["failures"] else 0


def _also_mutations(args, runs, steps, partial) -> dict:
    """Each --also-mutation's comparison with the clean original's band, printed: caught or not."""
    from tools.original_parity import mutations

    extra = {}
    for mutation in args.also_mutation:
        m_curves, _ = collect(runs, mutation)
        m_result = verdict(m_curves, steps, args.k, args.max_outside)
        caught = "caught" if m_result["failures"] else "NOT caught"
        m_line = f"{caught}: {_verdict_line(m_result, args)}"
        if partial:
            m_line += f" [PARTIAL: up to step {steps[-1] if steps else 0} of {args.steps}]"
        extra[mutation] = {"verdict": m_line,
                           "failures": m_result["failures"], "curves": m_curves["project"],
                           "bands": m_result["bands"]}  # fmt: skip
        log(f"\nmutation {mutation} ({MUTATIONS.get(mutation) or mutations.ALL[mutation]}):")
        log("\n".join(table_lines(m_result, args.print_every)))
        log("\n".join(summary_lines(m_result)))
        log(f"mutation {mutation}: {extra[mutation]['verdict']}")
    return extra


def draw(
    path: str, result: dict, curves: dict, extra: dict, line: str, mutation: str | None
) -> None:
    """The curves as a PNG (`plots.curve_parity`): the verdict, the points outside and each
    --also-mutation's outcome as its title; the mutated runs in colours of their own."""
    from electra_tf.evaluation import plots

    outside = sum(band["outside"] for band in result["bands"].values())
    points = len(result["steps"]) * len(result["bands"])
    title = f"{line.split(' (')[0]}: {outside} of {points} points outside the original's band"
    if "[PARTIAL" in line:
        title += " [" + line.split(" [PARTIAL: ")[1]
    project = f"electra-tf under {mutation}" if mutation else "electra-tf"
    for name, m in extra.items():
        title += f"; {name}: {m['verdict'].split(':')[0]}"
    mutated = [(f"electra-tf under {name}", m["curves"]) for name, m in extra.items()]
    plots.curve_parity(path, result["steps"], curves["original"], curves["project"],
                       result["bands"], mutated, project, title)  # fmt: skip


def _verdict_line(result: dict, args) -> str:
    rule = (
        f"band: original seed range or mean +- {args.k:g} SE of the difference; at most "
        f"{args.max_outside:g} of the points outside per metric"
    )
    if result["failures"]:
        return f"CURVES FAILED ({len(result['failures'])} metric(s); {rule})"
    return f"CURVES OK ({rule})"


if __name__ == "__main__":
    sys.exit(main())
