"""The serving graph after Grappler (issue #16): every dense layer, LayerNorm and attention
product of the exported encoder runs as one fused oneDNN kernel, and each way of running the
export (TF2 function or Session as TF Serving, oneDNN on or off, XLA) gives the Keras model's
numbers. The exports are loaded in fresh processes, as a model server would load them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from helpers_precision import NO_ONEDNN_BFLOAT16

from bench import serving_graph
from electra_tf.cli import export
from electra_tf.config import DEFAULT_QUERY_BLOCKS, pretraining_config
from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
from electra_tf.modeling.utils import LAYER_NORM_EPSILON, InferenceOptions, apply_layer_norm
from electra_tf.runtime.device_defaults import onednn_runs_bfloat16
from electra_tf.serving.kinds import serving_module
from electra_tf.serving.saved_model import ExportSpec, write_export

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(40))]
LAYERS = 2
# The exports: name -> (jit_compile, query_blocks). "blocks" is the default export.
EXPORTS = {"plain": (False, 1), "blocks": (False, DEFAULT_QUERY_BLOCKS), "xla": (True, 1)}


def kernel_counts(blocks: int) -> dict[str, int]:
    """The fused kernels an export with `blocks` query groups runs: per group and layer the
    q, k, v, attention output, intermediate (GELU) and output dense layers, two LayerNorms and
    both attention products; once, before the groups split or after they join, the embedding
    LayerNorm, the embedding projection (E != H) and the head's two dense layers (the first
    with GELU)."""
    return {
        "dense": 6 * LAYERS * blocks + 3,
        "gelu_dense": LAYERS * blocks + 1,
        "layer_norms": 2 * LAYERS * blocks + 1,
        "attention_products": LAYERS * blocks,
    }


# Op types that mean a dense layer, a LayerNorm, a GELU or an attention product ran unfused.
UNFUSED = {
    "MatMul", "_MklMatMul", "BatchMatMulV2", "Einsum", "_MklEinsum", "BiasAdd", "Erf", "Erfc",
    "Mean", "SquaredDifference", "Rsqrt", "FusedBatchNormV3", "_MklNativeFusedBatchNormV3",
}  # fmt: skip

# Runs in a fresh interpreter: argv = the two export paths, the ids file, the output file.
LOADER = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # the tokenizer's ops, as a serving binary links them
from tensorflow.python.util import _pywrap_util_port
from bench import serving_graph
paths, ids_file, out_file = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
ids = dict(np.load(ids_file))
result = {"onednn": _pywrap_util_port.IsMklEnabled()}
for path in paths:
    encode = tf.saved_model.load(path).signatures["encode_ids"]
    feeds = {k: tf.constant(v) for k, v in ids.items()}
    result[path] = {
        "function_ops": serving_graph.function_graph_ops(encode, feeds),
        "function_probs": encode(**feeds)["replaced_probability"].numpy().tolist(),
        "session_ops": serving_graph.session_graph_ops(path, "encode_ids", ids),
    }
    with serving_graph.signature_session(path, "encode_ids") as (session, signature):
        fetch = signature.outputs["replaced_probability"].name
        feed = {signature.inputs[k].name: v for k, v in ids.items()}
        result[path]["session_probs"] = session.run(fetch, feed).tolist()
json.dump(result, open(out_file, "w"))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A random tiny discriminator exported as `EXPORTS` lists, each loaded with oneDNN on and
    off in fresh processes; the Keras model's probabilities as the reference."""
    root = tmp_path_factory.mktemp("serving_graph")
    vocab_file = root / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    overrides = {
        "hidden_size": 32,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 32,
    }
    hparams = {"vocab_size": len(VOCAB), "embedding_size": 16, "model_hparam_overrides": overrides}
    tf.random.set_seed(4)
    model = ElectraDiscriminator(pretraining_config("tiny", hparams=hparams).discriminator_config())
    model(dummy_inputs())
    paths = {}
    for name, (jit_compile, blocks) in EXPORTS.items():
        module = serving_module(
            "discriminator", model, str(vocab_file), 32, jit_compile=jit_compile,
            query_blocks=blocks,
        )  # fmt: skip
        spec = ExportSpec("discriminator", name, module, "{}", str(vocab_file), {})
        paths[name] = write_export(spec, str(root), None, False)

    ids = serving_graph.random_ids(3, 12, len(VOCAB))
    ids["input_mask"][1, 9:] = 0  # a second padded row, shorter
    np.savez(root / "ids.npz", **ids)
    logits = model({k: tf.constant(v) for k, v in ids.items()})["logits"].numpy()
    reference = 1.0 / (1.0 + np.exp(-logits.astype(np.float64))) * ids["input_mask"]

    runs = {}
    for onednn in ("1", "0"):
        out_file = root / f"onednn{onednn}.json"
        env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, CUDA_VISIBLE_DEVICES="")
        subprocess.run(
            [sys.executable, "-c", LOADER, ",".join(paths.values()),
             str(root / "ids.npz"), str(out_file)],
            check=True, env=env, cwd=REPO,
        )  # fmt: skip
        loaded = json.loads(out_file.read_text())
        runs[onednn] = {
            "onednn": loaded.pop("onednn"),
            **{name: loaded[path] for name, path in paths.items()},
        }
    return {"runs": runs, "reference": reference, "paths": paths}


@pytest.mark.parametrize("runtime", ["function", "session"])
@pytest.mark.parametrize("name", ["plain", "blocks"])
def test_onednn_runs_each_dense_norm_and_attention_product_fused(exported, runtime, name):
    run = exported["runs"]["1"]
    if not run["onednn"]:
        pytest.skip("this TensorFlow build has no oneDNN (TF_ENABLE_ONEDNN_OPTS=1 had no effect)")
    ops = run[name][f"{runtime}_ops"]
    counts = kernel_counts(EXPORTS[name][1])
    assert ops.get("_MklNativeFusedMatMul[BiasAdd,GeluExact]") == counts["gelu_dense"], ops
    assert ops.get("_MklLayerNorm") == counts["layer_norms"], ops
    # Scores with their scale and mask fused; probabilities x values.
    assert ops.get("_MklFusedBatchMatMulV2[Mul,Add]") == counts["attention_products"], ops
    assert ops.get("_MklBatchMatMulV2") == counts["attention_products"], ops
    # Every dense layer is one fused kernel, and nothing of a dense, a LayerNorm or a GELU runs
    # on its own.
    fused_dense = {k: v for k, v in ops.items() if k.startswith("_MklNativeFusedMatMul[BiasAdd")}
    assert sum(fused_dense.values()) == counts["dense"], ops
    assert not UNFUSED & set(ops), ops
    # The residual adds (an AddN each, `TransformerLayer._sublayer_end`) are the attention
    # output's and the output dense layer's post-ops, in a Session (TF Serving's runtime) as in
    # the function runtime: no inference dropout's Identity stands between product and sum.
    residual_adds = 2 * LAYERS * EXPORTS[name][1]
    assert ops.get("_MklNativeFusedMatMul[BiasAdd,Add]") == residual_adds, ops
    assert "AddN" not in ops, ops


@pytest.mark.parametrize("onednn", ["1", "0"])
@pytest.mark.parametrize("runtime", ["function", "session"])
@pytest.mark.parametrize("name", list(EXPORTS))
def test_every_way_of_running_the_export_gives_the_keras_numbers(exported, onednn, runtime, name):
    got = np.asarray(exported["runs"][onednn][name][f"{runtime}_probs"])
    np.testing.assert_allclose(got, exported["reference"], atol=1e-5)


def test_without_onednn_the_standard_kernels_run(exported):
    run = exported["runs"]["0"]
    if run["onednn"]:
        pytest.skip("TF_ENABLE_ONEDNN_OPTS=0 did not turn oneDNN off in this build")
    ops = run["plain"]["function_ops"]
    assert not any(k.startswith("_Mkl") for k in ops), ops
    # Grappler's own MatMul + BiasAdd fusion, and the LayerNorm as one FusedBatchNormV3.
    counts = kernel_counts(EXPORTS["plain"][1])
    fused_dense = {k: v for k, v in ops.items() if k.startswith("_FusedMatMul[BiasAdd")}
    assert sum(fused_dense.values()) == counts["dense"], ops
    assert ops.get("FusedBatchNormV3") == counts["layer_norms"], ops


@pytest.mark.parametrize("runtime", ["function", "session"])
def test_jit_compile_runs_the_model_inside_xla(exported, runtime):
    ops = exported["runs"]["1"]["xla"][f"{runtime}_ops"]
    # The model is one compiled call; only the signature's own ops run outside it.
    assert not any("MatMul" in k or "LayerNorm" in k or "Softmax" in k for k in ops), ops
    assert ops.get("Sigmoid") == 1, ops  # the post-processing did run, outside the cluster
    for name, (jit_compile, blocks) in EXPORTS.items():
        with open(os.path.join(exported["paths"][name], "assets", "export.json")) as f:
            info = json.load(f)
        assert (info["jit_compile"], info["query_blocks"]) == (jit_compile, blocks), name


def test_export_cli_takes_jit_compile_and_query_blocks(capsys):
    base = ["--data-dir", "d", "--model-name", "m"]
    assert export.parse_args([*base, "--jit-compile"]).jit_compile
    assert not export.parse_args(base).jit_compile
    assert export.parse_args(base).query_blocks == DEFAULT_QUERY_BLOCKS
    assert export.parse_args([*base, "--query-blocks", "3"]).query_blocks == 3
    with pytest.raises(SystemExit):
        export.parse_args([*base, "--query-blocks", "0"])
    assert "--query-blocks: 0 is outside [1, 64]" in capsys.readouterr().err


def test_query_blocks_give_the_plain_outputs_at_every_length(tmp_path):
    """The blocked encoder (`InferenceOptions.query_blocks`) against the plain one, traced the
    same way, on lengths below, at and above the number of groups, with padding; and with XLA
    the module keeps one group."""
    overrides = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
                 "intermediate_size": 32, "max_position_embeddings": 16}  # fmt: skip
    hparams = {"vocab_size": 30, "embedding_size": 8, "model_hparam_overrides": overrides}
    tf.random.set_seed(5)
    model = ElectraDiscriminator(pretraining_config("tiny", hparams=hparams).discriminator_config())
    model(dummy_inputs())
    spec = {k: tf.TensorSpec([None, None], tf.int32) for k in ("input_ids", "input_mask",
                                                              "segment_ids")}  # fmt: skip

    def traced(blocks):
        options = InferenceOptions(query_blocks=blocks)
        function = tf.function(
            lambda **f: model(f, training=False, inference_options=options), autograph=False
        )
        return function.get_concrete_function(**spec)

    plain, functions = traced(1), {blocks: traced(blocks) for blocks in (2, 3)}
    ops = {op.type for op in functions[3].graph.get_operations()}
    assert "ConcatV2" in ops  # the groups' keys and values are joined
    rng = np.random.default_rng(0)
    for length in (1, 2, 3, 7, 16):
        ids = serving_graph.random_ids(2, length, 30)
        ids["input_mask"][1, length // 2 + 1 :] = 0
        feeds = {k: tf.constant(v, tf.int32) for k, v in ids.items()}
        feeds["segment_ids"] = tf.constant(rng.integers(0, 2, [2, length]), tf.int32)
        expected = plain(**feeds)
        for blocks, function in functions.items():
            got = function(**feeds)
            for key in expected:
                np.testing.assert_allclose(
                    got[key].numpy(), expected[key].numpy(), atol=1e-6, err_msg=f"{blocks} {key}"
                )
    with pytest.raises(ValueError, match="query blocks must be >= 1"):
        InferenceOptions(query_blocks=0)
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB[:30]) + "\n", encoding="utf-8")
    module = serving_module("discriminator", model, str(vocab_file), 16, jit_compile=True,
                            query_blocks=2)  # fmt: skip
    assert module.query_blocks == 1


def _layer_norm_inputs() -> np.ndarray:
    """Rows of a transformer's scale, and rows whose mean is large next to their spread."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=[2, 8, 64]).astype(np.float32)
    for i, (mean, spread) in enumerate([(1.0, 1e-3), (10.0, 1e-2), (100.0, 1.0), (0.0, 1e-4)]):
        x[0, i] = mean + spread * rng.normal(size=64)
    return x


def test_serving_layer_norm_is_the_layer_norm():
    norm = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON)
    norm.build([None, None, 64])
    rng = np.random.default_rng(1)
    norm.gamma.assign(rng.normal(size=64).astype(np.float32))
    norm.beta.assign(rng.normal(size=64).astype(np.float32))
    x = _layer_norm_inputs()
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    variance = ((x64 - mean) ** 2).mean(-1, keepdims=True)
    expected = (x64 - mean) / np.sqrt(variance + 1e-12) * norm.gamma.numpy() + norm.beta.numpy()

    spec = tf.TensorSpec([None, None, 64])

    def traced(training=False, fused=False):
        function = tf.function(
            lambda t: apply_layer_norm(norm, t, training, fused=fused), input_signature=[spec]
        )
        return function.get_concrete_function()

    def op_types(function):
        return {op.type for op in function.graph.get_operations()}

    keras_form = traced()
    fused_form = traced(fused=True)
    # Training, and eager calls, keep the Keras layer even when asked for the fused form.
    assert "FusedBatchNormV3" not in op_types(traced(training=True, fused=True))
    np.testing.assert_array_equal(apply_layer_norm(norm, x, fused=True), norm(x))
    assert "FusedBatchNormV3" in op_types(fused_form)
    assert "FusedBatchNormV3" not in op_types(keras_form)
    keras_error = np.abs(keras_form(tf.constant(x)).numpy() - expected)
    fused_error = np.abs(fused_form(tf.constant(x)).numpy() - expected)
    # Rows of a normal scale: float32 rounding. The hard rows: no worse than the Keras layer's.
    assert fused_error[1].max() < 1e-5 and keras_error[1].max() < 1e-5
    assert fused_error[0].max() <= 2 * keras_error[0].max() + 1e-6


def _tiny_discriminator(seed: int) -> ElectraDiscriminator:
    """A random 2-layer discriminator of width 32 over `VOCAB`, built."""
    overrides = {"hidden_size": 32, "num_hidden_layers": LAYERS, "num_attention_heads": 2,
                 "intermediate_size": 64, "max_position_embeddings": 32}  # fmt: skip
    hparams = {"vocab_size": len(VOCAB), "embedding_size": 16, "model_hparam_overrides": overrides}
    tf.random.set_seed(seed)
    model = ElectraDiscriminator(pretraining_config("tiny", hparams=hparams).discriminator_config())
    model(dummy_inputs())
    return model


def _float32_and_bfloat16_exports(tmp_path):
    """(model, {precision: export path}) for a random tiny discriminator."""
    from electra_tf.serving.kinds import save_for_serving

    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n")
    model = _tiny_discriminator(seed=5)
    paths = {
        precision: save_for_serving(
            model, str(tmp_path), str(vocab_file), 32, name=precision, precision=precision
        )
        for precision in ("float32", "bfloat16")
    }
    return model, paths


@pytest.mark.skipif(not onednn_runs_bfloat16(), reason=NO_ONEDNN_BFLOAT16)
def test_bfloat16_export_fuses_every_product_with_constant_kernels_and_its_layer_norms(tmp_path):
    """The `--precision bfloat16` export: the encoder's dense kernels are constants of the graph
    (`InferenceOptions.constant_kernels`; only on a constant kernel does oneDNN run the fused
    bfloat16 product on AMX), so every dense layer is one fused kernel with its bias (and GELU
    or the residual add) in both runtimes; and every LayerNorm is one `_MklLayerNorm` in
    bfloat16 (a float32 cast before it broke the pattern)."""
    _, paths = _float32_and_bfloat16_exports(tmp_path)
    ids = serving_graph.random_ids(3, 12, len(VOCAB))
    feeds = {k: tf.constant(v) for k, v in ids.items()}
    encode = tf.saved_model.load(paths["bfloat16"]).signatures["encode_ids"]
    ops = serving_graph.function_graph_ops(encode, feeds)
    counts = kernel_counts(DEFAULT_QUERY_BLOCKS)
    session = serving_graph.session_graph_ops(paths["bfloat16"], "encode_ids", ids)
    for graph in (ops, session):
        assert graph.get("_MklNativeFusedMatMul[BiasAdd,GeluExact]") == counts["gelu_dense"], graph
        fused = sum(n for op, n in graph.items() if op.startswith("_MklNativeFusedMatMul"))
        # Query, key and value are one product per group and layer (`_joined_heads`).
        assert fused == counts["dense"] - 2 * LAYERS * DEFAULT_QUERY_BLOCKS, graph
        residual_adds = 2 * LAYERS * DEFAULT_QUERY_BLOCKS
        assert graph.get("_MklNativeFusedMatMul[BiasAdd,Add]") == residual_adds, graph
        assert "AddN" not in graph, graph
        assert graph.get("_MklLayerNorm") == counts["layer_norms"], graph
        assert not {"MatMul", "_MklMatMul", "BiasAdd", "Erf", "Erfc"} & set(graph), graph
        assert not {"FusedBatchNormV3", "_MklNativeFusedBatchNormV3"} & set(graph), graph


def test_bfloat16_export_holds_its_kernels_as_constants_and_answers_as_float32(tmp_path):
    """On every CPU (bf16 through oneDNN or through Eigen): the SavedModel keeps no variable
    for the encoder's kernels, says so in export.json, counts every weight, and its outputs are
    the float32 export's within bfloat16's error."""
    model, paths = _float32_and_bfloat16_exports(tmp_path)
    feeds = {k: tf.constant(v) for k, v in serving_graph.random_ids(3, 12, len(VOCAB)).items()}
    loaded = tf.saved_model.load(paths["bfloat16"])
    # Only the head's two kernels (outside the encoder) are still variables.
    kernels = [v.name for v in loaded.model_variables if "kernel" in v.name]
    assert len(kernels) == 2, kernels
    info = json.loads((tmp_path / "bfloat16" / "1" / "assets" / "export.json").read_text())
    assert info["constant_kernels"] is True
    assert sum(info["weight_dtypes"].values()) == model.count_params()
    float32 = tf.saved_model.load(paths["float32"]).signatures["encode_ids"]
    expected = float32(**feeds)["replaced_probability"].numpy()
    got = loaded.signatures["encode_ids"](**feeds)["replaced_probability"].numpy()
    # A few bfloat16 roundings of each activation: well inside 0.02 on these probabilities.
    np.testing.assert_allclose(got, expected, atol=0.02)


@pytest.mark.parametrize("blocks", [1, DEFAULT_QUERY_BLOCKS])
def test_constant_kernels_compute_the_plain_function(blocks):
    """The constant-kernel form (kernels as graph constants, query, key and value as one
    product) in float32 against the Keras model's own call, to float32 rounding."""
    model = _tiny_discriminator(seed=6)
    ids = {k: tf.constant(v) for k, v in serving_graph.random_ids(3, 12, len(VOCAB)).items()}
    options = InferenceOptions(fused_layer_norms=True, query_blocks=blocks, constant_kernels=True)
    traced = tf.function(lambda f: model(f, training=False, inference_options=options)["logits"])
    np.testing.assert_allclose(traced(ids), model(ids)["logits"], atol=1e-5, rtol=0)
    # The traced graph reads no transformer kernel from a variable.
    captured = {id(t) for t in traced.get_concrete_function(ids).captured_inputs}
    read = [v.name for v in model.variables if id(v.handle) in captured]
    assert read and not [name for name in read if "layer_" in name and "kernel" in name], read
