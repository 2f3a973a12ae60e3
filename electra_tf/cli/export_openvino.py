"""`python -m electra_tf.export_openvino`: a serving export's `encode_ids` signature as an
OpenVINO model, checked against TensorFlow's answers on the same export.

    python -m electra_tf.export_openvino --saved-model data/models/M/serving/M_discriminator/1 \\
        --output-dir data/models/M/openvino/M_discriminator/1 [--signature encode_ids]
        [--check-batch 4] [--check-length 128]

Writes `model.xml` and `model.bin` (float32 weights; OpenVINO picks the compute precision at
load time, bf16 by default on a CPU with AMX or AVX512_BF16). Then runs the same random token
ids (`--check-batch` x `--check-length`, the first [CLS] and the last [SEP]) through the
SavedModel in TensorFlow and through the OpenVINO model at f32 and at this CPU's default
precision, prints the largest difference of every output, and exits 1 if the f32 model differs
from TensorFlow's by more than `F32_TOLERANCE` (a conversion error, not a rounding). Convert an
export made with `--query-blocks 1`: the default export's side-by-side query groups are for
TensorFlow's thread pools, and OpenVINO served the one-block export faster (it says so). OpenVINO
Model Server serves the folder layout `<models>/<name>/<version>/model.xml` on TF Serving's
REST API; `electra_tf/serving/openvino_runtime.py` says why this runtime is offered beside
TensorFlow's.

Exit codes: 0 written and agreeing; 1 written but disagreeing; 2 bad input (no SavedModel, no
such signature, an existing model in --output-dir, OpenVINO not installed): nothing written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

# Probabilities in [0, 1]: float32 arithmetic in another order differs by about 1e-6.
F32_TOLERANCE = 1e-4


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saved-model", required=True, help="a version folder of an export")
    parser.add_argument("--output-dir", required=True, help="where model.xml/.bin go")
    parser.add_argument("--signature", default="encode_ids")
    parser.add_argument("--check-batch", type=int, default=4)
    parser.add_argument("--check-length", type=int, default=128)
    args = parser.parse_args(argv)
    if args.check_batch < 1 or args.check_length < 3:
        parser.error("--check-batch must be >= 1 and --check-length >= 3 ([CLS], a token, [SEP])")
    return args


def check_ids(batch: int, length: int, vocab_size: int) -> dict:
    """Random int32 ids [batch, length] with [CLS] first and [SEP] last, all real tokens."""
    import numpy as np

    rng = np.random.default_rng(0)
    low = min(1000, vocab_size // 2)  # past BERT's [unused] block where the vocabulary has it
    ids = rng.integers(low, vocab_size, size=(batch, length)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 101, 102
    return {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}


def vocab_size(saved_model: str) -> int:
    """The export's vocabulary size: the lines of its `assets/vocab.txt`."""
    import os

    with open(os.path.join(saved_model, "assets", "vocab.txt"), encoding="utf-8") as f:
        return sum(1 for _ in f)


def query_blocks(saved_model: str) -> int:
    """The export's query blocks, from its `assets/export.json` (1 where it says nothing)."""
    from electra_tf.serving.loading import export_info

    return export_info(saved_model).get("query_blocks", 1)


def agreement(saved_model: str, model_file: str, signature: str, features: dict) -> dict:
    """{precision: {output: largest absolute difference from TensorFlow}} for OpenVINO at f32
    and at this CPU's default precision."""
    import numpy as np
    import tensorflow as tf

    from electra_tf.serving import openvino_runtime

    function = tf.saved_model.load(saved_model).signatures[signature]
    expected = function(**{k: tf.constant(v) for k, v in features.items()})
    result = {}
    for precision in ("f32", None):
        compiled = openvino_runtime.compile_model(model_file, precision)
        got = openvino_runtime.infer(compiled, features)
        hint = compiled.get_property("INFERENCE_PRECISION_HINT")  # an openvino Type
        hint = hint.get_type_name() if hasattr(hint, "get_type_name") else hint
        name = precision or f"default ({hint})"
        result[name] = {
            key: float(np.max(np.abs(value - expected[key].numpy())))
            for key, value in sorted(got.items())
        }
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from electra_tf.runtime.tf_startup import start_tensorflow

    start_tensorflow()
    from electra_tf.serving import openvino_runtime
    from electra_tf.serving.saved_model import ExportError

    try:
        model_file = openvino_runtime.convert_export(
            args.saved_model, args.output_dir, args.signature
        )
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"converted {args.saved_model} ({args.signature}) -> {model_file}")
    blocks = query_blocks(args.saved_model)
    if blocks > 1:
        print(
            f"  note: this export runs {blocks} query blocks side by side (for TensorFlow's "
            "thread pools); OpenVINO schedules its own threads and served a one-block export "
            "faster (5.7 against 8.0 ms at batch 1, 97 against 125 at 32, bf16 on an AMX Xeon): "
            "convert an export made with --query-blocks 1"
        )
    features = check_ids(args.check_batch, args.check_length, vocab_size(args.saved_model))
    differences = agreement(args.saved_model, model_file, args.signature, features)
    for precision, outputs in differences.items():
        line = ", ".join(f"{key} {value:.2e}" for key, value in outputs.items())
        print(f"  OpenVINO {precision} against TensorFlow, largest difference: {line}")
    worst = max(differences["f32"].values())
    if worst > F32_TOLERANCE:
        print(
            f"error: the f32 model differs from TensorFlow's by {worst:.2e} (> {F32_TOLERANCE})",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
