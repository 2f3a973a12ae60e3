"""Where a config's values come from before the schema sees them: presets (configs/<name>.json),
`--hparams` (a JSON object string or a .json file) and the original's debug settings.
Every name here is also importable from `electra_tf.config`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from electra_tf.config.checks import ConfigError

# The repository's configs/ folder, beside the package (this file is electra_tf/config/presets.py).
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS_DIR = os.path.join(_REPO, "configs")


def parse_hparams(hparams: str | None) -> dict[str, Any]:
    """`--hparams`: a JSON object string, or a path to a .json file (as the original)."""
    if hparams is None or not hparams.strip():
        return {}
    text = hparams.strip()
    where = "--hparams"
    if text.endswith(".json"):
        where = text
        try:
            with open(text, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"--hparams: cannot read {hparams}: {e}") from e
    try:
        values = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: invalid JSON ({e})") from e
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(values).__name__}")
    # Keys starting with "_" are comments (JSON has none).
    return {k: v for k, v in values.items() if not k.startswith("_")}


def preset_path(preset: str) -> str:
    if preset.endswith(".json") or os.sep in preset:
        return preset
    return os.path.join(CONFIGS_DIR, f"{preset}.json")


def load_preset(preset: str | None) -> dict[str, Any]:
    if not preset:
        return {}
    path = preset_path(preset)
    if not os.path.exists(path):
        available = sorted(p[:-5] for p in os.listdir(CONFIGS_DIR) if p.endswith(".json"))
        raise ConfigError(f"preset {preset!r}: no file {path}; available: {', '.join(available)}")
    return parse_hparams(path)


# The original's debug settings; like the original, explicit user values win over them.
DEBUG_SETTINGS: dict[str, Any] = {
    "model_hparam_overrides": {
        "hidden_size": 144,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "intermediate_size": 576,
    },
    "train_batch_size": 8,
    "num_train_steps": 20,
    "eval_batch_size": 4,
    "iterations_per_loop": 1,
    "num_eval_steps": 2,
}
