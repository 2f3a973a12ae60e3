"""atomic_io: the target holds the old content or the new, never a torn file or a leftover."""

import json
import os

import pytest

from electra_tf.runtime import atomic_io


def test_writes_creates_folders_and_replaces(tmp_path):
    path = tmp_path / "a" / "b" / "out.json"
    atomic_io.write_json(str(path), {"x": 1}, indent=2)
    assert json.loads(path.read_text()) == {"x": 1}
    atomic_io.write_text(str(path), "two\n", sync=True)
    assert path.read_text() == "two\n"
    atomic_io.write_bytes(str(path), b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert os.listdir(path.parent) == ["out.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    path.write_text("old")
    with pytest.raises(TypeError):  # not serializable: fails before any file is touched
        atomic_io.write_json(str(path), {"x": object()})

    def rename_fails(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(atomic_io.os, "replace", rename_fails)
    with pytest.raises(OSError, match="disk gone"):
        atomic_io.write_text(str(path), "new")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["config.json"]


def test_make_parents_creates_output_folders_and_names_a_path_it_cannot(tmp_path):
    from electra_tf.runtime.atomic_io import make_parents

    assert make_parents(str(tmp_path / "a" / "b" / "out.json"), None) is None
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("x")
    problem = make_parents(str(tmp_path / "file" / "out.png"))
    assert (
        problem
        == f"{tmp_path / 'file' / 'out.png'}: cannot create its folder (a file is in the way)"
    )


def test_a_bench_output_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys):
    # `bench.cost_curve --json DIR/x.json` ran four minutes, then died on the missing folder.
    from bench import cost_curve

    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as stop:
        cost_curve.parse_args(["--json", str(tmp_path / "file" / "curve.json")])
    assert stop.value.code == 2 and "cannot create its folder" in capsys.readouterr().err
    args = cost_curve.parse_args(["--json", str(tmp_path / "new" / "curve.json")])
    assert (tmp_path / "new").is_dir() and args.json.endswith("curve.json")
