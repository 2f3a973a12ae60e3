"""`make bench`'s rows and table: the configurations it can run (`CONFIGS`, the peers each
task is compared with), medians over rounds, per-round ratios against the peers, MFU (and the
matrix-product FLOPs per token it counts: `flops_per_token`).

Pure functions over the workers' records, so the arithmetic is tested without running a step.
A record is one configuration at one sequence length in one round:
`{"config", "seq", "batch", "round", "tokens_per_s", "peak_rss_mib", "precision",
"jit_compile"}` (`jit_compile` None where XLA does not apply: the PyTorch rows).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

# ---------------------------------------------------------------------------------- rows
# name -> worker settings. "auto" means: what the project's config resolution picks here.
# "parallel2": the batch as two micro-batches side by side (`parallel_micro_batches`), one
# single-threaded core each (threads intra 1, inter 2, whatever --intra/--inter say).
# "task": which step it times, and so which peers its ratios are against (bench/train_table.py).
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
    # Hugging Face PyTorch under --hf-python (bench/peer_torch.py); "bf16": its autocast.
    "hf-fp32": {"kind": "torch", "command": "pretrain"},
    "hf-bf16": {"kind": "torch", "command": "pretrain", "bf16": True},
    # The fine-tuning step of a GLUE classifier (bench/project_step.py) and its PyTorch peers.
    "finetune": {"kind": "finetune", "task": "finetune"},
    "finetune-bf16": {"kind": "finetune", "task": "finetune", "precision": "mixed_bfloat16"},
    "hf-finetune": {"kind": "torch", "command": "finetune", "task": "finetune"},
    "hf-finetune-bf16": {"kind": "torch", "command": "finetune", "task": "finetune", "bf16": True},
    # `python -m electra_tf.finetune` end to end (tokenizing, 3 epochs, checkpoint, evaluation,
    # results) on an MRPC-sized synthetic task: the whole run's training tokens/s, to set
    # beside the step's (`finetune`). Not in the default list: five minutes on 2 cores.
    "finetune-run": {
        "kind": "finetune-run",
        "task": "finetune",
        "step": "finetune",
        "examples": 3668,
        "dev": 408,
    },
    # The same run on the same sentences as a user's CSV task (quoted fields, a task file):
    # reading by column name, the label set from the file, the checks before the first step.
    "finetune-run-csv": {
        "kind": "finetune-run",
        "task": "finetune",
        "step": "finetune",
        "examples": 3668,
        "dev": 408,
        "csv": True,
    },
    # The same run with a training checkpoint every 50 steps (at least 6 in the run), each one
    # timed: its line gives a checkpoint's cost at 500-step intervals, as a share of the run.
    "finetune-run-ckpt": {
        "kind": "finetune-run",
        "task": "finetune",
        "step": "finetune",
        "examples": 3668,
        "dev": 408,
        "hparams": {"save_checkpoints_steps": 50},
    },
    # `python -m electra_tf.pretrain --preset small` end to end (bench/whole_run.py): 300 steps
    # on synthetic TFRecords, a checkpoint every 100, a progress line every 10; its tokens/s
    # over the whole run against the `default` step's, and its phases (start-up, first trace,
    # first call, input, checkpoints, metrics and logging). Not in the default list: six minutes
    # on 2 cores.
    "pretrain-run": {
        "kind": "pretrain-run",
        "step": "default",
        "steps": 300,
        "checkpoints": 3,
        "log_every": 10,
    },
    # SQuAD's fine-tuning step at its length ("seq": these rows run at 384 whatever --seq says).
    "squad": {"kind": "finetune", "task": "squad", "seq": 384},
    "squad-bf16": {"kind": "finetune", "task": "squad", "seq": 384, "precision": "mixed_bfloat16"},
    "hf-squad": {"kind": "torch", "command": "qa", "task": "squad", "seq": 384},
    "hf-squad-bf16": {"kind": "torch", "command": "qa", "task": "squad", "seq": 384, "bf16": True},
}
# task -> its PyTorch peers, float32 and bf16 autocast (added to the rows of that task).
TORCH_PEERS = {
    "pretrain": ("hf-fp32", "hf-bf16"),
    "finetune": ("hf-finetune", "hf-finetune-bf16"),
    "squad": ("hf-squad", "hf-squad-bf16"),
}
DEFAULT_CONFIGS = (
    "default,fp32,fp32+xla,bf16,bf16+xla,mg-fp32,hf-fp32,finetune,finetune-bf16,squad,squad-bf16"
)
PEER = "mg-fp32"
BASELINE = "baseline"


def runs_at_length(name: str, seq: int, lengths: Sequence[int]) -> bool:
    """Whether `name` runs at `seq`: its own length where it has one (SQuAD's), else `lengths`."""
    fixed = CONFIGS.get(name, {}).get("seq")
    return seq == fixed if fixed else seq in lengths


def task_of(name: str) -> str:
    """ "pretrain", "finetune" or "squad": the step a configuration times."""
    return CONFIGS["default" if name == BASELINE else name].get("task", "pretrain")


def is_bf16(name: str) -> bool:
    settings = CONFIGS.get(name, {})
    return settings.get("bf16", False) or "bfloat16" in settings.get("precision", "")


# The peer columns: (column title, {task: the configuration each row of that task is divided by}).
PEER_COLUMNS: tuple[tuple[str, dict[str, str]], ...] = (
    ("vs MG fp32", {"pretrain": "mg-fp32"}),
    ("vs HF PyTorch", {"pretrain": "hf-fp32", "finetune": "hf-finetune", "squad": "hf-squad"}),
    (
        "vs HF bf16",
        {"pretrain": "hf-bf16", "finetune": "hf-finetune-bf16", "squad": "hf-squad-bf16"},
    ),
)


def paired_ratio(
    runs: Sequence[dict[str, Any]], peer_runs: Sequence[dict[str, Any]]
) -> float | None:
    """Median over rounds of tokens/s divided by the peer's of the same round and length.

    Pairing by round keeps each ratio to two measurements minutes apart, so load that came
    and went between rounds moves both; None when no round has both.
    """
    peer = {(p["round"], p["seq"]): p["tokens_per_s"] for p in peer_runs}
    ratios = [
        r["tokens_per_s"] / peer[(r["round"], r["seq"])]
        for r in runs
        if (r["round"], r["seq"]) in peer
    ]
    return statistics.median(ratios) if ratios else None


def summarise(
    records: Sequence[dict[str, Any]],
    names: Sequence[str],
    task_of: dict[str, str],
    flops_per_token: Callable[[str, int], float],
    peak: dict[str, float] | None,
    runs_at: Callable[[str, int], bool] | None = None,
) -> list[dict[str, Any]]:
    """One row per (sequence length, configuration), in length then `names` order.

    `task_of`: configuration -> "pretrain", "finetune" or "squad" (which peers apply);
    `flops_per_token(task, seq)`: matrix-product FLOPs of one token's step (for MFU);
    `peak`: `bench.machine.matmul_peaks`' float32 / bfloat16 GFLOP/s (None: no MFU).
    `runs_at(name, seq)`: whether a configuration runs at that length at all (None: at every
    length); one that should and has no record gives a row with `failed` set.
    """
    rows = []
    for seq in sorted({r["seq"] for r in records}):
        at_seq = [r for r in records if r["seq"] == seq]
        for name in names:
            if runs_at and not runs_at(name, seq):
                continue
            runs = [r for r in at_seq if r["config"] == name]
            row: dict[str, Any] = {"seq": seq, "config": name, "failed": not runs}
            if runs:
                task = task_of[name]
                tokens = statistics.median(r["tokens_per_s"] for r in runs)
                precision = runs[0]["precision"]
                key = "bfloat16_gflops" if "bfloat16" in precision else "float32_gflops"
                gflops = peak[key] if peak else None
                ratios = {}
                for title, peers in PEER_COLUMNS:
                    peer = peers.get(task)
                    peer_runs = [r for r in at_seq if r["config"] == peer]
                    ratios[title] = 1.0 if name == peer else paired_ratio(runs, peer_runs)
                row.update(
                    batch=runs[0]["batch"],
                    task=task,
                    precision=precision,
                    jit_compile=runs[0]["jit_compile"],
                    tokens_per_s=tokens,
                    ratios=ratios,
                    mfu=tokens * flops_per_token(task, seq) / (gflops * 1e9) if gflops else None,
                    peak_rss_mib=max(r["peak_rss_mib"] for r in runs),
                )
                row.update(whole_run_medians(runs))
            rows.append(row)
    return with_step_shares(rows)


# A whole run's figures (bench/whole_run.py): evaluation and serving export (finetune-run),
# checkpoints, the run's steps, its training calls' tokens/s, its phases (pretrain-run).
WHOLE_RUN_KEYS = ("eval_ms", "export_ms", "ckpt_ms", "ckpt_count", "run_steps", "wall_s",
                  "steady_tokens_per_s", "input_ms")  # fmt: skip


def whole_run_medians(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The medians over rounds of a whole run's figures (`WHOLE_RUN_KEYS`, each phase)."""
    medians = {
        key: statistics.median(r[key] for r in runs)
        for key in WHOLE_RUN_KEYS
        if all(key in r for r in runs)
    }
    if all("phases" in r for r in runs):
        phases = runs[0]["phases"]
        medians["phases"] = {k: statistics.median(r["phases"][k] for r in runs) for k in phases}
    return medians


def with_step_shares(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows`, each whole run's with `step_share`: its tokens/s over those of the step it is
    set beside (its CONFIGS "step") at the same length, where both ran."""
    for row in rows:
        step_name = CONFIGS.get(row["config"], {}).get("step")
        step = [r for r in rows if r["config"] == step_name and r["seq"] == row["seq"]]
        if step_name and not row["failed"] and step and not step[0]["failed"]:
            row["step_share"] = row["tokens_per_s"] / step[0]["tokens_per_s"]
    return rows


def ratio_at(rows: Sequence[dict[str, Any]], config: str, column: str, seq: int) -> float | None:
    """The `column` ratio of `config` at length `seq`, or None."""
    for row in rows:
        if row["config"] == config and row["seq"] == seq and not row["failed"]:
            return row["ratios"].get(column)
    return None


# The checkpoint period the bench states the cost of (the target: 2% of the run's time or less).
CHECKPOINT_PERIOD = 500


def checkpoint_line(row: dict[str, Any]) -> str:
    """A `finetune-run` row's training checkpoint: its median time, and that time once every
    `CHECKPOINT_PERIOD` steps of the run's as a share of the run's time."""
    step_s = row["batch"] * row["seq"] / row["tokens_per_s"]  # the whole run's, per step
    cost = row["ckpt_ms"] / 1000 / (CHECKPOINT_PERIOD * step_s)
    return (
        f"{row['config']}: a training checkpoint {row['ckpt_ms']:.0f} ms (median of "
        f"{row['ckpt_count']}), every {CHECKPOINT_PERIOD} steps {cost:.2%} of the run's time "
        f"({step_s:.2f} s a step)"
    )


def pretrain_run_line(row: dict[str, Any]) -> str:
    """A `pretrain-run` row: its share of the step (`step_share`, where the step ran), its
    training calls' tokens/s, and where the rest of its wall time went (`phases`)."""
    step_tokens = row["tokens_per_s"] / row["step_share"] if "step_share" in row else None
    share = "" if step_tokens is None else (
        f" at {row['step_share']:.0%} of the default step's tokens/s ({row['tokens_per_s']:.0f} "
        f"against {step_tokens:.0f}); its training calls alone at "
        f"{row['steady_tokens_per_s'] / step_tokens:.0%}"
    )  # fmt: skip
    phases = row["phases"]
    parts = [f"{name} {seconds:.1f} s" for name, seconds in phases.items() if name != "steps"]
    return (
        f"\n{row['config']}: the whole pre-training run ({row['run_steps']:.0f} steps){share}; "
        f"its {row['wall_s']:.1f} s: steps {phases['steps']:.1f} s, " + ", ".join(parts)
        + f" (input {row['input_ms']:.1f} ms a batch read alone; {row['ckpt_count']:.0f} "
        f"checkpoints, {row['ckpt_ms']:.0f} ms each)"
    )  # fmt: skip


def whole_run_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """For a `finetune-run` row: its whole run's tokens/s as a share of the `finetune` step's at
    the same length (the target is 90% or more); for a `pretrain-run` row, `pretrain_run_line`
    (the target: 95% of the step or more)."""
    lines = []
    for row in rows:
        if CONFIGS.get(row["config"], {}).get("kind") == "pretrain-run" and not row["failed"]:
            lines.append(pretrain_run_line(row))
        step = [r for r in rows if r["config"] == "finetune" and r["seq"] == row["seq"]]
        whole = CONFIGS.get(row["config"], {}).get("kind") == "finetune-run"
        if whole and not row["failed"] and step and not step[0]["failed"]:
            share = row["tokens_per_s"] / step[0]["tokens_per_s"]
            lines.append(
                f"\n{row['config']}: the whole fine-tuning run at {share:.0%} of the finetune "
                f"step's tokens/s ({row['tokens_per_s']:.0f} against {step[0]['tokens_per_s']:.0f})"
            )
        if whole and row.get("ckpt_ms"):
            lines.append(checkpoint_line(row))
        if whole and row.get("eval_ms"):
            lines.append(
                f"{row['config']}: evaluation {row['eval_ms']:.0f} ms per batch of {row['batch']}, "
                f"the task's serving export {row['export_ms']:.0f} ms "
                f"({row['export_ms'] / row['eval_ms']:.2f}x the export's speed)"
            )
    return lines


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    titles = [title for title, _ in PEER_COLUMNS]
    lines = [
        "| seq | batch | configuration | step | precision | XLA | tokens/s | "
        + " | ".join(titles)
        + " | MFU | peak RSS MiB |",
        "| ---: | ---: | --- | --- | --- | --- | ---: | " + " | ".join("---:" for _ in titles)
        + " | ---: | ---: |",
    ]  # fmt: skip
    for row in rows:
        if row["failed"]:
            lines.append(
                f"| {row['seq']} | | {row['config']} | failed |" + " |" * (6 + len(titles))
            )
            continue
        xla = {True: "on", False: "off", None: "-"}[row["jit_compile"]]
        ratios = " | ".join(_ratio(row["ratios"][t]) for t in titles)
        lines.append(
            f"| {row['seq']} | {row['batch']} | {row['config']} | {row['task']} | "
            f"{row['precision']} | {xla} | {row['tokens_per_s']:.0f} | {ratios} | "
            f"{'-' if row['mfu'] is None else format(row['mfu'], '.1%')} | "
            f"{row['peak_rss_mib']:.0f} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- FLOPs
def _encoder_flops(seq: int, hidden: int, layers: int, ffn: int) -> float:
    """Forward matrix-product FLOPs per token of one encoder."""
    dense = 4 * hidden * hidden + 2 * hidden * ffn  # q, k, v, output; FFN in and out
    attention = 2 * seq * hidden  # scores and context, per token
    return 2.0 * layers * (dense + attention)


def electra_small_train_flops_per_token(seq: int, vocab: int = 30522) -> float:
    """Matrix-product FLOPs per token of one ELECTRA-Small train step (forward x 3).

    Counts every dense layer and both attention products of the discriminator (12 x 256, FFN
    1024) and generator (12 x 64, FFN 256), both embedding projections (128 -> H), the
    discriminator head, and the generator head at the masked positions only (the fraction
    max_predictions / seq of tokens). Backward costs twice the forward.
    """
    embedding = 128
    masked_fraction = int((0.15 + 0.005) * seq) / seq
    forward = (
        _encoder_flops(seq, 256, 12, 1024)
        + _encoder_flops(seq, 64, 12, 256)
        + 2.0 * embedding * (256 + 64)  # embeddings_project of both towers
        + 2.0 * 256 * 256  # discriminator_predictions/dense
        + masked_fraction * 2.0 * (64 * embedding + embedding * vocab)  # generator head
    )
    return 3.0 * forward


def electra_small_finetune_flops_per_token(seq: int) -> float:
    """Matrix-product FLOPs per token of one fine-tuning step (forward x 3): the
    discriminator's encoder and embedding projection (a classifier's [CLS] head is one row in
    `seq`; SQuAD's span head is 2 x 256 per token, 0.01% of it: both left out)."""
    return 3.0 * (_encoder_flops(seq, 256, 12, 1024) + 2.0 * 128 * 256)


def flops_per_token(task: str, seq: int) -> float:
    if task in ("finetune", "squad"):
        return electra_small_finetune_flops_per_token(seq)
    return electra_small_train_flops_per_token(seq)


def print_round(round_index: int, seq: int, name: str, result: dict[str, Any]) -> None:
    # The project's resolved step layout and thread pools (0 = TensorFlow's default).
    layout = ""
    if "parallel_micro_batches" in result:
        intra, inter = result["threads"]
        layout = (
            f", parallel_micro_batches {result['parallel_micro_batches']}, "
            f"threads ({intra}, {inter})"
        )
    elif "torch" in result:
        layout = f", torch {result['torch']}, {result['threads'][0]} threads"
    print(
        f"round {round_index + 1} seq {seq} {name:12s} {result['tokens_per_s']:8.0f} tokens/s "
        f"(step {result['step_s']:.3f} s, peak RSS {result['peak_rss_mib']:.0f} MiB{layout})",
        flush=True,
    )
