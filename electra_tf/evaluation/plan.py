"""The equal-wall-time plan of `compare_objectives` and the checks on its inputs:
which objectives exist, what the shared hparams may set, how many steps a budget buys, and
whether a work folder was planned with the same settings. No TensorFlow.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from electra_tf.config import CONFIGS_DIR, ConfigError, parse_hparams

ABLATIONS_DIR = os.path.join(CONFIGS_DIR, "ablations")
RANDOM_ROW = "random"
# Set per objective by compare_objectives; in --hparams they would break the plan.
PLANNED_KEYS = ("num_train_steps", "model_dir", "do_train", "do_eval")


# ---------------------------------------------------------------------- objectives and settings
def available_objectives() -> list[str]:
    return sorted(f[: -len(".json")] for f in os.listdir(ABLATIONS_DIR) if f.endswith(".json"))


def load_objectives(names: str) -> dict[str, dict[str, Any]]:
    """{name: the objective file's keys} for a comma-separated list; errors name the culprit."""
    known = available_objectives()
    objectives: dict[str, dict[str, Any]] = {}
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        if name == RANDOM_ROW:
            raise ConfigError(f"--objectives: {RANDOM_ROW!r} is the random-init row, always added")
        if name in objectives:
            raise ConfigError(f"--objectives: {name!r} is listed twice")
        path = os.path.join(ABLATIONS_DIR, f"{name}.json")
        if not os.path.exists(path):
            hint = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
            raise ConfigError(
                f"--objectives: unknown objective {name!r} (no file {path}); known: "
                f"{', '.join(known)}" + (f"; did you mean {hint[0]!r}?" if hint else "")
            )
        objectives[name] = parse_hparams(path)
    if not objectives:
        raise ConfigError("--objectives: no objective named")
    return objectives


def check_shared_hparams(shared: Mapping[str, Any], objectives: Mapping[str, Mapping]) -> None:
    """The shared --hparams may not decide an objective or a step count."""
    for key in shared:
        if key in PLANNED_KEYS:
            raise ConfigError(
                f"--hparams: {key!r} is set by the comparison (the budget decides it)"
            )
        owners = [name for name, values in objectives.items() if key in values]
        if owners:
            raise ConfigError(
                f"--hparams: {key!r} is an objective setting (configs/ablations/{owners[0]}"
                ".json sets it); objectives must differ only in their objective files"
            )


def parse_warmup(text: str | None) -> float | None:
    """`--warmup`: None (the preset's), a fraction in [0, 1), or a whole number of steps."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"--warmup: {text!r} is not a number") from None
    if value < 0 or (value >= 1 and value != int(value)):
        raise ConfigError(f"--warmup: {text!r} is neither a fraction in [0, 1) nor a step count")
    return value


# ---------------------------------------------------------------------- the plan
class PlanError(ValueError):
    """The budget cannot hold a run of this objective; the message says why."""


@dataclass(frozen=True)
class StepPlan:
    steps: int
    warmup_steps: int
    planned_seconds: float
    capped: bool


def plan_steps(
    budget_seconds: float,
    pilot: Mapping[str, float],
    warmup: float | None,
    preset_warmup: int,
    max_steps: int | None = None,
    objective: str = "",
) -> StepPlan:
    """num_train_steps and num_warmup_steps for one objective (the rule: module docstring)."""
    where = f"{objective}: " if objective else ""
    if budget_seconds <= pilot["pilot_seconds"]:
        raise PlanError(
            f"{where}the budget ({budget_seconds:.0f} s) is not longer than the pilot itself "
            f"({pilot['pilot_seconds']:.0f} s: start-up {pilot['startup_seconds']:.0f} s and "
            f"{pilot['timed_steps']} timed steps); give more --minutes"
        )
    # The epsilon keeps a budget of exactly N steps at N despite binary fractions (0.8 s).
    steps = math.floor(
        (budget_seconds - pilot["startup_seconds"]) / pilot["seconds_per_step"] + 1e-9
    )
    capped = max_steps is not None and steps > max_steps
    if capped:
        steps = max_steps
    if warmup is None:
        warmup_steps = preset_warmup
    elif warmup < 1:
        warmup_steps = int(round(warmup * steps))
    else:
        warmup_steps = int(warmup)
    if warmup_steps >= steps:
        raise PlanError(
            f"{where}{warmup_steps} warm-up steps but the budget allows {steps} steps: the "
            "learning rate would never decay; pass --warmup as a fraction (e.g. 0.1)"
        )
    planned = pilot["startup_seconds"] + steps * pilot["seconds_per_step"]
    return StepPlan(steps, warmup_steps, planned, capped)


# ---------------------------------------------------------------------- files under --out
def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path: str, value: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def latest_step(model_dir: str) -> int:
    """The step of the model dir's latest checkpoint (its `checkpoint` index file), 0 if none."""
    try:
        with open(os.path.join(model_dir, "checkpoint"), encoding="utf-8") as f:
            match = re.search(r'^model_checkpoint_path:\s*"[^"]*?(\d+)"', f.read(), re.M)
    except OSError:
        return 0
    return int(match.group(1)) if match else 0


def check_plan_settings(plan_path: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The saved plan, after checking it was made with these settings (else an error)."""
    if not os.path.exists(plan_path):
        return {"settings": dict(settings), "objectives": {}}
    plan = read_json(plan_path)
    changed = [
        f"{key}: planned with {plan['settings'].get(key)!r}, now {value!r}"
        for key, value in settings.items()
        if plan["settings"].get(key) != value
    ]
    if changed:
        raise ConfigError(
            f"{plan_path} was made with other settings; resuming would mix budgets or recipes:\n  "
            + "\n  ".join(changed)
            + "\nUse another --out for a new comparison."
        )
    return plan


def encoder_shape(config: Mapping[str, Any]) -> dict[str, Any]:
    """The discriminator's shape settings of a resolved config (a pilot's `config`), in the
    form of sst2_transfer's `--random-shape` file: a random row built from it has the same
    encoder as the pre-trained rows."""
    from electra_tf.evaluation.sst2_transfer import SHAPE_KEYS

    overrides = config["model_hparam_overrides"]
    shape: dict[str, Any] = {
        "model_size": config["model_size"],
        "model_hparam_overrides": {k: overrides[k] for k in SHAPE_KEYS if k in overrides},
    }
    if config["embedding_size"] is not None:
        shape["embedding_size"] = config["embedding_size"]
    return shape
