"""precision/jit_compile/micro-batches/threads "auto": resolved for a `Machine` by config
resolution, which never asks the hardware; `probe_machine` is the one place that does."""

import os

import pytest

from electra_tf.config import ConfigError, PretrainingConfig, pretraining_config
from electra_tf.runtime import device_defaults
from electra_tf.runtime.device_defaults import PORTABLE, Machine


@pytest.mark.parametrize(
    "kind, capability, flags, expected",
    [
        ("cpu", None, {"avx512f", "avx512_bf16"}, "mixed_bfloat16"),
        ("cpu", None, {"avx512f", "amx_bf16"}, "mixed_bfloat16"),
        ("cpu", None, {"avx2", "avx512f"}, "float32"),
        ("cpu", None, set(), "float32"),
        ("gpu", (9, 0), set(), "mixed_bfloat16"),
        ("gpu", (7, 0), set(), "mixed_float16"),
        ("gpu", (6, 1), set(), "float32"),
        ("tpu", None, set(), "mixed_bfloat16"),
    ],
)
def test_auto_precision_per_device(monkeypatch, kind, capability, flags, expected):
    # What the probe reads, then the pure choice from its answer.
    monkeypatch.setattr(device_defaults, "accelerator", lambda: (kind, capability))
    monkeypatch.setattr(device_defaults, "cpu_flags", lambda: frozenset(flags))
    machine = device_defaults.probe_machine()
    assert (machine.accelerator, machine.compute_capability) == (kind, capability)
    assert device_defaults.auto_precision(machine) == expected
    # XLA was slower on CPU for this model (make bench); accelerators get it.
    assert device_defaults.auto_jit_compile(machine) is (kind != "cpu")


def test_config_resolves_auto_to_concrete_values():
    bf16_cpu = Machine(accelerator="cpu", cpu_count=4, native_bf16=True)
    hparams = {"precision": "auto", "jit_compile": "auto"}
    config = pretraining_config(preset="tiny", hparams=hparams, machine=bf16_cpu)
    assert (config.precision, config.jit_compile) == ("mixed_bfloat16", False)
    # Resolution is idempotent: a saved, resolved config reloads unchanged.
    assert config.resolve() == config
    # Explicit values are never overridden.
    config = pretraining_config(
        preset="tiny", hparams={"precision": "float32", "jit_compile": True}
    )
    assert (config.precision, config.jit_compile) == ("float32", True)


def test_bad_values_are_named(monkeypatch):
    with pytest.raises(ConfigError, match="jit_compile"):
        pretraining_config(preset="tiny", hparams={"jit_compile": "yes"})
    with pytest.raises(ConfigError, match="precision"):
        pretraining_config(preset="tiny", hparams={"precision": "bfloat16"})


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="needs Linux /proc/cpuinfo")
def test_cpu_flags_reads_this_machine():
    flags = device_defaults.cpu_flags()
    # Every x86-64 / arm64 Linux kernel lists its baseline features ("fpu", "fp").
    assert flags & {"fpu", "fp"}
    assert device_defaults.cpu_has_native_bf16() == bool(
        flags & set(device_defaults.BF16_CPU_FLAGS)
    )


@pytest.mark.parametrize(
    "kind, cores, hparams, expected",
    [
        # (parallel_micro_batches, intra_op_threads, inter_op_threads) after resolution.
        ("cpu", 2, {}, (2, 1, 2)),  # the measured case: each half on its own core
        ("cpu", 8, {}, (2, 0, 0)),  # more cores: TensorFlow's own pools (unmeasured)
        ("cpu", 1, {}, (1, 0, 0)),
        ("gpu", 2, {}, (1, 0, 0)),
        ("tpu", 2, {}, (1, 0, 0)),
        ("cpu", 2, {"train_batch_size": 9}, (1, 0, 0)),  # an odd batch does not split
        ("cpu", 2, {"gradient_accumulation_steps": 2}, (1, 0, 0)),
        ("cpu", 2, {"distribution_strategy": "mirrored"}, (1, 0, 0)),
        # electra_15 with positions drawn with replacement cannot split its loss denominator.
        ("cpu", 2, {"objective_variant": "electra_15", "untied_generator": True}, (1, 0, 0)),
        # Explicit values are kept; "auto" threads follow an explicit split.
        ("cpu", 2, {"parallel_micro_batches": 1}, (1, 0, 0)),
        ("cpu", 4, {"parallel_micro_batches": 4}, (4, 1, 4)),
        ("cpu", 2, {"intra_op_threads": 2, "inter_op_threads": 1}, (2, 2, 1)),
    ],
)
def test_auto_parallel_micro_batches_and_threads(kind, cores, hparams, expected):
    machine = Machine(accelerator=kind, cpu_count=cores)
    values = {"train_batch_size": 8, **hparams}
    config = pretraining_config(preset="tiny", hparams=values, machine=machine)
    got = (config.parallel_micro_batches, config.intra_op_threads, config.inter_op_threads)
    assert got == expected
    assert config.resolve() == config


def test_thread_settings_after_tensorflow_started_warn_and_go_on():
    # A caller that used TensorFlow before calling a CLI's main: the pools are fixed by then.
    import subprocess
    import sys

    code = (
        "import tensorflow as tf; tf.constant(1.0) + 1.0; "
        "from electra_tf.runtime.tf_startup import _set_threads; _set_threads(tf, 1, 2); "
        "t = tf.config.threading; "
        "print(t.get_intra_op_parallelism_threads(), t.get_inter_op_parallelism_threads())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "intra_op_threads 1 not applied" in done.stderr
    assert "inter_op_threads 2 not applied" in done.stderr


AUTO = {
    "precision": "auto",
    "jit_compile": "auto",
    "parallel_micro_batches": "auto",
    "intra_op_threads": "auto",
    "inter_op_threads": "auto",
    "train_batch_size": 8,
}


def _auto_fields(config):
    names = ("precision", "jit_compile", "parallel_micro_batches")
    return tuple(getattr(config, n) for n in (*names, "intra_op_threads", "inter_op_threads"))


@pytest.mark.parametrize(
    "machine, expected",
    [
        (Machine("cpu", None, 2, False), ("float32", False, 2, 1, 2)),
        (Machine("cpu", None, 16, True), ("mixed_bfloat16", False, 2, 0, 0)),
        (Machine("gpu", (8, 0), 16, False), ("mixed_bfloat16", True, 1, 0, 0)),
        (Machine("gpu", (7, 5), 16, False), ("mixed_float16", True, 1, 0, 0)),
        (Machine("tpu", None, 96, False), ("mixed_bfloat16", True, 1, 0, 0)),
        # The portable machine: an unknown CPU.
        (PORTABLE, ("float32", False, 1, 0, 0)),
    ],
)
def test_resolution_for_a_given_machine_is_deterministic(monkeypatch, machine, expected):
    def no_probe():
        raise AssertionError("resolve() asked the hardware")

    monkeypatch.setattr(device_defaults, "probe_machine", no_probe)
    monkeypatch.setattr(device_defaults, "accelerator", no_probe)
    monkeypatch.setattr(device_defaults, "cpu_count", no_probe)
    monkeypatch.setattr(device_defaults, "cpu_flags", no_probe)
    first = pretraining_config(preset="tiny", hparams=AUTO, machine=machine)
    again = pretraining_config(preset="tiny", hparams=AUTO, machine=machine)
    assert first == again and _auto_fields(first) == expected
    assert first.resolve(machine) == first  # idempotent for the same machine


def test_resolve_without_a_machine_is_the_portable_answer(monkeypatch):
    def no_probe():
        raise AssertionError("resolve() asked the hardware")

    monkeypatch.setattr(device_defaults, "probe_machine", no_probe)
    monkeypatch.setattr(device_defaults, "accelerator", no_probe)
    config = PretrainingConfig(**AUTO).resolve()
    assert _auto_fields(config) == ("float32", False, 1, 0, 0)
    assert config == PretrainingConfig(**AUTO).resolve(PORTABLE)
