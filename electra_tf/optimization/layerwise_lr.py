"""The original's layer-wise learning-rate decay for fine-tuning (`_get_layer_lrs` in
google-research/electra `model/optimization.py`) as a multiplier per original variable name;
`electra_tf.optimization.create_optimizer` applies it. Pure Python: no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def layerwise_lr_multipliers(
    variable_map: Mapping[str, Any],
    n_layers: int,
    decay: float,
    fix_top_layer: bool = False,
) -> dict[str, float]:
    """The original's `_get_layer_lrs` as a per-variable multiplier: original name -> factor.

    Depth 0: names containing "/embeddings/" or "/embeddings_project/" (with the leading slash,
    so "electra/embeddings/..." matches, as in the original); depth i+1: "encoder/layer_i/";
    depth L+2: "task_specific/". Factor = decay ** (L + 2 - depth): the top transformer layer gets
    decay**2, the original's acknowledged off-by-one (issue #51), kept unless `fix_top_layer`,
    which uses decay ** (L + 1 - depth) for every layer (head x1, top layer x decay).

    Raises ValueError naming a variable that matches no key (as the original) or several.
    """
    depths: dict[str, int] = {"/embeddings/": 0, "/embeddings_project/": 0}
    for i in range(n_layers):
        depths[f"encoder/layer_{i}/"] = i + 1
    depths["task_specific/"] = n_layers + 2
    top = n_layers + 2
    multipliers: dict[str, float] = {}
    for name in variable_map:
        keys = [key for key in depths if key in name]
        if not keys:
            raise ValueError(f"No layer-wise learning rate for variable {name!r}")
        if len(keys) > 1:
            raise ValueError(f"Variable {name!r} matches several layer keys: {keys}")
        depth = depths[keys[0]]
        if fix_top_layer and depth != top:
            depth += 1
        multipliers[name] = float(decay ** (top - depth))
    return multipliers
