"""The name-by-name report of a conversion (`python -m electra_tf.convert --dry-run`): how
each tensor is called, and shaped, in the source format and in the target format (each
registered format's `WeightFormat.rename`).
"""

from __future__ import annotations

from electra_tf.checkpoints import format_registry
from electra_tf.checkpoints.weights import SourceWeights


def _shape(shape) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def names_in(fmt: str, name: str, shape, config, native_vars=None) -> list[tuple[str, tuple]]:
    """How one original-named tensor is called, and shaped, in `fmt` ([] for no place);
    `native_vars`: the target model's `variable_map()`, for native."""
    return format_registry.get(fmt).rename(name, shape, config, native_vars or {})


def mapping_lines(source: SourceWeights, target_fmt: str, native_vars=None) -> list[str]:
    """The dry-run report: one line per tensor, then what is skipped or has no place. A tensor
    stored in two places of the source (the shared embeddings) is read from the first."""
    lines = []
    no_place = []
    for name in sorted(source.weights):
        shape = source.weights[name].shape
        sources = names_in(source.fmt, name, shape, source.config)[:1]
        targets = names_in(target_fmt, name, shape, source.config, native_vars)
        if not targets:
            no_place.append(name)
        for src, src_shape in sources:
            for dst, dst_shape in targets:
                lines.append(f"{src} {_shape(src_shape)} -> {dst} {_shape(dst_shape)}")
    shaped = all(format_registry.get(f).no_place_shapes for f in (source.fmt, target_fmt))
    for name in no_place:
        shown = f" {_shape(source.weights[name].shape)}" if shaped else ""
        lines.append(f"{name}{shown} -> (no place in {target_fmt})")
    lines += [f"{name} -> (skipped: optimizer slot / step)" for name in source.skipped]
    lines += [f"{name} -> (unused: not an ELECTRA variable)" for name in source.unused]
    return lines
