"""Which category an op's time goes to, in `bench.profile_breakdown`: the rules as ONE table.

`RULES` is the table (category, patterns, meaning); `categorise` runs it, first match wins, and
`rules_markdown` prints it (`python -m bench.profile_breakdown --rules-markdown`), which is the
table docs/performance.md shows (tests/test_profile_rules.py checks that they agree). How a
row reads: `RULES_INTRO`. Also here: which part of attention an op is (`attention_part`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

VOCAB_SIZE = 30522
OPTIMIZER_SCOPE = "AdamWeightDecay"
XLA_TYPE = "XlaFusion"  # the type given to a computation of an XLA cluster (profile_trace.py)

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


# ---------------------------------------------------------------------------------- the table
@dataclasses.dataclass(frozen=True)
class Op:
    """What the rules look at: one op of the trace."""

    name: str  # without a `:<type>` suffix
    kind: str  # `base_type` of the op's type
    parts: tuple[str, ...]  # the name's components: its scopes, then the op's own name
    shapes: Sequence[Sequence[int | None]] | None  # inputs then outputs; None: not found
    vocab_size: int | None
    optimizer_scope: str
    model_scope: str | None  # serving: the model's name scope


# Named tests a rule can use, as a pattern (it matches) or as a condition (it must hold):
# key -> (how the table says it, the test).
TESTS: dict[str, tuple[str, Callable[[Op], bool]]] = {
    "optimizer scope": (
        f"a scope equal to the optimizer's name (`{OPTIMIZER_SCOPE}`)",
        lambda op: op.optimizer_scope in op.parts,
    ),
    "matrix product": (
        "a matrix product type (the types of rule 8's matrix products)",
        lambda op: bool(MATMUL_TYPES.search(op.kind)),
    ),
    "vocabulary-wide": (
        f"a dimension equal to the vocabulary size ({VOCAB_SIZE} at the small preset) in an "
        "input or output shape",
        lambda op: _has_dim(op.shapes, op.vocab_size),
    ),
    "no shapes": (
        "no shapes (an op that Grappler created, not in the traced graphs)",
        lambda op: op.shapes is None,
    ),
    "in dropout": (
        "a scope starting with `dropout`",
        lambda op: any(p.startswith("dropout") for p in op.parts),
    ),
    "outside the model": (
        "serving only: no scope equal to the model's name (`electra_discriminator`)",
        lambda op: bool(op.model_scope) and op.model_scope not in op.parts,
    ),
    "attention-shaped": (
        "an input or output of [B, heads, L, L] (rank 4, heads known, the last two dimensions "
        "equal or both unknown)",
        lambda op: _attention_shaped(op.shapes),
    ),
}


@dataclasses.dataclass(frozen=True)
class Rule:
    """One row: ops that match any of its patterns (every op, where it has none) and meet all
    of its conditions go to `category`.

    `types`: a regular expression searched in the op's type, or a set of types (compared with
    the leading underscores removed too); `scope`: searched in each component of the name;
    `name`: searched in the whole name; `tests`: keys of TESTS that match too. `when` / `unless`:
    keys of TESTS that must / must not hold."""

    number: str
    category: str
    meaning: str
    types: re.Pattern | frozenset | None = None
    scope: re.Pattern | None = None
    name: re.Pattern | None = None
    tests: tuple[str, ...] = ()
    when: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()

    def matches(self, op: Op) -> bool:
        if not all(TESTS[key][1](op) for key in self.when):
            return False
        if any(TESTS[key][1](op) for key in self.unless):
            return False
        patterns = [self.types, self.scope, self.name, *self.tests]
        return all(p is None for p in patterns) or (
            self._type_matches(op.kind)
            or (self.scope is not None and any(self.scope.search(p) for p in op.parts))
            or (self.name is not None and bool(self.name.search(op.name)))
            or any(TESTS[key][1](op) for key in self.tests)
        )

    def _type_matches(self, kind: str) -> bool:
        if isinstance(self.types, frozenset):
            return kind in self.types or kind.lstrip("_") in self.types
        return self.types is not None and bool(self.types.search(kind))


# First match wins. `number`: the rule's place in the table (a number per kind of rule).
RULES: tuple[Rule, ...] = (
    Rule("0", "xla_fused", "a computation of an XLA cluster (a lower-case HLO event in the "
         "trace: `multiply_convert_fusion.clone`): the training forms of GELU, LayerNorm and "
         "dropout's scaling (`electra_tf/modeling/utils.py`), compiled to HLO fusions",
         types=re.compile(f"^{XLA_TYPE}$")),
    Rule("1", "optimizer", "the global-norm clipping, the Adam moments, weight decay and the "
         "variable updates", types=re.compile(r"^Resource(Sparse)?Apply"),
         tests=("optimizer scope",)),
    Rule("2", "input", "the IteratorGetNext op and the tf.data work it waited for",
         types=INPUT_TYPES),
    Rule("3", "framework_ops", "bookkeeping that moves or relabels data: casts, reshapes, "
         "identity, variable reads, slicing, control flow, function calls, oneDNN layout "
         "conversions", types=FRAMEWORK_TYPES),
    Rule("3", "framework_ops", "Tensordot's shape arithmetic (Prod, GatherV2 of a shape), which "
         "only a graph with unknown dimensions (the serving signature) keeps",
         name=re.compile(r"(^|/)Tensordot/"), unless=("matrix product",)),
    Rule("3b", "serving_io", "the signature's own work (id casts, special-token masks, sigmoid, "
         "token strings)", when=("outside the model",)),
    Rule("4", "gather_scatter", "embedding lookups and their gradients, the masked-position "
         "gathers and the sampled-token scatter", types=GATHER_TYPES),
    Rule("5", "vocab_softmax", "the Gumbel noise of the generator's sampling",
         types=RANDOM_TYPES, when=("vocabulary-wide",)),
    Rule("5", "dropout_rng", "dropout's random numbers", types=RANDOM_TYPES,
         when=("in dropout",)),
    Rule("5", "other_rng", "other random numbers (masking positions, seeds)",
         types=RANDOM_TYPES),
    Rule("6", "dropout_apply", "dropout's mask and scale (GreaterEqual, SelectV2, Mul) and "
         "their gradients", when=("in dropout",)),
    Rule("7", "vocab_matmul", "the generator's [B * N, E] x [V, E]^T logits MatMul and its two "
         "gradients", when=("vocabulary-wide", "matrix product")),
    Rule("7", "vocab_softmax", "the logits bias add, SparseSoftmaxCrossEntropyWithLogits and "
         "its gradient, the Gumbel log/add/argmax, the AddN of the tied embedding table's two "
         "gradients", when=("vocabulary-wide",)),
    Rule("7", "vocab_matmul", "the same logits product, found by its scope where the shapes "
         "are unknown", name=VOCAB_MATMUL_SCOPE, when=("no shapes", "matrix product")),
    Rule("7", "vocab_softmax", "the cross-entropy, found by its type or scope where the shapes "
         "are unknown", types=re.compile(r"^SparseSoftmaxCross"),
         scope=re.compile(r"^SparseSoftmaxCrossEntropyWithLogits$"), when=("no shapes",)),
    Rule("8", "layer_norm", "the hand-written LayerNorm gradient's column sums (a product with "
         "a row of ones)", scope=LAYER_NORM_SCOPE, when=("matrix product",)),
    Rule("8", "matmul", "matrix products: MatMul, BatchMatMul*, _FusedMatMul, Einsum (any "
         "prefix, any fusion)", types=MATMUL_TYPES),
    Rule("9", "attention_softmax", "the softmax, the mask add on the scores and the softmax "
         "gradient's Mul/Sum/Sub (the products and dropout on the scores went above); without "
         "shapes, only the Softmax op", types=SOFTMAX_TYPES, tests=("attention-shaped",)),
    Rule("10", "layer_norm", "forward moments, the batchnorm ops and their gradients",
         types=LAYER_NORM_TYPES, scope=LAYER_NORM_SCOPE),
    Rule("11", "gelu", "the erf form's Erfc, Mul and Neg, and the gradient's Exp "
         "(`_UnaryOpsComposition`), Square and Mul", types=re.compile(r"^Erfc?$"),
         scope=GELU_SCOPE),
    Rule("12", "bias_add", "the dense layers' bias where oneDNN did not fuse it",
         types=re.compile(r"^BiasAdd(Grad|V1)?$")),
    Rule("13", "other", "the rest (residual adds, losses, metrics, masking); the top ones are "
         "listed by op type and scope pattern (`layer_7` -> `layer_*`, trailing `_3` dropped)"),
)  # fmt: skip


def categorise(
    name: str,
    op_type: str,
    shapes: Sequence[Sequence[int | None]] | None = None,
    vocab_size: int | None = VOCAB_SIZE,
    optimizer_scope: str = OPTIMIZER_SCOPE,
    model_scope: str | None = None,
) -> str:
    """The category key of one op: that of the first of RULES that it matches.

    `shapes`: the op's input shapes then output shapes (unknown dims None), or None where the
    op was not found in the graph.
    `model_scope`: the model's name scope (serving): other ops are the signature's own.
    """
    return rule_of(name, op_type, shapes, vocab_size, optimizer_scope, model_scope).category


def rule_of(
    name: str,
    op_type: str,
    shapes: Sequence[Sequence[int | None]] | None = None,
    vocab_size: int | None = VOCAB_SIZE,
    optimizer_scope: str = OPTIMIZER_SCOPE,
    model_scope: str | None = None,
) -> Rule:
    """The first of RULES that one op matches (the last rule matches every op)."""
    parts = scopes(name)
    op = Op("/".join(parts), base_type(op_type), tuple(parts), shapes, vocab_size,
            optimizer_scope, model_scope)  # fmt: skip
    return next(rule for rule in RULES if rule.matches(op))


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


# ---------------------------------------------------------------------------------- Markdown
RULES_INTRO = (
    "Every op kernel's self time goes to the category of the first row it matches: any of "
    "the row's patterns (every op, where the row has none), and all of its conditions. Op "
    "types are compared with oneDNN's `_Mkl` / `_MklNative` prefix removed (`_MklMatMul` is a "
    "MatMul); a scope is a component of the op's name split at `/`; shapes are the op's input "
    "and output shapes, looked up by name in the traced Python graphs (the `train_steps` "
    "function with its while-loop body, or the serving signatures)."
)


def _pattern_text(rule: Rule, previous: Rule | None) -> str:
    def code(pattern: re.Pattern) -> str:
        case = " (any case)" if pattern.flags & re.IGNORECASE else ""
        return f"`{pattern.pattern}`{case}"

    texts = []
    if previous is not None and rule.types is not None and rule.types is previous.types:
        texts.append("the types of the row above")
    elif isinstance(rule.types, frozenset):
        texts.append("type one of " + ", ".join(f"`{t}`" for t in sorted(rule.types)))
    elif rule.types is not None:
        texts.append(f"type {code(rule.types)}")
    if rule.scope is not None:
        texts.append(f"a scope {code(rule.scope)}")
    if rule.name is not None:
        texts.append(f"name {code(rule.name)}")
    texts += [TESTS[key][0] for key in rule.tests]
    return "; or ".join(texts) or "any op"


def rules_markdown() -> str:
    """RULES as Markdown: `RULES_INTRO`, then one row per rule."""
    lines = [
        RULES_INTRO,
        "",
        "| rule | category | patterns (any of) | conditions (all of) | what it takes |",
        "| --- | --- | --- | --- | --- |",
    ]
    for previous, rule in zip((None, *RULES), RULES, strict=False):
        conditions = [TESTS[key][0] for key in rule.when]
        conditions += [f"not {TESTS[key][0]}" for key in rule.unless]
        cells = [rule.number, CATEGORIES[rule.category].split(" (")[0], _pattern_text(rule, previous),
                 "; ".join(conditions) or "-", rule.meaning]  # fmt: skip
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- attention
ATTENTION_PARTS: dict[str, str] = {
    "products": "QK^T and AV products (forward and gradients)",
    "softmax_mask": "scale, mask add, softmax (forward and gradient)",
    "dropout": "dropout on the attention probabilities (with the softmax's gradient where one "
    "XLA cluster does both)",
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
