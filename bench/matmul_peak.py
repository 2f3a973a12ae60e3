"""The machine's matrix-multiply peak, measured with tf.matmul (the MFU denominator of `make bench`).

Runs square products inside one tf.function loop (no per-product Python overhead) and keeps the
best GFLOP/s over a few sizes and repeats: the peak a train step could reach if it were nothing
but large GEMMs.
"""

from __future__ import annotations

import time

import tensorflow as tf


def matmul_gflops(dtype: tf.DType, size: int, iters: int) -> float:
    """GFLOP/s of `iters` chained [size, size] x [size, size] products in `dtype`."""
    a = tf.random.normal((size, size), stddev=1.0 / size**0.5, dtype=tf.float32)
    a = tf.cast(a, dtype)
    b = tf.cast(tf.random.normal((size, size), stddev=1.0 / size**0.5), dtype)

    @tf.function
    def run(x: tf.Tensor) -> tf.Tensor:
        # The chain makes every product depend on the previous one, so none can be skipped.
        for _ in tf.range(iters):
            x = tf.matmul(x, b)
        return tf.reduce_sum(tf.cast(x, tf.float32))

    run(a).numpy()  # trace + warm the kernels
    start = time.perf_counter()
    run(a).numpy()
    seconds = time.perf_counter() - start
    return 2.0 * size**3 * iters / seconds / 1e9


def matmul_peak(dtype: tf.DType, repeats: int = 2) -> float:
    """Best GFLOP/s over a few sizes near the ones the train step uses."""
    best = 0.0
    for size in (1024, 2048):
        iters = 10 if size == 1024 else 2
        for _ in range(repeats):
            best = max(best, matmul_gflops(dtype, size, iters))
    return best


if __name__ == "__main__":
    import json
    import sys

    peaks = {f"{name}_gflops": matmul_peak(getattr(tf, name)) for name in ("float32", "bfloat16")}
    if "--json" in sys.argv[1:]:  # one line, for bench.machine.measure_peak
        print(json.dumps(peaks))
    else:
        for key, gflops in peaks.items():
            print(f"{key.split('_')[0]}: {gflops:.1f} GFLOP/s")
