"""The public API: cheap to import, every name resolves and is documented, and the README's
"Use it from your own Keras code" blocks run as written (in a fresh interpreter, from a folder
that has the repository's `pretrained/`, as the repository's root has)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import electra_tf
from electra_tf import api

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADING = "### Use it from your own Keras code"


def _env() -> dict[str, str]:
    return dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)


def readme_snippet() -> str:
    """The section's ```python blocks, one program (the later ones use the first's imports)."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    assert HEADING in text, f"README.md lacks the section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 2, f"expected two ```python blocks after {HEADING!r} in README.md"
    return "\n".join(blocks)


def test_import_is_cheap_and_lazy():
    code = (
        "import sys, electra_tf\n"
        # Not pretraining_config(): its resolve() detects the device ("auto" precision/jit).
        "config = electra_tf.PretrainingConfig(model_size='small', embedding_size=128)\n"
        "assert config.discriminator_config().hidden_size == 256\n"
        "assert electra_tf.ModelConfig().hidden_size == 768\n"
        "assert 'tensorflow' not in sys.modules, 'config-only use imported TensorFlow'\n"
        "print('ok')\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"


def test_every_public_name_resolves_with_a_docstring():
    assert sorted(electra_tf.__all__) == sorted(api.PUBLIC)
    for name in electra_tf.__all__:
        value = getattr(electra_tf, name)
        assert callable(value), name
        assert (value.__doc__ or "").strip(), f"electra_tf.{name} has no docstring"
    assert set(electra_tf.__all__) <= set(dir(electra_tf))


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        electra_tf.Nope  # noqa: B018


def test_readme_snippet_runs(tmp_path):
    snippet = readme_snippet()
    script = tmp_path / "snippet.py"
    script.write_text(snippet, encoding="utf-8")
    os.symlink(os.path.join(REPO, "pretrained"), tmp_path / "pretrained")
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=_env(), cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # Fine-tuned from raw text: the classifier and the tagger have learned their examples, and
    # their exports answer with the labels and the tags as given.
    lines = run.stdout.strip().splitlines()
    assert lines[-4:] == [
        "['positive', 'negative']",
        "[b'positive']",
        "[['B-PER', 'I-PER', 'O', 'O', 'B-LOC']]",
        "['B-PER', 'I-PER', 'O', 'O', 'B-LOC']",
    ], lines
    assert os.path.isfile(tmp_path / "serving" / "sentiment" / "1" / "saved_model.pb")
