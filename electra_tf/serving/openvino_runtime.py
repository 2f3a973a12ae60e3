"""The serving export for OpenVINO: an export's id signature as an OpenVINO model, and its
agreement with TensorFlow's answers on the same export.

Why a second runtime. On a CPU with AMX, TensorFlow serves the bfloat16 export's dense layers
through oneDNN's inner-product kernel on its generic `gemm:jit` path, which does not use AMX
(`ONEDNN_VERBOSE=1` names it): Grappler fuses each MatMul with its BiasAdd and GELU into one
`_MklNativeFusedMatMul`, and TensorFlow builds that op on the inner product, with the weights in
their plain layout. The same product as a plain MatMul runs oneDNN's AMX `brg_matmul` three times
faster, but then the bias and the GELU are separate bfloat16 element-wise ops, which TensorFlow
computes by converting every operand on its own (a [4096, 1024] GELU took 29 ms where the
fused kernel's whole product took 6). TensorFlow has no kernel that is both: the AMX matmul
with the bias and GELU as its post-ops. OpenVINO compiles the whole graph to oneDNN with the
post-ops fused and AMX tiles, which is where its bfloat16 lead comes from (docs/performance.md
has the per-op figures and the measured latencies).

What is converted. The `encode_ids` signature (token ids in, as TF Serving's REST clients send
them; the raw-text signature's tokenizer ops are TensorFlow Text's, which OpenVINO does not
have). Its variables are frozen into constants, the string `tokens` output is cut away (OpenVINO
has no string tensors), and the rest is handed to `openvino.convert_model`. The model keeps the
signature's input and output names and float32 weights; its compute precision is OpenVINO's
run-time choice (`INFERENCE_PRECISION_HINT`: bf16 by default on a CPU with AMX or AVX512_BF16).
OpenVINO Model Server serves the written folder (`<name>/<version>/model.xml`) on TF Serving's
REST API (`/v1/models/<name>:predict`).

`openvino` is an optional dependency (requirements-interop.txt); everything here imports it
lazily and says how to install it when it is missing.

Known: in a process that has compiled and run two OpenVINO models (openvino 2026.4.1), a later
SIGTERM crashed the process (exit 139) instead of reaching Python's handler; blocking the
signal in the threads OpenVINO starts did not help. The command writes its model before it
runs any, atomically, so a stop then loses nothing; the tests run OpenVINO in fresh processes.
"""

from __future__ import annotations

import os
from typing import Any

from electra_tf.serving.loading import export_info
from electra_tf.serving.saved_model import ExportError

SIGNATURE = "encode_ids"
MODEL_FILE = "model.xml"
MISSING = (
    "OpenVINO is not installed: `pip install -r requirements-interop.txt` (or "
    "`pip install openvino`) in this environment"
)


def import_openvino() -> Any:
    try:
        import openvino
    except ImportError as error:  # the optional extra
        raise ExportError(MISSING) from error
    return openvino


def numeric_graph(export_dir: str, signature: str = SIGNATURE) -> tuple[Any, list[tuple[str, str]]]:
    """(the signature's frozen GraphDef cut to its numeric outputs, [(output key, its tensor's
    name in that graph)]) for `export_dir`, a SavedModel written by the export."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's tokenizer ops, needed to load it)
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    if not os.path.isfile(os.path.join(export_dir, "saved_model.pb")):
        raise ExportError(f"{export_dir}: no saved_model.pb (not a SavedModel export)")
    loaded = tf.saved_model.load(export_dir)
    if signature not in loaded.signatures:
        raise ExportError(
            f"{export_dir}: no {signature!r} signature (has {sorted(loaded.signatures)})"
        )
    function = loaded.signatures[signature]
    frozen = convert_variables_to_constants_v2(function)
    # The frozen function's outputs are the signature's, flattened in sorted key order.
    keys = sorted(function.structured_outputs)
    numeric = [
        (key, tensor) for key, tensor in zip(keys, frozen.outputs, strict=True)
        if tensor.dtype != tf.string
    ]  # fmt: skip
    nodes = [tensor.name.split(":")[0] for _, tensor in numeric]
    graph = _needed_by(_plain_layer_norms(frozen.graph.as_graph_def()), nodes)
    return graph, [(key, tensor.name) for key, tensor in numeric]


def _plain_layer_norms(graph: Any) -> Any:
    """`graph` (a GraphDef, modified in place and returned) with each LayerNorm in the export's
    fusable form (`modeling.utils.apply_layer_norm`: Reshape to [1, rows, width, 1], a
    FusedBatchNormV3 over NCHW channels with batch statistics, Reshape back) written as the
    plain formula over the last axis, (x - mean) * rsqrt(variance + epsilon). The fusable form
    is for oneDNN's remapper; OpenVINO translates it into element-wise ops over the channel
    layout (on an AMX Xeon they took three quarters of a batch-32 call, 305 of 415 ms), where
    it recognises the plain formula as one normalisation kernel. The values are the same
    function; the gamma and beta after it are untouched."""
    import tensorflow as tf

    nodes = {node.name: node for node in graph.node}
    users: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name.lstrip("^").split(":")[0], []).append(node)
    added = []
    for norm in [n for n in graph.node if n.op == "FusedBatchNormV3"]:
        before = nodes.get(norm.input[0].split(":")[0])
        after = users.get(norm.name, [])
        if (
            norm.attr["data_format"].s != b"NCHW"
            or not norm.attr["is_training"].b
            or before is None
            or before.op != "Reshape"
            or len(after) != 1
            or after[0].op != "Reshape"
        ):
            continue
        dtype, x, prefix = norm.attr["T"], before.input[0], norm.name + "/plain"

        def node(name, op, inputs, prefix=prefix, **attrs):
            made = tf.compat.v1.NodeDef(name=f"{prefix}/{name}", op=op, input=inputs)
            for key, value in attrs.items():
                made.attr[key].CopyFrom(value)
            added.append(made)
            return made.name

        def const(name, value, value_dtype):
            tensor = tf.compat.v1.AttrValue(tensor=tf.make_tensor_proto(value, value_dtype))
            kind = tf.compat.v1.AttrValue(type=value_dtype.as_datatype_enum)
            return node(name, "Const", [], value=tensor, dtype=kind)

        axis = const("axis", [-1], tf.int32)
        index = tf.compat.v1.AttrValue(type=tf.int32.as_datatype_enum)
        keep = {"T": dtype, "Tidx": index, "keep_dims": tf.compat.v1.AttrValue(b=True)}
        mean = node("mean", "Mean", [x, axis], **keep)
        centred = node("centred", "Sub", [x, mean], T=dtype)
        square = node("square", "Square", [centred], T=dtype)
        variance = node("variance", "Mean", [square, axis], **keep)
        epsilon = const("epsilon", norm.attr["epsilon"].f, tf.as_dtype(dtype.type))
        shifted = node("shifted", "AddV2", [variance, epsilon], T=dtype)
        inverse = node("inverse", "Rsqrt", [shifted], T=dtype)
        normalised = node("normalised", "Mul", [centred, inverse], T=dtype)
        back = after[0]  # the Reshape back: an Identity of the plain result for its users
        back.op = "Identity"
        back.input[:] = [normalised]
        del back.attr["Tshape"]
    graph.node.extend(added)
    return graph


def _needed_by(graph: Any, outputs: list[str]) -> Any:
    """A copy of the GraphDef `graph` with only the nodes that `outputs` (node names) depend on
    (what `tf.compat.v1.graph_util.extract_sub_graph` does, without its deprecation warning)."""
    nodes = {node.name: node for node in graph.node}
    needed, pending = set(), list(outputs)
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed.add(name)
        # Inputs are "name", "name:port" or "^name" (a control dependency).
        pending += [i.lstrip("^").split(":")[0] for i in nodes[name].input]
    pruned = type(graph)()
    pruned.CopyFrom(graph)
    del pruned.node[:]
    pruned.node.extend(node for node in graph.node if node.name in needed)
    return pruned


def convert_export(export_dir: str, output_dir: str, signature: str = SIGNATURE) -> str:
    """Writes `export_dir`'s `signature` as `<output_dir>/model.xml` (+ `.bin`); returns it.

    The inputs and outputs are named as the signature's keys (the string `tokens` left out).
    Refuses an `output_dir` that already holds a model: nothing is overwritten.
    """
    ov = import_openvino()
    target = os.path.join(output_dir, MODEL_FILE)
    if os.path.exists(target):
        raise ExportError(f"{target} exists: choose another --output-dir (nothing was written)")
    if export_info(export_dir).get("precision") == "bfloat16":
        raise ExportError(
            f"{export_dir} is a --precision bfloat16 export: its bfloat16 kernels are graph "
            "constants, which OpenVINO's TensorFlow reader cannot convert. Convert the float32 "
            "export of the same model: OpenVINO computes it in bf16 by itself on a CPU with bf16 "
            "units (nothing was written)"
        )
    graph, outputs = numeric_graph(export_dir, signature)
    try:
        model = ov.convert_model(graph)
    except Exception as e:  # noqa: BLE001 - OpenVINO raises its own types (OpConversionFailure)
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        why = next((line for line in lines if line.startswith("--")), lines[-1] if lines else e)
        raise ExportError(
            f"OpenVINO cannot convert {export_dir} ({signature}): {why} (nothing was written)"
        ) from None
    for port in model.inputs:  # "input_ids:0" -> "input_ids"
        port.get_tensor().set_names({port.get_any_name().split(":")[0]})
    for key, tensor_name in outputs:
        _output_port(model, tensor_name, key).get_tensor().set_names({key})
    os.makedirs(output_dir, exist_ok=True)
    partial = os.path.join(output_dir, f".{MODEL_FILE}.partial.xml")
    ov.save_model(model, partial, compress_to_fp16=False)
    os.replace(partial[: -len(".xml")] + ".bin", target[: -len(".xml")] + ".bin")
    os.replace(partial, target)
    return target


def _output_port(model: Any, tensor_name: str, key: str) -> Any:
    """The model output that is `tensor_name` of the frozen graph; an output that passes an
    input through (`input_mask`) keeps only the input's name."""
    for port in model.outputs:
        names = port.get_names()
        if tensor_name in names or key in names or f"{key}:0" in names:
            return port
    raise ExportError(f"OpenVINO conversion: no output for {key!r} ({tensor_name})")


def compile_model(model_file: str, precision: str | None = None, threads: int = 0) -> Any:
    """`model_file` compiled for the CPU; `precision` "f32" or "bf16" (None: OpenVINO's default
    for this CPU); `threads` 0: OpenVINO's default."""
    ov = import_openvino()
    config: dict[str, Any] = {}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    if threads:
        config["INFERENCE_NUM_THREADS"] = threads
    return ov.Core().compile_model(model_file, "CPU", config)


def infer(compiled: Any, features: dict[str, Any]) -> dict[str, Any]:
    """One request: int32 arrays by input name -> numpy arrays by output name."""
    names = [port.get_any_name() for port in compiled.inputs]
    request = compiled.create_infer_request()
    result = request.infer({name: features[name] for name in names})
    return {port.get_any_name(): result[port] for port in compiled.outputs}
