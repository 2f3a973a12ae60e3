"""bench.profile_breakdown (and bench/profile_trace.py): the shares, the trace nesting and the
attention share on synthetic data (no profiling), and one `--quick` run end to end. The op
categoriser's rules: tests/test_profile_rules.py."""

import json
import os
import subprocess
import sys
import time

import pytest

from bench import profile_breakdown as pb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BODY = "while/body/_1/while/"


def test_breakdown_shares_and_other_list():
    ops = [
        (BODY + "discriminator/layer_0/query/Tensordot/MatMul", "_MklMatMul", 0.40),
        (BODY + "discriminator/layer_1/query/Tensordot/MatMul", "_MklMatMul", 0.20),
        (BODY + "discriminator/layer_0/Softmax", "_MklSoftmax", 0.10),
        (BODY + "discriminator/layer_0/attention_layer_norm/moments/mean", "Mean", 0.05),
        (BODY + "AdamWeightDecay/mul", "Mul", 0.05),
        (BODY + "Cast", "Cast", 0.02),
        (BODY + "discriminator/layer_0/add_2", "AddV2", 0.03),
        (BODY + "discriminator/layer_1/add_2", "AddV2", 0.01),
        (BODY + "logistic_loss/Log1p", "Log1p", 0.02),
        # The same op again (a second step): its time adds up.
        (BODY + "discriminator/layer_0/Softmax", "_MklSoftmax", 0.02),
    ]
    result = pb.breakdown(ops, steps=2, wall_s=1.2, executor_s=0.1, background_s=0.04)
    cats = result["categories"]
    busy = 0.9 + 0.1
    assert result["op_self_ms_per_step"] == pytest.approx(450.0)
    assert result["busy_ms_per_step"] == pytest.approx(500.0)
    assert result["wall_ms_per_step"] == pytest.approx(600.0)
    assert result["gap_ms_per_step"] == pytest.approx(100.0)
    assert result["background_tfdata_ms_per_step"] == pytest.approx(20.0)
    assert cats["matmul"]["ms_per_step"] == pytest.approx(300.0)
    assert cats["matmul"]["share_of_busy"] == pytest.approx(0.6 / busy)
    assert cats["matmul"]["share_of_wall"] == pytest.approx(0.6 / 1.2)
    assert cats["attention_softmax"]["share_of_busy"] == pytest.approx(0.12 / busy)
    assert cats["layer_norm"]["share_of_busy"] == pytest.approx(0.05 / busy)
    assert cats["optimizer"]["share_of_busy"] == pytest.approx(0.05 / busy)
    assert cats["framework_ops"]["share_of_busy"] == pytest.approx(0.02 / busy)
    assert cats["executor"]["share_of_busy"] == pytest.approx(0.1 / busy)
    assert cats["other"]["share_of_busy"] == pytest.approx(0.06 / busy)
    assert cats["dropout_rng"]["ms_per_step"] == 0.0
    assert sum(c["share_of_busy"] for c in cats.values()) == pytest.approx(1.0)
    assert list(cats) == list(pb.CATEGORIES)
    # The two layers' residual adds are one pattern, and it tops the list.
    assert result["other_top"][0]["op"] == "AddV2 discriminator/layer_*/add"
    assert result["other_top"][0]["ms_per_step"] == pytest.approx(20.0)
    assert result["other_top"][1]["op"] == "Log1p logistic_loss/Log1p"
    assert [op["category"] for op in result["ops"][:2]] == ["matmul", "matmul"]
    assert len(result["ops"]) == 9 and result["ops"][0]["ms_per_step"] == pytest.approx(200.0)
    assert result["distinct_ops"] == 9 and result["ops_with_shapes"] == 0
    table = pb.markdown("t", result)
    assert "| matrix products" in table and "| 300.000 | 60.0% | 50.0% |" in table
    assert "dropout random numbers" not in table  # empty rows are left out


def test_breakdown_uses_shapes_where_given():
    name = BODY + "Log"
    shapes = {name: [(4, 4, 1999), (4, 4, 1999)]}
    result = pb.breakdown([(name, "Log", 0.5)], 1, 1.0, shapes=shapes, vocab_size=1999)
    assert result["categories"]["vocab_softmax"]["share_of_busy"] == pytest.approx(1.0)
    assert result["ops_with_shapes"] == 1


def test_nest_self_times():
    # A [0, 100) parent with children [10, 30) and [40, 90); [50, 60) inside the second;
    # a child running past its parent's end [95, 120) counts up to 100; [200, 210) is alone.
    intervals = [(0, 100), (10, 20), (40, 50), (50, 10), (95, 25), (200, 10)]
    self_times, roots = pb.nest(intervals)
    assert self_times == [100 - 20 - 50 - 5, 20, 40, 10, 25, 10]
    assert roots == [0, 0, 0, 0, 0, 5]
    # Order of the input does not matter; equal starts nest the longer outside.
    self_times, roots = pb.nest([(0, 10), (0, 30)])
    assert self_times == [10, 20] and roots == [1, 1]


def test_shape_index_suffix_lookup():
    index = pb.ShapeIndex()
    index.shapes = {
        "while/generator_predictions/einsum/Einsum": ((4, 16), (16, 1999)),
        "add": None,  # two graphs disagreed
    }
    assert index.lookup("while/body/_1/while/generator_predictions/einsum/Einsum") == (
        (4, 16),
        (16, 1999),
    )
    assert index.lookup("while/body/_1/while/add") is None
    assert index.lookup("unknown/op") is None
    assert index.for_ops(["a/while/generator_predictions/einsum/Einsum", "b"]) == {
        "a/while/generator_predictions/einsum/Einsum": ((4, 16), (16, 1999))
    }


def test_op_event_names():
    assert pb.OP_EVENT.match("while/body/_1/while/Cast:Cast")["type"] == "Cast"
    assert pb.OP_EVENT.match("x/MatMul:_MklMatMul")["name"] == "x/MatMul"
    for name in ("ExecutorState::Process", "EagerLocalExecute: __inference_f_1", "train"):
        assert not (pb.OP_EVENT.match(name) and "::" not in name)


QUICK_LIMIT_S = 30


@pytest.mark.slow  # `make profile` itself; the categorisation is tested above
def test_quick_run_end_to_end(tmp_path):
    """`--quick` through the real profiler, both paths, on one core (about 15-25 s here)."""
    out = tmp_path / "breakdown.json"
    env = dict(
        os.environ,
        PYTHONPATH=ROOT,
        TF_NUM_INTRAOP_THREADS="1",
        TF_NUM_INTEROP_THREADS="1",
        OMP_NUM_THREADS="1",
    )
    start = time.perf_counter()
    command = [sys.executable, "-m", "bench.profile_breakdown", "--quick"]
    command += ["--out", str(out), "--logdir", str(tmp_path / "trace")]
    try:
        run = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=300, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        # About 14 s of CPU; only a machine whose cores other jobs hold takes this long.
        pytest.skip("--quick did not finish in 300 s: the machine is too loaded to tell")
    seconds = time.perf_counter() - start
    assert run.returncode == 0, run.stderr[-3000:]
    if seconds > QUICK_LIMIT_S:
        print(f"note: --quick took {seconds:.0f} s (over {QUICK_LIMIT_S} s: a loaded machine)")
    result = json.loads(out.read_text())
    profiles = result["profiles"]
    assert [p["path"] for p in profiles] == ["train", "serve", "serve"]
    assert [p.get("batch") for p in profiles[1:]] == [1, 4]
    for profile in profiles:
        shares = [c["share_of_busy"] for c in profile["categories"].values()]
        assert sum(shares) == pytest.approx(1.0)
        assert profile["categories"]["matmul"]["ms_per_step"] > 0
        assert profile["ops_with_shapes"] > 0.9 * profile["distinct_ops"]
    train = profiles[0]["categories"]
    for key in ("vocab_matmul", "vocab_softmax", "layer_norm", "gelu", "optimizer", "input"):
        assert train[key]["ms_per_step"] > 0, key
    assert profiles[1]["categories"]["optimizer"]["ms_per_step"] == 0
    assert "### train step, batch 4 x seq 32" in run.stdout
    assert "### serving `encode_ids`, batch 1 x seq 32" in run.stdout
    # Attention found in every profile: its products, softmax and (training) dropout.
    for profile in profiles:
        parts = profile["attention"]["parts"]
        assert parts["products"]["ms_per_step"] > 0 and parts["softmax_mask"]["ms_per_step"] > 0
        assert (
            0
            < profile["attention"]["share_of_busy"]
            < profile["categories"]["matmul"]["share_of_busy"]
            + profile["categories"]["attention_softmax"]["share_of_busy"]
            + 0.2
        )
    assert profiles[0]["attention"]["parts"]["dropout"]["ms_per_step"] > 0
    assert "- attention (QK^T" in run.stdout and "processor: " in run.stdout


def test_the_hand_written_training_forms_are_xla_clusters_under_their_scopes():
    """The training forms of LayerNorm and GELU (forward and gradient) are each one call of a
    function that XLA must compile (the profile counts their HLO fusions as "XLA clusters"),
    under the scopes that name them; no op around them falls into "other"."""
    import tensorflow as tf

    from electra_tf.modeling.utils import apply_activation, apply_layer_norm, layer_norm

    norm = layer_norm()
    norm.build([None, 8])

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            with tf.name_scope("layer_0"):
                y = apply_activation("gelu", apply_layer_norm(norm, x, training=True), True)
            loss = tf.reduce_sum(y)
        return tape.gradient(loss, [x, *norm.trainable_variables])

    graph = step.get_concrete_function(tf.TensorSpec([4, 8])).graph
    compiled = set()
    for op in graph.get_operations():
        if op.type in ("PartitionedCall", "StatefulPartitionedCall"):
            definition = graph._get_function(op.get_attr("f").name).definition
            if definition.attr["_XlaMustCompile"].b:
                compiled.add(op.name.split("/")[-2])
        # Outside layer_0: the test's own loss and its gradient.
        elif "layer_0/" in op.name and pb.categorise(op.name, op.type) == "other":
            raise AssertionError(f"{op.name} ({op.type}) is uncategorised")
    assert compiled == {"layer_norm_train", "layer_norm_train_grad", "gelu_train",
                        "gelu_train_grad"}  # fmt: skip


# ---------------------------------------------------------------------------------- attention
LQ = 32  # the hand-built trace's sequence length; 4 heads of 16, batch 2
SCORES = (2, 4, LQ, LQ)
TRACE_OPS = [
    # (name, type, start ns, duration ns, shapes)
    (BODY + "discriminator/layer_0/query/MatMul", "_MklMatMul", 10, 300,
     [(64, 64), (64, 64), (64, 64)]),
    (BODY + "discriminator/layer_0/MatMul", "_MklBatchMatMulV2", 320, 100,
     [(2, 4, LQ, 16), (2, 4, LQ, 16), SCORES]),
    (BODY + "discriminator/layer_0/add", "AddV2", 430, 20, [SCORES, (2, 1, 1, LQ), SCORES]),
    (BODY + "discriminator/layer_0/Softmax", "_MklSoftmax", 450, 50, [SCORES, SCORES]),
    (BODY + "discriminator/layer_0/dropout_1/dropout/SelectV2", "SelectV2", 500, 30,
     [SCORES, SCORES, (), SCORES]),
    (BODY + "discriminator/layer_0/MatMul_1", "_MklBatchMatMulV2", 530, 100,
     [SCORES, (2, 4, LQ, 16), (2, 4, LQ, 16)]),
    # The generator's vocabulary softmax: a Softmax, but not attention's.
    (BODY + "Softmax", "Softmax", 640, 100, [(8, 1999), (8, 1999)]),
    # The head split [batch, seq, heads, head_size]: not attention.
    (BODY + "discriminator/layer_0/transpose", "Transpose", 750, 40,
     [(2, LQ, 4, 16), (4,), (2, 4, LQ, 16)]),
]  # fmt: skip


def hand_built_trace(directory):
    """An .xplane.pb with one profiled window [0, 1000) ns: on the executor's thread an
    `ExecutorState::Process` [0, 900) ns around TRACE_OPS (so 900 - 740 = 160 ns of executor
    time of its own)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    names = [pb.WINDOW, "ExecutorState::Process"] + [f"{n}:{t}" for n, t, *_ in TRACE_OPS]
    for index, name in enumerate(names, start=1):
        plane.event_metadata[index].id = index
        plane.event_metadata[index].name = name
    python = plane.lines.add(id=1, name="python", timestamp_ns=0)
    python.events.add(metadata_id=1, offset_ps=0, duration_ps=1000 * 1000)
    executor = plane.lines.add(id=2, name="tf_inter_op", timestamp_ns=0)
    executor.events.add(metadata_id=2, offset_ps=0, duration_ps=900 * 1000)
    for index, (_, _, start, duration, _) in enumerate(TRACE_OPS, start=3):
        executor.events.add(metadata_id=index, offset_ps=start * 1000, duration_ps=duration * 1000)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "host.xplane.pb"), "wb") as f:
        f.write(space.SerializeToString())


def test_attention_share_of_a_hand_built_trace(tmp_path):
    hand_built_trace(str(tmp_path))
    trace = pb.read_trace(str(tmp_path))
    shapes = {name: op_shapes for name, _, _, _, op_shapes in TRACE_OPS}
    result = pb.breakdown(
        trace["ops"], 1, trace["wall_s"], trace["executor_s"], shapes=shapes, vocab_size=1999
    )
    # Busy: 740 ns of ops + 160 ns of executor; attention: QK^T, mask add, softmax, dropout, AV.
    assert result["busy_ms_per_step"] == pytest.approx(900e-6)
    attention = pb.attention_share(result, LQ)
    assert attention["ms_per_step"] == pytest.approx(300e-6)
    assert attention["share_of_busy"] == pytest.approx(300 / 900)
    parts = {k: v["share_of_busy"] for k, v in attention["parts"].items()}
    assert parts == pytest.approx({"products": 200 / 900, "softmax_mask": 70 / 900,
                                   "dropout": 30 / 900})  # fmt: skip
    assert "33.3% of busy" in pb.markdown("t", {**result, "attention": attention})


def test_attention_without_shapes_counts_only_batched_products_and_softmax():
    ops = [
        {"op": "x/MatMul", "type": "_MklBatchMatMulV2", "category": "matmul", "ms_per_step": 2.0},
        {"op": "x/Softmax", "type": "Softmax", "category": "attention_softmax",
         "ms_per_step": 1.0},
        {"op": "x/add", "type": "AddV2", "category": "other", "ms_per_step": 4.0},
        {"op": "x/dense/MatMul", "type": "_MklMatMul", "category": "matmul", "ms_per_step": 8.0},
    ]  # fmt: skip
    result = {"ops": [{**op, "shapes": None} for op in ops], "busy_ms_per_step": 20.0}
    attention = pb.attention_share(result, 128)
    assert attention["ms_per_step"] == pytest.approx(3.0)
    assert attention["share_of_busy"] == pytest.approx(0.15)


def test_xla_cluster_computations_get_their_own_category(tmp_path):
    # The training GELU/LayerNorm/dropout scaling run as XLA clusters: their HLO fusions are
    # traced as events with an `hlo_module` stat, not `<name>:<Type>` op kernels, and must not
    # be counted as the executor's own time. A lower-case name alone is no XLA computation: a
    # SavedModel signature's function event is `signature_wrapper`, the executor's time.
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    plane.stat_metadata[1].id = 1
    plane.stat_metadata[1].name = "hlo_module"
    names = [pb.WINDOW, "ExecutorState::ProcessAsync::Start", "multiply_convert_fusion.clone",
             "reduce-window.5.clone", "x/MatMul:_MklMatMul", "signature_wrapper"]  # fmt: skip
    for index, name in enumerate(names, start=1):
        plane.event_metadata[index].id = index
        plane.event_metadata[index].name = name
    python = plane.lines.add(id=1, name="python", timestamp_ns=0)
    python.events.add(metadata_id=1, offset_ps=0, duration_ps=1000 * 1000)
    compute = plane.lines.add(id=2, name="tf_Compute/1", timestamp_ns=0)
    events = ((2, 0, 100), (3, 100, 300), (4, 400, 100), (5, 500, 400), (6, 900, 50))
    for metadata_id, start, duration in events:
        event = compute.events.add(
            metadata_id=metadata_id, offset_ps=start * 1000, duration_ps=duration * 1000
        )
        if metadata_id in (3, 4):
            event.stats.add(metadata_id=1, str_value="a_inference__gelu_forward_10__.1")
    with open(tmp_path / "host.xplane.pb", "wb") as f:
        f.write(space.SerializeToString())
    trace = pb.read_trace(str(tmp_path))
    result = pb.breakdown(trace["ops"], 1, trace["wall_s"], trace["executor_s"])
    cats = result["categories"]
    assert cats["xla_fused"]["ms_per_step"] == pytest.approx(400e-6)
    assert cats["matmul"]["ms_per_step"] == pytest.approx(400e-6)
    assert cats["executor"]["ms_per_step"] == pytest.approx(150e-6)
