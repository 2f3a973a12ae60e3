"""A damaged run folder loses nothing: a missing, empty, garbled or stale `checkpoint` index is
rebuilt from the complete checkpoints on disk, and a truncated or corrupted checkpoint stops
the run with a line naming the file and the older checkpoint to resume from, every older
checkpoint left byte for byte."""

import hashlib
import io
import os
import re
import shutil

import pytest
import tensorflow as tf
import tf_keras as keras
from helpers_pretrain_cli import run_pretrain, write_corpus
from helpers_reliability import last_line, record

from electra_tf.checkpoints.recovery import (
    CheckpointDamageError,
    checkpoint_problem,
    holds_checkpoints,
    resume_point,
)
from electra_tf.checkpoints.training_state import TrainingCheckpoints


def _digests(model_dir):
    """sha256 of every checkpoint file in the folder (the index file excluded)."""
    return {
        name: hashlib.sha256((model_dir / name).read_bytes()).hexdigest()
        for name in sorted(os.listdir(model_dir))
        if name.startswith("ckpt-")
    }


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _delete_ckpt(model_dir, step):
    for name in os.listdir(model_dir):
        if name.startswith(f"ckpt-{step}."):
            os.remove(model_dir / name)


# Each damage leaves ckpt-2 and ckpt-4 of a run that saved at steps 2 and 4 (ckpt-6 for the
# last two), and names the checkpoint a resumed run must start from.
DAMAGES = {
    "index missing": (lambda d: os.remove(d / "checkpoint"), "ckpt-4"),
    "index empty": (lambda d: (d / "checkpoint").write_text(""), "ckpt-4"),
    "index garbled": (lambda d: (d / "checkpoint").write_bytes(b"\x00\xffmodel_check{{"), "ckpt-4"),
    "index names a deleted checkpoint": (lambda d: _delete_ckpt(d, 6), "ckpt-4"),
}


def _saved(model_dir, steps=(2, 4, 6)):
    value = tf.Variable(0.0)
    checkpoints = TrainingCheckpoints(str(model_dir), 0, value=value)
    for step in steps:
        value.assign(float(step))
        checkpoints.save(step)
    return value


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_index_is_rebuilt_from_the_checkpoints_on_disk(tmp_path, damage):
    _saved(tmp_path, (2, 4) if damage != "index names a deleted checkpoint" else (2, 4, 6))
    harm, expected = DAMAGES[damage]
    harm(tmp_path)
    before = _digests(tmp_path)
    assert holds_checkpoints(str(tmp_path))
    value = tf.Variable(-1.0)
    out = io.StringIO()
    restored = TrainingCheckpoints(str(tmp_path), 0, value=value).restore_latest(out)
    record("1", f"checkpoint {damage}", f"resume from {expected}, files unchanged", out.getvalue())
    assert os.path.basename(restored) == expected
    assert float(value.numpy()) == float(expected.split("-")[1])
    assert "rebuilt it from the complete checkpoints on disk" in out.getvalue()
    assert _digests(tmp_path) == before
    # The rebuilt index is TensorFlow's again: every reader agrees on the latest.
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith(expected)


def test_a_sound_index_is_trusted_without_reading_the_checkpoints(tmp_path, monkeypatch):
    _saved(tmp_path)
    monkeypatch.setattr(
        "electra_tf.checkpoints.recovery.checkpoint_problem",
        lambda prefix: pytest.fail("a sound index needs no scan"),
    )
    assert resume_point(str(tmp_path), write_index=True).endswith("ckpt-6")


def test_a_sound_index_in_a_relative_folder_is_trusted(tmp_path, monkeypatch):
    """`make pretrain` names the run folder relative to the repository (data/default/models/
    electra_small): its sound index must resume without a warning or a rebuilt index (it once
    joined the folder twice, called ckpt-N's files gone and read every checkpoint in full)."""
    _saved(tmp_path / "models" / "run")
    monkeypatch.chdir(tmp_path)
    index = (tmp_path / "models" / "run" / "checkpoint").read_bytes()
    monkeypatch.setattr(
        "electra_tf.checkpoints.recovery.checkpoint_problem",
        lambda prefix: pytest.fail("a sound index needs no scan"),
    )
    out = io.StringIO()
    latest = resume_point(os.path.join("models", "run"), write_index=True, stream=out)
    assert latest == os.path.join("models", "run", "ckpt-6")
    assert out.getvalue() == ""
    assert (tmp_path / "models" / "run" / "checkpoint").read_bytes() == index


def test_an_empty_folder_starts_fresh(tmp_path):
    assert resume_point(str(tmp_path), write_index=True) is None
    assert not holds_checkpoints(str(tmp_path))


@pytest.mark.parametrize("harm", [_truncate, _flip_last_byte], ids=["truncated", "flipped byte"])
@pytest.mark.parametrize("part", ["data-00000-of-00001", "index"])
def test_a_damaged_latest_checkpoint_names_the_file_and_the_older_one(tmp_path, harm, part):
    _saved(tmp_path, (2, 4))
    harm(tmp_path / f"ckpt-4.{part}")
    before = _digests(tmp_path)
    assert checkpoint_problem(str(tmp_path / "ckpt-4")) is not None
    assert checkpoint_problem(str(tmp_path / "ckpt-2")) is None
    with pytest.raises(CheckpointDamageError) as caught:
        TrainingCheckpoints(str(tmp_path), 0, value=tf.Variable(0.0)).restore_latest()
    message = str(caught.value)
    record("2", f"latest checkpoint {part} {harm.__name__}", "one line naming ckpt-2", message)
    assert "ckpt-4" in message and "cannot be used" in message
    assert "ckpt-2 is the newest older checkpoint that reads in full" in message
    assert "move ckpt-4.* out of" in message and "\n" not in message
    assert _digests(tmp_path) == before


def test_a_damaged_newest_checkpoint_with_a_damaged_index_rebuilds_nothing(tmp_path):
    _saved(tmp_path, (2, 4))
    os.remove(tmp_path / "checkpoint")
    _truncate(tmp_path / "ckpt-4.data-00000-of-00001")
    before = _digests(tmp_path)
    with pytest.raises(CheckpointDamageError, match="ckpt-2 is the newest older"):
        resume_point(str(tmp_path), write_index=True)
    assert not (tmp_path / "checkpoint").exists() and _digests(tmp_path) == before


def test_following_the_advice_resumes_from_the_older_checkpoint(tmp_path):
    _saved(tmp_path, (2, 4))
    _truncate(tmp_path / "ckpt-4.data-00000-of-00001")
    aside = tmp_path / "aside"
    aside.mkdir()
    for name in os.listdir(tmp_path):
        if name.startswith("ckpt-4."):
            os.rename(tmp_path / name, aside / name)
    value = tf.Variable(0.0)
    restored = TrainingCheckpoints(str(tmp_path), 0, value=value).restore_latest(io.StringIO())
    assert restored.endswith("ckpt-2") and float(value.numpy()) == 2.0


@pytest.fixture(scope="module")
def four_steps(tmp_path_factory):
    """A run of 4 steps saving every 2 (ckpt-2, ckpt-4); each test works on a copy."""
    data = write_corpus(tmp_path_factory.mktemp("four_steps") / "data")
    assert run_pretrain(data, "m", num_train_steps=4) == 0
    return data


@pytest.mark.parametrize("damage", ["index missing", "latest truncated"])
def test_the_pretraining_command_resumes_or_refuses_and_keeps_older_checkpoints(
    tmp_path, capsys, damage, four_steps
):
    data = tmp_path / "data"
    shutil.copytree(four_steps, data)
    model_dir = data / "models" / "m"
    if damage == "index missing":
        os.remove(model_dir / "checkpoint")
    else:
        _truncate(model_dir / "ckpt-4.data-00000-of-00001")
    before = _digests(model_dir)
    capsys.readouterr()
    code = run_pretrain(data, "m", num_train_steps=6)
    captured = capsys.readouterr()
    after = _digests(model_dir)
    got = f"exit {code}: {last_line(captured.err if code else captured.out)}"
    record("1", f"pretrain after {damage}", "older checkpoints byte for byte", got)
    if damage == "index missing":
        assert code == 0
        assert "Resuming from" in captured.out and "ckpt-4 (step 4)" in captured.out
        assert "Training steps 0" not in captured.out
        assert {k: v for k, v in after.items() if not k.startswith("ckpt-6")} == before
    else:
        assert code != 0
        assert "ckpt-4 cannot be used" in captured.err and "ckpt-2" in captured.err
        assert after == before


def test_a_nan_in_the_middle_of_a_run_stops_it_before_saving(
    tmp_path, capsys, monkeypatch, four_steps
):
    """Resumed at step 4, a bad update poisons a weight in the call that reaches step 6: the
    run stops at that save (the weights check), ckpt-4 stays the latest, byte for byte, the
    message says so, and rerunning resumes from it."""
    from electra_tf.runs import pretraining

    real = pretraining.run_steps

    def poisoned(train_steps, iterator, num_steps, config, checkpoints, optimizer, *rest):
        done = real(train_steps, iterator, num_steps, config, checkpoints, optimizer, *rest)
        if int(optimizer.iterations.numpy()) == 6:
            weight = checkpoints.checkpoint.model.trainable_variables[0]
            weight.assign(tf.fill(weight.shape, float("nan")))
        return done

    monkeypatch.setattr(pretraining, "run_steps", poisoned)
    data = tmp_path / "data"
    shutil.copytree(four_steps, data)
    model_dir = data / "models" / "m"
    before = _digests(model_dir)
    capsys.readouterr()
    code = run_pretrain(data, "m", num_train_steps=8)
    err = capsys.readouterr().err
    record("3", "a NaN weight in the middle of a run", "exit 1, ckpt-4 kept", last_line(err))
    assert code == 1, err
    # A CPU run's first call after a resume is one step (it builds the graph): 5..6 or 6..6.
    assert re.search(r"the weights became NaN or Inf at a step in [56]\.\.6;", err), err
    assert "the last checkpoint" in err and "ckpt-4, is kept" in err
    assert _digests(model_dir) == before  # no ckpt-6, the older ones untouched
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-4")
    monkeypatch.setattr(pretraining, "run_steps", real)
    assert run_pretrain(data, "m", num_train_steps=8) == 0  # resumes from ckpt-4 and finishes
    after = _digests(model_dir)
    assert {k: v for k, v in after.items() if k in before} == before


def test_a_nan_loss_is_caught_from_the_metrics(tmp_path):
    from electra_tf.runs.pretraining_model import divergence

    class Model:
        metrics = [keras.metrics.Mean(name="loss"), keras.metrics.Mean(name="disc_auc")]
        trainable_variables = [tf.Variable([1.0, 2.0])]

    model = Model()
    model.metrics[0].update_state(1.0)
    assert divergence(model, check_weights=True) is None
    model.metrics[0].update_state(float("inf"))
    assert divergence(model, check_weights=False) == "the loss became NaN or Inf"
    model.metrics[0].reset_state()
    model.trainable_variables[0].assign([1.0, float("nan")])
    assert divergence(model, check_weights=False) is None
    assert divergence(model, check_weights=True) == "the weights became NaN or Inf"
