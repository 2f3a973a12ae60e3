"""precision/jit_compile "auto": resolved per device by config resolution."""

import os

import pytest

from electra_tf import device_defaults
from electra_tf.config import ConfigError, pretraining_config


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
    monkeypatch.setattr(device_defaults, "accelerator", lambda: (kind, capability))
    monkeypatch.setattr(device_defaults, "cpu_flags", lambda: frozenset(flags))
    assert device_defaults.auto_precision() == expected
    # XLA was slower on CPU for this model (make bench); accelerators get it.
    assert device_defaults.auto_jit_compile() is (kind != "cpu")


def test_config_resolves_auto_to_concrete_values(monkeypatch):
    monkeypatch.setattr(device_defaults, "accelerator", lambda: ("cpu", None))
    monkeypatch.setattr(device_defaults, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    config = pretraining_config(preset="tiny", hparams={"precision": "auto", "jit_compile": "auto"})
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
