"""Does pre-training help? SST-2 fine-tuning from several initialisations, one protocol for all.

Every row (an initialisation: a pre-trained checkpoint, or `random`) gets the same treatment:

1. The fine-tuning learning rate is chosen by a sweep on a validation split carved from SST-2's
   training set (its last `--val-examples` sentences), never on the dev set. A "sweep" of one
   `--lrs` value has nothing to choose: it runs nothing on the validation split.
2. With that learning rate, `--seeds` trials fine-tune on the same first `--train-examples`
   training sentences and are scored on the whole SST-2 dev set; the row's figure is their
   median (the fine-tuning CLI's own `num_trials` median).

Training sentences never include the validation slice. Each fine-tuning run is the project's
own `python -m electra_tf.finetune`; a run whose results file exists is not repeated, so the
script resumes where it stopped. `--full-epochs E` adds, per row, one trial on every training
sentence (all but the validation slice) for E epochs, at the row's chosen learning rate.
`--jobs 2` fine-tunes two rows at once, each run pinned to its own core (`taskset`, `--cpus`)
with one TensorFlow thread (the rows' runs and caches do not overlap, and the fine-tuning
TFRecords they share are written atomically).

    python -m electra_tf.evaluation.sst2_transfer --glue-dir data/glue/SST-2 --out data/sst2 \\
        --vocab-file pretrained/electra-tiny-gutenberg/vocab.txt \\
        --row electra=pretrained/electra-tiny-gutenberg --row random=random \\
        --random-shape configs/gutenberg.json

Results: `OUT/summary.json` and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# The folder that holds the electra_tf package (the checkout's root): the fine-tuning runs
# start there and import the package from there.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def split_sst2(glue_dir: str, out: str, val_examples: int) -> dict[str, str]:
    """Writes the validation and dev data dirs; returns {"val": dir, "dev": dir}."""
    with open(os.path.join(glue_dir, "train.tsv"), encoding="utf-8") as f:
        header, *rows = f.read().splitlines()
    if len(rows) <= val_examples:
        raise SystemExit(f"error: {glue_dir}/train.tsv has only {len(rows)} sentences")
    train, val = rows[:-val_examples], rows[-val_examples:]
    with open(os.path.join(glue_dir, "dev.tsv"), encoding="utf-8") as f:
        dev = f.read().splitlines()
    dirs = {}
    for split, dev_lines in (("val", [header, *val]), ("dev", dev)):
        task_dir = os.path.join(out, split, "finetuning_data", "sst")
        os.makedirs(task_dir, exist_ok=True)
        for name, lines in (("train.tsv", [header, *train]), ("dev.tsv", dev_lines)):
            path = os.path.join(task_dir, name)
            text = "\n".join(lines) + "\n"
            if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
        dirs[split] = os.path.join(out, split)
    return dirs


def random_init_hparams(shape_file: str) -> dict[str, Any]:
    """The encoder shape of a pre-training config file, for a randomly initialised row."""
    with open(shape_file, encoding="utf-8") as f:
        pre = json.load(f)
    shape = {k: v for k, v in pre.get("model_hparam_overrides", {}).items() if k in SHAPE_KEYS}
    hparams: dict[str, Any] = {"init_checkpoint": None, "model_hparam_overrides": shape}
    for key in ("embedding_size", "model_size"):
        if key in pre:
            hparams[key] = pre[key]
    return hparams


def run_command(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    """One fine-tuning command in its own process: its exit code and the end of its output.
    (compare_objectives passes its own, to count runs or to run them in-process.)"""
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    return done.returncode, done.stdout[-3000:] + done.stderr[-3000:]


# The environment of a run pinned to one core: one TensorFlow thread of each kind.
ONE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1"}


def choose_cpus(jobs: int, cpus: list[int] | None) -> list[int]:
    """The `jobs` cores that runs pinned one per core go to: `cpus` (default: the cores this
    process may use), checked; ValueError says what is wrong."""
    chosen = cpus or sorted(os.sched_getaffinity(0))
    if len(chosen) < jobs:
        raise ValueError(f"{jobs} runs at once, but only cores {chosen} to run on")
    if not shutil.which("taskset"):
        raise ValueError("pinning runs to cores needs taskset, which is not installed")
    return chosen[:jobs]


def pinning_cpus(parser: argparse.ArgumentParser, jobs: int, cpus: str | None) -> list[int]:
    """The cores `--jobs` rows run on (none for one job); `parser.error` says what is wrong."""
    if jobs < 1:
        parser.error(f"--jobs must be at least 1, not {jobs}")
    if jobs == 1:
        if cpus:
            parser.error("--cpus needs --jobs 2 or more")
        return []
    try:
        listed = [int(c) for c in cpus.split(",")] if cpus else None
    except ValueError:
        parser.error(f"--cpus {cpus!r}: not a comma-separated list of core numbers")
    try:
        return choose_cpus(jobs, listed)
    except ValueError as e:
        parser.error(f"--jobs {jobs}: {e}")


def pinned(command: list[str], cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu), *command]


def one_thread(env: dict[str, str]) -> dict[str, str]:
    return {**env, **ONE_THREAD}


def finetune(
    data_dir: str, name: str, hparams: dict[str, Any], python: str, run: Any = run_command
) -> dict[str, Any]:
    """One `electra_tf.finetune` run (cached by its results file); its results.json."""
    results = os.path.join(data_dir, "models", name, "results", "sst_results.json")
    if os.path.exists(results):
        check_cached_run(data_dir, name, hparams)
        with open(results, encoding="utf-8") as f:
            return json.load(f)
    command = [python, "-m", "electra_tf.finetune", "--data-dir", data_dir]
    command += ["--model-name", name, "--tasks", "sst", "--hparams", json.dumps(hparams)]
    start = time.perf_counter()
    print(f"[sst2_transfer] {name}: {json.dumps(hparams)}", flush=True)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    code, output = run(command, env)
    if code != 0:
        sys.stderr.write(output)
        raise SystemExit(f"error: fine-tuning {name} failed (exit {code})")
    with open(results, encoding="utf-8") as f:
        summary = json.load(f)
    accuracy = summary["median"]["sst"]["accuracy"]
    print(f"[sst2_transfer] {name}: accuracy {accuracy:.2f} in {time.perf_counter() - start:.0f} s")
    return summary


def check_cached_run(data_dir: str, name: str, hparams: dict[str, Any]) -> None:
    """Refuses to reuse a finished run whose recorded settings differ from `hparams`.

    Runs are cached by name, so without this a changed `--seeds`, `--train-examples`,
    `--epochs` or checkpoint would silently reuse the old result. The first trial's
    `finetuning_config.json` records what the run used; every key this protocol sets is
    compared (`overwrite` only says how the run treats its own folder)."""
    path = os.path.join(
        data_dir, "models", name, "finetuning_models", "sst_model_1", "finetuning_config.json"
    )
    if not os.path.exists(path):
        print(f"[sst2_transfer] {name}: reusing a cached result without a config to check ({path})")
        return
    with open(path, encoding="utf-8") as f:
        recorded = json.load(f)
    wanted = {"num_trials": 1, **hparams}
    differ = [
        f"{key}: {recorded.get(key)!r} there, {value!r} asked"
        for key, value in sorted(wanted.items())
        if key != "overwrite" and recorded.get(key) != value
    ]
    if differ:
        raise SystemExit(
            f"error: the cached run {os.path.join(data_dir, 'models', name)} was made with "
            f"other settings ({'; '.join(differ)}); give another --out or move that run away"
        )


def lr_tag(lr: float) -> str:
    return f"{lr:g}".replace("-0", "-")


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[int]]:
    """The command line, its paths made absolute, and the cores `--jobs` rows run on."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--glue-dir", required=True, help="Holds SST-2 train.tsv and dev.tsv.")
    parser.add_argument("--out", required=True, help="Work directory (data splits, runs).")
    parser.add_argument(
        "--row",
        action="append",
        required=True,
        metavar="NAME=INIT",
        help="An initialisation: a checkpoint (dir or prefix), or 'random'. Repeatable.",
    )
    parser.add_argument("--vocab-file", required=True)
    parser.add_argument("--random-shape", help="Pre-training config JSON: the random rows' shape.")
    parser.add_argument("--lrs", default="3e-5,1e-4,3e-4,1e-3", help="The sweep.")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--train-examples", type=int, default=2000)
    parser.add_argument("--val-examples", type=int, default=2000)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--layerwise-lr-decay", type=float, default=1.0)
    parser.add_argument("--full-epochs", type=float, default=0, help="0: no full-data rows.")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="Rows fine-tuned at once, each run pinned to its own core with one TF thread.",
    )
    parser.add_argument("--cpus", help="Cores for --jobs, e.g. 0,1 (default: the first ones).")
    args = parser.parse_args(argv)
    cpus = pinning_cpus(parser, args.jobs, args.cpus)
    # The fine-tuning subprocesses run in the repository root: paths given relative to the
    # caller's directory must not be read relative to it.
    args.out, args.glue_dir = os.path.abspath(args.out), os.path.abspath(args.glue_dir)
    if os.sep in args.python:
        args.python = os.path.abspath(args.python)
    return args, cpus


class Transfer:
    """One call of the protocol: the SST-2 splits, the settings every row shares, and the
    summary (`OUT/summary.json`), written again after each row."""

    def __init__(self, args: argparse.Namespace, run: Any):
        self.args, self.run = args, run
        self.dirs = split_sst2(args.glue_dir, args.out, args.val_examples)
        vocab_size = sum(1 for _ in open(args.vocab_file, encoding="utf-8"))
        self.common = {
            "max_seq_length": args.max_seq_length,
            "num_train_epochs": args.epochs,
            "layerwise_lr_decay": args.layerwise_lr_decay,
            "vocab_file": os.path.abspath(args.vocab_file),
            "vocab_size": vocab_size,
            "overwrite": True,
        }
        self.lrs = [float(x) for x in args.lrs.split(",")]
        self.summary: dict[str, Any] = {"protocol": {**vars(args), "lrs": self.lrs}, "rows": {}}
        self.lock = threading.Lock()

    def write_summary(self) -> None:
        with open(os.path.join(self.args.out, "summary.json"), "w", encoding="utf-8") as f:
            json.dump(self.summary, f, indent=2)

    def init_hparams(self, init: str) -> dict[str, Any]:
        if init != "random":
            return {"init_checkpoint": os.path.abspath(init)}
        if not self.args.random_shape:
            raise SystemExit("error: a random row needs --random-shape")
        return random_init_hparams(self.args.random_shape)

    def one_row(self, row: str, run: Any) -> None:
        """The sweep on the validation split, then the seeds on dev (and the full-data trial)."""
        a = self.args
        name, _, init = row.partition("=")
        base = {**self.common, **self.init_hparams(init), "max_train_examples": a.train_examples}
        sweep = {}
        for lr in self.lrs if len(self.lrs) > 1 else []:
            hparams = {**base, "learning_rate": lr}
            swept = finetune(self.dirs["val"], f"{name}_val_lr{lr_tag(lr)}", hparams, a.python, run)
            sweep[lr] = swept["median"]["sst"]["accuracy"]
        best = max(self.lrs, key=lambda lr: sweep.get(lr, 0.0))
        hparams = {**base, "learning_rate": best, "num_trials": a.seeds}
        dev = finetune(self.dirs["dev"], f"{name}_dev_lr{lr_tag(best)}", hparams, a.python, run)
        trials = [t["sst"]["accuracy"] for t in dev["trials"]]
        result = {
            "init": init,
            "val_accuracy_by_lr": {lr_tag(lr): acc for lr, acc in sweep.items()},
            "lr": best,
            "dev_accuracy_trials": trials,
            "dev_accuracy_median": statistics.median(trials),
        }
        if a.full_epochs:
            full = {**base, "learning_rate": best, "num_train_epochs": a.full_epochs}
            full["max_train_examples"] = None
            done = finetune(self.dirs["dev"], f"{name}_full_lr{lr_tag(best)}", full, a.python, run)
            result["full_dev_accuracy"] = done["median"]["sst"]["accuracy"]
        with self.lock:
            self.summary["rows"][name] = result
            self.write_summary()

    def run_rows(self, cpus: list[int]) -> dict[str, Any]:
        """Every row, one at a time or `--jobs` at once (one core each); the rows' results in
        the order they were given, whatever order they finished in."""
        rows = self.args.row
        if self.args.jobs == 1:
            for row in rows:
                self.one_row(row, self.run)
        else:
            free: queue.Queue[int] = queue.Queue()
            for cpu in cpus:
                free.put(cpu)

            def pinned_row(row: str) -> None:
                cpu = free.get()  # one row at a time per core; its runs go to that core
                try:

                    def pin(command: list[str], env: dict[str, str]) -> tuple[int, str]:
                        return self.run(pinned(command, cpu), one_thread(env))

                    self.one_row(row, pin)
                finally:
                    free.put(cpu)

            with ThreadPoolExecutor(self.args.jobs) as pool:
                for done in [pool.submit(pinned_row, row) for row in rows]:
                    done.result()  # re-raises a failed row's error
        order = [row.partition("=")[0] for row in rows]
        self.summary["rows"] = {name: self.summary["rows"][name] for name in order}
        self.write_summary()
        return self.summary["rows"]


def print_table(rows: dict[str, Any], full_epochs: bool) -> None:
    print(
        "\n| init | val accuracy by lr | lr | dev accuracy (seeds) | median |"
        + (" all train |" if full_epochs else "")
    )
    print("| --- | --- | --- | --- | --- |" + (" --- |" if full_epochs else ""))
    for name, r in rows.items():
        by_lr = ", ".join(f"{lr}: {acc:.2f}" for lr, acc in r["val_accuracy_by_lr"].items())
        trials = " / ".join(f"{a:.2f}" for a in r["dev_accuracy_trials"])
        full = f" {r['full_dev_accuracy']:.2f} |" if "full_dev_accuracy" in r else ""
        print(
            f"| {name} | {by_lr} | {r['lr']:g} | {trials} | {r['dev_accuracy_median']:.2f} |{full}"
        )


def main(argv: list[str] | None = None, run: Any = run_command) -> int:
    args, cpus = parse_args(argv)
    rows = Transfer(args, run).run_rows(cpus)
    print_table(rows, bool(args.full_epochs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
