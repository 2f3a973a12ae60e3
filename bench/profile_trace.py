"""A profiler trace read back and summed by category, for `bench.profile_breakdown`.

`profile_calls` runs calls under `tf.profiler.experimental` (host tracer); `read_trace` reads the
trace's `.xplane.pb` back (the XSpace protobuf, `tensorflow.tsl.profiler.protobuf`): on each host
thread, events nest by time, and an event's SELF time is its duration minus that of the events
nested in it (`nest`). Every event is one of:

- an op kernel (`<op name>:<op type>`): its self time goes to a category (bench/profile_rules.py);
- a computation of an XLA cluster (an `hlo_module` stat): an `XlaFusion` op ("XLA clusters");
- `IteratorGetNextOp::DoCompute` and the tf.data events nested in it: the IteratorGetNext op,
  which runs on a tf.data thread while the step waits for it: category "input pipeline";
- other tf.data events (`Iterator::*`, `PrefetchProduce`, ...): the background producer, off the
  step's critical path: reported per step, not in the shares;
- anything else off the Python thread (`ExecutorState::Process`, `ExecutorDoneCallback`, ...):
  the executor's own time around the kernels: category "framework: executor";
- the Python thread's own events (eager dispatch, waiting for the function): not counted.

`ShapeIndex` finds each op's shapes in the traced Python graphs; `breakdown` sums the self times
by category, as shares of the BUSY time (op self times + executor time), and `markdown` prints it.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

from bench.profile_rules import (
    ATTENTION_PARTS,
    CATEGORIES,
    VOCAB_SIZE,
    XLA_TYPE,
    attention_part,
    categorise,
    op_pattern,
)

WINDOW = "electra_profile_window"  # the TraceMe around the profiled calls


def profile_calls(run_call, calls: int, logdir: str) -> float:
    """Runs `run_call()` `calls` times under the profiler; returns the wall seconds of it all."""
    import tensorflow as tf

    # The default options: host tracer level 2 (every op kernel), no Python tracer. (Passing
    # ProfilerOptions explicitly only makes TF 2.20 log "expects an i value" per option.)
    tf.profiler.experimental.start(logdir)
    try:
        start = time.perf_counter()
        for i in range(calls):
            with tf.profiler.experimental.Trace(WINDOW, step_num=i, _r=1):
                run_call()
        seconds = time.perf_counter() - start
    finally:
        tf.profiler.experimental.stop()
    return seconds


# ---------------------------------------------------------------------------------- trace
def nest(intervals: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Self time and outermost ancestor of each interval (start, duration) on ONE thread.

    Returns (self durations, root index per interval: itself when it is not nested). A child that
    runs past its parent's end counts only up to it.
    """
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], -intervals[i][1], i))
    self_time = [duration for _, duration in intervals]
    root = list(range(len(intervals)))
    stack: list[int] = []
    for i in order:
        start, duration = intervals[i]
        while stack and intervals[stack[-1]][0] + intervals[stack[-1]][1] <= start:
            stack.pop()
        if stack:
            parent = stack[-1]
            parent_end = intervals[parent][0] + intervals[parent][1]
            self_time[parent] -= min(start + duration, parent_end) - start
            root[i] = root[stack[0]]
        stack.append(i)
    return [max(0, t) for t in self_time], root


OP_EVENT = re.compile(r"^(?P<name>[^:]+):(?P<type>_?[A-Z][A-Za-z0-9_]*)$")
TFDATA_EVENT = re.compile(r"^(Iterator::|Prefetch|ParallelMap|ParallelInterleave|MapAndBatch)")
GETNEXT_EVENT = "IteratorGetNextOp::DoCompute"


def _xplane_module():
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:  # other TF builds ship it at the top level
        from tsl.profiler.protobuf import xplane_pb2  # type: ignore[no-redef]
    return xplane_pb2


def host_plane(path: str) -> tuple[Any, list[str]]:
    """The host plane (XPlane) of the `.xplane.pb` at `path`, and the names of the device
    planes (not read)."""
    space = _xplane_module().XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    planes = {plane.name: plane for plane in space.planes}
    host = planes.get("/host:CPU")
    if host is None:
        raise RuntimeError(f"{path}: no /host:CPU plane (planes: {sorted(planes)})")
    return host, [name for name in planes if name.startswith("/device:")]


def host_lines(path: str) -> tuple[list[tuple[str, list[tuple[int, int, str, bool]]]], list[str]]:
    """The host plane of the trace at `path`: [(thread name, [(start ps, duration ps, name,
    an XLA computation: an `hlo_module` stat, not the lower-case name `signature_wrapper` has
    too)])], and the names of the device planes (not read)."""
    host, device_planes = host_plane(path)
    hlo = {key for key, meta in host.stat_metadata.items() if meta.name == "hlo_module"}
    lines = []
    for line in host.lines:
        base = line.timestamp_ns * 1000
        events = []
        for event in line.events:
            if event.duration_ps <= 0:
                continue
            xla = any(stat.metadata_id in hlo for stat in event.stats)
            name = host.event_metadata[event.metadata_id].name
            events.append((base + event.offset_ps, event.duration_ps, name, xla))
        lines.append((line.display_name or line.name, events))
    return lines, device_planes


def read_trace(logdir: str) -> dict[str, Any]:
    """Op self times and the rest, from the newest `.xplane.pb` under `logdir` (host plane)."""
    paths = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))
    if not paths:
        raise RuntimeError(f"no .xplane.pb under {logdir}: did the profiler run?")
    path = max(paths, key=os.path.getmtime)
    lines, device_planes = host_lines(path)
    windows = [
        (start, start + duration)
        for _, events in lines
        for start, duration, name, _ in events
        if name == WINDOW
    ]
    if not windows:
        raise RuntimeError(f"{path}: no '{WINDOW}' event: the profiled calls were not traced")
    window_lines = {name for name, events in lines if any(e[2] == WINDOW for e in events)}

    def inside(start: int) -> bool:
        return any(lo <= start < hi for lo, hi in windows)

    ops: dict[tuple[str, str], int] = collections.defaultdict(int)
    executor = background = 0
    for line_name, events in lines:
        self_times, roots = nest([(start, duration) for start, duration, *_ in events])
        for (start, _, name, xla), self_ps, root in zip(events, self_times, roots, strict=True):
            if not inside(start) or name == WINDOW:
                continue
            match = OP_EVENT.match(name)
            if match and "::" not in name:
                ops[(match["name"], match["type"])] += self_ps
            elif xla:
                ops[(name, XLA_TYPE)] += self_ps
            elif events[root][2] == GETNEXT_EVENT:
                ops[("IteratorGetNext (tf.data work it waited for)", "IteratorGetNext")] += self_ps
            elif TFDATA_EVENT.match(name) or line_name.startswith("tf_data"):
                background += self_ps
            elif line_name not in window_lines or name.startswith("Executor"):
                executor += self_ps
    wall = sum(hi - lo for lo, hi in windows)
    return {
        "path": path,
        "ops": [(name, op_type, ps / 1e12) for (name, op_type), ps in ops.items()],
        "wall_s": wall / 1e12,
        "executor_s": executor / 1e12,
        "background_s": background / 1e12,
        "device_planes": device_planes,
    }


# ---------------------------------------------------------------------------------- shapes
class ShapeIndex:
    """Op name -> [input shapes..., output shapes...], from traced graphs and their bodies.

    A traced op name is looked up by its longest suffix that some graph holds (inlining adds
    prefixes such as `while/body/_1/`); a name two graphs hold with different shapes is dropped.
    `calls`: a called function's name (`__inference__fused_drop_812`) -> its call's shapes.
    """

    def __init__(self) -> None:
        self.shapes: dict[str, tuple[tuple[int | None, ...], ...] | None] = {}
        self.calls: dict[str, tuple[tuple[int | None, ...], ...]] = {}

    def add_graph(self, graph: Any, seen: set[int] | None = None) -> ShapeIndex:
        seen = set() if seen is None else seen
        if id(graph) in seen:
            return self
        seen.add(id(graph))
        for op in graph.get_operations():
            try:
                shapes = tuple(
                    tuple(t.shape.as_list()) if t.shape.rank is not None else ()
                    for t in (*op.inputs, *op.outputs)
                )
            except Exception:  # a resource or variant tensor without a usable shape
                shapes = ()
            if op.name in self.shapes and self.shapes[op.name] != shapes:
                self.shapes[op.name] = None
            else:
                self.shapes[op.name] = shapes
            for attr in ("_body_graph", "_cond_graph", "_true_graph", "_false_graph"):
                sub = getattr(op, attr, None)
                if sub is not None:
                    self.add_graph(sub, seen)
            for name, sub in _called_graphs(graph, op):
                self.calls[name] = shapes
                self.add_graph(sub, seen)
        return self

    def lookup(self, name: str) -> tuple[tuple[int | None, ...], ...] | None:
        parts = name.split("/")
        for i in range(len(parts)):
            key = "/".join(parts[i:])
            if key in self.shapes:
                return self.shapes[key] or None
        return None

    def for_ops(self, names: Iterable[str]) -> dict[str, Any]:
        found = {}
        for name in names:
            shapes = self.lookup(name)
            if shapes is not None:
                found[name] = shapes
        return found


def _called_graphs(graph: Any, op: Any) -> list[tuple[str, Any]]:
    """(name, graph) of the functions `op` calls (PartitionedCall's `f`), where Python has
    their graphs."""
    graphs = []
    for attr in ("f", "then_branch", "else_branch", "body", "cond"):
        try:
            name = op.get_attr(attr).name
        except (ValueError, AttributeError, TypeError):
            continue
        function = graph._get_function(name) if hasattr(graph, "_get_function") else None
        sub = getattr(function, "graph", None)
        if sub is not None:
            graphs.append((name, sub))
    return graphs


# ---------------------------------------------------------------------------------- summary
def _categorised(
    ops: Iterable[tuple[str, str, float]],
    shapes: dict[str, Any] | None,
    vocab_size: int | None,
    model_scope: str | None,
) -> tuple[dict[str, float], dict[tuple[str, str], float], dict[tuple[str, str], str], int]:
    """(seconds per category, seconds per op, category per op, ops with shapes) of `breakdown`'s
    `ops`; each distinct op is categorised once."""
    per_category: dict[str, float] = collections.defaultdict(float)
    per_op: dict[tuple[str, str], float] = collections.defaultdict(float)
    op_category: dict[tuple[str, str], str] = {}
    matched = 0
    for name, op_type, seconds in ops:
        key = (name, op_type)
        if key not in op_category:
            op_shapes = shapes.get(name) if shapes else None
            matched += op_shapes is not None
            op_category[key] = categorise(
                name, op_type, op_shapes, vocab_size, model_scope=model_scope
            )
        per_category[op_category[key]] += seconds
        per_op[key] += seconds
    return per_category, per_op, op_category, matched


def share(seconds: float, whole: float) -> float:
    return seconds / whole if whole > 0 else 0.0


def _other_top(
    per_op: dict[tuple[str, str], float],
    op_category: dict[tuple[str, str], str],
    ms: float,
    busy_s: float,
    top: int,
) -> list[dict[str, Any]]:
    """The `top` slowest patterns (`op_pattern`) of the ops in category "other"."""
    other: dict[str, float] = collections.defaultdict(float)
    for (name, op_type), seconds in per_op.items():
        if op_category[(name, op_type)] == "other":
            other[op_pattern(name, op_type)] += seconds
    return [
        {"op": pattern, "ms_per_step": seconds * ms, "share_of_busy": share(seconds, busy_s)}
        for pattern, seconds in sorted(other.items(), key=lambda kv: -kv[1])[:top]
    ]


def _every_op(
    per_op: dict[tuple[str, str], float],
    op_category: dict[tuple[str, str], str],
    shapes: dict[str, Any] | None,
    ms: float,
    busy_s: float,
) -> list[dict[str, Any]]:
    """Every op, slowest first, with its category and shapes: the JSON's record for auditing
    the rules (the Markdown shows only the categories and the top of "other")."""
    return [
        {
            "op": name,
            "type": op_type,
            "category": op_category[(name, op_type)],
            "ms_per_step": seconds * ms,
            "share_of_busy": share(seconds, busy_s),
            "shapes": shapes.get(name) if shapes else None,
        }
        for (name, op_type), seconds in sorted(per_op.items(), key=lambda kv: -kv[1])
    ]


def breakdown(
    ops: Iterable[tuple[str, str, float]],
    steps: int,
    wall_s: float,
    executor_s: float = 0.0,
    background_s: float = 0.0,
    unprofiled_step_s: float | None = None,
    shapes: dict[str, Any] | None = None,
    vocab_size: int | None = VOCAB_SIZE,
    model_scope: str | None = None,
    top: int = 10,
) -> dict[str, Any]:
    """The breakdown of one profile.

    Args:
      ops: (op name, op type, self seconds), summed over the profiled steps; one op may repeat.
      steps: profiled steps (calls); every time is reported per step.
      wall_s: wall time of the profiled window, all steps.
      executor_s: executor time outside any op kernel (category "executor").
      background_s: background tf.data time (reported, not in the shares).
      shapes: op name -> shapes, from `ShapeIndex.lookup`, or None.
      vocab_size, model_scope: as `categorise`'s.
    """
    per_category, per_op, op_category, matched = _categorised(ops, shapes, vocab_size, model_scope)
    total_ops = len(op_category)
    op_s = sum(per_category.values())
    per_category["executor"] += executor_s
    busy_s = op_s + executor_s
    ms = 1000.0 / steps
    categories = {
        key: {
            "label": label,
            "ms_per_step": per_category.get(key, 0.0) * ms,
            "share_of_busy": share(per_category.get(key, 0.0), busy_s),
            "share_of_wall": share(per_category.get(key, 0.0), wall_s),
        }
        for key, label in CATEGORIES.items()
    }
    other_top = _other_top(per_op, op_category, ms, busy_s, top)
    all_ops = _every_op(per_op, op_category, shapes, ms, busy_s)
    return {
        "steps": steps,
        "wall_ms_per_step": wall_s * ms,
        "unprofiled_ms_per_step": None if unprofiled_step_s is None else unprofiled_step_s * 1000,
        "op_self_ms_per_step": op_s * ms,
        "executor_ms_per_step": executor_s * ms,
        "busy_ms_per_step": busy_s * ms,
        "gap_ms_per_step": (wall_s - busy_s) * ms,
        "background_tfdata_ms_per_step": background_s * ms,
        "distinct_ops": total_ops,
        "ops_with_shapes": matched,
        "categories": categories,
        "other_top": other_top,
        "ops": all_ops,
    }


def attention_share(
    result: dict[str, Any], seq_len: int, clusters: dict[str, float] | None = None
) -> dict[str, Any]:
    """Attention's ms per step and share of the busy time in one breakdown, in total and per
    part (ATTENTION_PARTS), `clusters` (`profile_clusters.attention_clusters`) added."""
    parts = dict.fromkeys(ATTENTION_PARTS, 0.0)
    for part, ms in (clusters or {}).items():
        parts[part] += ms
    for op in result["ops"]:
        part = attention_part(op, seq_len)
        if part:
            parts[part] += op["ms_per_step"]
    busy = result["busy_ms_per_step"]
    total = sum(parts.values())
    return {
        "ms_per_step": total,
        "share_of_busy": total / busy if busy > 0 else 0.0,
        "parts": {
            key: {"ms_per_step": ms, "share_of_busy": ms / busy if busy > 0 else 0.0}
            for key, ms in parts.items()
        },
    }


def attention_line(attention: dict[str, Any]) -> str:
    parts = ", ".join(
        f"{ATTENTION_PARTS[key]} {part['share_of_busy']:.1%}"
        for key, part in attention["parts"].items()
    )
    return (
        f"- attention (QK^T, scale and mask, softmax, AV, dropout on the probabilities, with "
        f"their gradients): {attention['ms_per_step']:.2f} ms/step, "
        f"{attention['share_of_busy']:.1%} of busy ({parts})"
    )


def markdown(title: str, result: dict[str, Any]) -> str:
    r = result
    unprofiled = r["unprofiled_ms_per_step"]
    lines = [
        f"### {title}",
        "",
        f"- wall time per step: {r['wall_ms_per_step']:.2f} ms profiled"
        + (f", {unprofiled:.2f} ms unprofiled" if unprofiled is not None else "")
        + f" ({r['steps']} step(s))",
        f"- op self times: {r['op_self_ms_per_step']:.2f} ms/step; executor outside ops: "
        f"{r['executor_ms_per_step']:.2f} ms; busy = {r['busy_ms_per_step']:.2f} ms; "
        f"wall - busy = {r['gap_ms_per_step']:.2f} ms (idle or untraced; < 0 when ops overlap)",
        f"- background tf.data (not in the shares): {r['background_tfdata_ms_per_step']:.2f} ms/step",
        f"- ops found in the traced graphs (shapes known): {r['ops_with_shapes']} of "
        f"{r['distinct_ops']} distinct ops",
        *([attention_line(r["attention"])] if "attention" in r else []),
        "",
        "| category | ms/step | % of busy | % of wall |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, row in r["categories"].items():
        if key in ("framework_ops", "executor", "other") or row["ms_per_step"] > 0:
            lines.append(
                f"| {row['label']} | {row['ms_per_step']:.3f} | {row['share_of_busy']:.1%} | "
                f"{row['share_of_wall']:.1%} |"
            )
    if r["other_top"]:
        lines += ["", "Top uncategorised ops (type, scope pattern):", ""]
        lines += ["| op | ms/step | % of busy |", "| --- | ---: | ---: |"]
        for row in r["other_top"]:
            lines.append(
                f"| `{row['op']}` | {row['ms_per_step']:.3f} | {row['share_of_busy']:.1%} |"
            )
    return "\n".join(lines)
