"""The neutral form every checkpoint format is read into: NumPy arrays keyed by the ORIGINAL
TF1 variable names (docs/faithfulness.md, section 9 'Checkpoint variable names'), which are
also the keys of every model's
`variable_map()`; and fitting that form into a model, every name and shape checked first.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from electra_tf.checkpoints import names
from electra_tf.checkpoints.files import CheckpointError
from electra_tf.config import PretrainingConfig

_LOG = logging.getLogger(__name__)

# The output bias of each kind of generator head: there is a generator iff one is present.
GENERATOR_HEAD_BIASES = (names.GENERATOR_OUTPUT_BIAS, f"{names.CLOZE_HEAD}/output_bias")


@dataclasses.dataclass
class SourceWeights:
    """Weights read from a checkpoint, by original name, and what was learned on the way."""

    weights: dict[str, np.ndarray]
    fmt: str
    path: str  # the resolved checkpoint prefix or HF directory
    config: PretrainingConfig  # given, saved beside the checkpoint, or inferred from shapes
    global_step: int | None = None
    skipped: list[str] = dataclasses.field(default_factory=list)  # optimizer slots etc.
    unused: list[str] = dataclasses.field(default_factory=list)  # unknown names in the source

    @property
    def has_generator(self) -> bool:
        """A generator head: the masked-LM one, or Electric's two-tower cloze head."""
        return any(name in self.weights for name in GENERATOR_HEAD_BIASES)


@dataclasses.dataclass
class LoadResult:
    """What `load_weights` did. `global_step` is the source's step (None if it has none)."""

    fmt: str
    path: str
    global_step: int | None
    loaded: list[str]
    fresh: list[str]  # target variables left at initialisation on purpose (task heads)
    unused: list[str]  # source variables the target has no place for
    skipped: list[str]  # optimizer slots / step counters, ignored by design


def model_weights(model) -> dict[str, np.ndarray]:
    """A model's weights by original name."""
    return {name: var.numpy() for name, var in model.variable_map().items()}


def summarize(names: list[str]) -> str:
    """`generator/* (68), discriminator_predictions/* (4)`: a long name list in one line."""
    counts: dict[str, int] = {}
    for name in names:
        scope = name.split("/", 1)[0]
        counts[scope] = counts.get(scope, 0) + 1
    return ", ".join(f"{scope}/* ({n})" for scope, n in sorted(counts.items()))


def check_fit(
    variables: Mapping[str, tf.Variable], source: SourceWeights, where: str = "model"
) -> list[str]:
    """Raises CheckpointError listing EVERY target variable the source lacks or has with
    another shape; returns the fine-tuning heads (`task_specific/...`) left to initialise."""
    weights = source.weights
    if not weights:
        unused = f"; its keys: {', '.join(source.unused[:5])}" if source.unused else ""
        unused += " ..." if len(source.unused) > 5 else ""
        raise CheckpointError(
            f"{source.path} ({source.fmt}): read no ELECTRA weights at all{unused}"
        )
    missing, wrong, fresh = [], [], []
    for name, var in sorted(variables.items()):
        if name not in weights:
            # Fine-tuning heads start fresh by design; anything else would be random silently.
            if name.startswith("task_specific/"):
                fresh.append(name)
            else:
                missing.append(f"{name} {list(var.shape)}")
        elif tuple(weights[name].shape) != tuple(var.shape):
            wrong.append(f"{name}: expected {list(var.shape)}, found {list(weights[name].shape)}")
    if missing or wrong:
        lines = [f"{source.path} ({source.fmt}) does not fit {where}:"]
        if missing:
            lines.append(f"  {len(missing)} missing (name [expected shape]):")
            lines += [f"    {m}" for m in missing]
        if wrong:
            lines.append(f"  {len(wrong)} with the wrong shape:")
            lines += [f"    {w}" for w in wrong]
        raise CheckpointError("\n".join(lines))
    return fresh


def assign(
    variables: Mapping[str, tf.Variable], source: SourceWeights, where: str = "model"
) -> LoadResult:
    """Assigns `source` to `variables` (by original name), after checking ALL names/shapes."""
    fresh = check_fit(variables, source, where)
    weights = source.weights
    for name, var in variables.items():
        if name in weights:
            var.assign(weights[name].astype(var.dtype.as_numpy_dtype))
    unused = sorted(set(weights) - set(variables)) + source.unused
    if unused:
        _LOG.warning(
            "%s: %d source variables unused by %s: %s",
            source.path, len(unused), where, summarize(unused),
        )  # fmt: skip
    loaded = sorted(n for n in variables if n in weights)
    return LoadResult(
        source.fmt, source.path, source.global_step, loaded, fresh, unused, source.skipped
    )
