"""The package's layout as users and readers meet it: every module that moved into a subpackage
keeps its old import path (the same module object, so a monkeypatch through either name holds),
the `python -m electra_tf.<command>` entry points stay at the root, and docs/layout.md names
every entry of the package root."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

import electra_tf
from electra_tf import MOVED_MODULES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.join(REPO, "electra_tf")
COMMANDS = ("pretrain", "finetune", "export", "export_openvino", "convert")


def root_entries() -> list[str]:
    return sorted(
        name for name in os.listdir(ROOT) if not name.startswith(".") and name != "__pycache__"
    )


def test_the_moved_modules_are_not_at_the_root():
    names = {entry.removesuffix(".py") for entry in root_entries()}
    assert not {old.split(".", 1)[1] for old in MOVED_MODULES} & names
    assert len(MOVED_MODULES) == 10


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_an_old_import_path_gives_the_moved_module(old, monkeypatch):
    new = MOVED_MODULES[old]
    module = importlib.import_module(old)
    assert module is importlib.import_module(new) is sys.modules[old] is sys.modules[new]
    assert module.__name__ == module.__spec__.name == new  # its own spec, not the alias's
    leaf = old.rsplit(".", 1)[1]
    assert getattr(electra_tf, leaf) is module  # `from electra_tf import <old name>`
    exec(f"from electra_tf import {leaf} as via_from", {})
    # A patch through the old name is seen through the new one.
    monkeypatch.setattr(f"{old}.__doc__", "patched")
    assert importlib.import_module(new).__doc__ == "patched"


def test_old_paths_and_the_config_import_no_tensorflow():
    # Config-only use stays cheap; the old names go through no heavier path than the new ones.
    code = (
        "import sys, electra_tf\n"
        "from electra_tf.config import pretraining_config\n"
        "import electra_tf.config_checks, electra_tf.presets, electra_tf.model_config\n"
        "import electra_tf.atomic_io, electra_tf.run_lock, electra_tf.device_defaults\n"
        "import electra_tf.checkpoint_names, electra_tf.format_registry\n"
        "import electra_tf.checkpoints.names, electra_tf.checkpoints.format_registry\n"
        "print(sorted(m for m in ('tensorflow', 'tf_keras') if m in sys.modules))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]", run.stdout


def test_a_name_that_never_existed_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("electra_tf.no_such_module")
    with pytest.raises(ImportError):
        exec("from electra_tf import no_such_module", {})


@pytest.mark.parametrize("command", COMMANDS)
def test_the_command_entry_points_stay_at_the_root(command):
    assert f"{command}.py" in root_entries()


def test_docs_layout_names_every_root_entry():
    with open(os.path.join(REPO, "docs", "layout.md"), encoding="utf-8") as f:
        layout = f.read()
    entries = root_entries()
    assert "config" in entries and "runtime" in entries  # the listing works
    missing = [
        entry
        for entry in entries
        if f"`electra_tf/{entry}{'/' if os.path.isdir(os.path.join(ROOT, entry)) else ''}`"
        not in layout
    ]
    assert not missing, f"docs/layout.md does not name: {missing}"
