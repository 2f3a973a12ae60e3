"""bench/ab_step.py: two tiny configs' steps in one process, rounds in alternating order, the
medians of the per-round ratios; bad JSON refused by name."""

import json
import re

import pytest
import tf_keras as keras

from bench import ab_step

TINY = {
    "model_hparam_overrides": {
        "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 64,
    },
    "embedding_size": 16, "vocab_size": 1999, "max_seq_length": 32,
}  # fmt: skip


def test_two_tiny_configs_timed_in_turn(monkeypatch, capsys):
    monkeypatch.setattr(ab_step, "measure_peak", lambda: None)  # no subprocess in the suite
    # The suite's process has started TensorFlow: its thread pools can no longer be set.
    monkeypatch.setattr(ab_step, "apply_config_threads", lambda config: None)
    a, b = json.dumps(TINY), json.dumps({**TINY, "precision": "mixed_bfloat16"})
    try:
        assert (
            ab_step.main(["--a", a, "--b", b, "--rounds", "2", "--steps", "1", "--batch", "4"]) == 0
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    out = capsys.readouterr().out
    assert "(float32)" in out and "(mixed_bfloat16)" in out
    rounds = re.findall(r"^round (\d): A (\d+) ms, B (\d+) ms", out, flags=re.M)
    assert [r[0] for r in rounds] == ["1", "2"], out
    for label in ("wall", "CPU"):
        line = re.search(
            rf"^{label}: A \d+ ms, B \d+ ms a step \(medians\); B/A median ([\d.]+)", out, re.M
        )
        assert line and float(line.group(1)) > 0, out
    assert "processor:" in out


def test_a_config_that_is_not_json_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        ab_step.main(["--b", "{precision: bf16}"])
    assert "--b: not JSON" in capsys.readouterr().err


def test_a_config_the_project_refuses_is_a_usage_error_naming_the_side(capsys, monkeypatch):
    """A bad value is refused before anything is measured or traced (it was a traceback)."""
    monkeypatch.setattr(ab_step, "measure_peak", lambda: pytest.fail("measured before checking"))
    with pytest.raises(SystemExit) as stop:
        ab_step.main(["--a", '{"precision": "nope"}'])
    assert stop.value.code == 2
    assert "--a: precision: 'nope' is not" in capsys.readouterr().err
