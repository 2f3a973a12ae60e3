"""bench.profile_rules: the op-category rules as one table (`RULES`), the categoriser that runs
it, and the table docs/performance.md shows, which must be `--rules-markdown`'s output."""

import os
import re

import pytest

from bench import profile_breakdown
from bench import profile_rules as pb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

V = 30522
B, N, E, L, H = 32, 19, 128, 128, 256
BODY = "while/body/_1/while/"
GRAD = "while/body/_1/gradient_tape/while/"

CASES = [
    # Matrix products, with and without oneDNN's rewrite prefix and fusions.
    (BODY + "discriminator/layer_0/query/Tensordot/MatMul", "_MklMatMul", None, "matmul"),
    (BODY + "discriminator/layer_0/einsum/Einsum", "_MklEinsum", None, "matmul"),
    ("x/dense/MatMul", "_MklNativeFusedMatMul", None, "matmul"),
    ("x/MatMul", "_FusedMatMul", None, "matmul"),
    ("x/bmm", "BatchMatMulV2", None, "matmul"),
    # The vocabulary: by a V-wide shape, whatever the scope ...
    (
        BODY + "generator_predictions/einsum/Einsum",
        "_MklEinsum",
        [(B, N, E), (V, E), (B, N, V)],
        "vocab_matmul",
    ),
    (
        GRAD + "generator_predictions/einsum/Einsum_1",
        "_MklEinsum",
        [(B, N, V), (B, N, E), (V, E)],
        "vocab_matmul",
    ),
    (BODY + "Log", "Log", [(B, N, V), (B, N, V)], "vocab_softmax"),
    (BODY + "ArgMax", "ArgMax", [(B, N, V), (), (B, N)], "vocab_softmax"),
    (
        BODY + "stateless_random_uniform_2/StatelessRandomUniformV2",
        "StatelessRandomUniformV2",
        [(3,), (1,), (2,), (), (B, N, V)],
        "vocab_softmax",
    ),
    # ... or, without shapes, by the head's scope / the cross-entropy op.
    (BODY + "generator_predictions/einsum/Einsum", "_MklEinsum", None, "vocab_matmul"),
    (BODY + "generator_predictions/MatMul", "_MklNativeFusedMatMul", None, "vocab_matmul"),
    (GRAD + "generator_predictions/MatMul/MatMul_1", "_MklMatMul", None, "vocab_matmul"),
    (BODY + "cloze_predictions/MatMul", "_MklMatMul", None, "vocab_matmul"),
    (
        BODY + "SparseSoftmaxCrossEntropyWithLogits/SparseSoftmaxCrossEntropyWithLogits",
        "SparseSoftmaxCrossEntropyWithLogits",
        None,
        "vocab_softmax",
    ),
    # A V-row embedding gradient is a scatter, not the vocabulary softmax.
    (
        BODY + "AddN_23/inputs_1",
        "UnsortedSegmentSum",
        [(B * L, E), (B * L,), (), (V, E)],
        "gather_scatter",
    ),
    (BODY + "discriminator/embeddings/Gather", "ResourceGather", None, "gather_scatter"),
    (BODY + "ScatterNd_1", "ScatterNd", None, "gather_scatter"),
    ("x/TensorScatterSub", "TensorScatterSub", None, "gather_scatter"),
    # Attention softmax: the Softmax op, and ops shaped [B, heads, L, L].
    (BODY + "discriminator/layer_0/Softmax", "_MklSoftmax", None, "attention_softmax"),
    (
        BODY + "discriminator/layer_0/add",
        "AddV2",
        [(B, 4, L, L), (B, 1, 1, L), (B, 4, L, L)],
        "attention_softmax",
    ),
    (
        GRAD + "discriminator/layer_0/Sum",
        "Sum",
        [(B, 4, L, L), (1,), (B, 4, L, 1)],
        "attention_softmax",
    ),
    (
        GRAD + "discriminator/layer_0/sub",
        "Sub",
        [(B, 4, L, L), (B, 4, L, 1), (B, 4, L, L)],
        "attention_softmax",
    ),
    (
        "m/layer_0/add",
        "AddV2",
        [(None, 4, None, None), (None, 1, 1, None), (None, 4, None, None)],
        "attention_softmax",
    ),
    # ... but not the head split [B, L, heads, head_size] nor a dropout on the probabilities.
    (BODY + "discriminator/layer_0/mul", "Mul", [(B, L, 4, 64), (), (B, L, 4, 64)], "other"),
    # Dropout: random numbers vs the mask and scale; other random numbers.
    (
        BODY + "discriminator/layer_0/dropout_1/dropout/random_uniform/RandomUniform",
        "RandomUniform",
        [(4,), (B, 4, L, L)],
        "dropout_rng",
    ),
    (
        BODY + "discriminator/layer_0/dropout_1/dropout/SelectV2",
        "SelectV2",
        [(B, 4, L, L)] * 4,
        "dropout_apply",
    ),
    (GRAD + "discriminator/embeddings/dropout/dropout/Mul", "Mul", None, "dropout_apply"),
    (
        BODY + "stateless_categorical/StatelessMultinomial",
        "StatelessMultinomial",
        None,
        "other_rng",
    ),
    (BODY + "stateful_uniform_full_int/RngReadAndSkip", "RngReadAndSkip", None, "other_rng"),
    # Layer norm and GELU by scope, forward and gradient.
    (
        BODY + "discriminator/layer_0/attention_layer_norm/moments/mean",
        "Mean",
        None,
        "layer_norm",
    ),
    (GRAD + "generator/embeddings/LayerNorm/batchnorm/mul/Sum", "Sum", None, "layer_norm"),
    # The hand-written gradient's column sums are products with a row of ones.
    (
        BODY + "layer_norm_train_grad_3/MatMul_1",
        "_MklMatMul",
        [(1, B * L), (B * L, 256), (1, 256)],
        "layer_norm",
    ),
    ("x/ln", "_MklLayerNorm", None, "layer_norm"),
    (BODY + "discriminator/layer_0/intermediate/Gelu/Erfc", "Erfc", None, "gelu"),
    (
        GRAD + "discriminator/layer_0/intermediate/Gelu/Exp/unary_ops_composition",
        "_UnaryOpsComposition",
        None,
        "gelu",
    ),
    ("x/Erf", "Erf", None, "gelu"),
    (BODY + "discriminator/layer_0/query/BiasAdd", "BiasAdd", None, "bias_add"),
    (GRAD + "discriminator/layer_0/query/BiasAdd/BiasAddGrad", "BiasAddGrad", None, "bias_add"),
    # The optimizer's scope wins over every op type in it.
    (BODY + "AdamWeightDecay/clip_by_global_norm/mul_1", "Mul", None, "optimizer"),
    (BODY + "AdamWeightDecay/AssignSubVariableOp_3", "AssignSubVariableOp", None, "optimizer"),
    ("x/ResourceApplyAdam", "ResourceApplyAdam", None, "optimizer"),
    # Input pipeline, framework bookkeeping.
    (BODY + "IteratorGetNext", "IteratorGetNext", None, "input"),
    ("x/OptionalGetValue", "OptionalGetValue", None, "input"),
    (BODY + "Cast_3", "Cast", None, "framework_ops"),
    (
        BODY + "discriminator/embeddings/ReadVariableOp",
        "ReadVariableOp",
        [(), (V, E)],
        "framework_ops",
    ),
    (
        BODY + "SparseSoftmaxCrossEntropyWithLogits/Reshape",
        "Reshape",
        [(B, N, V), (2,), (B * N, V)],
        "framework_ops",
    ),
    ("m/layer_0/attention_output/Tensordot/Prod", "Prod", None, "framework_ops"),
    ("m/layer_0/attention_output/Tensordot/GatherV2", "GatherV2", None, "framework_ops"),
    (
        GRAD + "discriminator/embeddings/strided_slice_2/StridedSliceGrad",
        "StridedSliceGrad",
        None,
        "framework_ops",
    ),
    ("x/mkl", "_MklToTf", None, "framework_ops"),
    # The rest.
    (BODY + "logistic_loss/Log1p", "Log1p", None, "other"),
    (BODY + "AssignAddVariableOp_3", "AssignAddVariableOp", None, "framework_ops"),
    # An XLA cluster's computation (bench/profile_trace.py gives it this type).
    ("multiply_convert_fusion.clone", "XlaFusion", None, "xla_fused"),
]
SERVING_SCOPE = "electra_discriminator"


@pytest.mark.parametrize("name, op_type, shapes, expected", CASES)
def test_categorise(name, op_type, shapes, expected):
    assert pb.categorise(name, op_type, shapes) == expected


def test_vocab_rule_uses_the_given_vocab_size():
    shapes = [(4, 4, 16), (1999, 16), (4, 4, 1999)]
    assert pb.categorise("g/einsum/Einsum", "Einsum", shapes, vocab_size=1999) == "vocab_matmul"
    assert pb.categorise("g/dense/Einsum", "Einsum", shapes, vocab_size=V) == "matmul"
    assert pb.categorise("g/dense/Einsum", "Einsum", shapes, vocab_size=None) == "matmul"


def test_serving_ops_outside_the_model_scope():
    scope = "electra_discriminator"
    assert pb.categorise("StatefulPartitionedCall/GatherV2", "GatherV2", model_scope=scope) == (
        "serving_io"
    )
    assert pb.categorise("StatefulPartitionedCall/Sigmoid", "Sigmoid", model_scope=scope) == (
        "serving_io"
    )
    # Bookkeeping stays framework, and the model's own ops keep their categories.
    assert pb.categorise("StatefulPartitionedCall/Cast", "Cast", model_scope=scope) == (
        "framework_ops"
    )
    inside = f"StatefulPartitionedCall/{scope}/electra/embeddings/Gather"
    assert pb.categorise(inside, "ResourceGather", model_scope=scope) == "gather_scatter"


def test_base_type_and_op_pattern():
    assert pb.base_type("_MklMatMul") == "MatMul"
    assert pb.base_type("_MklNativeFusedMatMul") == "_FusedMatMul"
    assert pb.base_type("_MklFusedBatchMatMulV2") == "_FusedBatchMatMulV2"
    assert pb.base_type("AddV2") == "AddV2"
    assert pb.op_pattern(BODY + "discriminator/layer_11/add_2", "AddV2") == (
        "AddV2 discriminator/layer_*/add"
    )
    assert pb.op_pattern("StatefulPartitionedCall/Equal_1", "Equal") == "Equal Equal"


@pytest.mark.parametrize(
    "shape, seq_len, expected",
    [
        ((32, 4, 128, 128), 128, True),  # scores / probabilities
        ((32, 4, 64, 128), 128, True),  # one query block's scores against every key
        ((32, 1, 1, 128), 128, True),  # the mask bias
        ((None, 4, None, None), 128, True),  # a serving signature's unknown batch and length
        ((32, 128, 4, 64), 128, False),  # the heads' split before the transpose
        ((32, 64, 4, 64), 64, False),  # ... where head_size equals the length
        ((32, 4, 128, 64), 128, False),  # [batch, heads, seq, head_size]
        ((32, 128, 256), 128, False),
    ],
)
def test_attention_scores_shaped(shape, seq_len, expected):
    assert pb.attention_scores_shaped(shape, seq_len) is expected


# ---------------------------------------------------------------------------------- the table
def test_every_rule_is_the_first_match_of_some_case():
    """No row of the table is dead: each one is the rule that decides at least one case above
    (the serving row with the model's scope given)."""
    decided = {id(pb.rule_of(name, op_type, shapes)) for name, op_type, shapes, _ in CASES}
    decided.add(id(pb.rule_of("StatefulPartitionedCall/Sigmoid", "Sigmoid",
                              model_scope=SERVING_SCOPE)))  # fmt: skip
    assert [rule for rule in pb.RULES if id(rule) not in decided] == []


def test_the_rules_cover_every_category_and_end_with_a_catch_all():
    # "executor" is the trace's own time around the kernels, never an op's category.
    assert {rule.category for rule in pb.RULES} == set(pb.CATEGORIES) - {"executor"}
    last = pb.RULES[-1]
    assert (last.category, last.types, last.scope, last.name, last.tests) == (
        "other",
        None,
        None,
        None,
        (),
    )
    assert not (last.when or last.unless)
    keys = {key for rule in pb.RULES for key in (*rule.tests, *rule.when, *rule.unless)}
    assert keys <= set(pb.TESTS)


RULES_BLOCK = re.compile(
    r"<!-- rules: generated by `python -m bench.profile_breakdown --rules-markdown`[^\n]*-->\n"
    r"(?P<table>.*?)\n<!-- end of rules -->",
    re.DOTALL,
)


def test_the_docs_show_the_rules_markdown_output(capsys):
    """docs/performance.md's table of the rules is `--rules-markdown`'s output, verbatim: the
    rules are stated once, in `RULES`, and the docs are generated from them."""
    assert profile_breakdown.main(["--rules-markdown"]) == 0
    printed = capsys.readouterr().out
    assert printed == pb.rules_markdown() + "\n"
    with open(os.path.join(ROOT, "docs", "performance.md"), encoding="utf-8") as f:
        found = RULES_BLOCK.search(f.read())
    assert found, "docs/performance.md: no generated rules block (regenerate it)"
    assert found["table"] == printed.rstrip("\n"), (
        "docs/performance.md: the rules table differs from `python -m bench.profile_breakdown "
        "--rules-markdown`: paste its output between the markers"
    )
    for rule in pb.RULES:
        assert rule.meaning in found["table"]
