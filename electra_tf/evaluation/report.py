"""The report of `compare_objectives`: a Markdown table, a JSON file, and where the
measured ordering differs from the paper's Table 5. Pure functions on plain dicts (no
TensorFlow), so the tests feed them hand-made numbers.

A row (one dict per objective, plus the random-initialisation row) holds:
`objective`, `steps`, `warmup_steps`, `real_tokens` (steps x the pilot's real tokens per step),
`token_positions` (steps x batch x max_seq_length), `seconds_per_step` (pilot),
`planned_seconds`, `wall_seconds` (measured, every segment of a resumed run summed),
`segments`, `capped`, `heldout` (metrics dict or None), `lr`, `val_accuracy_by_lr`,
`dev_accuracy_trials`, `dev_accuracy_median`. The pre-training fields are None for `random`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

# The paper's Table 5 (Clark et al. 2020, Section 3.2; GLUE score, Base-size models), worst to
# best: BERT < ELECTRA 15% < Replace MLM < All-Tokens MLM < ELECTRA.
# Electric is from another paper and `random` is no objective: neither is compared.
TABLE5_ORDER = ("bert_mlm", "electra_15", "replace_mlm", "all_tokens_mlm", "electra")
DISPLAY_NAMES = {
    "bert_mlm": "BERT",
    "electra_15": "ELECTRA 15%",
    "replace_mlm": "Replace MLM",
    "all_tokens_mlm": "All-Tokens MLM",
    "electra": "ELECTRA",
    "electric": "Electric",
    "random": "random init",
}
# Held-out metrics shown in the table, when the row has them (the JSON keeps every metric).
SHOWN_METRICS = (
    "masked_lm_accuracy",
    "disc_auc",
    "replace_mlm_accuracy",
    "all_tokens_mlm_accuracy",
)


def display(objective: str) -> str:
    return DISPLAY_NAMES.get(objective, objective)


def _spread(trials: Sequence[float]) -> float | None:
    """max - min over the seeds; None for fewer than two seeds (no spread to judge by)."""
    return max(trials) - min(trials) if len(trials) > 1 else None


def table5_comparison(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Compares the dev medians of the Table 5 objectives that were run with the paper's order.

    Every pair the paper orders is checked; a pair where the paper's better objective does not
    score strictly higher here is a disagreement. A disagreement smaller than the larger seed
    spread (max - min over seeds) of the two rows is marked as such: the seeds alone move a row
    that much (`within_seed_spread` is None when neither row has two seeds). Returns
    `measured_order` (worst to best), `disagreements` and `statement`."""
    medians = {
        r["objective"]: r["dev_accuracy_median"]
        for r in rows
        if r["objective"] in TABLE5_ORDER and r.get("dev_accuracy_median") is not None
    }
    trials = {r["objective"]: r.get("dev_accuracy_trials") or [] for r in rows}
    compared = [name for name in TABLE5_ORDER if name in medians]
    left_out = sorted(r["objective"] for r in rows if r["objective"] not in TABLE5_ORDER)
    paper = " < ".join(display(n) for n in TABLE5_ORDER)
    lines = [f"Paper (Table 5, worst to best): {paper}."]
    if len(compared) < 2:
        lines.append("Fewer than two of its objectives have a result here: nothing to compare.")
        return {"measured_order": compared, "disagreements": [], "statement": " ".join(lines)}
    # Python's sort is stable: equal medians keep the paper's order, and are still reported.
    measured = sorted(compared, key=lambda n: medians[n])
    order = f"{display(measured[0])} {medians[measured[0]]:.2f}"
    for prev, name in zip(measured, measured[1:], strict=False):
        order += f" {'=' if medians[name] == medians[prev] else '<'} "
        order += f"{display(name)} {medians[name]:.2f}"
    lines.append(f"Here (dev median, worst to best): {order}.")
    disagreements = _disagreements(compared, medians, trials)
    if not disagreements:
        lines.append("The ordering agrees with the paper's for every pair run.")
    else:
        lines.append("Where it differs from the paper:")
        for d in disagreements:
            low, high = d["paper_lower"], d["paper_higher"]
            relation = "ties with" if d["median_lower"] == d["median_higher"] else "beats"
            note = " (within the seed spread)" if d["within_seed_spread"] else ""
            lines.append(
                f"- {display(low)} ({d['median_lower']:.2f}) {relation} {display(high)} "
                f"({d['median_higher']:.2f}), which the paper ranks above it{note}."
            )
    if left_out:
        lines.append(
            "Not in Table 5, so not compared: " + ", ".join(display(n) for n in left_out) + "."
        )
    return {
        "measured_order": measured,
        "disagreements": disagreements,
        "statement": "\n".join(lines),
    }


def _disagreements(
    compared: Sequence[str], medians: Mapping[str, float], trials: Mapping[str, Sequence[float]]
) -> list[dict[str, Any]]:
    """The pairs of `compared` (in the paper's order, worst first) whose paper-better objective
    does not score strictly higher here."""
    found = []
    for i, lower in enumerate(compared):
        for higher in compared[i + 1 :]:
            if medians[higher] > medians[lower]:
                continue
            gap = medians[lower] - medians[higher]
            spreads = [
                s for s in (_spread(trials[lower]), _spread(trials[higher])) if s is not None
            ]
            found.append(
                {
                    "paper_lower": lower,
                    "paper_higher": higher,
                    "median_lower": medians[lower],
                    "median_higher": medians[higher],
                    "within_seed_spread": gap <= max(spreads) if spreads else None,
                }
            )
    return found


def objective_row(
    name: str,
    entry: Mapping[str, Any],
    runs: Mapping[str, Any],
    checkpoint: str,
    heldout: Mapping[str, float] | None,
) -> dict[str, Any]:
    """The pre-training fields of a row: `entry` is the objective's plan.json entry (its pilot
    included), `runs` its runs/<objective>.json (wall-time segments)."""
    pilot, config = entry["pilot"], entry["pilot"]["config"]
    return {
        "objective": name,
        "steps": entry["steps"],
        "warmup_steps": entry["warmup_steps"],
        "capped": entry["capped"],
        "real_tokens": int(entry["steps"] * pilot["real_tokens_per_step"]),
        "token_positions": entry["steps"] * config["train_batch_size"] * config["max_seq_length"],
        "seconds_per_step": pilot["seconds_per_step"],
        "planned_seconds": entry["planned_seconds"],
        "wall_seconds": runs["wall_seconds"],
        "segments": len(runs["segments"]),
        "checkpoint": checkpoint,
        "heldout": dict(heldout) if heldout else None,
    }


def with_finetuning(row: dict[str, Any], summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """`row` plus its SST-2 fields from sst2_transfer's summary.json (when it has the row)."""
    fine = (summary or {}).get("rows", {}).get(row["objective"])
    if not fine:
        return row
    keys = ("lr", "val_accuracy_by_lr", "dev_accuracy_trials", "dev_accuracy_median")
    return {**row, **{k: fine[k] for k in keys}}


def timing_notes(rows: Sequence[Mapping[str, Any]], tolerance: float = 0.1) -> list[str]:
    """A line for each run whose measured wall time is off its plan by more than `tolerance`:
    the comparison is at equal wall time only as far as the runs kept to their plans (a busier
    machine than during the pilots, or a resume's second start-up, breaks that)."""
    notes = []
    for r in rows:
        planned, wall = r.get("planned_seconds"), r.get("wall_seconds")
        if not planned or wall is None or abs(wall - planned) <= tolerance * planned:
            continue
        resumed = f", over {r['segments']} segments" if r.get("segments", 1) > 1 else ""
        notes.append(
            f"{display(r['objective'])} ran {wall / 60:.1f} min against {planned / 60:.1f} "
            f"planned ({(wall / planned - 1) * 100:+.0f}%{resumed})."
        )
    return notes


def _count(n: float | None) -> str:
    if n is None:
        return ""
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    return f"{n / 1e3:.1f}k" if n >= 1e3 else f"{n:.0f}"


def _minutes(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds / 60:.1f}"


def _heldout(metrics: Mapping[str, float] | None) -> str:
    if not metrics:
        return ""
    return ", ".join(f"{k} {metrics[k]:.3f}" for k in SHOWN_METRICS if k in metrics)


def _row_line(r: Mapping[str, Any]) -> str:
    steps = (
        "" if r.get("steps") is None else f"{r['steps']:,}" + (" (capped)" if r["capped"] else "")
    )
    tokens = _count(r.get("real_tokens"))
    wall = _minutes(r.get("wall_seconds"))
    if r.get("segments", 0) > 1:
        wall += f" ({r['segments']} segments)"
    trials = r.get("dev_accuracy_trials")
    cells = [
        display(r["objective"]),
        steps,
        tokens,
        _minutes(r.get("planned_seconds")),
        wall,
        _heldout(r.get("heldout")),
        "" if r.get("lr") is None else f"{r['lr']:g}",
        " / ".join(f"{a:.2f}" for a in trials) if trials else "",
        "" if r.get("dev_accuracy_median") is None else f"**{r['dev_accuracy_median']:.2f}**",
    ]
    return "| " + " | ".join(cells) + " |"


def render_markdown(results: Mapping[str, Any]) -> str:
    """The report as Markdown: the command, the settings, the table, the Table 5 statement."""
    s = results["settings"]
    heldout = results.get("heldout_data") or "not evaluated"
    lines = [
        "# Pre-training objectives at equal wall time, then SST-2",
        "",
        "```",
        results["command"],
        "```",
        "",
        f"Budget {s['minutes']:g} min of wall time per objective; preset `{s['preset']}`; "
        f"shared hparams `{json.dumps(s['shared_hparams'], sort_keys=True)}`; "
        f"{s['parallel']} run(s) at a time"
        + (", each pinned to its own core" if s["parallel"] > 1 else "")
        + f"; warm-up: {s['warmup_rule']}.",
        f"Held-out metrics: {heldout}.",
        f"SST-2: {results.get('protocol_text', '')}",
        "",
        "| objective | steps | real tokens | planned min | wall min | held-out metrics | "
        "lr | dev accuracy (seeds) | median |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: |",
    ]
    lines += [_row_line(r) for r in results["rows"]]
    notes = timing_notes(results["rows"])
    if notes:
        lines += ["", "Off their plan by more than 10% (equal wall time holds only so far):"]
        lines += [f"- {note}" for note in notes]
    lines += ["", results["table5"]["statement"], ""]
    if results.get("quick"):
        lines.insert(
            2, "**A --quick smoke run: these numbers say nothing about the objectives.**\n"
        )
    return "\n".join(lines)


def write_report(results: Mapping[str, Any], out_dir: str) -> tuple[str, str]:
    """Writes results.json and results.md under `out_dir`; returns their paths."""
    json_path = os.path.join(out_dir, "results.json")
    md_path = os.path.join(out_dir, "results.md")
    for path, text in (
        (json_path, json.dumps(results, indent=2, sort_keys=True) + "\n"),
        (md_path, render_markdown(results)),
    ):
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)  # never a half-written report next to the old one
    return md_path, json_path
