"""The name-by-name report of a conversion (`python -m electra_tf.convert --dry-run`): how
each tensor is called, and shaped, in the source format and in the target format.
"""

from __future__ import annotations

from electra_tf.checkpoints import hf
from electra_tf.checkpoints.weights import SourceWeights


def _shape(shape) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def _names_in(
    fmt: str, name: str, shape, native_vars, masked_lm: bool = False
) -> list[tuple[str, tuple]]:
    """How one original-named tensor is called, and shaped, in `fmt`."""
    if fmt == "original":
        return [(name, tuple(shape))]
    if fmt == "hf":
        transposed = tuple(reversed(shape)) if hf.is_kernel(name) else tuple(shape)
        return [
            (f"{folder}/{hf_name}", transposed) for folder, hf_name in hf.to_hf(name, masked_lm)
        ]
    var = native_vars.get(name)
    return [] if var is None else [(f"model:{var.name}", tuple(var.shape))]


def mapping_lines(source: SourceWeights, target_fmt: str, native_vars=None) -> list[str]:
    """The dry-run report: one line per tensor, then what is skipped or has no place."""
    native_vars = native_vars or {}
    masked_lm = not source.config.has_discriminator
    lines = []
    no_place = []
    for name in sorted(source.weights):
        shape = source.weights[name].shape
        sources = _names_in(source.fmt, name, shape, {}, masked_lm)
        if source.fmt == "hf":  # the shared embeddings come from the discriminator folder
            sources = sources[:1]
        targets = _names_in(target_fmt, name, shape, native_vars, masked_lm)
        if not targets:
            no_place.append(name)
        for src, src_shape in sources:
            for dst, dst_shape in targets:
                lines.append(f"{src} {_shape(src_shape)} -> {dst} {_shape(dst_shape)}")
    for name in no_place:
        lines.append(f"{name} {_shape(source.weights[name].shape)} -> (no place in {target_fmt})")
    lines += [f"{name} -> (skipped: optimizer slot / step)" for name in source.skipped]
    lines += [f"{name} -> (unused: not an ELECTRA variable)" for name in source.unused]
    return lines
