"""bench.step_speed: bad arguments are one line (exit 2) before anything is built, and a run
leaves no scratch folder behind; `ab`: two tiny configs' steps in one process, rounds in
alternating order, the medians of the per-round ratios; bad JSON refused by name."""

import glob
import json
import os
import re
import subprocess
import sys

import pytest
import tf_keras as keras

from bench import step_speed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
    "argv, message",
    [
        (['{"precision": "nope"}'], "precision: 'nope' is not"),
        (["notjson"], "Expecting value"),
        (["{}", "many"], "invalid literal for int()"),
    ],
)
def test_bad_arguments_are_one_line(argv, message, capsys):
    assert step_speed.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "usage: python -m bench.step_speed" in err
    assert len(err.strip().splitlines()) == 1


def test_a_run_removes_its_scratch_folder(tmp_path):
    tiny = (
        '{"model_hparam_overrides": {"hidden_size": 16, "num_hidden_layers": 1, '
        '"num_attention_heads": 1, "intermediate_size": 32}, "embedding_size": 16, '
        '"train_batch_size": 4, "max_seq_length": 16}'
    )
    env = dict(os.environ, TMPDIR=str(tmp_path), CUDA_VISIBLE_DEVICES="")
    run = subprocess.run(
        [sys.executable, "-m", "bench.step_speed", tiny, "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "tokens/s" in run.stdout
    assert not glob.glob(os.path.join(str(tmp_path), "electra-step-speed-*"))


TINY = {
    "model_hparam_overrides": {
        "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 64,
    },
    "embedding_size": 16, "vocab_size": 1999, "max_seq_length": 32,
}  # fmt: skip


def test_two_tiny_configs_timed_in_turn(monkeypatch, capsys):
    monkeypatch.setattr(step_speed, "measure_peak", lambda: None)  # no subprocess in the suite
    # The suite's process has started TensorFlow: its thread pools can no longer be set.
    monkeypatch.setattr(step_speed, "apply_config_threads", lambda config: None)
    a, b = json.dumps(TINY), json.dumps({**TINY, "precision": "mixed_bfloat16"})
    try:
        assert (
            step_speed.main(
                ["ab", "--a", a, "--b", b, "--rounds", "2", "--steps", "1", "--batch", "4"]
            )
            == 0
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
        step_speed.main(["ab", "--b", "{precision: bf16}"])
    assert "--b: not JSON" in capsys.readouterr().err


def test_a_config_the_project_refuses_is_a_usage_error_naming_the_side(capsys, monkeypatch):
    """A bad value is refused before anything is measured or traced (it was a traceback)."""
    monkeypatch.setattr(step_speed, "measure_peak", lambda: pytest.fail("measured before checking"))
    with pytest.raises(SystemExit) as stop:
        step_speed.main(["ab", "--a", '{"precision": "nope"}'])
    assert stop.value.code == 2
    assert "--a: precision: 'nope' is not" in capsys.readouterr().err
