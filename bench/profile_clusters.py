"""The XLA clusters of a profiled step, each by the function it compiles, and the time their
computations spent far above their own median: for `bench.profile_breakdown`.

`read_trace` sums an XLA cluster's computations by their HLO names (`multiply_convert_fusion`),
which every cluster reuses, so one name can hold the GELU's forward and a LayerNorm's backward.
The profiler marks each computation's event with its module (`hlo_module`, for example
`a_inference__gelu_bias_forward_10185__.23`); here the events are summed by the function that
module compiles (`_gelu_bias_forward`).

Each (module, computation) pair runs the same work on the same shapes at every call, so its
events should last about as long as their median. Time beyond four medians is reported as
`stalled`: a computation waiting (its thread preempted, or its partitions queued behind other
work) rather than computing. On a 2-core Zen 5 one mixed_bfloat16 profile had 109 of its 347
ms of cluster time a step stalled, mostly in the forward clusters while the other thread ran
another cluster; two later runs had 3 (docs/performance.md, "The sampler's noise in one
cluster").
"""

from __future__ import annotations

import collections
import re
import statistics
from typing import Any

from bench.profile_rules import attention_scores_shaped
from bench.profile_trace import WINDOW, host_plane

# The function a module compiles: `a_inference_<function>_<id>__...` (a `tf.function`); the
# graph's call names it `__inference_<function>_<id>`.
_MODULE = re.compile(r"^a(?P<call>_inference_(?P<function>.+?)_\d+)__")
# A computation's events beyond this many times their median count as stalled.
STALL_FACTOR = 4


def cluster_function(module: str) -> str:
    """The function name of an XLA module's name; the module's name where it has none."""
    match = _MODULE.match(module)
    return match["function"] if match else module


def read_clusters(path: str) -> dict[tuple[str, str], list[int]]:
    """{(module, computation): [event durations in ps]} of the XLA events inside the
    profiled window(s) of the `.xplane.pb` at `path` (its host plane)."""
    host, _ = host_plane(path)
    stat_names = {key: meta.name for key, meta in host.stat_metadata.items()}
    events, windows = [], []
    for line in host.lines:
        base = line.timestamp_ns * 1000
        for event in line.events:
            name = host.event_metadata[event.metadata_id].name
            start = base + event.offset_ps
            if name == WINDOW:
                windows.append((start, start + event.duration_ps))
                continue
            for stat in event.stats:
                if stat_names.get(stat.metadata_id) == "hlo_module":
                    module = (
                        stat_names.get(stat.ref_value, "") if stat.ref_value else stat.str_value
                    )
                    events.append((start, event.duration_ps, module, name))
    durations: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for start, duration, module, name in events:
        if not windows or any(lo <= start < hi for lo, hi in windows):
            durations[(module, name)].append(duration)
    return durations


def cluster_table(durations: dict[tuple[str, str], list[int]], steps: int) -> list[dict[str, Any]]:
    """Per compiled function, heaviest first: ms per step, events per step, and ms per step
    beyond STALL_FACTOR times the median of the same computation's events (`stalled_ms`)."""
    rows: dict[str, dict[str, float]] = {}
    for (module, _), times in durations.items():
        row = rows.setdefault(cluster_function(module), {"ms": 0.0, "events": 0, "stalled": 0.0})
        median = statistics.median(times)
        row["ms"] += sum(times)
        row["events"] += len(times)
        row["stalled"] += sum(max(0, t - STALL_FACTOR * median) for t in times)
    per_step = 1e-9 / steps  # ps summed over the steps -> ms per step
    table = [
        {
            "function": function,
            "ms_per_step": row["ms"] * per_step,
            "events_per_step": row["events"] / steps,
            "stalled_ms_per_step": row["stalled"] * per_step,
        }
        for function, row in rows.items()
    ]
    return sorted(table, key=lambda row: -row["ms_per_step"])


def attention_clusters(
    durations: dict[tuple[str, str], list[int]],
    calls: dict[str, tuple[tuple[int | None, ...], ...]],
    seq_len: int,
    steps: int,
) -> dict[str, float]:
    """ms per step of the XLA clusters called on attention-scores-shaped tensors, by attention
    part (`profile_rules.ATTENTION_PARTS`): a dropout's function (`_fused_drop`; in bfloat16
    `_dropped_backward`, the dropout's and the softmax's gradients in one cluster) is
    `dropout`, any other `softmax_mask`. `calls`: `ShapeIndex.calls` of the traced step."""
    parts: dict[str, float] = collections.defaultdict(float)
    for (module, _), times in durations.items():
        match = _MODULE.match(module)
        shapes = calls.get("_" + match["call"]) if match else None
        if shapes and any(attention_scores_shaped(shape, seq_len) for shape in shapes):
            part = "dropout" if "drop" in match["function"] else "softmax_mask"
            parts[part] += sum(times) * 1e-9 / steps
    return dict(parts)


def clusters_markdown(table: list[dict[str, Any]]) -> str:
    """`cluster_table`'s rows as a markdown table, with a total row."""
    lines = [
        "XLA clusters by the function they compile (stalled: beyond "
        f"{STALL_FACTOR}x the median of the same computation):",
        "",
        "| function | ms/step | events/step | stalled ms/step |",
        "| --- | ---: | ---: | ---: |",
    ]
    for row in table:
        lines.append(
            f"| `{row['function']}` | {row['ms_per_step']:.1f} | {row['events_per_step']:.0f} | "
            f"{row['stalled_ms_per_step']:.1f} |"
        )
    total = sum(row["ms_per_step"] for row in table)
    stalled = sum(row["stalled_ms_per_step"] for row in table)
    lines.append(f"| all | {total:.1f} | | {stalled:.1f} |")
    return "\n".join(lines)
