"""Resuming pre-training: exact continuation, kill -9 at any moment, Ctrl-C saves and exits."""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
from helpers_pretrain_cli import (
    ROOT,
    TINY,
    checkpoint_values,
    cli_command,
    cli_env,
    hparams,
    run_pretrain,
    write_corpus,
)

from electra_tf.checkpoints import read_weights
from electra_tf.cli import pretrain
from electra_tf.runs.pretraining_model import build_model, load_init_checkpoint


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """8 uninterrupted steps, a checkpoint every 2."""
    data = write_corpus(tmp_path_factory.mktemp("resume") / "data")
    assert run_pretrain(data, "straight", num_train_steps=8) == 0
    return data


def test_resumed_run_equals_the_uninterrupted_run(straight_run, capsys):
    data = straight_run
    models = data / "models"
    # A run that "stopped" at step 4: the straight run's files up to ckpt-4, and nothing later.
    os.makedirs(models / "resumed")
    for name in os.listdir(models / "straight"):
        if name.startswith("ckpt-4.") or name == "config.json":
            shutil.copy(models / "straight" / name, models / "resumed" / name)
    (models / "resumed" / "checkpoint").write_text('model_checkpoint_path: "ckpt-4"\n')
    capsys.readouterr()
    assert run_pretrain(data, "resumed", num_train_steps=8) == 0
    out = capsys.readouterr().out
    assert "Resuming from" in out and "ckpt-4 (step 4)" in out
    assert "step 2/8" not in out and "step 8/8" in out

    straight = checkpoint_values(str(models / "straight" / "ckpt-8"))
    resumed = checkpoint_values(str(models / "resumed" / "ckpt-8"))
    assert straight.keys() == resumed.keys()
    # Weights, Adam slots, step and the sampling RNG all continue exactly; equal weights also
    # show that the data stream continued where it stopped (no batch repeated or skipped).
    for name, value in straight.items():
        np.testing.assert_array_equal(value, resumed[name], err_msg=name)
    assert any("rng" in name for name in straight), sorted(straight)[:20]
    earlier = checkpoint_values(str(models / "straight" / "ckpt-6"))
    changed = [k for k in earlier if k.startswith("model/") and "metric" not in k]
    assert any(not np.array_equal(earlier[k], straight[k]) for k in changed)


def test_a_run_with_dropout_resumes_to_the_uninterrupted_runs_weights(tmp_path):
    # Dropout's masks come from the checkpointed `model.rng` (a seed per pass,
    # `gradients.part_dropout_seed`), not from stateful ops that restart with the run: the
    # resumed steps draw the masks the uninterrupted run drew.
    data = write_corpus(tmp_path / "data", num_records=16)
    models = data / "models"
    dropout = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
    overrides = {"model_hparam_overrides": {**TINY["model_hparam_overrides"], **dropout}}
    assert run_pretrain(data, "straight", num_train_steps=4, **overrides) == 0
    os.makedirs(models / "resumed")
    for name in os.listdir(models / "straight"):
        if name.startswith("ckpt-2.") or name == "config.json":
            shutil.copy(models / "straight" / name, models / "resumed" / name)
    (models / "resumed" / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n')
    assert run_pretrain(data, "resumed", num_train_steps=4, **overrides) == 0
    straight = checkpoint_values(str(models / "straight" / "ckpt-4"))
    resumed = checkpoint_values(str(models / "resumed" / "ckpt-4"))
    assert straight.keys() == resumed.keys()
    for name, value in straight.items():
        np.testing.assert_array_equal(value, resumed[name], err_msg=name)
    # Dropout acted: the same run without it ends elsewhere.
    assert run_pretrain(data, "no-dropout", num_train_steps=4) == 0
    plain = checkpoint_values(str(models / "no-dropout" / "ckpt-4"))
    weights = [k for k in plain if k.startswith("model/") and "rng" not in k and "metric" not in k]
    assert any(not np.array_equal(plain[k], straight[k]) for k in weights)


def test_a_fresh_process_starts_from_the_same_weights(tmp_path):
    # tf_keras initializers without a seed draw one from Python's `random`, which a new
    # process seeds afresh: two runs of one config started from different weights (the
    # `seed` hparam fixed only TF's seeds). Here Python's state differs between the runs.
    data = write_corpus(tmp_path / "data", num_records=8)
    for name, python_seed in (("first", 1), ("second", 2)):
        random.seed(python_seed)
        assert run_pretrain(data, name, num_train_steps=1) == 0
    first = checkpoint_values(str(data / "models" / "first" / "ckpt-1"))
    second = checkpoint_values(str(data / "models" / "second" / "ckpt-1"))
    weights = [k for k in first if k.startswith("model/") and "rng" not in k]
    assert weights and first.keys() == second.keys()
    for name in weights:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)


def test_init_checkpoint_loads_weights_and_sets_the_step(straight_run):
    data = straight_run
    source = str(data / "models" / "straight")
    config = pretrain.build_config(
        pretrain.parse_args(
            ["--data-dir", str(data), "--model-name", "next", "--preset", "tiny", "--hparams",
             hparams(init_checkpoint=source, init_step=8, num_train_steps=10)]
        )
    )  # fmt: skip
    model = build_model(config)
    assert load_init_checkpoint(model, config) == "native"
    expected = read_weights(source, "native").weights  # the checkpoint helper's reader
    for name, variable in model.variable_map().items():
        np.testing.assert_array_equal(variable.numpy(), expected[name], err_msg=name)


def _wait_for_step(model_dir, at_least, proc, timeout=240):
    """Polls the checkpoint index until its latest step is >= at_least; returns that step."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        state = os.path.join(model_dir, "checkpoint")
        if os.path.exists(state):
            match = re.search(r'^model_checkpoint_path: ".*ckpt-(\d+)"', open(state).read(), re.M)
            if match and int(match.group(1)) >= at_least:
                return int(match.group(1))
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"no checkpoint at step >= {at_least} after {timeout}s")


def _latest_step(model_dir):
    text = open(os.path.join(model_dir, "checkpoint")).read()
    return int(re.search(r'^model_checkpoint_path: ".*ckpt-(\d+)"', text, re.M).group(1))


def _start(data, model_name, **overrides):
    return subprocess.Popen(
        cli_command(data, model_name, **overrides),
        env=cli_env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_kill_9_resumes_from_the_last_complete_checkpoint_and_sigint_saves(tmp_path):
    data = write_corpus(tmp_path / "data")
    model_dir = str(data / "models" / "run")
    # A checkpoint every step, so the kill is likely to land during a save.
    endless = {"num_train_steps": 100000, "keep_checkpoint_max": 3, "save_checkpoints_steps": 1}

    # 1. kill -9: the index must still name complete checkpoints only.
    proc = _start(data, "run", **endless)
    _wait_for_step(model_dir, 3, proc)
    time.sleep(0.3)
    proc.kill()
    proc.communicate()
    killed_at = _latest_step(model_dir)
    for line in open(os.path.join(model_dir, "checkpoint")):
        if line.startswith("all_model_checkpoint_paths"):
            prefix = os.path.join(model_dir, line.split('"')[1].split("/")[-1])
            assert checkpoint_values(prefix)  # every listed checkpoint reads in full

    # 2. The restart resumes there; then Ctrl-C saves at the step reached and exits with 130.
    proc = _start(data, "run", **endless)
    _wait_for_step(model_dir, killed_at + 2, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert f"ckpt-{killed_at} (step {killed_at})" in out, out[-2000:]
    assert proc.returncode == 130, err[-2000:]
    stopped = re.search(r"Stopped at step (\d+); saved \S*ckpt-(\d+)", out)
    assert stopped and stopped.group(1) == stopped.group(2), out[-2000:]
    assert _latest_step(model_dir) == int(stopped.group(1)) >= killed_at + 2


def test_a_saved_config_with_an_unknown_key_is_refused_naming_it(tmp_path):
    # One rule with every other reader of a saved config (config.config_from_values): the
    # resume check no longer drops keys it does not know.
    from electra_tf.checkpoints.resume_check import check_resumable
    from electra_tf.config import ConfigError, PretrainingConfig

    config = PretrainingConfig(vocab_size=60, max_seq_length=16).resolve()
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config.to_dict(), "mask_prb": 0.2}))
    with pytest.raises(ConfigError, match=r"config.json: not a valid .*did you mean 'mask_prob'"):
        check_resumable(str(path), config)
