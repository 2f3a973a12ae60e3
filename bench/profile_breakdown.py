"""Where the time goes: a per-op breakdown of the train step and the serving call, from TF's profiler.

Profiles, with `tf.profiler.experimental` (host tracer, trace written to `--logdir`), two paths:

- train: the project's own ELECTRA pre-training step, built as `electra_tf.pretrain` builds it
  (`pretraining_model.build_model`, `pretraining_model.build_optimizer`, `pretraining_model.make_train_function`) on synthetic full-length
  batches (bench/project_step.py), small preset, vocab 30522, float32, `jit_compile` as the config
  resolves it (off on CPU). Like the real loop, the steps run inside ONE call of the compiled
  `train_steps(iterator, num_steps)`: `--warmup` steps, then `--steps` steps timed without the
  profiler, then `--steps` steps profiled.
- serve: the `encode_ids` signature of the exported SavedModel (ELECTRA-Small discriminator, as
  `make bench-serve` exports it), loaded back with `tf.saved_model.load`, at each of
  `--serve-batches` (default 1 and 32) x `--seq`: `--warmup` calls, `--steps` calls timed without
  the profiler, then `--steps` calls profiled.

The trace's `.xplane.pb` is read back (the XSpace protobuf, `tensorflow.tsl.profiler.protobuf`);
on each host thread, events nest by time, and an event's SELF time is its duration minus that of
the events nested in it. Every event is one of:

- an op kernel (`<op name>:<op type>`): its self time goes to a category (rules below);
- a computation of an XLA cluster (lower-case HLO names: `multiply_convert_fusion.clone`,
  `reduce-window.5.clone`, `convert.8`): category "XLA clusters", the training forms of GELU,
  LayerNorm and dropout's scaling (`electra_tf/modeling/utils.py`), which compile to HLO
  fusions instead of op kernels;
- `IteratorGetNextOp::DoCompute` and the tf.data events nested in it: the IteratorGetNext op,
  which runs on a tf.data thread while the step waits for it: category "input pipeline";
- other tf.data events (`Iterator::*`, `PrefetchProduce`, ...): the background producer, off the
  step's critical path: reported per step, not in the shares;
- anything else off the Python thread (`ExecutorState::Process`, `ExecutorDoneCallback`, ...):
  the executor's own time around the kernels: category "framework: executor";
- the Python thread's own events (eager dispatch, waiting for the function): not counted.

Shares are of the BUSY time (op self times + executor time); the summary also gives the wall
time per step (profiled, and unprofiled), the sum of op self times, and wall - busy (idle, or
untraced host work; negative when ops ran in parallel on several inter-op threads).

Category rules, first match wins. "Scope" is a component of the op's name split at "/"; op types
are compared with oneDNN's `_Mkl` / `_MklNative` prefix removed (`_MklMatMul` is a MatMul). Shapes
are the op's input and output shapes, looked up by name in the traced Python graphs (the
`train_steps` function with its while-loop body, or the serving signatures) where the name
matches; where it does not (ops that Grappler created), the fallbacks in [] apply.

 1. optimizer: a scope equal to the optimizer's name (`AdamWeightDecay`: the global-norm
    clipping, the Adam moments, weight decay and the variable updates), or a Resource*Apply* type.
 2. input pipeline: IteratorGetNext* / Optional* / MakeIterator / *Iterator* / *Dataset* types.
 3. framework: bookkeeping op types that move or relabel data (Cast, Reshape, Identity,
    ReadVariableOp, Assign*VariableOp, Shape, StridedSlice(Grad), Pack, ConcatV2, Fill, Transpose,
    ExpandDims, control flow, function calls, oneDNN layout conversions; FRAMEWORK_TYPES below).
    Also any other op under a `Tensordot` scope (its shape arithmetic: Prod, GatherV2 of a
    shape), which only a graph with unknown dimensions (the serving signature) keeps.
 3b. serving only: any remaining op outside the model's name scope (`electra_discriminator`):
    the signature's own work (id casts, special-token masks, sigmoid, token strings).
 4. embedding gathers/scatters: GatherV2, ResourceGather, GatherNd, UnsortedSegmentSum,
    SparseSegment*, ScatterNd, TensorScatter*, ResourceScatter* (embedding lookups, their
    gradients, the masked-position gathers and the sampled-token scatter).
 5. random-number ops (StatelessRandom*, Random*, *Multinomial, RngReadAndSkip, ...): with a
    vocab-sized dimension -> generator vocabulary softmax/sampling (the Gumbel noise); in a
    `dropout*` scope -> dropout random numbers; else -> other random numbers (masking, seeds).
 6. any other op in a `dropout*` scope (GreaterEqual, SelectV2, Mul, and their gradients):
    dropout mask and scale.
 7. a dimension equal to the vocabulary size (30522) in an input or output shape: a matrix product
    -> generator vocabulary logits matmul (the [B * N, E] x [V, E]^T MatMul, its two gradients);
    anything else -> generator vocabulary softmax, cross-entropy and sampling (logits bias add,
    SparseSoftmaxCrossEntropyWithLogits and its gradient, Gumbel log/add/argmax, the AddN of the
    tied embedding table's two gradients). [No shape: a matrix product under
    `generator_predictions/MatMul` or `cloze_predictions/MatMul` (`einsum` before 2026-11-27)
    -> logits matmul; a
    SparseSoftmaxCrossEntropyWithLogits type or scope -> vocabulary softmax.]
 8. matrix products: MatMul, BatchMatMul*, _FusedMatMul, Einsum (any prefix, any fusion);
    but under a layer norm scope (rule 10's), a product is the gradient's column sums: layer norm.
 9. attention softmax: Softmax / LogSoftmax types, or any op with an input or output of
    [B, heads, L, L] (rank 4, known heads, last two dimensions equal or both unknown; the matrix
    products and dropout on the scores were taken above): the mask add on the scores and the
    softmax gradient's Mul/Sum/Sub. [No shape: only the Softmax op; the gradient's elementwise
    ops fall to other.]
10. layer norm: a scope matching `layer_?norm` (any case: `LayerNorm`, `attention_layer_norm`)
    or a LayerNorm / FusedBatchNorm type; forward moments and batchnorm ops and their gradients.
11. GELU: a scope matching `gelu` (any case) or an Erf / Erfc type: the erf form's Erfc, Mul and
    Neg, and the gradient's Exp (`_UnaryOpsComposition`), Square and Mul.
12. bias add: BiasAdd / BiasAddGrad (the dense layers' bias where oneDNN did not fuse it).
13. other: the rest (residual adds, losses, metrics, masking); the top ones are listed by op type
    and scope pattern (`layer_7` -> `layer_*`, trailing `_3` dropped).

Usage (run alone on the machine for the real numbers; a few minutes):

    python -m bench.profile_breakdown [--path train|serve|both] [--steps 10] [--warmup 3]
        [--batch 32] [--seq 128] [--serve-batches 1,32] [--out breakdown.json] [--logdir DIR]
    python -m bench.profile_breakdown --quick      # tiny model, 2 steps: a smoke run

The trace stays in `--logdir` (default: a new temporary directory, printed) for TensorBoard's
profile plugin or Perfetto. CPU only: on a GPU the kernels run on the device planes, which this
reads nothing of, and with XLA (`--jit on`) the ops are fused into clusters that count as other.
"""

from __future__ import annotations

if (
    __name__ == "__main__" and not __package__
):  # `python bench/profile_breakdown.py`: bench is a package
    raise SystemExit("run it from the repository root as: python -m bench.profile_breakdown")

import argparse
import atexit
import collections
import glob
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from typing import Any

WINDOW = "electra_profile_window"  # the TraceMe around the profiled calls
VOCAB_SIZE = 30522
OPTIMIZER_SCOPE = "AdamWeightDecay"

# ---------------------------------------------------------------------------------- categories
# key -> label, in display order.
CATEGORIES: dict[str, str] = {
    "matmul": "matrix products (MatMul, BatchMatMul, _FusedMatMul, Einsum)",
    "vocab_matmul": "generator vocabulary logits matmul ([B,N,E] x [V,E], fwd + grads)",
    "vocab_softmax": "generator vocabulary softmax, cross-entropy, sampling (other V-wide ops)",
    "attention_softmax": "attention softmax (score mask add, softmax, its gradient)",
    "layer_norm": "layer norm (moments, normalise, gradients)",
    "gelu": "GELU (Erf or Erfc and the elementwise ops around it, gradients)",
    "bias_add": "bias add (BiasAdd, BiasAddGrad: not fused into the matmul)",
    "dropout_rng": "dropout random numbers",
    "dropout_apply": "dropout mask and scale (GreaterEqual, SelectV2, Mul)",
    "other_rng": "other random numbers (masking positions, seeds)",
    "gather_scatter": "gathers/scatters: embeddings, masked positions (GatherV2, ResourceGather, UnsortedSegmentSum, ScatterNd)",
    "optimizer": "optimizer update (AdamWeightDecay scope: clipping, moments, decay, assign)",
    "input": "input pipeline (IteratorGetNext and the tf.data work it waits for)",
    "serving_io": "serving signature's own ops (outside the model: input checks, outputs)",
    "framework_ops": "framework: bookkeeping ops (casts, reshapes, identity, variable reads, slicing)",
    "xla_fused": "XLA clusters (training GELU, LayerNorm, dropout scaling: HLO fusions)",
    "executor": "framework: executor (traced time outside any op kernel)",
    "other": "other (uncategorised ops; the top ones below)",
}

MATMUL_TYPES = re.compile(r"^_?(Fused)?(Batch)?MatMul(V\d)?$|^_?(Fused)?Einsum$|^_FusedBatchMatMul")
FRAMEWORK_TYPES = frozenset(
    """Identity IdentityN Const NoOp Cast Bitcast Reshape Squeeze ExpandDims Shape ShapeN Size Rank
    StridedSlice StridedSliceGrad Slice Pack Unpack ConcatV2 Concat ConcatOffset Split SplitV Fill
    ZerosLike OnesLike BroadcastTo BroadcastArgs BroadcastGradientArgs Range Transpose
    ReadVariableOp AssignVariableOp AssignAddVariableOp AssignSubVariableOp VarHandleOp
    VarIsInitializedOp DestroyResourceOp _Arg _Retval _Send _Recv _HostSend _HostRecv _DeviceArg
    _DeviceRetval Enter Exit Merge Switch NextIteration LoopCond While StatelessWhile If
    StatelessIf Case StatelessCase PartitionedCall StatefulPartitionedCall Placeholder
    PlaceholderWithDefault StopGradient PreventGradient Snapshot EnsureShape CheckNumerics
    ToTf InputConversion _ToTf _InputConversion""".split()
)
INPUT_TYPES = re.compile(r"Iterator|Dataset|^Optional(GetValue|HasValue|FromValue|None)$")
GATHER_TYPES = re.compile(
    r"^(Resource)?Gather(V2|Nd)?$|^(Unsorted)?Segment(Sum|Max|Min|Prod|Mean)(V2)?$|"
    r"^SparseSegment|^(Resource|TensorScatter|Scatter)(Nd)?(Update|Add|Sub|Max|Min|Mul|Div)?$|"
    r"^ScatterNd(NonAliasingAdd)?$|^TensorScatter|^ResourceScatter"
)
RANDOM_TYPES = re.compile(
    r"^(Stateless|Stateful)?(Random|TruncatedNormal|Multinomial|ParameterizedTruncatedNormal)|"
    r"^StatelessRandom|^Rng(ReadAndSkip|Skip)$|^StatefulUniform|^StatelessMultinomial$"
)
SOFTMAX_TYPES = re.compile(r"^(Log)?Softmax$")
LAYER_NORM_SCOPE = re.compile(r"layer_?norm", re.IGNORECASE)
LAYER_NORM_TYPES = re.compile(r"LayerNorm|^FusedBatchNorm")
GELU_SCOPE = re.compile(r"gelu", re.IGNORECASE)
VOCAB_MATMUL_SCOPE = re.compile(r"(generator|cloze)_predictions/(einsum|MatMul)")


def base_type(op_type: str) -> str:
    """The op type without oneDNN's rewrite prefix: `_MklNativeFusedMatMul` -> `_FusedMatMul`."""
    for prefix in ("_MklNative", "_Mkl"):
        if op_type.startswith(prefix):
            rest = op_type[len(prefix) :]
            return f"_{rest}" if rest.startswith("Fused") else rest
    return op_type


def scopes(name: str) -> list[str]:
    return name.split(":", 1)[0].split("/")


def _has_dim(shapes: Sequence[Sequence[int | None]] | None, size: int | None) -> bool:
    return bool(shapes and size) and any(size in shape for shape in shapes)


def _attention_shaped(shapes: Sequence[Sequence[int | None]] | None) -> bool:
    """An input or output of [B, heads, L, L] (heads known; L may be unknown in both)."""
    return any(
        len(shape) == 4 and shape[1] is not None and shape[2] == shape[3] for shape in shapes or ()
    )


def categorise(
    name: str,
    op_type: str,
    shapes: Sequence[Sequence[int | None]] | None = None,
    vocab_size: int | None = VOCAB_SIZE,
    optimizer_scope: str = OPTIMIZER_SCOPE,
    model_scope: str | None = None,
) -> str:
    """The category key of one op; the rules are the module docstring's, in the same order.

    `shapes`: the op's input shapes then output shapes (unknown dims None), or None where the
    op was not found in the graph.
    `model_scope`: the model's name scope (serving): other ops are the signature's own.
    """
    kind = base_type(op_type)
    if kind == XLA_TYPE:
        return "xla_fused"
    parts = scopes(name)
    is_matmul = bool(MATMUL_TYPES.search(kind))
    if optimizer_scope in parts or re.match(r"^Resource(Sparse)?Apply", kind):
        return "optimizer"
    if INPUT_TYPES.search(kind):
        return "input"
    if kind in FRAMEWORK_TYPES or kind.lstrip("_") in FRAMEWORK_TYPES:
        return "framework_ops"
    if "Tensordot" in parts[:-1] and not is_matmul:
        return "framework_ops"  # Tensordot's shape arithmetic (Prod, GatherV2 of a shape)
    if model_scope and model_scope not in parts:
        return "serving_io"
    if GATHER_TYPES.search(kind):
        return "gather_scatter"
    in_dropout = any(p.startswith("dropout") for p in parts)
    vocab_wide = _has_dim(shapes, vocab_size)
    if RANDOM_TYPES.search(kind):
        if vocab_wide:
            return "vocab_softmax"
        return "dropout_rng" if in_dropout else "other_rng"
    if in_dropout:
        return "dropout_apply"
    if vocab_wide:
        return "vocab_matmul" if is_matmul else "vocab_softmax"
    if shapes is None:
        if is_matmul and VOCAB_MATMUL_SCOPE.search(name):
            return "vocab_matmul"
        if "SparseSoftmaxCrossEntropyWithLogits" in parts or kind.startswith("SparseSoftmaxCross"):
            return "vocab_softmax"
    if is_matmul and any(LAYER_NORM_SCOPE.search(p) for p in parts):
        return "layer_norm"  # the hand-written gradient's column sums
    if is_matmul:
        return "matmul"
    if SOFTMAX_TYPES.search(kind) or _attention_shaped(shapes):
        return "attention_softmax"
    if any(LAYER_NORM_SCOPE.search(p) for p in parts) or LAYER_NORM_TYPES.search(kind):
        return "layer_norm"
    if any(GELU_SCOPE.search(p) for p in parts) or kind in ("Erf", "Erfc"):
        return "gelu"
    if kind in ("BiasAdd", "BiasAddGrad", "BiasAddV1"):
        return "bias_add"
    return "other"


def op_pattern(name: str, op_type: str) -> str:
    """`while/body/_1/while/discriminator/layer_7/add_2:AddV2` -> `AddV2 discriminator/layer_*/add`."""
    parts = scopes(name)
    # Drop the prefixes that inlining a function adds (`while/body/_1/`, `StatefulPartitionedCall/`).
    while len(parts) > 1 and re.fullmatch(
        r"while(_\d+)?|body|cond|_\d+|(Stateful)?PartitionedCall(_\d+)?", parts[0]
    ):
        parts = parts[1:]
    parts = [re.sub(r"^layer_\d+$", "layer_*", p) for p in parts]
    parts = [re.sub(r"_\d+$", "", p) for p in parts]
    return f"{op_type} {'/'.join(parts)}"


# ---------------------------------------------------------------------------------- summary
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
    per_category: dict[str, float] = collections.defaultdict(float)
    per_op: dict[tuple[str, str], float] = collections.defaultdict(float)
    op_category: dict[tuple[str, str], str] = {}
    matched = total_ops = 0
    for name, op_type, seconds in ops:
        key = (name, op_type)
        if key not in op_category:
            op_shapes = shapes.get(name) if shapes else None
            total_ops += 1
            matched += op_shapes is not None
            op_category[key] = categorise(
                name, op_type, op_shapes, vocab_size, model_scope=model_scope
            )
        per_category[op_category[key]] += seconds
        per_op[key] += seconds
    op_s = sum(per_category.values())
    per_category["executor"] += executor_s
    busy_s = op_s + executor_s
    ms = 1000.0 / steps

    def share(seconds: float, whole: float) -> float:
        return seconds / whole if whole > 0 else 0.0

    categories = {
        key: {
            "label": label,
            "ms_per_step": per_category.get(key, 0.0) * ms,
            "share_of_busy": share(per_category.get(key, 0.0), busy_s),
            "share_of_wall": share(per_category.get(key, 0.0), wall_s),
        }
        for key, label in CATEGORIES.items()
    }
    other: dict[str, float] = collections.defaultdict(float)
    for (name, op_type), seconds in per_op.items():
        if op_category[(name, op_type)] == "other":
            other[op_pattern(name, op_type)] += seconds
    other_top = [
        {"op": pattern, "ms_per_step": seconds * ms, "share_of_busy": share(seconds, busy_s)}
        for pattern, seconds in sorted(other.items(), key=lambda kv: -kv[1])[:top]
    ]
    # Every op, slowest first, with its category and shapes: the JSON's record for auditing
    # the rules (the Markdown shows only the categories and the top of "other").
    all_ops = [
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


# ---------------------------------------------------------------------------------- attention
ATTENTION_PARTS: dict[str, str] = {
    "products": "QK^T and AV products (forward and gradients)",
    "softmax_mask": "scale, mask add, softmax (forward and gradient)",
    "dropout": "dropout on the attention probabilities",
}
BATCH_MATMUL_TYPES = re.compile(r"BatchMatMul")


def attention_scores_shaped(shape: Sequence[int | None], seq_len: int) -> bool:
    """A [batch, heads, seq_q, seq_k] tensor: rank 4, heads known and unlike the length, the
    last dimension the key length (or unknown). Takes the scores, the probabilities, the
    [batch, 1, 1, seq_k] mask bias; not the heads' split [batch, seq, heads, head_size], nor
    [batch, heads, seq, head_size] unless head_size equals the length."""
    return (
        len(shape) == 4
        and shape[1] is not None
        and shape[1] != seq_len
        and shape[3] in (seq_len, None)
    )


def attention_part(op: dict[str, Any], seq_len: int) -> str | None:
    """Which part of attention one op of a breakdown's `ops` list is, or None.

    With shapes: any op with an input or output shaped like the scores (but none of the
    optimizer's); a matrix product is a product, an op in a dropout scope is dropout, the rest
    is scale, mask and softmax. Without shapes: a BatchMatMul (in this project's encoder only
    the attention products are batched; the dense layers run on 2-D rows) or a Softmax op.
    """
    if op["category"] in ("optimizer", "input", "executor"):
        return None
    kind = base_type(op["type"])
    shapes = op.get("shapes")
    if shapes:
        if not any(attention_scores_shaped(shape, seq_len) for shape in shapes):
            return None
    elif not (BATCH_MATMUL_TYPES.search(kind) or SOFTMAX_TYPES.search(kind)):
        return None
    if MATMUL_TYPES.search(kind):
        return "products"
    if op["category"] in ("dropout_rng", "dropout_apply"):
        return "dropout"
    return "softmax_mask"


def attention_share(result: dict[str, Any], seq_len: int) -> dict[str, Any]:
    """Attention's time in one breakdown (`breakdown`'s result): ms per step and share of the
    busy time, in total and per part (ATTENTION_PARTS)."""
    parts = dict.fromkeys(ATTENTION_PARTS, 0.0)
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
# An XLA computation's thunk: an HLO instruction name, lower case (`select_convert_fusion.clone`).
XLA_EVENT = re.compile(r"^[a-z][a-z0-9_\-]*(\.\d+)*(\.clone)?$")
XLA_TYPE = "XlaFusion"
TFDATA_EVENT = re.compile(r"^(Iterator::|Prefetch|ParallelMap|ParallelInterleave|MapAndBatch)")
GETNEXT_EVENT = "IteratorGetNextOp::DoCompute"


def _xplane_module():
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:  # other TF builds ship it at the top level
        from tsl.profiler.protobuf import xplane_pb2  # type: ignore[no-redef]
    return xplane_pb2


def read_trace(logdir: str) -> dict[str, Any]:
    """Op self times and the rest, from the newest `.xplane.pb` under `logdir` (host plane)."""
    paths = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))
    if not paths:
        raise RuntimeError(f"no .xplane.pb under {logdir}: did the profiler run?")
    path = max(paths, key=os.path.getmtime)
    space = _xplane_module().XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    planes = {plane.name: plane for plane in space.planes}
    device_planes = [name for name in planes if name.startswith("/device:")]
    host = planes.get("/host:CPU")
    if host is None:
        raise RuntimeError(f"{path}: no /host:CPU plane (planes: {sorted(planes)})")
    lines = []
    for line in host.lines:
        base = line.timestamp_ns * 1000
        events = []
        for event in line.events:
            if event.duration_ps <= 0:
                continue
            meta = host.event_metadata[event.metadata_id]
            events.append((base + event.offset_ps, event.duration_ps, meta.name))
        lines.append((line.display_name or line.name, events))
    windows = [
        (start, start + duration)
        for _, events in lines
        for start, duration, name in events
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
        self_times, roots = nest([(start, duration) for start, duration, _ in events])
        for (start, _, name), self_ps, root in zip(events, self_times, roots, strict=True):
            if not inside(start) or name == WINDOW:
                continue
            match = OP_EVENT.match(name)
            if match and "::" not in name:
                ops[(match["name"], match["type"])] += self_ps
            elif XLA_EVENT.match(name):
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
    """

    def __init__(self) -> None:
        self.shapes: dict[str, tuple[tuple[int | None, ...], ...] | None] = {}

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
            for sub in _called_graphs(graph, op):
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


def _called_graphs(graph: Any, op: Any) -> list[Any]:
    """The graphs of the functions `op` calls (PartitionedCall's `f`), where Python has them."""
    graphs = []
    for attr in ("f", "then_branch", "else_branch", "body", "cond"):
        try:
            name = op.get_attr(attr).name
        except (ValueError, AttributeError, TypeError):
            continue
        function = graph._get_function(name) if hasattr(graph, "_get_function") else None
        sub = getattr(function, "graph", None)
        if sub is not None:
            graphs.append(sub)
    return graphs


# ---------------------------------------------------------------------------------- runs
QUICK_MODEL = {
    "model_hparam_overrides": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
    },
    "embedding_size": 16,
    # > 1000 (bench/project_step.py draws ids from 1000 up) and unlike any other dimension.
    "vocab_size": 1999,
}


def model_hparams(args: argparse.Namespace) -> dict[str, Any]:
    hparams: dict[str, Any] = {
        "train_batch_size": args.batch,
        "max_seq_length": args.seq,
        "precision": args.precision,
    }
    if args.jit != "auto":
        hparams["jit_compile"] = args.jit == "on"
    if args.quick:
        hparams.update(QUICK_MODEL)
    return hparams


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


def profile_train(args: argparse.Namespace, logdir: str) -> dict[str, Any]:
    import tensorflow as tf
    import tf_keras as keras

    from bench.project_step import synthetic_batches, write_bench_vocab
    from electra_tf.config import pretraining_config
    from electra_tf.device_defaults import probe_machine
    from electra_tf.runs import pretraining_model

    data_dir = tempfile.mkdtemp(prefix="electra-profile-")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    config = pretraining_config(
        "profile", data_dir, preset="small", hparams=model_hparams(args), machine=probe_machine()
    )
    write_bench_vocab(data_dir, config.vocab_size)
    keras.mixed_precision.set_global_policy(config.precision)
    model = pretraining_model.build_model(config)
    optimizer = pretraining_model.build_optimizer(config, model)
    model.compile(optimizer=optimizer)
    train_steps = pretraining_model.make_train_function(
        model, tf.distribute.get_strategy(), bool(config.jit_compile)
    )
    iterator = iter(synthetic_batches(args.batch, args.seq, config.vocab_size))
    print(f"train: warming up ({args.warmup} steps)", file=sys.stderr, flush=True)
    train_steps(iterator, tf.constant(max(1, args.warmup))).numpy()
    steps = tf.constant(args.steps)
    start = time.perf_counter()
    train_steps(iterator, steps).numpy()
    unprofiled = (time.perf_counter() - start) / args.steps
    print(f"train: profiling {args.steps} steps", file=sys.stderr, flush=True)
    profile_calls(lambda: train_steps(iterator, steps).numpy(), 1, logdir)
    trace = read_trace(logdir)
    index = ShapeIndex().add_graph(train_steps.get_concrete_function(iterator, steps).graph)
    result = breakdown(
        trace["ops"],
        args.steps,
        trace["wall_s"],
        trace["executor_s"],
        trace["background_s"],
        unprofiled,
        index.for_ops(name for name, _, _ in trace["ops"]),
        config.vocab_size,
    )
    params = sum(int(tf.size(v)) for v in model.trainable_variables)
    result.update(
        attention=attention_share(result, args.seq),
        path="train",
        title=(
            f"train step, batch {args.batch} x seq {args.seq}, {config.precision}, "
            f"XLA {'on' if config.jit_compile else 'off'}, vocab {config.vocab_size}, "
            f"{params / 1e6:.1f}M parameters"
        ),
        trace=trace["path"],
        device_planes=trace["device_planes"],
        optimizer=type(optimizer).__name__,
    )
    if config.jit_compile:
        result["notes"] = [
            "XLA is on: the step's ops run fused inside XLA clusters, which count as other; "
            "rerun with --jit off for the per-op breakdown."
        ]
    return result


def profile_serve(args: argparse.Namespace, logdir: str) -> list[dict[str, Any]]:
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, as a serving binary links them)

    from bench.project_step import write_bench_vocab
    from electra_tf.config import pretraining_config
    from electra_tf.device_defaults import probe_machine
    from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
    from electra_tf.serving.kinds import serving_module
    from electra_tf.serving.saved_model import ExportSpec, write_export

    workdir = tempfile.mkdtemp(prefix="electra-profile-serve-")  # the export: ~60 MB at full size
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    config = pretraining_config(
        "profile", workdir, preset="small", hparams=model_hparams(args), machine=probe_machine()
    )
    vocab_file = write_bench_vocab(workdir, config.vocab_size)
    model = ElectraDiscriminator(config.discriminator_config())
    model(dummy_inputs())
    module = serving_module("discriminator", model, vocab_file, args.seq)
    spec = ExportSpec("discriminator", "electra_profile", module, "{}", vocab_file, {})
    export_dir = write_export(spec, os.path.join(workdir, "export"), None, False)
    loaded = tf.saved_model.load(export_dir)
    encode = loaded.signatures["encode_ids"]
    index = ShapeIndex().add_graph(encode.graph)
    results = []
    rng = np.random.default_rng(0)
    for batch in args.serve_batches:
        ids = rng.integers(1000, config.vocab_size, size=(batch, args.seq)).astype(np.int32)
        ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
        inputs = {
            "input_ids": tf.constant(ids),
            "input_mask": tf.ones_like(ids),
            "segment_ids": tf.zeros_like(ids),
        }

        def call(inputs=inputs) -> None:
            encode(**inputs)["replaced_probability"].numpy()

        print(f"serve: batch {batch}", file=sys.stderr, flush=True)
        for _ in range(max(1, args.warmup)):  # the first call runs the graph optimisations
            call()
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        sub = os.path.join(logdir, f"serve_b{batch}")
        profile_calls(call, args.steps, sub)
        trace = read_trace(sub)
        result = breakdown(
            trace["ops"],
            args.steps,
            trace["wall_s"],
            trace["executor_s"],
            trace["background_s"],
            statistics.median(times),
            index.for_ops(name for name, _, _ in trace["ops"]),
            config.vocab_size,
            model_scope=model.name,
        )
        result.update(
            attention=attention_share(result, args.seq),
            path="serve",
            batch=batch,
            title=(
                f"serving `encode_ids`, batch {batch} x seq {args.seq}, discriminator "
                f"{config.discriminator_config().num_hidden_layers} x "
                f"{config.discriminator_config().hidden_size} (unprofiled time: median call)"
            ),
            trace=trace["path"],
            device_planes=trace["device_planes"],
        )
        results.append(result)
    return results


# ---------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=("train", "serve", "both"), default="both")
    parser.add_argument("--steps", type=int, help="profiled steps / calls (default 10; quick 2)")
    parser.add_argument(
        "--warmup", type=int, help="untimed steps / calls first (default 3; quick 1; at least 1)"
    )
    parser.add_argument("--batch", type=int, help="train batch (default 32; quick 4)")
    parser.add_argument("--seq", type=int, help="sequence length (default 128; quick 32)")
    parser.add_argument("--serve-batches", help="serving batch sizes (default 1,32; quick 1,4)")
    parser.add_argument("--precision", default="float32", help="train precision (float32)")
    parser.add_argument(
        "--jit",
        choices=("auto", "on", "off"),
        default="auto",
        help="train step XLA (auto: as the config resolves it, off on CPU)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny model, few steps: smoke run")
    parser.add_argument(
        "--no-peak", action="store_true", help="skip the tf.matmul peak (--quick skips it too)"
    )
    parser.add_argument("--intra", type=int, default=0, help="intra-op threads (0: TF default)")
    parser.add_argument("--inter", type=int, default=0, help="inter-op threads (0: TF default)")
    parser.add_argument("--out", help="write the breakdown as JSON here")
    parser.add_argument("--logdir", help="profiler trace directory (default: a new temp dir)")
    args = parser.parse_args(argv)
    quick = args.quick
    for field, full, small in (
        ("steps", 10, 2),
        ("warmup", 3, 1),
        ("batch", 32, 4),
        ("seq", 128, 32),
        ("serve_batches", "1,32", "1,4"),
    ):
        if getattr(args, field) is None:
            setattr(args, field, small if quick else full)
    args.serve_batches = [int(b) for b in str(args.serve_batches).split(",") if b.strip()]
    if args.steps < 1 or args.batch < 1 or args.seq < 4 or not args.serve_batches:
        parser.error("--steps, --batch, --serve-batches must be positive and --seq at least 4")
    return args


def start_tensorflow(args: argparse.Namespace) -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if args.intra:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra)
    if args.inter:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter)
    from electra_tf.tf_startup import start_tensorflow as start

    start()
    return tf


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tf = start_tensorflow(args)
    logdir = args.logdir or tempfile.mkdtemp(prefix="electra-profile-trace-")
    os.makedirs(logdir, exist_ok=True)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    peak = None
    if not (args.quick or args.no_peak):  # the processor's matmul peak, for the header
        from bench.machine import measure_peak

        peak = measure_peak()
    results = []
    if args.path in ("train", "both"):
        results.append(profile_train(args, os.path.join(logdir, "train")))
    if args.path in ("serve", "both"):
        results += profile_serve(args, os.path.join(logdir, "serve"))
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    machine = {
        "tensorflow": tf.__version__,
        "cpus": os.cpu_count(),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "quick": args.quick,
        "matmul_peak": peak,
        "logdir": logdir,
    }
    from bench.machine import header

    print(
        f"## Profile breakdown{' (--quick: tiny model)' if args.quick else ''}\n\n"
        f"{header(peak, load_before, load_after)}\n\n"
        f"TensorFlow {machine['tensorflow']}, threads intra "
        f"{machine['intra_op_threads']} / inter {machine['inter_op_threads']} (0 = TF default); "
        f"trace in {logdir}\n"
    )
    for result in results:
        print(markdown(result["title"], result) + "\n")
        for note in result.get("notes", []):
            print(f"NOTE: {note}\n")
        if result["device_planes"]:
            print(f"NOTE: device planes {result['device_planes']} were not read (host only).\n")
    if args.out:
        tmp = f"{args.out}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"machine": machine, "profiles": results}, f, indent=2)
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
