"""`make bench-curve`: how the cost grows with sequence length, this project against its peers.

At each sequence length (default 128, 256, 512), in one run and one table:

- training, in float32 and in `mixed_bfloat16` (`LINES`): the project's pre-training step
  (float32: the default step), Model Garden's `ElectraPretrainer` (float32 only: it does not
  run under mixed_bfloat16) and Hugging Face PyTorch's (under `--hf-python`; bf16: its
  autocast), at a FIXED NUMBER OF TOKENS PER BATCH (`--tokens-per-batch`, default 4096:
  batch 32 x 128, 16 x 256, 8 x 512), so that a step
  holds the same dense-layer work at every length and what grows is attention's (its products
  grow with the length per token). tokens/s, and the ratios per round against each peer
  (`bench_train`'s rounds, interleaved);
- serving: the exported discriminator's `encode_ids` at batch 1 and 32 (`bench_serve`, default
  export only) against Hugging Face PyTorch with the same weights, p50 latency;
- attention's share of the step, from TensorFlow's profiler (`profile_breakdown`): the busy
  time in QK^T, the scale and mask, softmax, AV and the dropout on the probabilities (with their
  gradients), for the train step and for serving at batch 32.

Then it says whether the project's ratio to each peer at the longest length is at least the
one at the shortest (the cost curve is no worse than the peer's), and whether the ratio to
Model Garden at the longest length is at least `MIN_MODEL_GARDEN_RATIO`.

    python -m bench.cost_curve [--seq-lengths 128,256,512] [--tokens-per-batch 4096]
        [--rounds 2] [--steps 4] [--calls 20] [--hf-python P] [--no-profile] [--json F] [--png F]
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # `python bench/cost_curve.py`: bench is a package
    raise SystemExit("run it from the repository root as: python -m bench.cost_curve")

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from bench import bench_train, machine, train_table
from electra_tf.runtime import atomic_io

# The training lines, by precision: (the project's configuration, {peer: the column of
# `train_table.PEER_COLUMNS` that holds its ratio}). "default" is the pre-training step as the
# preset resolves it (float32, the original's). Model Garden's `ElectraPretrainer` does not run
# under mixed_bfloat16 (its sampler adds float32 noise to bfloat16 logits: a TypeError), so the
# bfloat16 line is set beside its float32 step.
LINES: dict[str, tuple[str, dict[str, str]]] = {
    "float32": ("default", {"Model Garden": "vs MG fp32", "HF PyTorch": "vs HF PyTorch"}),
    "mixed_bfloat16": ("bf16", {"Model Garden": "vs MG fp32", "HF PyTorch": "vs HF bf16"}),
}
_PEER_CONFIGS = {title: peers["pretrain"] for title, peers in train_table.PEER_COLUMNS}
TRAIN_CONFIGS = tuple(
    dict.fromkeys(
        c for ours, peers in LINES.values() for c in (ours, *map(_PEER_CONFIGS.get, peers.values()))
    )
)
PEERS = ("Model Garden", "HF PyTorch")
SERVE_BATCHES = (1, 32)
# The least the project's training ratio to Model Garden should be at the longest length.
MIN_MODEL_GARDEN_RATIO = 1.8
# The training configurations by the system each one is (the picture's lines).
SYSTEMS = {"default": "electra-tf", "bf16": "electra-tf bf16", "mg-fp32": "Model Garden",
           "hf-fp32": "HF PyTorch", "hf-bf16": "HF PyTorch bf16"}  # fmt: skip


def run_module(module: str, arguments: list[str], timeout: float) -> tuple[bool, str]:
    """`python -m bench.<module> arguments` from the repository root: (succeeded, output)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=bench_train.ROOT)
    command = [sys.executable, "-m", f"bench.{module}", *arguments]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, cwd=bench_train.ROOT
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f} s"
    if proc.returncode:
        return False, f"exit {proc.returncode}: {proc.stderr.strip()[-800:]}"
    return True, proc.stdout


def serve_at(seq: int, args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    """bench_serve at one length: {row: {batch: p50 ms}} for the default export and HF."""
    out = os.path.join(workdir, f"serve_{seq}.json")
    arguments = ["--seq", str(seq), "--batches", ",".join(map(str, SERVE_BATCHES))]
    arguments += ["--calls", str(args.calls), "--min-calls", "1", "--warmup", str(args.warmup)]
    arguments += ["--no-variants", "--no-ort", "--json", out, "--no-png"]
    if args.hf_python:
        arguments += ["--hf-python", args.hf_python]
    ok, output = run_module("bench_serve", arguments, args.timeout)
    if not ok:
        print(f"serving at seq {seq} FAILED: {output}", flush=True)
        return {}
    with open(out, encoding="utf-8") as f:
        rows = json.load(f)["rows"]
    return {
        row: {int(batch): s["p50"] for batch, s in by_signature["encode_ids"].items()}
        for row, by_signature in rows.items()
        if "encode_ids" in by_signature
    }


def attention_at(seq: int, batch: int, args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    """profile_breakdown at one length: {"train": share, "serve": share at batch 32}."""
    out = os.path.join(workdir, f"profile_{seq}.json")
    arguments = ["--path", "both", "--seq", str(seq), "--batch", str(batch), "--no-peak"]
    arguments += ["--serve-batches", str(SERVE_BATCHES[-1]), "--steps", str(args.profile_steps)]
    arguments += ["--warmup", "1", "--out", out]
    ok, output = run_module("profile_breakdown", arguments, args.timeout)
    if not ok:
        print(f"profile at seq {seq} FAILED: {output}", flush=True)
        return {}
    with open(out, encoding="utf-8") as f:
        profiles = json.load(f)["profiles"]
    return {p["path"]: p["attention"]["share_of_busy"] for p in profiles}


def curve_rows(
    train_rows: Sequence[dict[str, Any]],
    serving: dict[int, dict[str, Any]],
    attention: dict[int, dict[str, Any]],
    seq_lengths: Sequence[int],
) -> list[dict[str, Any]]:
    """One row per length: for each precision of `LINES`, the project's training row
    (`train_table.summarise`'s: tokens/s, the median over rounds) and its ratio to each peer
    (that row's per-round ratio in the peer's column); serving p50s and their ratios (HF p50 /
    ours: > 1 means the project is faster); attention shares."""
    rows = []
    for seq in seq_lengths:
        row: dict[str, Any] = {"seq": seq, "train": {}, "serve": {}, "attention": {}}
        for precision, (config, peers) in LINES.items():
            ours = next((r for r in train_rows if r["config"] == config and r["seq"] == seq), None)
            row["train"][precision] = None
            if ours and not ours["failed"]:
                row["train"][precision] = {
                    "config": config,
                    "batch": ours["batch"],
                    "tokens_per_s": ours["tokens_per_s"],
                    "ratios": {peer: ours["ratios"].get(column) for peer, column in peers.items()},
                }
        served = serving.get(seq, {})
        for batch in SERVE_BATCHES:
            mine = served.get("electra-tf", {}).get(batch)
            peer = served.get("HF PyTorch", {}).get(batch)
            row["serve"][batch] = {
                "ours_ms": mine,
                "hf_ms": peer,
                "ratio": peer / mine if mine and peer else None,
            }
        row["attention"] = attention.get(seq, {})
        rows.append(row)
    return rows


def _train_ratio(row: dict[str, Any], precision: str, peer: str) -> float | None:
    train = row["train"].get(precision)
    return train["ratios"].get(peer) if train else None


def verdicts(rows: Sequence[dict[str, Any]]) -> list[str]:
    """For each precision and peer: the project's ratio at the longest length against the
    shortest's; the ratio to Model Garden at the longest against `MIN_MODEL_GARDEN_RATIO`."""
    first, last = rows[0], rows[-1]
    pairs = [
        (f"training {precision} {peer}", _train_ratio(first, precision, peer),
         _train_ratio(last, precision, peer))
        for precision in LINES for peer in PEERS
    ]  # fmt: skip
    pairs += [
        (f"serving batch {b} HF PyTorch", first["serve"][b]["ratio"], last["serve"][b]["ratio"])
        for b in SERVE_BATCHES
    ]
    lines = []
    for what, short, long in pairs:
        if short is None or long is None:
            lines.append(f"- {what}: not measured at both {first['seq']} and {last['seq']}")
            continue
        verdict = "no worse" if long >= short else f"WORSE by {1 - long / short:.0%}"
        lines.append(
            f"- {what}: {short:.2f}x at {first['seq']}, {long:.2f}x at {last['seq']}: {verdict}"
        )
    for precision in LINES:
        ratio = _train_ratio(last, precision, "Model Garden")
        if ratio is not None:
            met = "met" if ratio >= MIN_MODEL_GARDEN_RATIO else "NOT met"
            lines.append(
                f"- training {precision} at {last['seq']}: {ratio:.2f}x Model Garden "
                f"(target {MIN_MODEL_GARDEN_RATIO}x or more: {met})"
            )
    return lines


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Two tables: training (a row per length and precision, its ratio to each peer of the
    same precision, attention's share of the float32 step) and serving (a row per length)."""
    lines = [
        "| seq | precision | train batch | train tokens/s | vs Model Garden | vs HF PyTorch "
        "| attention, train |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        for precision in LINES:
            train = row["train"].get(precision)
            if train is None:
                lines.append(f"| {row['seq']} | {precision} | | failed | | | |")
                continue
            share = row["attention"].get("train") if precision == "float32" else None
            cells = [str(row["seq"]), precision, str(train["batch"]),
                     f"{train['tokens_per_s']:.0f}", *(_x(train["ratios"].get(p)) for p in PEERS),
                     _pct(share)]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| seq | serve b1 p50 ms (ours / HF) | vs HF b1 | serve b32 p50 ms (ours / HF) "
        "| vs HF b32 | attention, serve b32 |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        cells = [str(row["seq"])]
        for batch in SERVE_BATCHES:
            s = row["serve"][batch]
            cells += [f"{_ms(s['ours_ms'])} / {_ms(s['hf_ms'])}", _x(s["ratio"])]
        cells.append(_pct(row["attention"].get("serve")))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-lengths", type=bench_train.int_list, default=[128, 256, 512])
    parser.add_argument("--tokens-per-batch", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved training rounds")
    parser.add_argument("--steps", type=int, default=4, help="timed training steps per row")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps / calls first")
    parser.add_argument("--calls", type=int, default=20, help="timed serving calls per row")
    parser.add_argument("--profile-steps", type=int, default=3, help="profiled steps / calls")
    parser.add_argument("--no-profile", action="store_true", help="no attention shares")
    parser.add_argument("--no-serve", action="store_true", help="no serving columns")
    parser.add_argument("--hf-python", default=bench_train.default_peer_python())
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per subprocess")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--png", help="draw the curves here (default: beside --json, as .png)")
    args = parser.parse_args(argv)
    problem = atomic_io.make_parents(args.json, args.png)
    if problem:
        parser.error(problem)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    train_argv = ["--configs", ",".join(TRAIN_CONFIGS), "--no-extras"]
    train_argv += ["--seq-lengths", ",".join(map(str, args.seq_lengths))]
    train_argv += ["--tokens-per-batch", str(args.tokens_per_batch), "--rounds", str(args.rounds)]
    train_argv += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    train_argv += ["--hf-python", args.hf_python, "--timeout", str(args.timeout)]
    train_args = bench_train.parse_args(train_argv)
    names, notes = bench_train.row_names(train_args)

    load_start = machine.load_average()
    peak = bench_train.run_child(["--matmul-worker"], train_args, args.timeout)
    records = bench_train.run_rounds(train_args, names, dict.fromkeys(names, bench_train.ROOT))
    train_rows = train_table.summarise(
        records,
        names,
        {n: bench_train.task_of(n) for n in names},
        bench_train.flops_per_token,
        peak,
    )
    serving: dict[int, dict[str, Any]] = {}
    attention: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for seq in args.seq_lengths:
            if not args.no_serve:
                print(f"serving at seq {seq}", flush=True)
                serving[seq] = serve_at(seq, args, workdir)
            if not args.no_profile:
                print(f"profiling at seq {seq}", flush=True)
                batch = bench_train.batch_at(seq, train_args)
                attention[seq] = attention_at(seq, batch, args, workdir)
    load_end = machine.load_average()

    rows = curve_rows(train_rows, serving, attention, args.seq_lengths)
    print(
        f"\nCost curve, ELECTRA-Small: training at {args.tokens_per_batch} tokens per batch "
        f"(median of {args.rounds} rounds x {args.steps} steps; float32: the project's default "
        "step; bf16 against PyTorch's bf16 autocast and Model Garden's float32), "
        f"serving `encode_ids` p50 of {args.calls} calls (threads 1, 2; PyTorch its default); "
        "ratios > 1: the project is faster; attention: share of the busy time in QK^T, scale "
        "and mask, softmax, AV and dropout on the probabilities (TensorFlow profiler)"
    )
    header = machine.header(peak, load_start, load_end)
    print(header)
    print(markdown(rows))
    print("\nThe project's ratio at the longest length against the shortest:")
    print("\n".join(verdicts(rows)))
    print("\nEvery training row:\n" + train_table.markdown(train_rows))
    for note in notes:
        print(f"\n{note}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "train_rows": train_rows, "peak": peak}, f, indent=2)
    from electra_tf.evaluation import plots

    png = plots.png_path(args.png, args.json)
    if png:
        draw(png, rows, train_rows, header)
        print(f"picture: {png}")
    return 0


def draw(
    path: str, rows: Sequence[dict[str, Any]], train_rows: Sequence[dict[str, Any]], header: str
) -> None:
    """Cost against length (`plots.cost_vs_length`), a line per system: training time per
    token (every training row of `SYSTEMS`), serving p50 at each batch (`curve_rows`' rows)."""
    from electra_tf.evaluation import plots

    training: dict[str, dict[int, float]] = {}
    for row in train_rows:
        if row["config"] in SYSTEMS and not row["failed"]:
            by_seq = training.setdefault(SYSTEMS[row["config"]], {})
            by_seq[row["seq"]] = 1e6 / row["tokens_per_s"]
    panels = [("training step", "µs per token", training)]
    for batch in SERVE_BATCHES:
        serving = {
            system: {row["seq"]: row["serve"][batch][key] for row in rows}
            for system, key in (("electra-tf", "ours_ms"), ("HF PyTorch", "hf_ms"))
        }
        panels.append((f"serving `encode_ids`, batch {batch}", "p50 latency (ms)", serving))
    plots.cost_vs_length(path, panels, header)


if __name__ == "__main__":
    sys.exit(main())
