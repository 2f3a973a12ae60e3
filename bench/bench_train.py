"""`make bench`: ELECTRA-Small train-step throughput, this project against Model Garden, same run.

Every configuration runs in its own subprocess (so each peak-RSS figure is that configuration's
own high-water mark), and the configurations are interleaved round by round (A B C ... A B C)
so that load from other processes on the machine hits them alike; the reported figures are
medians over rounds, and the ratio is taken per round against the peer measured next to it.
The same run measures the machine's tf.matmul peak (fp32 and bf16) for MFU.

Usage:
    python -m bench.bench_train [--batch 32] [--seq 128] [--steps 6] [--rounds 2]
        [--configs default,fp32,...] [--skip-peer] [--no-extras]

Rows: the project at its default precision/XLA, parallel micro-batches and thread pools
(each "auto" resolved for this machine, as `python -m electra_tf.pretrain` resolves them; the
round lines name the result), at float32 and mixed_bfloat16 with XLA on and off, and Model
Garden fp32 (`parallel2`, not in the default list: `parallel_micro_batches` 2 with threads
(1, 2), whatever the machine). `--baseline DIR` adds a row
`baseline`: the default configuration with the `electra_tf` package of another checkout (e.g. a
`git worktree` of an earlier commit), timed by this checkout's harness in the same rounds, for
before/after figures of a change. `--batch 128 --configs default
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULT_TAG = "BENCH_RESULT "

# name -> worker settings. "auto" means: what the project's config resolution picks here.
# "parallel2": the batch as two micro-batches side by side (`parallel_micro_batches`), one
# single-threaded core each (threads intra 1, inter 2, whatever --intra/--inter say).
CONFIGS: dict[str, dict] = {
    "default": {"kind": "project", "precision": "auto", "jit": "auto"},
    "parallel2": {
        "kind": "project",
        "precision": "auto",
        "jit": "auto",
        "hparams": {"parallel_micro_batches": 2},
        "threads": (1, 2),
    },
    "fp32": {"kind": "project", "precision": "float32", "jit": "off"},
    "fp32+xla": {"kind": "project", "precision": "float32", "jit": "on"},
    "bf16": {"kind": "project", "precision": "mixed_bfloat16", "jit": "off"},
    "bf16+xla": {"kind": "project", "precision": "mixed_bfloat16", "jit": "on"},
    "mg-fp32": {"kind": "peer", "precision": "float32", "jit": "off"},
    "mg-fp32+xla": {"kind": "peer", "precision": "float32", "jit": "on"},
}
DEFAULT_CONFIGS = "default,fp32,fp32+xla,bf16,bf16+xla,mg-fp32"
PEER = "mg-fp32"
BASELINE = "baseline"


def checkout_revision(directory: str) -> str:
    """The commit a checkout is at (or why not), for a baseline row's label (also bench_serve's)."""
    try:
        proc = subprocess.run(
            ["git", "-C", directory, "log", "-1", "--format=%h %s"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no git: {e}"
    return proc.stdout.strip()[:70] or "no git"


def electra_small_train_flops_per_token(seq: int, vocab: int = 30522) -> float:
    """Matrix-product FLOPs per token of one ELECTRA-Small train step (forward x 3).

    Counts every dense layer and both attention products of the discriminator (12 x 256, FFN
    1024) and generator (12 x 64, FFN 256), both embedding projections (128 -> H), the
    discriminator head, and the generator head at the masked positions only (the fraction
    max_predictions / seq of tokens). Backward costs twice the forward.
    """

    def encoder(hidden: int, layers: int, ffn: int) -> float:
        dense = 4 * hidden * hidden + 2 * hidden * ffn  # q, k, v, output; FFN in and out
        attention = 2 * seq * hidden  # scores and context, per token
        return 2.0 * layers * (dense + attention)

    embedding = 128
    masked_fraction = int((0.15 + 0.005) * seq) / seq
    forward = (
        encoder(256, 12, 1024)
        + encoder(64, 12, 256)
        + 2.0 * embedding * (256 + 64)  # embeddings_project of both towers
        + 2.0 * 256 * 256  # discriminator_predictions/dense
        + masked_fraction * 2.0 * (64 * embedding + embedding * vocab)  # generator head
    )
    return 3.0 * forward


# ---------------------------------------------------------------------------------- workers
def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _set_threads(intra: int, inter: int) -> None:
    import tensorflow as tf

    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(inter)


def _time_steps(run_step, steps: int, warmup: int) -> list[float]:
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        run_step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def worker(args: argparse.Namespace) -> dict[str, Any]:
    settings = CONFIGS[args.worker]
    _set_threads(*settings.get("threads", (args.intra, args.inter)))
    start = time.perf_counter()
    if settings["kind"] == "peer":
        from bench.peer_model_garden import build_peer_step

        step, inputs, params = build_peer_step(args.batch, args.seq, jit=settings["jit"] == "on")
        resolved = {"precision": "float32", "jit_compile": settings["jit"] == "on"}

        def run_step() -> None:
            step(inputs).numpy()

    elif settings["kind"] == "project":
        from bench.project_step import build_project_step

        run_step, params, resolved = build_project_step(
            args.batch, args.seq, settings["precision"], settings["jit"], settings.get("hparams")
        )
    else:
        raise ValueError(f"unknown worker kind {settings['kind']!r}")
    build_seconds = time.perf_counter() - start
    times = _time_steps(run_step, args.steps, args.warmup)
    step_s = statistics.median(times)
    return {
        "config": args.worker,
        "params": params,
        "step_s": step_s,
        "tokens_per_s": args.batch * args.seq / step_s,
        "build_s": build_seconds,
        "peak_rss_mib": _peak_rss_mib(),
        **resolved,
    }


def matmul_worker(args: argparse.Namespace) -> dict[str, Any]:
    import tensorflow as tf

    from bench.matmul_peak import matmul_peak

    _set_threads(args.intra, args.inter)
    return {
        "float32_gflops": matmul_peak(tf.float32),
        "bfloat16_gflops": matmul_peak(tf.bfloat16),
    }


# ---------------------------------------------------------------------------------- parent
def run_child(
    extra: list[str], args: argparse.Namespace, timeout: float, root: str = ROOT
) -> dict[str, Any]:
    """One worker in its own process; `root` is the checkout whose `electra_tf` it imports
    (this file runs by its path; `bench` resolves to `root`'s when that is a package, else to
    this checkout's)."""
    command = [
        sys.executable,
        os.path.abspath(__file__),
        *extra,
        f"--batch={args.batch}",
        f"--seq={args.seq}",
        f"--steps={args.steps}",
        f"--warmup={args.warmup}",
        f"--intra={args.intra}",
        f"--inter={args.inter}",
    ]
    path = os.pathsep.join(dict.fromkeys([root, ROOT]))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=path)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    raise RuntimeError(
        f"bench worker {' '.join(extra)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    )


def run_extra(module: str, timeout: float) -> str:
    """Runs another bench module (data prep, serving) and returns its output."""
    if not os.path.exists(os.path.join(HERE, f"{module}.py")):
        return f"{module}: not present"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    command = [sys.executable, "-m", f"bench.{module}"]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        return f"{module}: timed out after {timeout:.0f} s"
    if proc.returncode:
        return f"{module}: failed (exit {proc.returncode})\n{proc.stderr[-1500:]}"
    return proc.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repetitions")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"of {sorted(CONFIGS)}")
    parser.add_argument("--skip-peer", action="store_true", help="no Model Garden row")
    parser.add_argument("--no-extras", action="store_true", help="skip bench_data/bench_serve")
    parser.add_argument("--intra", type=int, default=0, help="intra-op threads (0: TF default)")
    parser.add_argument("--inter", type=int, default=0, help="inter-op threads (0: TF default)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per subprocess")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--baseline", help="another checkout: its electra_tf as a 'baseline' row (default config)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--matmul-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(RESULT_TAG + json.dumps(worker(args)), flush=True)
        return 0
    if args.matmul_worker:
        print(RESULT_TAG + json.dumps(matmul_worker(args)), flush=True)
        return 0

    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    for name in names:
        if name not in CONFIGS:
            parser.error(f"--configs: unknown configuration {name!r}; known: {sorted(CONFIGS)}")
    if args.skip_peer:
        names = [n for n in names if CONFIGS[n]["kind"] != "peer"]
    elif PEER not in names:
        names.append(PEER)
    roots = dict.fromkeys(names, ROOT)
    if args.baseline:
        baseline = os.path.abspath(args.baseline)
        if not os.path.isdir(os.path.join(baseline, "electra_tf")):
            parser.error(f"--baseline {args.baseline}: no electra_tf package in that folder")
        names.insert(0, BASELINE)
        roots[BASELINE] = baseline
        print(f"baseline: {baseline} ({checkout_revision(baseline)})", flush=True)

    print(f"load average before: {os.getloadavg()}", flush=True)
    peak = run_child(["--matmul-worker"], args, args.timeout)
    print(
        f"tf.matmul peak: fp32 {peak['float32_gflops']:.0f} GFLOP/s, "
        f"bf16 {peak['bfloat16_gflops']:.0f} GFLOP/s",
        flush=True,
    )
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for round_index in range(args.rounds):
        for name in names:
            try:
                config = "default" if name == BASELINE else name
                result = run_child([f"--worker={config}"], args, args.timeout, roots[name])
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                # One failed configuration must not discard the others' measurements.
                print(f"round {round_index + 1} {name:12s} FAILED: {str(e)[-500:]}", flush=True)
                continue
            results[name].append({**result, "round": round_index})
            # The project's resolved step layout and thread pools (0 = TensorFlow's default).
            layout = ""
            if "parallel_micro_batches" in result:
                intra, inter = result["threads"]
                layout = (
                    f", parallel_micro_batches {result['parallel_micro_batches']}, "
                    f"threads ({intra}, {inter})"
                )
            print(
                f"round {round_index + 1} {name:12s} {result['tokens_per_s']:8.0f} tokens/s "
                f"(step {result['step_s']:.3f} s, peak RSS {result['peak_rss_mib']:.0f} MiB"
                f"{layout})",
                flush=True,
            )
    print(f"load average after: {os.getloadavg()}", flush=True)

    flops = electra_small_train_flops_per_token(args.seq)
    print(
        f"\nELECTRA-Small train step, batch {args.batch} x {args.seq}, "
        f"median of {args.rounds} round(s) x {args.steps} steps; "
        f"{flops / 1e6:.1f} MFLOP/token in matmuls"
    )
    print("| configuration | precision | XLA | tokens/s | vs MG fp32 | MFU | peak RSS MiB |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    summary = {"matmul_peak": peak, "flops_per_token": flops, "rows": {}}
    for name in names:
        runs = results[name]
        if not runs:
            print(f"| {name} | failed | | | | | |")
            continue
        tokens = statistics.median(r["tokens_per_s"] for r in runs)
        # Ratios pair each run with the peer of the same round (measured minutes apart).
        peer_by_round = {p["round"]: p["tokens_per_s"] for p in results.get(PEER, [])}
        ratios = [
            r["tokens_per_s"] / peer_by_round[r["round"]]
            for r in runs
            if r["round"] in peer_by_round
        ]
        if name == PEER:
            ratio = "1.00x"
        elif ratios:
            ratio = f"{statistics.median(ratios):.2f}x"
        else:
            ratio = "-"
        precision = runs[0]["precision"]
        gflops = peak["bfloat16_gflops" if "bfloat16" in precision else "float32_gflops"]
        mfu = tokens * flops / (gflops * 1e9)
        rss = max(r["peak_rss_mib"] for r in runs)
        xla = "on" if runs[0]["jit_compile"] else "off"
        print(f"| {name} | {precision} | {xla} | {tokens:.0f} | {ratio} | {mfu:.1%} | {rss:.0f} |")
        summary["rows"][name] = {"tokens_per_s": tokens, "ratio": ratio, "mfu": mfu, "rss": rss}

    if not args.no_extras:
        for module in ("bench_data", "bench_serve"):
            print(f"\n== {module}\n{run_extra(module, args.timeout)}", flush=True)
    if args.json:
        tmp = f"{args.json}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"results": results, "summary": summary}, f, indent=2)
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
