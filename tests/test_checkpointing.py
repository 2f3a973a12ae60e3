"""TrainingCheckpoints: the index names complete checkpoints only, whenever the process dies."""

import os
import shutil

import pytest
import tensorflow as tf

from electra_tf.checkpoints import training_state as checkpointing
from electra_tf.checkpoints.training_state import TrainingCheckpoints


class Crash(BaseException):
    """Stands in for the process dying (BaseException: nothing in the save may swallow it)."""


def _checkpoints(model_dir, max_to_keep=3):
    value = tf.Variable(0.0)
    return TrainingCheckpoints(str(model_dir), max_to_keep, value=value), value


def _save_steps(checkpoints, value, steps):
    for step in steps:
        value.assign(float(step))
        checkpoints.save(step)


def _files_of(model_dir, step):
    return sorted(f for f in os.listdir(model_dir) if f.startswith(f"ckpt-{step}."))


def _assert_index_complete(model_dir):
    """Every checkpoint the index names reads in full and holds the value saved at its step."""
    state = tf.train.get_checkpoint_state(str(model_dir))
    assert state is not None
    names = [os.path.basename(p) for p in state.all_model_checkpoint_paths]
    assert names and names[-1] == os.path.basename(state.model_checkpoint_path)
    for name in names:
        reader = tf.train.load_checkpoint(os.path.join(str(model_dir), name))
        step = int(name.rsplit("-", 1)[1])
        assert reader.get_tensor("value/.ATTRIBUTES/VARIABLE_VALUE") == step
    return names


def test_keeps_the_last_max_to_keep_and_deletes_the_rest(tmp_path):
    checkpoints, value = _checkpoints(tmp_path)
    _save_steps(checkpoints, value, [1, 2, 3, 4, 5])
    assert _assert_index_complete(tmp_path) == ["ckpt-3", "ckpt-4", "ckpt-5"]
    assert _files_of(tmp_path, 1) == [] and _files_of(tmp_path, 2) == []
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-5")
    # Relative names: the run directory can be moved and still resumes.
    moved = tmp_path.parent / "moved"
    shutil.move(str(tmp_path), str(moved))
    assert tf.train.latest_checkpoint(str(moved)) == str(moved / "ckpt-5")


def test_a_restarted_run_continues_the_kept_list(tmp_path):
    checkpoints, value = _checkpoints(tmp_path)
    _save_steps(checkpoints, value, [2, 4, 6])
    again, value = _checkpoints(tmp_path)
    assert again.restore_latest() == str(tmp_path / "ckpt-6")
    assert value.numpy() == 6.0
    _save_steps(again, value, [8])
    assert _assert_index_complete(tmp_path) == ["ckpt-4", "ckpt-6", "ckpt-8"]
    assert _files_of(tmp_path, 2) == []
    # Saving a step that is already kept (resume, then save at once) replaces, never duplicates.
    _save_steps(again, value, [8])
    assert _assert_index_complete(tmp_path) == ["ckpt-4", "ckpt-6", "ckpt-8"]


def test_zero_keeps_every_checkpoint(tmp_path):
    checkpoints, value = _checkpoints(tmp_path, max_to_keep=0)
    _save_steps(checkpoints, value, [1, 2, 3, 4])
    assert _assert_index_complete(tmp_path) == ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]


def test_death_while_deleting_leaves_no_listed_checkpoint_missing(tmp_path, monkeypatch):
    checkpoints, value = _checkpoints(tmp_path)
    _save_steps(checkpoints, value, [1, 2, 3])

    def dies_on_first_delete(path):
        raise Crash(path)

    monkeypatch.setattr(checkpointing.os, "remove", dies_on_first_delete)
    with pytest.raises(Crash):
        _save_steps(checkpoints, value, [4])
    monkeypatch.undo()
    # The index already moved on to 2, 3, 4; ckpt-1 is an orphan, not a dangling entry.
    assert _assert_index_complete(tmp_path) == ["ckpt-2", "ckpt-3", "ckpt-4"]
    assert _files_of(tmp_path, 1)
    # A restarted run's next save removes the orphan.
    again, value = _checkpoints(tmp_path)
    again.restore_latest()
    _save_steps(again, value, [5])
    assert _assert_index_complete(tmp_path) == ["ckpt-3", "ckpt-4", "ckpt-5"]
    assert _files_of(tmp_path, 1) == [] and _files_of(tmp_path, 2) == []


def test_death_while_writing_leaves_the_index_on_the_previous_checkpoint(tmp_path, monkeypatch):
    checkpoints, value = _checkpoints(tmp_path)
    _save_steps(checkpoints, value, [1, 2])
    real_write = tf.train.Checkpoint.write

    def dies_after_writing_files(self, prefix, options=None):
        real_write(self, prefix, options)
        with open(prefix + ".index", "r+b") as f:  # a torn file, as a kill mid-write leaves
            f.truncate(10)
        raise Crash(prefix)

    monkeypatch.setattr(tf.train.Checkpoint, "write", dies_after_writing_files)
    with pytest.raises(Crash):
        _save_steps(checkpoints, value, [3])
    monkeypatch.undo()
    assert _assert_index_complete(tmp_path) == ["ckpt-1", "ckpt-2"]
    # Resuming reads ckpt-2; reaching step 3 again overwrites the torn prefix.
    again, value = _checkpoints(tmp_path)
    assert again.restore_latest() == str(tmp_path / "ckpt-2")
    _save_steps(again, value, [3])
    assert _assert_index_complete(tmp_path) == ["ckpt-1", "ckpt-2", "ckpt-3"]


def test_only_our_older_checkpoint_files_are_deleted(tmp_path):
    keep = ["ckpt-1", "ckpt-1.txt", "ckpt-notes", "my-ckpt-1.index", "config.json", "ckpt-99.index"]
    for name in keep:
        (tmp_path / name).write_text("user data")
    checkpoints, value = _checkpoints(tmp_path, max_to_keep=1)
    _save_steps(checkpoints, value, [1, 2])
    for name in keep:
        assert (tmp_path / name).read_text() == "user data", name
    assert not (tmp_path / "ckpt-1.index").exists()
    assert not [f for f in os.listdir(tmp_path) if f.startswith("ckpt-1.data")]
    assert _assert_index_complete(tmp_path) == ["ckpt-2"]


def test_an_index_naming_foreign_checkpoints_deletes_none_of_them(tmp_path):
    # e.g. a converted original checkpoint (model.ckpt-N) in the directory a run resumes in.
    (tmp_path / "model.ckpt-1000.index").write_text("not ours")
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-1000"\n')
    checkpoints, value = _checkpoints(tmp_path, max_to_keep=2)
    _save_steps(checkpoints, value, [1, 2])
    assert (tmp_path / "model.ckpt-1000.index").read_text() == "not ours"
    assert _assert_index_complete(tmp_path) == ["ckpt-1", "ckpt-2"]
