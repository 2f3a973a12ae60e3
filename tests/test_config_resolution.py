"""The config is resolved once: who may call `resolve()`, what the resolved type guarantees,
and the one loader of configs read from files (electra_tf/config/, "Resolved once")."""

from __future__ import annotations

import ast
import dataclasses
import json
import os

import pytest

from electra_tf import config as config_module
from electra_tf.config import (
    ConfigError,
    PretrainingConfig,
    ResolvedPretrainingConfig,
    pretraining_config,
    read_config_file,
    save_config,
)

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "electra_tf")

# The modules that may call `.resolve(` and how often: the definition's module (its one
# constructor from read values), the runs, which know the machine (the fine-tuning run calls
# FinetuningConfig.resolve), the CLI, and nobody else. The pretrain CLI resolves through
# `pretraining_config`; the finetune CLI resolves the CPU layout from --hparams to set the
# thread pools before TensorFlow starts (`cli.finetune.layout_threads`).
RESOLVE_CALLERS = {
    "config/__init__": 2,
    "runs/pretraining": 1,
    "runs/finetuning": 2,
    "cli/finetune": 1,
}

SMALL = {
    "model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
    "vocab_size": 60,
    "max_seq_length": 16,
}


def resolve_calls(source: str) -> int:
    """How many `<anything>.resolve(...)` calls `source` makes."""
    return sum(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "resolve"
        for node in ast.walk(ast.parse(source))
    )


def unexpected_resolve_calls(counts: dict[str, int]) -> list[str]:
    """`module: n calls` for each module whose count of calls differs from RESOLVE_CALLERS."""
    return [
        f"{module}: {counts.get(module, 0)} calls, expected {RESOLVE_CALLERS.get(module, 0)}"
        for module in sorted(set(counts) | set(RESOLVE_CALLERS))
        if counts.get(module, 0) != RESOLVE_CALLERS.get(module, 0)
    ]


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    """Every module of the package: its path below electra_tf/, without .py -> its text."""
    found = {}
    for directory, _, files in os.walk(PACKAGE):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(directory, file)
                module = os.path.relpath(path, PACKAGE)[: -len(".py")].replace(os.sep, "/")
                with open(path, encoding="utf-8") as f:
                    found[module] = f.read()
    return found


@pytest.fixture(scope="module")
def counts(sources) -> dict[str, int]:
    return {module: resolve_calls(text) for module, text in sources.items()}


def test_only_the_runs_and_the_reading_constructor_resolve(counts):
    assert (
        len(counts) > 100 and counts["config/__init__"] > 0
    )  # the collector sees modules and calls
    assert unexpected_resolve_calls(counts) == []


def test_a_planted_resolve_call_is_reported(sources, counts):
    planted = sources["pretraining/networks"] + "\n\ndef f(config):\n    return config.resolve()\n"
    assert unexpected_resolve_calls({**counts, "pretraining/networks": resolve_calls(planted)}) == [
        "pretraining/networks: 1 calls, expected 0"
    ]


def test_a_resolved_config_is_concrete_and_derives_once():
    config = PretrainingConfig(**SMALL).resolve()
    assert type(config) is ResolvedPretrainingConfig
    assert (config.precision, config.jit_compile, config.parallel_micro_batches) == (
        "float32",
        False,
        1,
    )
    assert (config.intra_op_threads, config.inter_op_threads) == (0, 0)
    assert config.max_predictions_per_seq == 2  # int((0.15 + 0.005) * 16)
    assert config.discriminator_config() is config.discriminator
    assert config.generator_config() is config.generator
    assert config.generator.hidden_size == 8
    assert config.resolve() == config  # idempotent


def test_replace_on_a_resolved_config_validates_and_derives_again():
    config = PretrainingConfig(**SMALL).resolve()
    longer = dataclasses.replace(config, max_seq_length=512)
    assert type(longer) is ResolvedPretrainingConfig
    assert longer.max_predictions_per_seq == 79
    assert longer.discriminator.max_position_embeddings == 512
    shared = dataclasses.replace(config, untied_generator=False)
    assert shared.generator == shared.discriminator
    electric = dataclasses.replace(config, electra_objective=False, electric_objective=True)
    assert electric.two_tower_generator is True
    with pytest.raises(ConfigError, match='jit_compile: "auto" in a resolved config'):
        dataclasses.replace(config, jit_compile="auto")
    with pytest.raises(ConfigError, match='precision: "auto" in a resolved config'):
        dataclasses.replace(config, precision="auto")
    with pytest.raises(ConfigError, match="temperature"):
        dataclasses.replace(config, temperature=0.0)


def test_a_saved_config_reads_back_identically(tmp_path):
    config = pretraining_config("m", str(tmp_path), "tiny", {"seed": 3})
    path = tmp_path / "config.json"
    save_config(config, str(path))
    back = read_config_file(str(path))
    assert back == config
    again = tmp_path / "again.json"
    save_config(back, str(again))
    assert again.read_bytes() == path.read_bytes()


def test_unknown_keys_are_refused(tmp_path):
    values = PretrainingConfig(**SMALL).resolve().to_dict()
    values["mask_prb"] = 0.2
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError, match=r"'mask_prb' in .*config.json; did you mean 'mask_prob'"):
        read_config_file(str(path))


def test_retired_keys_are_ignored(tmp_path, monkeypatch):
    values = {**PretrainingConfig(**SMALL).resolve().to_dict(), "old_setting": 1}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError, match="old_setting"):
        read_config_file(str(path))
    monkeypatch.setitem(config_module.RETIRED_KEYS, "old_setting", "removed")
    assert read_config_file(str(path)) == PretrainingConfig(**SMALL).resolve()


def test_a_config_file_that_is_no_object_is_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"config.json: a config is a JSON object, not list"):
        read_config_file(str(path))


def test_the_pretrainer_refuses_an_unresolved_config():
    # Everything below the run takes a resolved config: one still holding "auto" and no
    # derived values is refused at the public boundary, naming the fix.
    from electra_tf.pretraining.networks import build_networks
    from electra_tf.pretraining.pretrainer import ElectraPretrainer

    unresolved, ids = PretrainingConfig(**SMALL), {"cls_id": 1, "sep_id": 2, "mask_id": 3}
    with pytest.raises(TypeError, match=r"ElectraPretrainer: config must be resolved .*resolve"):
        ElectraPretrainer(unresolved, **ids)
    with pytest.raises(TypeError, match="build_networks: config must be resolved"):
        build_networks(unresolved)
    model = ElectraPretrainer(unresolved.resolve(), **ids)
    assert ElectraPretrainer.from_config(model.get_config()).config == model.config
