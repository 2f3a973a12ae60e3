"""What `precision: "auto"` and `jit_compile: "auto"` mean on the machine that trains.

The choices come from `make bench` measurements (README section "Speed"):

- CPU with native bfloat16 matrix instructions (AVX512_BF16 or AMX-BF16): mixed_bfloat16, which
  was faster than float32 there and reached the same pre-training metrics; other CPUs: float32
  (bfloat16 is emulated there and slower).
- NVIDIA GPU: mixed_bfloat16 from compute capability 8.0 (Ampere), mixed_float16 (with loss
  scaling) from 7.0, float32 before. TPU: mixed_bfloat16. Not measured here (no GPU/TPU).
- XLA: off on CPU, where it was slower for this model (both for this project and for Model
  Garden); on for GPU/TPU, where fused kernels are the usual win.
"""

from __future__ import annotations

import functools
import os

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_has_native_bf16() -> bool:
    return any(flag in cpu_flags() for flag in BF16_CPU_FLAGS)


def accelerator() -> tuple[str, tuple[int, int] | None]:
    """("tpu" | "gpu" | "cpu", GPU compute capability or None) for the process's devices.

    A remote Cloud TPU has no local device: `ELECTRA_ACCELERATOR=tpu` says so (the TPU path is
    not tested here).
    """
    forced = os.environ.get("ELECTRA_ACCELERATOR", "").lower()
    if forced in ("tpu", "cpu"):
        return forced, None
    import tensorflow as tf  # only here: config.py stays importable without TensorFlow

    # Physical devices only: listing logical ones would initialise the runtime, after which
    # logical-device splits and MultiWorkerMirroredStrategy can no longer be set up.
    if tf.config.list_physical_devices("TPU"):
        return "tpu", None
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return "gpu", details.get("compute_capability")
    return "cpu", None


def auto_precision() -> str:
    kind, capability = accelerator()
    if kind == "tpu":
        return "mixed_bfloat16"
    if kind == "gpu":
        if capability and capability >= (8, 0):
            return "mixed_bfloat16"
        if capability and capability >= (7, 0):
            return "mixed_float16"
        return "float32"
    return "mixed_bfloat16" if cpu_has_native_bf16() else "float32"


def auto_jit_compile() -> bool:
    return accelerator()[0] != "cpu"
