"""bench.profile_clusters: XLA computations summed by the function their module compiles, and
the time beyond four medians, on a hand-built trace (no profiling)."""

import pytest

from bench import profile_clusters as pc
from bench.profile_trace import WINDOW

GELU = "a_inference__gelu_bias_forward_10185__.23"
NORM = "a_inference__forward_10154__.117__XlaMustCompile_true_config_proto_1"


def write_trace(path, events):
    """An .xplane.pb: the profiled window [0, 10,000) ns on a Python line, and on one compute
    line `events` (start ns, duration ns, computation, module or None)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    plane.stat_metadata[1].id = 1
    plane.stat_metadata[1].name = "hlo_module"
    names = [WINDOW] + sorted({name for _, _, name, _ in events})
    ids = {name: index for index, name in enumerate(names, start=1)}
    for name, index in ids.items():
        plane.event_metadata[index].id = index
        plane.event_metadata[index].name = name
    modules = {}
    for _, _, _, module in events:
        if module and module not in modules:
            modules[module] = 10 + len(modules)  # a stat metadata entry holds each module name
            plane.stat_metadata[modules[module]].id = modules[module]
            plane.stat_metadata[modules[module]].name = module
    python = plane.lines.add(id=1, name="python", timestamp_ns=0)
    python.events.add(metadata_id=ids[WINDOW], offset_ps=0, duration_ps=10_000 * 1000)
    compute = plane.lines.add(id=2, name="tf_Compute/1", timestamp_ns=0)
    for start, duration, name, module in events:
        event = compute.events.add(
            metadata_id=ids[name], offset_ps=start * 1000, duration_ps=duration * 1000
        )
        if module:
            event.stats.add(metadata_id=1, ref_value=modules[module])
    path.write_bytes(space.SerializeToString())


def test_cluster_table_sums_by_function_and_counts_stalls(tmp_path):
    events = [
        # The GELU forward: three calls of 100 ns and one stalled call of 1,000 ns.
        (0, 100, "multiply_convert_fusion", GELU),
        (200, 100, "multiply_convert_fusion", GELU),
        (400, 100, "multiply_convert_fusion", GELU),
        (600, 1000, "multiply_convert_fusion", GELU),
        # A LayerNorm cluster whose computation shares the GELU's name: counted apart.
        (2000, 50, "multiply_convert_fusion", NORM),
        (2100, 50, "multiply_convert_fusion", NORM),
        (2200, 30, "reduce-window", NORM),
        # Not an XLA event, and an XLA event after the profiled window: neither counted.
        (3000, 500, "x/MatMul:_MklMatMul", None),
        (20_000, 400, "multiply_convert_fusion", GELU),
    ]
    write_trace(tmp_path / "host.xplane.pb", events)
    durations = pc.read_clusters(str(tmp_path / "host.xplane.pb"))
    assert sorted(len(v) for v in durations.values()) == [1, 2, 4]
    table = pc.cluster_table(durations, steps=2)
    assert [row["function"] for row in table] == ["_gelu_bias_forward", "_forward"]
    gelu, norm = table
    # ps -> ms per step over 2 steps; the stalled call is 1,000 - 4 x 100 (its median) beyond.
    assert gelu["ms_per_step"] == pytest.approx(1300e-6 / 2)
    assert gelu["events_per_step"] == 2
    assert gelu["stalled_ms_per_step"] == pytest.approx(600e-6 / 2)
    assert norm["ms_per_step"] == pytest.approx(130e-6 / 2)
    assert norm["stalled_ms_per_step"] == 0
    text = pc.clusters_markdown(table)
    assert "| `_gelu_bias_forward` | 0.0 | 2 | 0.0 |" in text and text.endswith(
        "| all | 0.0 | | 0.0 |"
    )


def test_function_names_of_modules():
    assert pc.cluster_function(GELU) == "_gelu_bias_forward"
    assert pc.cluster_function(NORM) == "_forward"
    assert pc.cluster_function("cluster_7") == "cluster_7"


def test_attention_clusters_by_the_shapes_of_their_calls():
    """A cluster counts in attention when its call reads a [batch, heads, seq, seq] tensor: a
    dropout's function as dropout, another as the softmax's part; clusters called on the
    hidden rows [n, width] do not count, nor modules the traced graph does not call."""
    seq = 128
    scores = ((16, 4, seq, seq), (2,), (), (), (16, 4, seq, seq))
    rows = ((2048, 256), (2,), (), (), (2048, 256))
    calls = {
        "__inference__fused_drop_812": scores,
        "__inference__fused_drop_901": rows,
        "__inference__dropped_backward_950": scores,
        "__inference__backward_977": scores,
    }
    ps = 1_000_000_000  # 1 ms
    durations = {
        ("a_inference__fused_drop_812__.9", "fusion"): [ps, ps],
        ("a_inference__fused_drop_901__.4", "fusion"): [5 * ps],
        ("a_inference__dropped_backward_950__XlaMustCompile_true", "fusion"): [3 * ps],
        ("a_inference__backward_977__.2", "reduce"): [ps],
        ("a_inference__fused_drop_333__.1", "fusion"): [7 * ps],  # not in the graph
        ("cluster_7", "fusion"): [ps],
    }
    parts = pc.attention_clusters(durations, calls, seq, steps=2)
    assert parts == pytest.approx({"dropout": 2.5, "softmax_mask": 0.5})


def test_shape_index_records_each_called_function_with_its_call_shapes():
    import tensorflow as tf

    from bench.profile_trace import ShapeIndex

    @tf.function(jit_compile=True)
    def inner(x):
        return x * 2.0

    @tf.function
    def outer(x):
        return inner(x), inner(tf.reshape(x, [2, 2]))

    graph = outer.get_concrete_function(tf.TensorSpec([4], tf.float32)).graph
    calls = ShapeIndex().add_graph(graph).calls
    shapes = sorted(v for k, v in calls.items() if k.startswith("__inference_inner_"))
    assert shapes == [((2, 2), (2, 2)), ((4,), (4,))]
