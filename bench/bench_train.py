"""`make bench`: ELECTRA-Small train-step throughput, this project against Model Garden, same run.

Every configuration runs in its own subprocess (so each peak-RSS figure is that configuration's
own high-water mark), and the configurations are interleaved round by round (A B C ... A B C)
so that load from other processes on the machine hits them alike; the reported figures are
medians over rounds, and the ratio is taken per round against the peer measured next to it.
The same run measures the machine's tf.matmul peak (fp32 and bf16) for MFU.

Usage:
    python -m bench.bench_train [--batch 32] [--seq 128] [--steps 6] [--rounds 2]
        [--configs default,fp32,...] [--skip-peer] [--no-extras] [--json F] [--png F]

Rows: the project at its default precision/XLA, parallel micro-batches and thread pools
(each "auto" resolved for this machine, as `python -m electra_tf.pretrain` resolves them; the
round lines name the result), at float32 and mixed_bfloat16 with XLA on and off, and Model
Garden fp32 (`parallel2`, not in the default list: `parallel_micro_batches` 2 with threads
(1, 2), whatever the machine). `--baseline DIR` adds a row
`baseline`: the default configuration with the `electra_tf` package of another checkout (e.g. a
`git worktree` of an earlier commit), timed by this checkout's harness in the same rounds, for
before/after figures of a change. `finetune-run`, `pretrain-run`: a whole command beside its
step (bench/whole_run.py; `--run-steps N`: a shorter pre-training run). `--batch 128 --configs default
--skip-peer` gives the peak memory of the small preset at batch 128.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # `python bench/bench_train.py`: bench is a package
    raise SystemExit("run it from the repository root as: python -m bench.bench_train")

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.machine import (
    PEER_TORCH,
    checkout_revision,
    default_peer_python,
    harness_command,
    run_extra,
    timed,
)
from bench.train_table import (
    BASELINE,
    CONFIGS,
    DEFAULT_CONFIGS,
    PEER,
    TORCH_PEERS,
    flops_per_token,
    is_bf16,
    print_round,
    runs_at_length,
    task_of,
)
from electra_tf.runtime import atomic_io

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULT_TAG = "BENCH_RESULT "


# ---------------------------------------------------------------------------------- workers
def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _set_threads(intra: int, inter: int) -> None:
    import tensorflow as tf

    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(inter)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    settings = CONFIGS[args.worker]
    if settings["kind"] in ("finetune-run", "pretrain-run"):
        # A whole command, before TensorFlow is imported here: the run sets its own thread
        # pools, and the pre-training run's start-up counts the imports it pays.
        from bench.whole_run import whole_run

        record = whole_run(settings, args)
        return {"config": args.worker, **record, "peak_rss_mib": _peak_rss_mib()}
    _set_threads(*settings.get("threads", (args.intra, args.inter)))
    start = time.perf_counter()
    if settings["kind"] == "peer":
        from bench.project_step import build_peer_step

        step, inputs, params = build_peer_step(args.batch, args.seq, jit=settings["jit"] == "on")
        resolved = {"precision": "float32", "jit_compile": settings["jit"] == "on"}

        def run_step() -> None:
            step(inputs).numpy()

    elif settings["kind"] == "project":
        from bench.project_step import build_project_step

        hparams = {**settings.get("hparams", {}), **json.loads(args.hparams)}
        run_step, params, resolved = build_project_step(
            args.batch, args.seq, settings["precision"], settings["jit"], hparams
        )
    elif settings["kind"] == "finetune":
        from bench.project_step import build_finetune_step

        run_step, params, resolved = build_finetune_step(
            args.batch,
            args.seq,
            json.loads(args.hparams),
            settings.get("precision", "float32"),
            task="squad" if settings["task"] == "squad" else "sst",
        )
    else:
        raise ValueError(f"unknown worker kind {settings['kind']!r}")
    build_seconds = time.perf_counter() - start
    times = timed(run_step, args.warmup, args.steps)
    step_s = statistics.median(times)
    return {
        "config": args.worker,
        "params": params,
        "step_s": step_s,
        "tokens_per_s": args.batch * args.seq / step_s,
        "shape": [args.batch, args.seq],  # what the worker ran, as it understood its flags
        "build_s": build_seconds,
        "peak_rss_mib": _peak_rss_mib(),
        **resolved,
    }


def matmul_worker(args: argparse.Namespace) -> dict[str, Any]:
    from bench.machine import matmul_peaks

    _set_threads(args.intra, args.inter)
    return matmul_peaks()


# ---------------------------------------------------------------------------------- parent
def run_child(
    extra: list[str],
    args: argparse.Namespace,
    timeout: float,
    root: str = ROOT,
    seq: int | None = None,
    batch: int | None = None,
) -> dict[str, Any]:
    """One worker in its own process, this checkout's harness importing the `electra_tf` of
    the checkout `root` (`harness_command`). `seq`, `batch`: the shape (default: --seq,
    --batch)."""
    command = [
        *harness_command(ROOT, root, "bench_train"),
        *extra,
        f"--batch={batch or args.batch}",
        f"--seq={seq or args.seq}",
        f"--steps={args.steps}",
        f"--warmup={args.warmup}",
        f"--intra={args.intra}",
        f"--inter={args.inter}",
        f"--hparams={args.hparams}",
        f"--run-steps={args.run_steps}",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    raise RuntimeError(
        f"bench worker {' '.join(extra)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    )


def run_torch_child(
    name: str, args: argparse.Namespace, timeout: float, seq: int, batch: int
) -> dict[str, Any]:
    """A PyTorch row: bench/peer_torch.py under --hf-python, as a worker's record."""
    command = [args.hf_python, PEER_TORCH, CONFIGS[name]["command"], f"--batch={batch}"]
    command += [f"--seq={seq}", f"--steps={args.steps}", f"--warmup={args.warmup}"]
    command += ["--bf16"] if CONFIGS[name].get("bf16") else []
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not records:
        raise RuntimeError(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    step_s = statistics.median(records[0]["seconds"])
    return {
        "config": name,
        "params": records[0]["params"],
        "step_s": step_s,
        "tokens_per_s": batch * seq / step_s,
        "shape": [records[0]["batch"], records[0]["seq"]],
        "peak_rss_mib": records[0]["peak_rss_mib"],
        "precision": records[0].get("precision", "float32"),
        "jit_compile": None,
        "torch": records[0]["torch"],
        "threads": [records[0]["threads"], 0],
    }


def int_list(text: str) -> list[int]:
    """`128,256,512` -> [128, 256, 512]; anything else is an argparse error."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas: {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers: {text!r}")
    return values


def batch_at(seq: int, args: argparse.Namespace) -> int:
    """The batch at length `seq`: --tokens-per-batch // seq where given, else --batch."""
    if args.tokens_per_batch:
        return max(1, args.tokens_per_batch // seq)
    return args.batch


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument(
        "--seq-lengths", type=int_list, help="several sequence lengths, e.g. 128,256,512"
    )
    parser.add_argument(
        "--tokens-per-batch",
        type=int,
        help="the batch at each length is this // length (default: --batch at every length)",
    )
    parser.add_argument("--steps", type=int, default=6, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repetitions")
    parser.add_argument(
        "--run-steps", type=int, default=0, help="steps of a whole pre-training run (0: its 300)"
    )
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"of {sorted(CONFIGS)}")
    parser.add_argument("--skip-peer", action="store_true", help="no Model Garden row")
    parser.add_argument(
        "--hf-python",
        default=default_peer_python(),
        help="an interpreter with torch and transformers, for the hf-* rows (default: "
        "$ELECTRA_PEER_PYTHON, else /tmp/hfenv/bin/python where it exists)",
    )
    parser.add_argument("--no-extras", action="store_true", help="skip bench_data/bench_serve")
    parser.add_argument("--intra", type=int, default=0, help="intra-op threads (0: TF default)")
    parser.add_argument("--inter", type=int, default=0, help="inter-op threads (0: TF default)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per subprocess")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--png", help="draw the table here (default: beside --json, as .png)")
    parser.add_argument(
        "--baseline", help="another checkout: its electra_tf as a 'baseline' row (default config)"
    )
    parser.add_argument("--no-peak", action="store_true", help="skip the tf.matmul peak (no MFU)")
    # More config fields for the project's rows (JSON): the tests' tiny model.
    parser.add_argument("--hparams", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--matmul-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    problem = atomic_io.make_parents(args.json, args.png)
    if problem:
        parser.error(problem)
    args.seq_lengths = args.seq_lengths or [args.seq]
    args.parser = parser
    return args


def row_names(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(the configurations to run, notes on those left out)."""
    parser = args.parser
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    for name in names:
        if name not in CONFIGS:
            parser.error(f"--configs: unknown configuration {name!r}; known: {sorted(CONFIGS)}")
    notes = []
    for name in list(names):  # a whole run brings the step it is set beside
        step = CONFIGS[name].get("step")
        names += [step] if step and step not in names else []
    if args.skip_peer:
        names = [n for n in names if CONFIGS[n]["kind"] != "peer"]
    elif PEER not in names and any(task_of(n) == "pretrain" for n in names):
        names.append(PEER)
    torch_listed = any(CONFIGS[n]["kind"] == "torch" for n in names)
    for task, (fp32_peer, bf16_peer) in TORCH_PEERS.items():
        # Every row of a task brings its float32 PyTorch peer (pre-training's only where a
        # torch row is asked for), a bf16 row the bf16 autocast peer too.
        rows = [n for n in names if task_of(n) == task]
        if rows and (task != "pretrain" or torch_listed):
            wanted = [fp32_peer, bf16_peer] if any(map(is_bf16, rows)) else [fp32_peer]
            names += [p for p in wanted if p not in names]
    torch_rows = [n for n in names if CONFIGS[n]["kind"] == "torch"]
    if torch_rows and not (args.hf_python and os.path.exists(args.hf_python)):
        names = [n for n in names if n not in torch_rows]
        notes.append(
            f"{', '.join(torch_rows)}: skipped (no --hf-python interpreter with torch and "
            "transformers; bench/README.md says how to make one)"
        )
    return names, notes


def run_rounds(
    args: argparse.Namespace, names: list[str], roots: dict[str, str]
) -> list[dict[str, Any]]:
    """Every configuration at every length, `args.rounds` times interleaved; one record each
    (bench/train_table.py). A configuration that fails is reported and left out."""
    records: list[dict[str, Any]] = []
    fixed = {CONFIGS.get(n, {}).get("seq") for n in names}
    lengths = sorted(set(args.seq_lengths) | (fixed - {None}))
    for round_index in range(args.rounds):
        for seq in lengths:
            batch = batch_at(seq, args)
            # A row with its own length runs at that length only; the others at --seq's.
            at_seq = [n for n in names if runs_at_length(n, seq, args.seq_lengths)]
            for name in at_seq:
                try:
                    if CONFIGS.get(name, {}).get("kind") == "torch":
                        result = run_torch_child(name, args, args.timeout, seq, batch)
                    else:
                        config = "default" if name == BASELINE else name
                        result = run_child(
                            [f"--worker={config}"], args, args.timeout, roots[name], seq, batch
                        )
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    # One failed configuration must not discard the others' measurements.
                    print(
                        f"round {round_index + 1} seq {seq} {name:12s} FAILED: {str(e)[-500:]}",
                        flush=True,
                    )
                    continue
                result = {**result, "config": name, "round": round_index, "seq": seq}
                records.append({**result, "batch": batch})
                print_round(round_index, seq, name, result)
    return records


def table_rows(
    args: argparse.Namespace, records: list[dict[str, Any]], names: list[str], peak: Any
) -> list[dict[str, Any]]:
    """The table's rows (`train_table.summarise`), its caption printed first."""
    from bench import train_table

    rows = train_table.summarise(
        records,
        names,
        {n: task_of(n) for n in names},
        flops_per_token,
        peak,
        lambda name, seq: runs_at_length(name, seq, args.seq_lengths),
    )
    lengths = ", ".join(
        f"{s} (batch {batch_at(s, args)})" for s in sorted({r["seq"] for r in rows})
    )
    print(
        "\nELECTRA-Small train steps (pretrain: the pre-training step; finetune: a GLUE "
        f"classifier's; squad: SQuAD's span head), sequence length {lengths}; median of "
        f"{args.rounds} round(s) x {args.steps} steps; ratios per round against the peer of the "
        "same round and length"
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(RESULT_TAG + json.dumps(worker(args)), flush=True)
        return 0
    if args.matmul_worker:
        print(RESULT_TAG + json.dumps(matmul_worker(args)), flush=True)
        return 0

    from bench import machine, train_table

    names, notes = row_names(args)
    roots = dict.fromkeys(names, ROOT)
    if args.baseline:
        baseline = os.path.abspath(args.baseline)
        if not os.path.isdir(os.path.join(baseline, "electra_tf")):
            args.parser.error(f"--baseline {args.baseline}: no electra_tf package in that folder")
        names.insert(0, BASELINE)
        roots[BASELINE] = baseline
        print(f"baseline: {baseline} ({checkout_revision(baseline)})", flush=True)

    load_start = machine.load_average()
    print(f"load average before: {load_start:.2f}", flush=True)
    for note in notes:
        print(note, flush=True)
    peak = None if args.no_peak else run_child(["--matmul-worker"], args, args.timeout)
    if peak:
        print(
            f"tf.matmul peak: fp32 {peak['float32_gflops']:.0f} GFLOP/s, "
            f"bf16 {peak['bfloat16_gflops']:.0f} GFLOP/s",
            flush=True,
        )
    records = run_rounds(args, names, roots)
    load_end = machine.load_average()
    print(f"load average after: {load_end:.2f}", flush=True)

    rows = table_rows(args, records, names, peak)
    header = machine.header(peak, load_start, load_end)
    print(header)
    print(train_table.markdown(rows))
    for line in train_table.whole_run_lines(rows):
        print(line)
    for note in notes:
        print(f"\n{note}")
    if not args.no_extras:
        for module in ("bench_data", "bench_serve"):
            print(f"\n== {module}\n{run_extra(module, args.timeout)}", flush=True)
    write_outputs(
        args, {"records": records, "summary": {"matmul_peak": peak, "rows": rows}}, header
    )
    return 0


def write_outputs(args: argparse.Namespace, result: dict[str, Any], header: str) -> None:
    """--json (`result`: the records and the table's rows) and the table's picture (--png, or
    beside --json)."""
    # Imported here, not at the top: a worker of another checkout binds its own electra_tf
    # after importing this module (HARNESS_CODE).
    from electra_tf.evaluation import plots

    if args.json:
        atomic_io.write_json(args.json, result, indent=2)
    png = plots.png_path(args.png, args.json)
    if png:
        draw(png, result["summary"]["rows"], header)
        print(f"picture: {png}", flush=True)


def draw(path: str, rows: list[dict[str, Any]], header: str) -> None:
    """The table's tokens/s as bars (`plots.speed_bars`), a panel per sequence length, the
    processor line as the title; failed rows are left out."""
    from electra_tf.evaluation import plots

    panels: dict[str, list[tuple[str, float, str]]] = {}
    for row in rows:
        if row["failed"]:
            continue
        kind = CONFIGS["default" if row["config"] == BASELINE else row["config"]]["kind"]
        group = "peers" if kind in ("peer", "torch") else "electra-tf"
        title = f"sequence length {row['seq']}, batch {row['batch']}"
        panels.setdefault(title, []).append((row["config"], row["tokens_per_s"], group))
    plots.speed_bars(path, panels, "tokens/s (median over rounds)", header)


if __name__ == "__main__":
    sys.exit(main())
