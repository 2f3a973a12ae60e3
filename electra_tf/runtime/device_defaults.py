"""What `precision`, `jit_compile`, `parallel_micro_batches` and the thread counts mean as
"auto" on the machine that trains.

The choices come from `make bench` measurements (README section "Speed"):

- CPU with native bfloat16 matrix instructions (AVX512_BF16 or AMX-BF16): mixed_bfloat16, which
  was faster than float32 there and reached the same pre-training metrics; other CPUs: float32
  (bfloat16 is emulated there and slower).
- NVIDIA GPU: mixed_bfloat16 from compute capability 8.0 (Ampere), mixed_float16 (with loss
  scaling) from 7.0, float32 before. TPU: mixed_bfloat16. Not measured here (no GPU/TPU).
- XLA: off on CPU, where it was slower for this model (both for this project and for Model
  Garden); on for GPU/TPU, where fused kernels are the usual win.
- Parallel micro-batches: 2 on a CPU-only machine with 2 or more cores, where two halves of
  the batch side by side were 3-19% faster than one pass (2-core AMD EPYC, float32);
  and there, where the machine has exactly as many cores as micro-batches, one intra-op and k
  inter-op threads (each half single-threaded on its own core). Machines with more cores keep
  TensorFlow's thread pools: unmeasured.

The choices are pure functions of a `Machine`; `probe_machine()` is the one place that asks the
hardware (a run calls it once). Without a machine, resolution uses `PORTABLE`.

Two more answers live here because they are the same kind of question:

- `serving_threads`: the model server's intra-op / inter-op threads for an export (the export
  command writes them beside the model, `electra_tf.serving.load` applies them);
- `emulated_bf16_note`: what a run that asks for mixed_bfloat16 on a CPU without bfloat16
  matrix instructions is told at start, with a measured slowdown (`bf16_block_slowdown`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")

# Lines that, without an NVIDIA driver, only say that no GPU will be used.
CPU_ONLY_NOISE = re.compile(
    r"failed call to cuInit|Could not find cuda drivers|Unable to register cu(DNN|FFT|BLAS) "
    r"factory|computation placer already registered|TF-TRT Warning|cuda_executor|"
    r"oneDNN custom operations are on|cpu_feature_guard|rebuild TensorFlow with the appropriate|"
    # And XLA's once-per-process INFO line for its first compiled cluster,
    # with absl's notice before it, which TF_CPP_MIN_LOG_LEVEL does not reach
    # (`tf_startup.start_tensorflow` compiles a trivial cluster inside the filter).
    r"Compiled cluster using XLA|All log messages before absl::InitializeLog"
)


@dataclasses.dataclass(frozen=True)
class Machine:
    """The facts the "auto" settings are chosen from. The defaults are `PORTABLE`."""

    accelerator: str = "cpu"  # "cpu" | "gpu" | "tpu"
    compute_capability: tuple[int, int] | None = None  # an NVIDIA GPU's, e.g. (8, 0)
    cpu_count: int = 1  # the cores this process may run on
    native_bf16: bool = False  # the CPU has bfloat16 matrix instructions


# What "auto" means where the machine is not asked (`PretrainingConfig.resolve` without one,
# e.g. reading a saved config): an unknown CPU, so float32, no XLA, one micro-batch and
# TensorFlow's default thread pools (0 / 0).
PORTABLE = Machine()


def has_nvidia_driver() -> bool:
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl")


@contextlib.contextmanager
def cpu_only_noise_filtered() -> Iterator[None]:
    """Around TensorFlow's import and first device queries: on a machine without an NVIDIA
    driver, file descriptor 2 is captured, and the captured lines are written back except the
    ones in CPU_ONLY_NOISE. Where a driver exists nothing is filtered."""
    if has_nvidia_driver():
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not CPU_ONLY_NOISE.search(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


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


@functools.lru_cache(maxsize=1)
def onednn_runs_bfloat16() -> bool:
    """Whether TensorFlow runs bfloat16 ops through oneDNN in this process: oneDNN on
    (`TF_ENABLE_ONEDNN_OPTS`, read when TensorFlow is imported) and TensorFlow's own test of the
    CPU (AVX512F or AVX-NE-CONVERT). oneDNN computes a bfloat16 softmax or LayerNorm in float32
    and rounds once, and fuses bfloat16 products with their bias and GELU; on an AVX2-only CPU
    TensorFlow runs bfloat16 with its Eigen kernels, one op at a time, and a bfloat16 softmax
    of 128 keys there was off by 8% of a probability."""
    import tensorflow as tf
    from tensorflow.python.util import _pywrap_util_port, _pywrap_utils

    return bool(
        _pywrap_util_port.IsMklEnabled()
        and _pywrap_utils.IsDataTypeSupportedByOneDNNOnThisCPU(tf.bfloat16.as_datatype_enum)
    )


def accelerator() -> tuple[str, tuple[int, int] | None]:
    """("tpu" | "gpu" | "cpu", GPU compute capability or None) for the process's devices
    (`probe_machine`'s question).

    A remote Cloud TPU has no local device: `ELECTRA_ACCELERATOR=tpu` says so (the TPU path is
    not tested here).
    """
    forced = os.environ.get("ELECTRA_ACCELERATOR", "").lower()
    if forced in ("tpu", "cpu"):
        return forced, None
    # Often the process's first device query (`probe_machine` comes before the CLIs'
    # start_tensorflow): without a GPU driver, TensorFlow's CUDA probe logs an ERROR line here.
    with cpu_only_noise_filtered():
        import tensorflow as tf  # only here: config.py stays importable without TensorFlow

        # Physical devices only: listing logical ones would initialise the runtime, after which
        # logical-device splits and MultiWorkerMirroredStrategy can no longer be set up.
        tpus = tf.config.list_physical_devices("TPU")
        gpus = tf.config.list_physical_devices("GPU")
    if tpus:
        return "tpu", None
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return "gpu", details.get("compute_capability")
    return "cpu", None


def cpu_count() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def probe_machine() -> Machine:
    """The machine this process runs on: the ONE place that asks TensorFlow which devices
    exist and reads the CPU's flags and cores. A run calls it once and passes the answer down;
    config resolution never calls it."""
    kind, capability = accelerator()
    return Machine(
        accelerator=kind,
        compute_capability=capability,
        cpu_count=cpu_count(),
        native_bf16=cpu_has_native_bf16(),
    )


def auto_precision(machine: Machine) -> str:
    if machine.accelerator == "tpu":
        return "mixed_bfloat16"
    if machine.accelerator == "gpu":
        capability = machine.compute_capability
        if capability and capability >= (8, 0):
            return "mixed_bfloat16"
        if capability and capability >= (7, 0):
            return "mixed_float16"
        return "float32"
    return "mixed_bfloat16" if machine.native_bf16 else "float32"


def auto_jit_compile(machine: Machine) -> bool:
    return machine.accelerator != "cpu"


def auto_parallel_micro_batches(
    machine: Machine,
    batch_size: int,
    accumulation_steps: int,
    distribution_strategy: str = "default",
) -> int:
    if (
        machine.accelerator != "cpu"
        or distribution_strategy != "default"
        or accumulation_steps > 1
        or batch_size % 2
        or machine.cpu_count < 2
    ):
        return 1
    return 2


def auto_threads(machine: Machine, parallel_micro_batches: int) -> tuple[int, int]:
    """(intra-op, inter-op) threads; (0, 0) is TensorFlow's default."""
    parts = parallel_micro_batches
    if parts > 1 and machine.accelerator == "cpu" and machine.cpu_count == parts:
        return 1, parts
    return 0, 0


def serving_threads(
    cpu_count: int, query_blocks: int, jit_compile: bool = False
) -> tuple[int, int]:
    """(intra-op, inter-op) threads for a model server running an export on `cpu_count` cores.

    The export runs every encoder layer on `query_blocks` groups of positions as independent
    ops (1 under `jit_compile`): one inter-op thread per group, and the cores shared out among
    the groups' kernels. Measured on 2 cores with 2 groups, (1, 2) against TensorFlow's
    default (2, 2): 1.7x faster at batch 1 (docs/serving.md, "Threads"); with more cores the
    even split is the rule, not a measurement.
    """
    groups = 1 if jit_compile else max(1, query_blocks)
    cores = max(1, cpu_count)
    return max(1, cores // groups), groups


def bf16_block_slowdown(rows: int = 256, width: int = 256, repeats: int = 5) -> float:
    """bfloat16 over float32 CPU time of one feed-forward block of the encoder's shape
    (matmul to 4 x `width`, exact GELU, matmul back) on `rows` rows, in this process: the
    least CPU time of `repeats` eager calls each, after one untimed call. CPU time, not wall
    time, so that other processes on a shared machine move it little. About 0.1-0.3 s on a
    2-core AVX2 CPU."""
    import tensorflow as tf

    def least_cpu_seconds(dtype) -> float:
        x = tf.cast(tf.random.stateless_uniform([rows, width], [1, 2]), dtype)
        up = tf.cast(tf.random.stateless_normal([width, 4 * width], [3, 4]) * 0.05, dtype)
        down = tf.cast(tf.random.stateless_normal([4 * width, width], [5, 6]) * 0.05, dtype)

        def block():
            hidden = tf.nn.gelu(tf.linalg.matmul(x, up), approximate=False)
            return tf.linalg.matmul(hidden, down).numpy()

        block()  # the first call picks and builds the kernels
        best = float("inf")
        for _ in range(repeats):
            start = time.process_time()
            block()
            best = min(best, time.process_time() - start)
        return best

    return least_cpu_seconds(tf.bfloat16) / max(least_cpu_seconds(tf.float32), 1e-9)


def emulated_bf16_note(
    precision: str, machine: Machine, slowdown: float | None = None
) -> str | None:
    """The start-of-run note for mixed_bfloat16 on a CPU without bfloat16 matrix instructions
    (None elsewhere): TensorFlow emulates bfloat16 there (float32 arithmetic plus
    conversions), so the run gains no speed from it. `slowdown`: the
    bf16 / fp32 CPU-time ratio of one feed-forward block measured at start
    (`bf16_block_slowdown`), quoted when given."""
    if precision != "mixed_bfloat16" or machine.accelerator != "cpu" or machine.native_bf16:
        return None
    measured = (
        f" Measured now: one feed-forward block of the encoder's shape took {slowdown:.2f}x "
        "its float32 CPU time."
        if slowdown is not None
        else ""
    )
    return (
        "note: precision mixed_bfloat16 on a CPU without bfloat16 matrix instructions "
        f"(no {' or '.join(BF16_CPU_FLAGS)} in /proc/cpuinfo): TensorFlow emulates bfloat16 "
        "here, so this run gets no speed from it, only its rounding: a whole ELECTRA-Small "
        "step took 0.97-1.09x the float32 CPU time on a 2-core AVX2 AMD EPYC, and 3-4x on "
        f'an AVX2 Intel CPU.{measured} "precision": "float32" (or "auto", which picks '
        "float32 on this CPU) is the better choice here."
    )


def warn_if_emulated_bf16(precision: str, machine: Machine, stream) -> str | None:
    """Prints `emulated_bf16_note` to `stream`, where it applies, with the slowdown measured
    now (`bf16_block_slowdown`, 0.1-0.3 s); returns the note (None where it does not apply)."""
    if emulated_bf16_note(precision, machine) is None:
        return None
    note = emulated_bf16_note(precision, machine, bf16_block_slowdown())
    print(note, file=stream, flush=True)
    return note
