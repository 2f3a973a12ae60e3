"""KerasHub presets both ways: `convert --to kerashub` writes what KerasHub's own
ElectraBackbone and ElectraTokenizer load, and they compute and tokenize as this project does;
presets read back; a model goes native -> modelgarden -> kerashub -> hf -> native unchanged.

Keras 3 (keras_hub) and tf_keras (this project) run in ONE process here, on purpose: the
converter itself loads a preset with keras_hub and hands the weights to tf_keras models, so the
tests that compare outputs load with keras_hub first and then build and run the project's
model, which is the coexistence a user of the converter depends on. Only the lazy-import test
uses a subprocess (it needs a process that has not imported keras_hub).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from helpers_pretrain_cli import assert_same_weights, pretrained_and_converted

from electra_tf import ElectraDiscriminator, FullTokenizer, checkpoints
from electra_tf.checkpoints import kerashub
from electra_tf.cli import convert
from electra_tf.modeling.discriminator import dummy_inputs

# keras_hub is imported by the tests that run, not at collection: a test process that collects
# this file but runs other modules never loads Keras 3's model code.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras_hub") is None or importlib.util.find_spec("official") is None,
    reason="keras-hub (requirements-interop.txt) or tf-models-official is not installed",
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(ROOT, "pretrained", "electra-tiny-gutenberg")
SENTENCES = os.path.join(ROOT, "tests", "data", "heldout_sentences.txt")
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def keras_hub():
    import keras_hub

    return keras_hub


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A pretrainer of the tiny preset after 4 steps (E 16 != H 32, generator of width 8) and
    its KerasHub export."""
    return pretrained_and_converted(tmp_path_factory, "kerashub")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The shipped discriminator (E 128 != H 256) as a KerasHub preset, its vocabulary the
    tokenizer's."""
    export = str(tmp_path_factory.mktemp("kh_shipped") / "preset")
    assert convert.main(["--to", "kerashub", "--input", SHIPPED, "--output", export]) == 0
    return export


def _heldout_ids(tokenize) -> list[list[int]]:
    with open(SENTENCES, encoding="utf-8") as f:
        return [tokenize(line.strip()) for line in f if line.strip()]


def test_tokenizer_from_preset_gives_the_projects_ids(keras_hub, shipped):
    tokenizer = keras_hub.models.ElectraTokenizer.from_preset(shipped)
    ours = FullTokenizer(os.path.join(SHIPPED, "vocab.txt"))
    got = _heldout_ids(lambda s: tokenizer(s).numpy().tolist())
    expected = _heldout_ids(lambda s: ours.convert_tokens_to_ids(ours.tokenize(s)))
    assert len(expected) == 100 and got == expected


def _batch(ids_list, length):
    ids = np.zeros([len(ids_list), length], np.int32)
    for row, ids_row in enumerate(ids_list):
        ids[row, : len(ids_row)] = ids_row[:length]
    return ids, (ids != 0).astype(np.int32)


def _largest_real_difference(a, b, mask) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))[np.asarray(mask, bool)]))


def _ours(model_config, path, ids, mask):
    """This project's (tf_keras) encoder output: a discriminator of `model_config` loaded from
    `path`."""
    model = ElectraDiscriminator(model_config)
    model(dummy_inputs())
    checkpoints.load_weights(model, path)
    inputs = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    return model.encoder(inputs)["sequence_output"].numpy()


def test_backbone_from_preset_matches_on_heldout_text(keras_hub, shipped):
    """KerasHub's ElectraBackbone, loaded from the preset, against this project's encoder on the
    100 held-out sentences. KerasHub computes the feed-forward GELU in its tanh approximation:
    against the project's encoder with that activation the outputs agree within 1e-5 (the
    weights are where they belong); against ELECTRA's exact GELU they differ by what the
    approximation makes, which this test measures and bounds."""
    backbone = keras_hub.models.ElectraBackbone.from_preset(shipped)
    ours_tokenizer = FullTokenizer(os.path.join(SHIPPED, "vocab.txt"))
    cls, sep = ours_tokenizer.vocab["[CLS]"], ours_tokenizer.vocab["[SEP]"]
    ids, mask = _batch(
        _heldout_ids(
            lambda s: [
                cls,
                *ours_tokenizer.convert_tokens_to_ids(ours_tokenizer.tokenize(s))[:62],
                sep,
            ]
        ),
        64,
    )
    got = backbone({"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": mask})
    got = np.asarray(got["sequence_output"])
    config = checkpoints.read_config(SHIPPED).discriminator_config()
    tanh = dataclasses.replace(
        config, hidden_act=lambda x: tf_keras.activations.gelu(x, approximate=True)
    )
    assert _largest_real_difference(got, _ours(tanh, SHIPPED, ids, mask), mask) < TOLERANCE
    exact = _largest_real_difference(got, _ours(config, SHIPPED, ids, mask), mask)
    print(f"KerasHub (tanh GELU) against ELECTRA's exact GELU: largest difference {exact:.3g}")
    assert TOLERANCE < exact < 0.05  # docs/checkpoints.md reports this figure


def test_native_kerashub_native_is_bit_exact(keras_hub, tiny, tmp_path):
    data, model_dir, export = tiny
    assert sorted(os.listdir(export)) == sorted(
        ["assets", "config.json", "electra_heads.safetensors", "generator", "metadata.json",
         "model.weights.h5", "tokenizer.json"]
    )  # fmt: skip
    # The generator is a preset of its own; its backbone is the generator's width.
    assert (
        keras_hub.models.ElectraBackbone.from_preset(os.path.join(export, "generator")).hidden_dim
        == 8
    )
    back = str(tmp_path / "back")
    assert convert.main(["--from", "kerashub", "--to", "native", "--input", export,
                         "--output", back]) == 0  # fmt: skip
    a, b = checkpoints.read_weights(model_dir), checkpoints.read_weights(back)
    assert_same_weights(a, b)
    assert not b.config.untied_generator_embeddings
    with open(os.path.join(back, "vocab.txt"), encoding="utf-8") as f:
        back_vocab = f.read()
    with open(os.path.join(data, "vocab.txt"), encoding="utf-8") as f:
        assert back_vocab == f.read()


def test_native_modelgarden_kerashub_hf_native_is_bit_exact(tiny, tmp_path):
    """Every weight of the pretrainer (both networks, both heads, the shared embeddings, the
    projections) and its vocabulary survive the four foreign homes in a row."""
    data, model_dir, _ = tiny
    steps = [("modelgarden", "mg"), ("kerashub", "kh"), ("hf", "hf"), ("native", "native")]
    current = model_dir
    for fmt, name in steps:
        out = str(tmp_path / name)
        assert convert.main(["--to", fmt, "--input", current, "--output", out]) == 0, fmt
        assert checkpoints.detect_format(out) == fmt
        current = out
    a, b = checkpoints.read_weights(model_dir), checkpoints.read_weights(current)
    assert_same_weights(a, b)
    with open(os.path.join(current, "vocab.txt"), encoding="utf-8") as f:
        back_vocab = f.read()
    with open(os.path.join(data, "vocab.txt"), encoding="utf-8") as f:
        assert back_vocab == f.read()


def test_detection_and_partial_presets(tiny, tmp_path):
    _, _, export = tiny
    assert checkpoints.detect_format(export) == "kerashub"
    pretrained = checkpoints.read_pretrained(export)  # what --pretrained and init_checkpoint use
    assert pretrained.fmt == "kerashub"
    assert pretrained.vocab_file == os.path.join(export, kerashub.VOCAB_PATH)
    partial = str(tmp_path / "partial")
    shutil.copytree(export, partial)
    os.remove(os.path.join(partial, kerashub.WEIGHTS_FILE))
    with pytest.raises(checkpoints.CheckpointError, match="KerasHub preset.*without its weights"):
        checkpoints.detect_format(partial)
    partial_generator = str(tmp_path / "partial_generator")
    shutil.copytree(export, partial_generator)
    os.remove(os.path.join(partial_generator, "generator", kerashub.WEIGHTS_FILE))
    with pytest.raises(checkpoints.CheckpointError, match="generator: a KerasHub preset"):
        checkpoints.detect_format(partial_generator)


def test_keras_hub_is_imported_only_to_read_or_write_weights(tiny):
    """Detecting a preset and reading its config import neither keras_hub nor Keras 3's
    model code: the extra is needed only by the KerasHub conversion itself."""
    _, _, export = tiny
    code = (
        "import sys\n"
        "from electra_tf import checkpoints\n"
        "import electra_tf.cli.convert\n"
        f"assert checkpoints.detect_format({export!r}) == 'kerashub'\n"
        f"config = checkpoints.read_config({export!r})\n"
        "assert config.discriminator_config().hidden_size == 32\n"
        "assert 'keras_hub' not in sys.modules, 'keras_hub imported'\n"
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_keras3_and_tf_keras_models_in_one_process(keras_hub, tiny):
    """After keras_hub has loaded a preset, the project's tf_keras pretrainer still builds,
    runs and loads the preset's weights (no global state of one Keras line leaks into the
    other), and the Keras 3 backbone still runs after it."""
    _, model_dir, export = tiny
    backbone = keras_hub.models.ElectraBackbone.from_preset(export)
    source = checkpoints.read_weights(export)
    model = checkpoints.build_pretrainer(source.config)
    checkpoints.load_weights(model, export)
    ids = np.array([[2, 9, 10, 11, 3]], np.int32)
    mask = np.ones_like(ids)
    ours = model.discriminator(
        {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    )["sequence_output"]
    theirs = backbone({"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": mask})
    assert not isinstance(backbone, tf_keras.Model)  # the other Keras line's model
    assert tf.reduce_all(tf.math.is_finite(ours))
    # One layer of width 32 with the tanh GELU against the exact one: close, not equal.
    assert _largest_real_difference(np.asarray(theirs["sequence_output"]), ours, mask) < 1e-2
