"""Reduced-precision exports: `export --precision bfloat16`, and why there is no int8.

A bfloat16 export computes the encoder's matrix products (and the heads') in bfloat16 with
bfloat16 weights, and keeps float32 where mixed-precision training keeps it: LayerNorm
(float32 gamma and beta, statistics in float32: oneDNN's fused LayerNorm reads and writes
bfloat16, `modeling.utils.apply_layer_norm`), the attention softmax, and every output of the
signatures (`ServingModule` casts them). Inputs and outputs are exactly the float32 export's.

The weights are stored in bfloat16, not cast in the graph: a variable is read at every call, so
a float32 variable cast in the graph is converted again at every request (13.5M numbers for
ELECTRA-Small, a pass over 54 MB before the first product), where a bfloat16 variable is read
as is, half the bytes, and the SavedModel is half the size. The numbers are the same either
way: the cast at export is the round-to-nearest-even one the graph would apply. The encoder's
dense kernels go further: they are constants of the signatures' graph, not variables
(`InferenceOptions.constant_kernels`), because oneDNN runs a bfloat16 product fused with its
bias and GELU on AMX only for a constant kernel (prepacked once); read from a variable, the
same fused product runs its generic inner product, 2.3x slower. The export is then a
serving artifact: its graph has those weights baked in (`export.json` says
`"constant_kernels": true`), and the float32 export is the one to build on.

`bfloat16_twin` builds that model: the same Keras model under the "bfloat16" policy
(`modeling.utils.layer_norm` keeps the LayerNorms on the mixed policy), its variables set
from the float32 model's, matched by their original checkpoint names (`variable_map`).

int8: TensorFlow's own SavedModel-to-SavedModel int8 tool is the experimental TF Quantizer,
`tf.quantization.experimental.quantize_saved_model`. Tried on this project's float32 export
(ELECTRA-Small-shaped 4-layer discriminator, all three signatures, dynamic-range int8):
with the `TF` op set it left every MatMul in float32; with the `UNIFORM_QUANTIZED` op set it
wrote int8 weights and `UniformQuantizedDotHybrid` products, which a stock CPU TensorFlow
runs, within 0.003 of float32 on the probabilities, but 11x slower (254 against 23 ms of CPU
time per batch-1 call): those kernels are plain reference loops, without oneDNN. An int8
export that serves slower than float32 is not shipped: `--precision int8` is refused saying
so (`INT8_UNSUPPORTED`). TFLite's dynamic-range quantization is TensorFlow's fast int8 path,
outside SavedModel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from electra_tf.serving.saved_model import ExportError

# TensorFlow is imported inside the functions: the command line's argument parsing (and
# `--help`) reads PRECISIONS and INT8_UNSUPPORTED without it.

PRECISIONS = ("float32", "bfloat16")

INT8_UNSUPPORTED = (
    "--precision int8: not supported. TensorFlow's only int8 path inside a SavedModel, the "
    "experimental TF Quantizer (tf.quantization.experimental.quantize_saved_model, "
    "dynamic-range int8), writes UniformQuantizedDotHybrid products that ran 11x slower "
    "than this float32 export on a CPU (reference kernels, no oneDNN); TFLite is "
    "TensorFlow's fast int8 route, outside SavedModel. Use --precision bfloat16 (half the "
    "weights' size; faster on CPUs with AVX512_BF16 or AMX-BF16) or float32."
)


def check_precision(precision: str) -> None:
    """Refuses a precision the export cannot write, saying why (int8) or what it can."""
    if precision == "int8":
        raise ExportError(INT8_UNSUPPORTED)
    if precision not in PRECISIONS:
        raise ExportError(f"--precision {precision!r}: expected one of {PRECISIONS}")


@contextlib.contextmanager
def global_policy(name: str) -> Iterator[None]:
    """Keras' global dtype policy set to `name` inside the block, restored after."""
    import tf_keras as keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def bfloat16_twin(model: Any, build: Callable[[], Any]) -> Any:
    """`build()` (a new model of `model`'s architecture, its variables created) under the
    "bfloat16" policy, with `model`'s weights: bfloat16 where the twin holds bfloat16 (rounded
    to nearest even), float32 where it keeps float32 (the LayerNorms)."""
    return precision_twin(model, build, "bfloat16")


def precision_twin(model: Any, build: Callable[[], Any], policy: str) -> Any:
    """`build()` under Keras' `policy` ("bfloat16", or "float32" for a model built under a
    mixed policy that a float32 export must not compute in 16 bits), `model`'s weights cast to
    each twin variable's dtype.

    Both models must name their variables alike (`variable_map()`, the original checkpoint
    names), and every variable of the twin must be among them: a variable left at its random
    initial value would go unnoticed in the outputs' tolerance.
    """
    import tensorflow as tf

    with global_policy(policy):
        twin = build()
    source, target = model.variable_map(), twin.variable_map()
    if source.keys() != target.keys():
        missing = sorted(set(source) ^ set(target))[:5]
        raise ExportError(f"{policy} export: the two models' variables differ: {missing}")
    named = {id(v) for v in target.values()}
    # Trainable: a FinetuningModel's other weights are its loss metric's.
    unnamed = [v.name for v in twin.trainable_weights if id(v) not in named]
    if unnamed:
        raise ExportError(f"{policy} export: variables without an original name: {unnamed[:5]}")
    for name, variable in target.items():
        value = source[name]
        if tuple(value.shape) != tuple(variable.shape):
            raise ExportError(
                f"{policy} export: {name} is {value.shape} in the model, {variable.shape} in "
                f"its {policy} twin"
            )
        variable.assign(tf.cast(value, variable.dtype))
    return twin


def model_twin_builder(model: Any, precision: str = "bfloat16") -> Callable[[], Any]:
    """How to build a new model like `model` (an `ElectraDiscriminator`, a
    `TransformerEncoder`, or a model with its own `build_twin()`, the Keras models of
    `finetuning.keras_models`), its variables created: for `save_for_serving`, which gets a
    model held in Python. A `FinetuningModel` needs its tasks' feature specs: the export command
    builds its twin (`sources.task_spec`). `precision`: the export's, for the errors."""
    from electra_tf.modeling import ElectraDiscriminator, TransformerEncoder
    from electra_tf.modeling.discriminator import dummy_inputs

    if callable(getattr(model, "build_twin", None)):  # a model that builds its own twin
        return model.build_twin
    if isinstance(model, ElectraDiscriminator):

        def discriminator():
            twin = ElectraDiscriminator(model.config)
            twin(dummy_inputs())
            return twin

        return discriminator
    if isinstance(model, TransformerEncoder):
        if not model.owns_embeddings:
            raise ExportError(f"{precision} export: an encoder with shared embeddings")
        return lambda: TransformerEncoder(
            model.config, name=model.name, attention_direction=model.attention_direction
        )
    raise ExportError(
        f"{precision} export of a {type(model).__name__} from Python: export a fine-tuned task "
        f"with `python -m electra_tf.export --task T --precision {precision}`"
    )
