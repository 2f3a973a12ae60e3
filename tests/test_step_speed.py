"""bench.step_speed: bad arguments are one line (exit 2) before anything is built, and a run
leaves no scratch folder behind."""

import glob
import os
import subprocess
import sys

import pytest

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
