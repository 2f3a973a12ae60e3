"""What every benchmark table names: the processor, its vector and matrix units, the measured
`tf.matmul` peak, and the load average when the run started and ended.

A speed holds for one processor and one load; a table that does not say which is no figure.

The peak (the MFU denominator of `make bench`): square products inside one tf.function loop
(no per-product Python overhead), the best GFLOP/s over a few sizes and repeats: the peak a
train step could reach if it were nothing but large GEMMs. `python -m bench.machine [--json]`
prints it.

And how the benchmarks run code elsewhere and time it (imports nothing of the project: a worker
of another checkout binds its own `electra_tf` after importing its bench module, `HARNESS_CODE`):

- `harness_command`: a bench module's `main` from this checkout, with the `electra_tf` package
  of another checkout (a `--baseline`) or of this one, in a fresh process;
- `run_peer` and `default_peer_python`: bench/peer_torch.py (the Hugging Face PyTorch and ONNX
  Runtime peers) under another interpreter, one with torch and transformers;
- `run_extra`: another bench module, as its own command;
- `checkout_revision`: the commit a checkout is at, for a row's label;
- `timed`: the timing loop the training and serving benchmarks share.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_TORCH = os.path.join(ROOT, "bench", "peer_torch.py")

# The instruction-set flags that decide which kernels run (Linux /proc/cpuinfo names).
ISA_FLAGS = (
    "fma",
    "avx2",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


def read_cpuinfo(text: str) -> tuple[str, list[str]]:
    """(model name, the ISA_FLAGS present, in ISA_FLAGS' order) from /proc/cpuinfo's text."""
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model, [flag for flag in ISA_FLAGS if flag in flags]


def processor() -> str:
    """`AMD EPYC, 2 CPUs, fma avx2` (the model name, CPU count and ISA flags)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model, flags = read_cpuinfo(f.read())
    except OSError:
        model, flags = "", []
    model = model or platform.processor() or platform.machine()
    isa = " ".join(flags) if flags else "no AVX2/AVX-512/AMX flags found"
    return f"{model}, {os.cpu_count()} CPUs, {isa}"


def matmul_gflops(dtype: tf.DType, size: int, iters: int) -> float:
    """GFLOP/s of `iters` chained [size, size] x [size, size] products in `dtype`."""
    import tensorflow as tf

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


def matmul_peaks() -> dict[str, float]:
    """{"float32_gflops": ..., "bfloat16_gflops": ...}: `matmul_peak` in both, in this process
    (with its threads)."""
    import tensorflow as tf

    return {f"{name}_gflops": matmul_peak(getattr(tf, name)) for name in ("float32", "bfloat16")}


def measure_peak(timeout: float = 600) -> dict[str, float] | None:
    """`matmul_peaks`, measured in a fresh process (with TensorFlow's default threads,
    whatever the caller's own process has set), or None."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    command = [sys.executable, "-m", "bench.machine", "--json"]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        return None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if proc.returncode == 0 and lines else None


def load_average() -> float:
    """The 1-minute load average (NaN where the platform has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def header(peak: dict[str, float] | None, load_start: float, load_end: float | None = None) -> str:
    """One line for above a table: processor, matmul peak (`matmul_peaks`' GFLOP/s in
    float32 and bfloat16, or None where not measured), load averages."""
    parts = [f"processor: {processor()}"]
    if peak:
        parts.append(
            f"tf.matmul peak fp32 {peak['float32_gflops']:.0f}, "
            f"bf16 {peak['bfloat16_gflops']:.0f} GFLOP/s"
        )
    load = f"load average {load_start:.1f} at start"
    if load_end is not None:
        load += f", {load_end:.1f} at end"
    parts.append(load)
    return "; ".join(parts)


# ---------------------------------------------------------------------------------- harness
def default_peer_python() -> str:
    """$ELECTRA_PEER_PYTHON, else /tmp/hfenv/bin/python where it exists, else none."""
    for path in (os.environ.get("ELECTRA_PEER_PYTHON", ""), "/tmp/hfenv/bin/python"):
        if path and os.path.exists(path):
            return path
    return ""


def checkout_revision(directory: str) -> str:
    """The commit a checkout is at (or why not), for a baseline row's label (also bench_serve's)."""
    try:
        proc = subprocess.run(
            ["git", "-C", directory, "log", "-1", "--format=%h %s"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no git: {e}"
    return proc.stdout.strip()[:70] or "no git"


# A child's entry point: `bench` from the harness checkout, imported first, then `electra_tf`
# from the package checkout (put first on sys.path after `bench` is bound to the harness's).
HARNESS_CODE = """import importlib, sys
harness, package, module = sys.argv[1:4]
sys.path.insert(0, harness)
main = importlib.import_module("bench." + module).main
sys.path.insert(0, package)
sys.exit(main(sys.argv[4:]))
"""


def harness_command(harness: str, package: str, module: str) -> list[str]:
    """The command line that runs `bench.<module>`'s `main` from the checkout `harness` with
    the `electra_tf` package of the checkout `package` (the same, or a --baseline's)."""
    return [sys.executable, "-c", HARNESS_CODE, harness, package, module]


def run_extra(module: str, timeout: float) -> str:
    """Runs another bench module (data prep, serving) and returns its output."""
    if not os.path.exists(os.path.join(ROOT, "bench", f"{module}.py")):
        return f"{module}: not present"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    command = [sys.executable, "-m", f"bench.{module}"]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        return f"{module}: timed out after {timeout:.0f} s"
    if proc.returncode:
        return f"{module}: failed (exit {proc.returncode})\n{proc.stderr[-1500:]}"
    return proc.stdout.strip()


def run_peer(python: str, command: list[str], what: str) -> tuple[list[dict], str]:
    """bench/peer_torch.py under `python`: (its JSON records, "" or why there are none)."""
    if not python or not os.path.exists(python):
        return [], f"skipped (no {what} interpreter; bench/README.md says how to make one)"
    run = subprocess.run([python, PEER_TORCH, *command], capture_output=True, text=True)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["?"])[-1]
        return [], f"skipped ({python} failed: {last})"
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")], ""


def timed(fn: Callable[[], object], warmup: int, calls: int) -> list[float]:
    """Seconds of each of `calls` calls of `fn`, after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


if __name__ == "__main__":
    peaks = matmul_peaks()
    if "--json" in sys.argv[1:]:  # one line, for measure_peak
        print(json.dumps(peaks))
    else:
        for key, gflops in peaks.items():
            print(f"{key.split('_')[0]}: {gflops:.1f} GFLOP/s")
