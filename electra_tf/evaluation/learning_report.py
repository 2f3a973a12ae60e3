"""The learning test's results (`electra_tf.evaluation.learning_test`): the summary over
seeds, the table it prints, the record `--json` writes and `--from-json` reads back, and the
picture of the per-seed accuracies.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from electra_tf.evaluation import plots

COLUMNS = ("random", "masked_lm", "electra")
COLUMN_LABELS = (("random", "random init"), ("masked_lm", "BERT masked LM"), ("electra", "ELECTRA"))
# The task's labels are balanced (half the topics are 1), so guessing scores 0.5.
CHANCE = 0.5
MARGINS = (("electra", "random"), ("masked_lm", "random"), ("electra", "masked_lm"))


def summary(results: dict[int, dict[str, float]]) -> dict[str, tuple[float, float]]:
    """Mean and sample standard deviation over seeds of each column and margin ("a-b")."""
    out = {}
    for column in [*COLUMNS, *(f"{a}-{b}" for a, b in MARGINS)]:
        if "-" in column:
            a, b = column.split("-")
            values = [r[a] - r[b] for r in results.values()]
        else:
            values = [r[column] for r in results.values()]
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        out[column] = (statistics.mean(values), std)
    return out


def format_table(results: dict[int, dict[str, float]]) -> str:
    """Held-out accuracy per seed and mean ± sd of each arm, and the margins."""
    names = [*COLUMNS, *(f"{a}-{b}" for a, b in MARGINS)]
    lines = [f"{'seed':>6} " + " ".join(f"{n:>18}" for n in names)]
    for seed, result in results.items():
        values = [result[c] for c in COLUMNS] + [result[a] - result[b] for a, b in MARGINS]
        lines.append(f"{seed:>6} " + " ".join(f"{v:>18.3f}" for v in values))
    stats = summary(results)
    lines.append(
        f"{'mean':>6} " + " ".join(f"{m:.3f}±{s:.3f}".rjust(18) for m, s in stats.values())
    )
    return "\n".join(lines)


def read_record(path: str) -> dict[str, Any]:
    """An earlier --json's record, its seeds back to ints; SystemExit naming what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"ERROR: --from-json {path}: {e}") from None
    try:
        for key in ("pretrain_seconds", "budget_clock", "pretraining_text"):
            if key not in record["protocol"]:
                raise KeyError(f"protocol.{key}")
        results = {}
        for seed, result in record["results"].items():
            if not seed.isdigit():
                raise KeyError(f"results.{seed} (a seed is a number)")
            missing = [c for c in COLUMNS if c not in result]
            if missing:
                raise KeyError(f"results.{seed}.{missing[0]}")
            results[int(seed)] = result
    except (KeyError, TypeError, AttributeError) as e:
        raise SystemExit(
            f"ERROR: --from-json {path}: not a learning-test record (no {e})"
        ) from None
    return {**record, "results": results}


def draw(path: str, record: dict[str, Any]) -> None:
    """The per-seed accuracies of `record` (as --json writes it) as a PNG."""
    protocol = record["protocol"]
    title = f"Learning test: held-out accuracy, {len(record['results'])} seed(s)"
    if protocol["pretrain_seconds"]:
        clock = protocol["budget_clock"].replace("cpu", "CPU")
        minutes = protocol["pretrain_seconds"] / 60
        title += f", {minutes:g} {clock} minute(s) of pre-training per objective"
    if protocol["pretraining_text"] == "shuffled":
        title += " (control: pre-training text shuffled)"
    plots.per_seed_accuracy(path, record["results"], COLUMN_LABELS, CHANCE, title)
