"""The bf16 tolerance rule of the precision tests, and the check they share: a bf16 form's
values and gradients against float64 automatic differentiation of the plain formula.

bfloat16 keeps 8 significant bits: one rounding is off by at most BF16_UNIT of the value. Each
check feeds the bf16 form bf16-rounded inputs and compares it with float64 on those same
inputs, so what remains is the form's own roundings: its output (and, for the gradients, the
upstream gradient's cast to bf16) rounded once each, plus the roundings of whatever it computes
in bf16. Tolerances are a few units of the largest reference value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

BF16_UNIT = 2.0**-8

# Why a check of fused bfloat16 kernels skips (`device_defaults.onednn_runs_bfloat16` false).
NO_ONEDNN_BFLOAT16 = (
    "TensorFlow runs no bfloat16 op through oneDNN here (oneDNN off, or a CPU without AVX512F "
    "or AVX-NE-CONVERT): it fuses no bfloat16 kernel"
)


def max_error(actual, reference) -> float:
    """The largest difference, relative to the largest reference value."""
    actual = np.asarray(tf.cast(actual, tf.float64))
    reference = np.asarray(reference)
    return float(np.abs(actual - reference).max() / np.abs(reference).max())


def bf16_values_and_gradients(
    form: Callable[[], tf.Tensor],
    plain: Callable[[list[tf.Tensor]], tf.Tensor],
    inputs: Sequence[tf.Tensor],
    variables: Sequence[tf.Variable],
    upstream: np.ndarray,
) -> list[tuple[tf.Tensor, np.ndarray]]:
    """[(got, float64 reference)] for the output, then the gradients of `sum(output *
    upstream)` with respect to `inputs` (bf16 tensors) and `variables` (float32), in that order.

    `form()` computes the bf16 form from `inputs` and `variables`; `plain(values)` the float64
    formula from their float64 copies, in the same order. The dtypes must be what mixed
    precision gives: the output and the inputs' gradients in bf16, the variables' in float32.
    """
    with tf.GradientTape() as tape:
        tape.watch(list(inputs))
        output = form()
        loss = tf.reduce_sum(tf.cast(output, tf.float32) * upstream.astype(np.float32))
    grads = tape.gradient(loss, [*inputs, *variables])
    dtypes = [output.dtype, *(g.dtype for g in grads)]
    expected = [tf.bfloat16] * (1 + len(inputs)) + [tf.float32] * len(variables)
    assert dtypes == expected, dtypes
    values = [tf.cast(v, tf.float64) for v in [*inputs, *variables]]
    with tf.GradientTape() as tape:
        tape.watch(values)
        output64 = plain(values)
        loss64 = tf.reduce_sum(output64 * upstream)
    references = [output64, *tape.gradient(loss64, values)]
    return [(got, np.asarray(ref)) for got, ref in zip([output, *grads], references, strict=True)]
