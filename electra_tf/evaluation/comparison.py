"""The phases of one comparison of pre-training objectives (`compare_objectives`, whose
docstring has the rules): pilots, the plan, the runs, their evaluation, SST-2 from each final
discriminator, and the results the report is written from.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from electra_tf.config import ConfigError, parse_hparams
from electra_tf.evaluation import report as compare_report
from electra_tf.evaluation import sst2_transfer
from electra_tf.evaluation.launcher import (
    FinetuneCounter,
    Job,
    Launcher,
    clock,
    groups,
    log,
    log_tail,
)
from electra_tf.evaluation.plan import (
    RANDOM_ROW,
    check_plan_settings,
    encoder_shape,
    latest_step,
    plan_steps,
    read_json,
    write_json,
)

PILOT_MODULE = "electra_tf.evaluation.pilot"
INTERRUPTED = (130, 143)  # the pre-training CLI's exit codes after saving on SIGINT / SIGTERM


class Comparison:
    """The phases of one comparison (see `compare_objectives`' docstring), resumable from
    --out."""

    def __init__(self, args: argparse.Namespace, objectives: dict[str, dict[str, Any]]):
        self.args = args
        self.objectives = objectives
        self.out = os.path.abspath(args.out)
        self.data_dir = os.path.abspath(args.data_dir)
        self.shared = parse_hparams(args.hparams)
        self.budget_s = args.minutes * 60
        cpus = None
        if (args.parallel > 1 or args.cpus) and not args.in_process:
            try:
                cpus = sst2_transfer.choose_cpus(args.parallel, args.cpus)
            except ValueError as e:
                raise ConfigError(f"--parallel {args.parallel}: {e}") from None
        threads = args.threads or (1 if args.parallel > 1 else None)
        self.launcher = Launcher(cpus, threads, args.in_process, args.progress_seconds)
        # What a resumed call must share with the first: any change would mix plans.
        self.settings = {
            "data_dir": self.data_dir,
            "preset": args.preset,
            "shared_hparams": self.shared,
            "minutes": args.minutes,
            "warmup": args.warmup,
            "max_steps": args.max_steps,
            "parallel": args.parallel,
            "threads": threads,
            "pilot_warmup": args.pilot_warmup,
            "pilot_steps": args.pilot_steps,
        }
        self.plan_path = os.path.join(self.out, "plan.json")
        self.plan = check_plan_settings(self.plan_path, self.settings)
        self.check_finetune_settings()

    def check_finetune_settings(self) -> None:
        """sst2_transfer caches runs by name (row, split, lr), not by settings: other seeds or
        sentences would silently reuse the old runs, so a change is refused here."""
        a = self.args
        wanted = {
            "glue_dir": os.path.abspath(a.glue_dir),
            "lrs": a.lrs,
            "seeds": a.seeds,
            "train_examples": a.train_examples,
            "val_examples": a.val_examples,
            "epochs": a.epochs,
            "max_seq_length": a.ft_max_seq_length,
        }
        saved = self.plan.get("finetune_settings")
        if a.no_finetune:
            self.plan.setdefault("finetune_settings", wanted)
            return
        if not saved or saved == wanted or not os.path.isdir(os.path.join(self.out, "sst2")):
            self.plan["finetune_settings"] = wanted
            return
        changed = [
            f"{k}: {saved.get(k)!r} -> {v!r}" for k, v in wanted.items() if saved.get(k) != v
        ]
        raise ConfigError(
            f"{self.out}/sst2 holds fine-tuning runs made with other settings ("
            + "; ".join(changed)
            + "): delete that folder (the pre-training is kept) or use the earlier settings"
        )

    # ------------------------------------------------------------------ helpers
    def model_dir(self, name: str) -> str:
        return os.path.join(self.out, "pretrain", name)

    def final_checkpoint(self, name: str) -> str:
        return os.path.join(self.model_dir(name), f"ckpt-{latest_step(self.model_dir(name))}")

    def eval_results(self, name: str) -> str:
        step = latest_step(self.model_dir(name))
        return os.path.join(self.model_dir(name), "results", f"eval_step{step}.json")

    def job(self, name: str, kind: str, extra: Mapping[str, Any] | None = None) -> Job:
        """A pre-training CLI job (kind "train" / "eval") or a pilot, its exact --hparams
        written to hparams/<name>.<kind>.json."""
        values = {**self.objectives[name], **self.shared, "model_dir": self.model_dir(name)}
        hparams = os.path.join(self.out, "hparams", f"{name}.{kind}.json")
        write_json(hparams, {**values, **(extra or {})})
        preset = ["--preset", self.args.preset] if self.args.preset else []
        log_path = os.path.join(self.out, "logs", f"{name}.{kind}.log")
        if kind != "pilot":
            argv = ["-m", "electra_tf.pretrain", "--data-dir", self.data_dir, "--model-name", name]
            return Job(name, [*argv, *preset, "--hparams", hparams], log_path)
        argv = ["-m", PILOT_MODULE, "--data-dir", self.data_dir, *preset, "--hparams", hparams]
        argv += ["--out", os.path.join(self.out, "pilots", f"{name}.json")]
        argv += ["--warmup-steps", str(self.args.pilot_warmup)]
        argv += ["--timed-steps", str(self.args.pilot_steps)]
        # The launch time: the pilot's start-up then includes the interpreter's.
        argv += ["--launched-at", "{now}" if self.args.in_process else str(time.time())]
        return Job(name, argv, log_path)

    def planned(self, name: str) -> dict[str, int]:
        entry = self.plan["objectives"][name]
        return {"num_train_steps": entry["steps"], "num_warmup_steps": entry["warmup_steps"]}

    @staticmethod
    def check(jobs: list[Job], what: str, allowed: tuple[int, ...] = ()) -> None:
        for job in jobs:
            if job.returncode != 0 and job.returncode not in allowed:
                raise SystemExit(
                    f"error: {what} {job.name} failed (exit {job.returncode}); "
                    f"{job.log_path} ends:\n{log_tail(job.log_path)}"
                )

    # ------------------------------------------------------------------ 1. pilots
    def run_pilots(self) -> dict[str, dict[str, Any]]:
        path = {name: os.path.join(self.out, "pilots", f"{name}.json") for name in self.objectives}
        kept = [name for name in self.objectives if os.path.exists(path[name])]
        if kept:
            log(f"pilots kept from an earlier call: {', '.join(kept)}")
        todo = [name for name in self.objectives if name not in kept]
        for group in groups(todo, self.args.parallel):
            log(f"pilot of {', '.join(group)} ({self.args.pilot_steps} timed steps each)")
            jobs = [self.job(name, "pilot") for name in group]
            self.launcher.run_group(jobs, None, 0)
            self.check(jobs, "the pilot of")
            for job in jobs:
                p = read_json(path[job.name])
                log(
                    f"pilot {job.name}: {p['seconds_per_step'] * 1000:.1f} ms/step, start-up "
                    f"{p['startup_seconds']:.1f} s ({job.seconds:.0f} s in all)"
                )
        return {name: read_json(path[name]) for name in self.objectives}

    # ------------------------------------------------------------------ 2. plan
    def make_plan(self, pilots: Mapping[str, Mapping[str, Any]]) -> None:
        shapes = {name: encoder_shape(p["config"]) for name, p in pilots.items()}
        if len({json.dumps(s, sort_keys=True) for s in shapes.values()}) > 1:
            raise ConfigError(f"the objectives resolve to different encoder shapes: {shapes}")
        for name, pilot in pilots.items():
            if name not in self.plan["objectives"]:
                step_plan = plan_steps(
                    self.budget_s,
                    pilot,
                    self.args.warmup,
                    pilot["config"]["num_warmup_steps"],
                    self.args.max_steps,
                    name,
                )
                self.plan["objectives"][name] = {**step_plan.__dict__, "pilot": pilot}
        self.plan.setdefault("command", self.args.command)
        write_json(self.plan_path, self.plan)
        for name in self.objectives:
            entry = self.plan["objectives"][name]
            capped = " (capped)" if entry["capped"] else ""
            log(
                f"plan {name}: {entry['steps']:,} steps (warm-up {entry['warmup_steps']:,}), "
                f"~{entry['planned_seconds'] / 60:.1f} min{capped}"
            )

    # ------------------------------------------------------------------ 3. runs
    def run_training(self) -> None:
        todo = []
        for name in self.objectives:
            steps = self.plan["objectives"][name]["steps"]
            if latest_step(self.model_dir(name)) >= steps:
                log(f"{name}: already trained to {steps:,} steps, skipped")
            else:
                todo.append(name)
        batches = groups(todo, self.args.parallel)
        # A group lasts as long as its longest plan: the budget, or less where --max-steps capped.
        lengths = [max(self.plan["objectives"][n]["planned_seconds"] for n in g) for g in batches]
        for index, group in enumerate(batches):
            after = sum(lengths[index + 1 :])
            log(
                f"pre-training {', '.join(group)} ({self.args.minutes:g} min each; "
                f"pre-training ETA {clock(lengths[index] + after)})"
            )
            jobs = [self.job(name, "train", self.planned(name)) for name in group]
            starts = {name: latest_step(self.model_dir(name)) for name in group}
            self.launcher.run_group(jobs, lengths[index], after)
            for job in jobs:  # every segment counts, an interrupted one too
                record = os.path.join(self.out, "runs", f"{job.name}.json")
                runs = read_json(record) if os.path.exists(record) else {"segments": []}
                end = latest_step(self.model_dir(job.name))
                runs["segments"].append(
                    {
                        "seconds": job.seconds,
                        "returncode": job.returncode,
                        "start_step": starts[job.name],
                        "end_step": end,
                    }
                )
                runs["wall_seconds"] = sum(s["seconds"] for s in runs["segments"])
                write_json(record, runs)
                if job.returncode == 0:
                    log(f"{job.name}: {end:,} steps in {clock(job.seconds)}")
            self.check(jobs, "pre-training", allowed=INTERRUPTED)
            if any(job.returncode in INTERRUPTED for job in jobs):
                raise KeyboardInterrupt

    # ------------------------------------------------------------------ 4. evaluation
    def run_evaluation(self) -> dict[str, dict[str, float]]:
        todo = [name for name in self.objectives if not os.path.exists(self.eval_results(name))]
        for group in groups(todo, self.args.parallel):
            log(f"evaluating {', '.join(group)}")
            evaluate = {"do_train": False, "do_eval": True}
            jobs = [self.job(name, "eval", {**self.planned(name), **evaluate}) for name in group]
            self.launcher.run_group(jobs, None, 0)
            self.check(jobs, "evaluating")
        return {name: read_json(self.eval_results(name)) for name in self.objectives}

    # ------------------------------------------------------------------ 5. SST-2
    def run_finetuning(self, pilots: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        a = self.args
        config = next(iter(pilots.values()))["config"]
        shape_file = os.path.join(self.out, "random_shape.json")
        write_json(shape_file, encoder_shape(config))
        vocab = config["vocab_file"] or os.path.join(config["data_dir"], "vocab.txt")
        sst_out = os.path.join(self.out, "sst2")
        argv = ["--glue-dir", a.glue_dir, "--out", sst_out, "--vocab-file", vocab]
        for name in self.objectives:
            argv += ["--row", f"{name}={self.final_checkpoint(name)}"]
        argv += ["--row", f"{RANDOM_ROW}=random", "--random-shape", shape_file]
        argv += ["--lrs", a.lrs, "--seeds", str(a.seeds), "--train-examples", str(a.train_examples)]
        argv += ["--val-examples", str(a.val_examples), "--epochs", str(a.epochs)]
        argv += ["--max-seq-length", str(a.ft_max_seq_length)]
        jobs = 1
        if a.parallel > 1 and self.launcher.cpus:  # rows on the pre-training's cores
            cpus = self.launcher.cpus[: a.parallel]
            jobs = len(cpus)
            argv += ["--jobs", str(jobs), "--cpus", ",".join(map(str, cpus))]
        rows = [*self.objectives, RANDOM_ROW]
        counter = FinetuneCounter(a.in_process, sst_out, rows, a.lrs.split(","), jobs)
        log(f"SST-2: {len(rows)} rows, at most {counter.total} fine-tuning runs to go")
        sst2_transfer.main(argv, run=counter)
        return read_json(os.path.join(sst_out, "summary.json"))

    # ------------------------------------------------------------------ 6. report
    def results(
        self, metrics: Mapping[str, Mapping[str, float]], summary: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        rows = [
            compare_report.objective_row(
                name,
                self.plan["objectives"][name],
                read_json(os.path.join(self.out, "runs", f"{name}.json")),
                self.final_checkpoint(name),
                metrics.get(name),
            )
            for name in self.objectives
        ]
        rows = [
            compare_report.with_finetuning(r, summary) for r in [*rows, {"objective": RANDOM_ROW}]
        ]
        a = self.args
        eval_data = self.shared.get("eval_tfrecords")
        heldout = f"`{eval_data}`" if eval_data else "the training files (no eval_tfrecords)"
        protocol = (
            f"the first {a.train_examples} training sentences, {a.epochs:g} epoch(s), length "
            f"{a.ft_max_seq_length}, lr chosen from {a.lrs} on the last {a.val_examples} "
            f"training sentences, then {a.seeds} seed(s) on dev (electra_tf.evaluation.sst2_transfer)."
        )
        return {
            "command": a.command,
            "quick": a.quick,
            "settings": {**self.settings, "warmup_rule": warmup_rule(a.warmup)},
            "heldout_data": None if a.no_eval else heldout,
            "protocol": None if summary is None else summary["protocol"],
            "protocol_text": "not run" if summary is None else protocol,
            "rows": rows,
            "table5": compare_report.table5_comparison(rows),
        }


def warmup_rule(warmup: float | None) -> str:
    if warmup is None:
        return "the preset's num_warmup_steps"
    return f"{warmup:g} of each run's steps" if warmup < 1 else f"{int(warmup)} steps"
