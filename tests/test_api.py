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


def _python_blocks(path: str, heading: str | None = None) -> list[str]:
    """The ```python blocks of `path` (after `heading`, up to the next section, if given)."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        text = f.read()
    if heading is not None:
        assert heading in text, f"{path} lacks the section {heading!r}"
        text = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


def readme_snippet() -> str:
    """The README section's ```python block and docs/keras.md's, one program (the later block
    uses the first's imports)."""
    readme = _python_blocks("README.md", HEADING)
    assert len(readme) == 1, f"expected one ```python block after {HEADING!r} in README.md"
    keras_page = _python_blocks(os.path.join("docs", "keras.md"))
    assert len(keras_page) == 1, "expected one ```python block in docs/keras.md"
    return "\n".join(readme + keras_page)


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
