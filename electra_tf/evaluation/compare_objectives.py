"""Pre-training objectives at equal wall time, then SST-2 from each (`make compare-objectives`).

    python -m electra_tf.evaluation.compare_objectives --data-dir data/g64 --preset gutenberg \\
        --objectives electra,electra_15,replace_mlm,all_tokens_mlm,bert_mlm,electric \\
        --minutes 45 --parallel 2 --warmup 0.125 --glue-dir data/glue/SST-2 \\
        --hparams '{"max_seq_length": 64, "eval_tfrecords": "data/g64/tfrecords-heldout/*"}'

An objective is a file `configs/ablations/<name>.json`. Every objective runs on the same data,
the same `--preset` and the same `--hparams` (shared overrides; objective keys and the step
counts are refused there) and gets the same wall-time budget, `--minutes`:

1. Pilot (`electra_tf.evaluation.pilot`): a fresh process per objective, launched exactly as its
   run will be (same core pinning, thread settings and neighbour), measures the start-up
   (launch to the end of the first step: imports, model build, graph tracing) and the seconds
   per step over `--pilot-steps` steps after `--pilot-warmup` warm-up steps.
2. Plan, the rule: num_train_steps = floor((budget - start-up) / seconds per step), so the
   whole learning-rate schedule (warm-up, then decay to 0) fits the budget. Checkpoint saves
   are not counted: the measured wall time shows what they cost. `--warmup F` with 0 < F < 1
   gives each objective round(F x its steps) warm-up steps (the same share of every schedule);
   `--warmup N` (an integer) gives N to all; without it the preset's `num_warmup_steps` stays.
   Refused: a budget not longer than the pilot itself, or a warm-up as long as the run.
   `--max-steps` caps the steps (a smoke test; the table marks capped rows).
3. Runs: `python -m electra_tf.pretrain`, one objective after another, or `--parallel 2` two
   at a time, each pinned to its own core (`taskset`) with one TensorFlow thread: the machine
   then gives both the same share (docs/pretraining-at-small-scale.md). A
   group's runs start together; the next group starts when both have ended.
4. `python -m electra_tf.pretrain` with do_eval on each final checkpoint (`--no-eval` skips
   it): held-out metrics when the shared hparams set `eval_tfrecords`, training-data metrics
   otherwise (the report says which).
5. SST-2 (`electra_tf.evaluation.sst2_transfer`, unchanged protocol): one row per final discriminator, plus a
   random initialisation of the same shape; the same lr sweep, seeds and sentences for all.
   With `--parallel 2`, two rows at a time (`sst2_transfer --jobs 2`), each run pinned to
   one of the same cores with one TensorFlow thread.
6. `OUT/results.md` and `OUT/results.json`: steps, tokens, the measured wall time, held-out
   metrics, lr chosen, dev accuracy per seed and median, the command, and where the ordering
   differs from the paper's Table 5.

Everything lives under `--out` (default `<data-dir>/compare_objectives`): plan.json, pilots/,
hparams/ (each run's exact `--hparams` file), logs/, pretrain/<objective>/ (model dirs),
runs/<objective>.json (wall-time segments), sst2/, results.*. Run the same command again to
resume: pilots and the plan are kept (a run resumed with a new plan would change its lr
schedule midway), finished runs, evaluations and fine-tuning runs are skipped, and an
interrupted run resumes from its last checkpoint (its wall time is the sum of its segments).
Ctrl-C stops every run after saving. Another budget, preset or hparams needs another --out.

`--quick`: a smoke run of the command (pilot 1 + 3 steps; SST-2 with one lr, one seed, 32
training and 8 validation sentences, one epoch): its numbers say nothing about the objectives.
`--in-process` runs every step inside this process, unpinned (for tests: no interpreter start
per step); its timings are not a fair comparison.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from electra_tf.config import ConfigError, load_preset, parse_hparams
from electra_tf.evaluation import report as compare_report
from electra_tf.evaluation.comparison import (  # noqa: F401 (importable from here)
    INTERRUPTED,
    PILOT_MODULE,
    Comparison,
    warmup_rule,
)
from electra_tf.evaluation.launcher import clock, log
from electra_tf.evaluation.plan import (
    PlanError,
    check_shared_hparams,
    load_objectives,
    parse_warmup,
)

MODULE = "electra_tf.evaluation.compare_objectives"
# The full protocol's / --quick's values for the options left unset.
DEFAULTS = {
    "pilot_warmup": 5,
    "pilot_steps": 30,
    "lrs": "3e-5,1e-4,3e-4,1e-3",
    "seeds": 3,
    "train_examples": 2000,
    "val_examples": 2000,
    "epochs": 3.0,
}
QUICK = {
    "pilot_warmup": 1,
    "pilot_steps": 3,
    "lrs": "1e-3",
    "seeds": 1,
    "train_examples": 32,
    "val_examples": 8,
    "epochs": 1.0,
}


# ---------------------------------------------------------------------- the command line
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"See the module docstring ({MODULE}) for the rules.",
    )
    parser.add_argument("--data-dir", required=True, help="pre-training data (vocab.txt, ...)")
    parser.add_argument("--objectives", required=True, help="names in configs/ablations, a,b,c")
    parser.add_argument("--minutes", type=float, required=True, help="wall time per objective")
    parser.add_argument("--preset", default="gutenberg", help="the shape preset (configs/*.json)")
    parser.add_argument("--hparams", default="{}", help="shared overrides: JSON or a .json file")
    parser.add_argument("--out", help="work folder (default: <data-dir>/compare_objectives)")
    parser.add_argument("--warmup", help="fraction of each run's steps (< 1) or a step count")
    parser.add_argument("--max-steps", type=int, help="cap on each run's steps (smoke tests)")
    parser.add_argument("--parallel", type=int, choices=(1, 2), default=1)
    parser.add_argument("--cpus", help="cores for --parallel, e.g. 0,1 (default: the first ones)")
    parser.add_argument("--threads", type=int, help="TF threads per run (default 1 if parallel)")
    parser.add_argument("--pilot-warmup", type=int, help="pilot steps before timing (5)")
    parser.add_argument("--pilot-steps", type=int, help="timed pilot steps (30)")
    parser.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation")
    sst = parser.add_argument_group("SST-2 (electra_tf.evaluation.sst2_transfer)")
    sst.add_argument("--glue-dir", help="SST-2's train.tsv, dev.tsv (<data-dir>/glue/SST-2)")
    sst.add_argument("--no-finetune", action="store_true", help="stop after pre-training")
    sst.add_argument("--lrs", help=f"the sweep ({DEFAULTS['lrs']})")
    sst.add_argument("--seeds", type=int, help=f"dev seeds ({DEFAULTS['seeds']})")
    sst.add_argument("--train-examples", type=int, help=f"({DEFAULTS['train_examples']})")
    sst.add_argument("--val-examples", type=int, help=f"({DEFAULTS['val_examples']})")
    sst.add_argument("--epochs", type=float, help=f"({DEFAULTS['epochs']:g})")
    sst.add_argument("--ft-max-seq-length", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="a smoke run (module docstring)")
    parser.add_argument("--in-process", action="store_true", help="for tests (module docstring)")
    parser.add_argument("--progress-seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.minutes <= 0 or not math.isfinite(args.minutes):
        parser.error("--minutes must be a positive number")
    if args.cpus:
        args.cpus = [int(c) for c in args.cpus.split(",")]
    args.out = args.out or os.path.join(args.data_dir, "compare_objectives")
    args.glue_dir = args.glue_dir or os.path.join(args.data_dir, "glue", "SST-2")
    args.command = shlex.join(["python", "-m", MODULE, *(sys.argv[1:] if argv is None else argv)])
    return args


def check_inputs(args: argparse.Namespace) -> None:
    """What can be checked before hours of pre-training: files, preset, SST-2 data."""
    if not os.path.isdir(args.data_dir):
        raise ConfigError(f"--data-dir: {args.data_dir} is not a directory")
    load_preset(args.preset)  # names the available presets when unknown
    if not args.no_finetune:
        for name in ("train.tsv", "dev.tsv"):
            if not os.path.isfile(os.path.join(args.glue_dir, name)):
                raise ConfigError(
                    f"--glue-dir: no {name} in {args.glue_dir} (SST-2's GLUE files; give their "
                    "folder, GLUE_DIR=... with make, or pass --no-finetune)"
                )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        objectives = load_objectives(args.objectives)
        args.warmup = parse_warmup(args.warmup)
        check_inputs(args)
        shared = parse_hparams(args.hparams)
        check_shared_hparams(shared, objectives)
        if args.warmup is not None and "num_warmup_steps" in shared:
            raise ConfigError("--warmup and num_warmup_steps in --hparams: give one")
        comparison = Comparison(args, objectives)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    log(f"{len(objectives)} objectives x {args.minutes:g} min, {args.parallel} at a time; "
        f"work folder {comparison.out}")  # fmt: skip
    started = time.monotonic()

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # a kill of this command stops the runs as Ctrl-C does

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        pilots = comparison.run_pilots()
        comparison.make_plan(pilots)
        comparison.run_training()
        metrics = {} if args.no_eval else comparison.run_evaluation()
        summary = None if args.no_finetune else comparison.run_finetuning(pilots)
    except (ConfigError, PlanError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        log("stopped (runs saved where they were); run the same command again to resume")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)  # in-process callers (tests) get theirs back
    results = comparison.results(metrics, summary)
    md_path, json_path = compare_report.write_report(results, comparison.out)
    print(compare_report.render_markdown(results))
    log(f"wrote {md_path} and {json_path} ({clock(time.monotonic() - started)} in this call)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
