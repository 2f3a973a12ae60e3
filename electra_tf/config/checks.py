"""Checks of configuration values: each names the key, the value and what it must be.

The typed schema (`electra_tf.config`) calls these where it validates; they read a config's
fields by name and know nothing of how it was built. Every name here is also importable from
`electra_tf.config`, where it lived first.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from electra_tf.runtime import device_defaults  # pure "auto" answers; no TensorFlow import

# `PretrainingConfig.objective_variant`: ELECTRA and the paper's Table 5 ablations (Clark et al.
# 2020, Section 3.2), each on ELECTRA's pipeline (mask -> generator -> sample -> full-size
# network on the corrupted input). The last two train the full-size network as a masked LM
# instead of a replaced-token detector.
# Serving exports: groups of positions the encoder runs side by side (`ServingModule`). Two
# fills this 2-core machine's cores with single-threaded kernels (docs/serving.md, thread
# settings); `--query-blocks` changes it.
DEFAULT_QUERY_BLOCKS = 2
# Each group is its own ops in every layer, run by its own inter-op thread: more groups than
# a server has cores cannot run side by side, and the graph (trace time, memory, the
# SavedModel) grows with every group. 64 covers a 64-core server; `--query-blocks 100000`
# traced for minutes past 11 GB before this bound.
MAX_QUERY_BLOCKS = 64
OBJECTIVE_VARIANTS = ("electra", "electra_15", "replace_mlm", "all_tokens_mlm")
MASKED_LM_VARIANTS = ("replace_mlm", "all_tokens_mlm")
# The formats `init_checkpoint_format` may name (electra_tf.checkpoints.FORMATS, plus auto).
INIT_CHECKPOINT_FORMATS = ("auto", "native", "original", "hf", "modelgarden", "kerashub")
# The `precision` values of pre-training and fine-tuning ("auto": `device_defaults.auto_precision`).
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


class ConfigError(ValueError):
    """A bad configuration key or value; the message names the key."""


def query_blocks_problem(value: Any) -> str | None:
    """Why `value` cannot be a serving export's `query_blocks` (None when it can): an integer
    in [1, MAX_QUERY_BLOCKS]. The export command, `ServingModule` and `serving.load` (reading
    `export.json`) each name where the value came from."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{value!r} is not an integer"
    if not 1 <= value <= MAX_QUERY_BLOCKS:
        return (
            f"{value} is outside [1, {MAX_QUERY_BLOCKS}] (one group per inter-op thread; "
            "more groups than cores only grow the graph)"
        )
    return None


_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
    "dict": (dict,),
}
_TYPE_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def check_precision(precision: Any) -> None:
    """`precision` is one of PRECISIONS; else a ConfigError naming the key and the values."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision: {precision!r} is not {'/'.join(PRECISIONS)}")


def check_types(config: Any) -> None:
    """Every field whose annotation is int / float / bool / str / dict (optionally `| None`)
    holds a value of that type; JSON's `"eight"` for an int is an error naming the key, the
    value and the type expected (bool is not accepted as a number)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        kinds = [k.strip() for k in str(f.type).split("|")]
        if value is None and "None" in kinds:
            continue
        known = [k for k in kinds if k in _TYPES]
        if not known or len(known) != len([k for k in kinds if k != "None"]):
            continue  # a type this check does not describe (tuple[...], bool | str)
        ok = any(
            isinstance(value, _TYPES[k]) and not (k in ("int", "float") and isinstance(value, bool))
            for k in known
        )
        if not ok:
            expected = " or ".join(_TYPE_NAMES.get(k, k) for k in known)
            expected += " or null" if "None" in kinds else ""
            raise ConfigError(
                f"{f.name}: {value!r} is a {type(value).__name__}, expected {expected}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            # JSON's Infinity / NaN and 1e999 parse as floats: a learning rate of inf trains
            # NaN weights and saves them.
            raise ConfigError(f"{f.name}: {value!r} is not a finite number")


def check_ranges(
    config: Any,
    positive: tuple[str, ...] = (),
    at_least_one: tuple[str, ...] = (),
    non_negative: tuple[str, ...] = (),
    probabilities: tuple[str, ...] = (),
) -> None:
    """Range checks by field name (None values are skipped); NaN fails every check."""
    rules = (
        (positive, lambda v: v > 0, "must be > 0"),
        (at_least_one, lambda v: v >= 1, "must be >= 1"),
        (non_negative, lambda v: v >= 0, "must be >= 0"),
        (probabilities, lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    )
    for names, ok, rule in rules:
        for name in names:
            value = getattr(config, name)
            if value is not None and not ok(value):
                raise ConfigError(f"{name}: {value!r} {rule}")


def check_model_name(name: str, key: str = "model_name") -> None:
    """A model name is one folder name under `<data-dir>/models`: `../x` or an absolute path
    would write outside it without a word (`model_dir` names any other folder)."""
    if (
        not name
        or name in (".", "..")
        or os.path.isabs(name)
        or any(sep in name for sep in ("/", "\\", os.sep))
    ):
        raise ConfigError(
            f"{key}: {name!r} is not a folder name; a model lives in <data-dir>/models/<name>. "
            "To put it elsewhere, set model_dir to the folder instead"
        )


def check_objective_variant(config: Any) -> None:
    """`objective_variant`: a known name, and only in combinations that mean something."""
    variant = config.objective_variant
    if variant not in OBJECTIVE_VARIANTS:
        hint = closest_key(variant, list(OBJECTIVE_VARIANTS))
        suggestion = f"; did you mean {hint!r}?" if hint else ""
        raise ConfigError(
            f"objective_variant: {variant!r} is not one of {', '.join(OBJECTIVE_VARIANTS)}"
            f"{suggestion}"
        )
    if variant == "electra":
        return
    if config.electric_objective:
        raise ConfigError(
            f"objective_variant: {variant!r} is an ELECTRA ablation; with electric_objective "
            'true it must be "electra"'
        )
    if not config.electra_objective:
        raise ConfigError(
            f"objective_variant: {variant!r} needs electra_objective true (every variant "
            "corrupts the input with generator samples); the BERT masked-LM baseline is "
            'electra_objective false with objective_variant "electra"'
        )
    if variant in MASKED_LM_VARIANTS and not config.untied_generator:
        raise ConfigError(
            f"untied_generator: must be true with objective_variant {variant!r}: its samples "
            "come from a separate generator network, not from the masked LM being trained"
        )
    for field in ("gradient_accumulation_steps", "parallel_micro_batches"):
        value = getattr(config, field)  # "auto" parallel micro-batches resolve to 1 here
        if (
            variant == "electra_15"
            and value != "auto"
            and value > 1
            and config.mask_positions_with_replacement
        ):
            # Positions drawn with replacement repeat at random, so how many distinct
            # positions the loss averages over is known only after every micro-batch is masked.
            raise ConfigError(
                f"{field}: > 1 with objective_variant 'electra_15' needs "
                "mask_positions_with_replacement false (the loss denominator, the number of "
                "distinct masked positions, must be known before the micro-batches run)"
            )


# ---------------------------------------------------------------------- keys
def closest_key(key: str, valid: list[str]) -> str | None:
    matches = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return matches[0] if matches else None


def check_known_keys(
    keys: Iterable[str], valid: Sequence[str], unknown: Callable[[str], str]
) -> None:
    """A ConfigError for the first of `keys` not in `valid`: `unknown(key)`, then the closest
    valid key."""
    for key in keys:
        if key not in valid:
            hint = closest_key(key, valid)
            suggestion = f"; did you mean {hint!r}?" if hint else ""
            raise ConfigError(unknown(key) + suggestion)


def replace_checked(config: Any, values: Mapping[str, Any], where: str = "config") -> Any:
    """`dataclasses.replace` that rejects unknown keys, naming the closest valid one."""
    valid = [f.name for f in dataclasses.fields(config)]
    check_known_keys(values, valid, lambda key: f"Unknown hparam {key!r} in {where}")
    return dataclasses.replace(config, **dict(values))


def divides_batch(k: Any, batch_size: int) -> bool:
    """Whether `k` is a positive integer (not a bool) that divides `batch_size`."""
    return isinstance(k, int) and not isinstance(k, bool) and k >= 1 and batch_size % k == 0


def check_micro_batches(config: Any, parts: Any) -> None:
    """Accumulation steps and parallel micro-batches divide the batch; not both > 1."""
    for field, k in (
        ("gradient_accumulation_steps", config.gradient_accumulation_steps),
        ("parallel_micro_batches", parts),
    ):
        if not divides_batch(k, config.train_batch_size):
            raise ConfigError(
                f"{field}: {k!r} must be a positive integer that divides "
                f"train_batch_size {config.train_batch_size}"
            )
    if config.gradient_accumulation_steps > 1 and parts > 1:
        raise ConfigError(
            "parallel_micro_batches: > 1 with gradient_accumulation_steps > 1 is not "
            "supported; set one of them to 1"
        )


def check_layout(config: Any) -> None:
    """A fine-tuning config's `parallel_micro_batches` ("auto" or a positive divisor of
    `train_batch_size`) and thread counts ("auto" or >= 0); ConfigError naming the key."""
    parts = config.parallel_micro_batches
    if parts != "auto" and not divides_batch(parts, config.train_batch_size):
        raise ConfigError(
            f'parallel_micro_batches: {parts!r} must be "auto" or a positive integer that '
            f"divides train_batch_size {config.train_batch_size}"
        )
    thread_changes(config, device_defaults.PORTABLE, 1)  # the given counts are checked


def thread_changes(config: Any, machine: device_defaults.Machine, parts: int) -> dict[str, int]:
    """The thread counts that were "auto", resolved together; the others checked."""
    threads = (config.intra_op_threads, config.inter_op_threads)
    auto = device_defaults.auto_threads(machine, parts) if "auto" in threads else (0, 0)
    changes = {}
    for field, value, resolved in zip(
        ("intra_op_threads", "inter_op_threads"), threads, auto, strict=True
    ):
        if value == "auto":
            changes[field] = resolved
        elif not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f'{field}: {value!r} must be an integer >= 0 or "auto"')
    return changes


def objective_changes(config: Any) -> dict[str, Any]:
    """Electric forces the two-tower generator (configure_pretraining.py); combinations
    that the original's run_pretraining.py cannot build are errors naming the key."""
    two_tower = config.two_tower_generator or config.electric_objective
    if not two_tower:
        return {}
    why = "electric_objective" if config.electric_objective else "two_tower_generator"
    if config.uniform_generator:
        raise ConfigError(
            f"uniform_generator: cannot be true with {why}, which needs the two-tower cloze "
            "generator"
        )
    if not config.untied_generator:
        raise ConfigError(
            f"untied_generator: must be true with {why}: the two-tower cloze generator is "
            "its own network, it cannot share the discriminator's weights"
        )
    if not config.has_discriminator:
        raise ConfigError(
            "two_tower_generator: needs electra_objective or electric_objective; the BERT "
            "masked-LM baseline has no place for a cloze generator"
        )
    return {"two_tower_generator": True}


# The fields whose "auto" `PretrainingConfig.resolve` answers; a resolved config holds none.
AUTO_FIELDS = (
    "precision",
    "jit_compile",
    "parallel_micro_batches",
    "intra_op_threads",
    "inter_op_threads",
)


def check_no_auto(config: Any) -> None:
    """A resolved config holds no "auto": a ConfigError naming the first key that does."""
    for key in AUTO_FIELDS:
        if getattr(config, key) == "auto":
            raise ConfigError(
                f'{key}: "auto" in a resolved config (PretrainingConfig.resolve chooses it for '
                "the machine)"
            )
