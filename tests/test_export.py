"""Export CLI -> SavedModel -> TF Serving layout -> reload in a FRESH process -> same outputs.

The reference for every output is independent of the serving graph: the Python featurizer
(FullTokenizer + the fine-tuning `featurize_pair`) and the Keras model the weights came from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers_pretrain_cli import count_format_reads, export_config

from electra_tf import checkpoints
from electra_tf.cli import export
from electra_tf.config import save_config
from electra_tf.data.tokenization import FullTokenizer
from electra_tf.finetuning.glue import featurize_pair
from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
from electra_tf.serving import saved_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = (
    "the quick brown fox jump over lazy dog cafe naive hello un ab cd long text is here "
    "a b c d e f g h . , ! 世 界 ##s ##ed ##ing ##y"
).split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
MAX_LEN = 24
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "",  # empty: [CLS] [SEP]
    "Café CAFÉ naïve, hello 世界!",
    " ".join(["a long text is here"] * 200),  # far longer than MAX_LEN
    b"ab\xff\xfecd \xc3fox",  # invalid UTF-8
    " \t\n ",
]

# Runs in a fresh interpreter: nothing of the exporting process (traced functions, Keras
# objects) can leak into the loaded model.
LOADER = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops, as a serving binary must
paths, texts_file, ids_file, out_file = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4]
texts = [bytes.fromhex(t) for t in json.load(open(texts_file))]
ids = dict(np.load(ids_file))
def listed(v):
    a = v.numpy()
    if v.dtype == tf.string:
        return [x.decode("utf-8") for x in a.ravel()] if a.ndim == 1 else [
            [x.decode("utf-8") for x in row] for row in a]
    return a.tolist()
result = {}
for path in paths:
    model = tf.saved_model.load(path)
    calls = {
        "serving_default": model.signatures["serving_default"](text=tf.constant(texts)),
        "tokenize": model.signatures["tokenize"](text=tf.constant(texts)),
        "encode_ids": model.signatures["encode_ids"](**{k: tf.constant(v) for k, v in ids.items()}),
    }
    result[path] = {
        sig: {k: listed(v) for k, v in out.items()}
        for sig, out in calls.items()
    }
json.dump(result, open(out_file, "w"))
"""


def _pretraining_config():
    return export_config(len(VOCAB))


def _as_bytes(text) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _python_features(vocab_file: str) -> dict[str, np.ndarray]:
    """The training-time featurization, [batch, MAX_LEN]."""
    tokenizer = FullTokenizer(vocab_file)
    rows = [
        featurize_pair(tokenizer, _as_bytes(t).decode("utf-8", "ignore"), None, MAX_LEN)
        for t in TEXTS
    ]
    return {k: np.array([r[k] for r in rows], np.int32) for k in rows[0]}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Random tiny discriminator -> original-format checkpoint -> `export.main` -> reload in a
    fresh process; returns everything the tests compare."""
    root = tmp_path_factory.mktemp("export")
    data_dir = root / "data"
    model_dir = data_dir / "models" / "tiny"
    model_dir.mkdir(parents=True)
    vocab_file = model_dir / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    tf.random.set_seed(1)
    config = _pretraining_config()
    model = ElectraDiscriminator(config.discriminator_config())
    model(dummy_inputs())
    weights = {name: var.numpy() for name, var in model.variable_map().items()}
    checkpoints.write_original_files(weights, str(model_dir), global_step=7)
    save_config(config, str(model_dir / "config.json"))

    args = ["--data-dir", str(data_dir), "--model-name", "tiny", "--max-seq-length", str(MAX_LEN)]
    assert export.main(args) == 0
    serving = model_dir / "serving"
    paths = [str(serving / "tiny_discriminator" / "1"), str(serving / "tiny_encoder" / "1")]

    features = _python_features(str(vocab_file))
    texts_file, ids_file, out_file = root / "texts.json", root / "ids.npz", root / "out.json"
    texts_file.write_text(json.dumps([_as_bytes(t).hex() for t in TEXTS]))
    np.savez(ids_file, **features)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run(
        [sys.executable, "-c", LOADER, ",".join(paths), str(texts_file), str(ids_file),
         str(out_file)],
        check=True, env=env, cwd=REPO,
    )  # fmt: skip
    outputs = json.loads(out_file.read_text())
    reference = {k: np.asarray(v) for k, v in model(features).items()}
    return {
        "args": args,
        "paths": paths,
        "outputs": [outputs[p] for p in paths],
        "features": features,
        "reference": reference,
        "model_dir": model_dir,
    }


def _trimmed(array: np.ndarray, length: int) -> np.ndarray:
    return array[:, :length]


def test_layout_and_assets(exported):
    for path in exported["paths"]:
        assert os.path.isfile(os.path.join(path, "saved_model.pb"))
        assets = sorted(os.listdir(os.path.join(path, "assets")))
        assert assets == ["config.json", "export.json", "vocab.txt"]
        with open(os.path.join(path, "assets", "vocab.txt"), encoding="utf-8") as f:
            assert f.read().split("\n")[:5] == VOCAB[:5]
        info = json.load(open(os.path.join(path, "assets", "export.json")))
        assert info["global_step"] == 7 and info["max_seq_length"] == MAX_LEN
        assert set(info["signatures"]) == {"serving_default", "encode_ids", "tokenize"}
        config = json.load(open(os.path.join(path, "assets", "config.json")))
        assert config["vocab_size"] == len(VOCAB)
    # No temporary directory is left behind next to the version.
    assert os.listdir(os.path.dirname(exported["paths"][0])) == ["1"]


def test_tokenize_signature_equals_training_featurization(exported):
    features = exported["features"]
    for out in exported["outputs"]:
        tokenized = out["tokenize"]
        length = np.asarray(tokenized["input_ids"]).shape[1]
        assert length == features["input_mask"].sum(1).max()  # padded to the longest row
        for key in ("input_ids", "input_mask", "segment_ids"):
            np.testing.assert_array_equal(tokenized[key], _trimmed(features[key], length))
        # Bad inputs: empty / whitespace -> [CLS] [SEP]; long -> truncated to MAX_LEN.
        assert tokenized["tokens"][1][:3] == ["[CLS]", "[SEP]", ""]
        assert sum(tokenized["input_mask"][3]) == MAX_LEN and tokenized["tokens"][3][-1] == "[SEP]"
        # Invalid bytes are dropped (the original decodes with errors="ignore"): "abcd fox".
        assert tokenized["tokens"][4][:5] == ["[CLS]", "[UNK]", "fox", "[SEP]", ""]


def test_discriminator_outputs_match_keras(exported):
    ref = exported["reference"]
    features = exported["features"]
    mask = features["input_mask"].astype(np.float32)
    probs = 1.0 / (1.0 + np.exp(-ref["logits"].astype(np.float64))) * mask
    # Real tokens other than [CLS] / [SEP] (ids 2 and 3): the sentence-score population.
    real = mask * ~np.isin(features["input_ids"], [2, 3])
    mean = np.where(real.sum(1) > 0, (probs * real).sum(1) / np.maximum(real.sum(1), 1), 0.0)
    out = exported["outputs"][0]
    for signature in ("serving_default", "encode_ids"):
        got = out[signature]
        length = np.asarray(got["replaced_probability"]).shape[1]
        np.testing.assert_allclose(got["replaced_probability"], probs[:, :length], atol=1e-5)
        np.testing.assert_allclose(got["mean_replaced_probability"], mean, atol=1e-5)
        np.testing.assert_allclose(
            got["max_replaced_probability"], (probs * real).max(1), atol=1e-5
        )
        np.testing.assert_array_equal(got["input_mask"], features["input_mask"][:, :length])
    # Empty / whitespace-only input: no real token, defined zero scores.
    got = out["serving_default"]
    assert got["mean_replaced_probability"][1] == 0.0 == got["max_replaced_probability"][5]
    assert got["tokens"][0][:3] == ["[CLS]", "the", "quick"]


def test_encoder_outputs_match_keras(exported):
    ref = exported["reference"]
    mask = exported["features"]["input_mask"][:, :, None]
    for signature in ("serving_default", "encode_ids"):
        got = exported["outputs"][1][signature]
        sequence = np.asarray(got["sequence_output"])
        length = sequence.shape[1]
        # Padded positions are not defined outputs; the real ones must match.
        np.testing.assert_allclose(
            sequence * mask[:, :length], ref["sequence_output"][:, :length] * mask[:, :length],
            atol=1e-5,
        )  # fmt: skip
        np.testing.assert_allclose(got["cls_output"], ref["cls_output"], atol=1e-5)


def test_saved_model_cli_lists_signatures(exported):
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    command = [cli] if os.path.exists(cli) else [
        sys.executable, "-m", "tensorflow.python.tools.saved_model_cli"
    ]  # fmt: skip
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    shown = subprocess.run(
        [*command, "show", "--all", "--dir", exported["paths"][0]],
        check=True, capture_output=True, text=True, env=env,
    ).stdout  # fmt: skip
    for expected in (
        "signature_def['serving_default']",
        "signature_def['encode_ids']",
        "signature_def['tokenize']",
        "inputs['text'] tensor_info",
        "inputs['segment_ids'] tensor_info",
        "outputs['mean_replaced_probability']",
        "outputs['replaced_probability']",
    ):
        assert expected in shown


def test_existing_version_needs_overwrite(exported, capsys):
    args = exported["args"]
    # Checked before any model is loaded: fast, and the version is left as it was.
    before = os.path.getmtime(os.path.join(exported["paths"][0], "saved_model.pb"))
    assert export.main([*args, "--version", "1", "--kind", "discriminator"]) == 1
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert os.path.getmtime(os.path.join(exported["paths"][0], "saved_model.pb")) == before


class _Tiny(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def double(self, x):
        return {"y": 2.0 * x}


def _save(base, **kwargs):
    module = _Tiny()
    return saved_model.save_versioned(
        module, {"serving_default": module.double.get_concrete_function()}, str(base), **kwargs
    )


def test_save_versioned_numbering_and_overwrite(tmp_path):
    base = tmp_path / "m"
    assert _save(base).endswith(os.path.join("m", "1"))
    assert _save(base).endswith(os.path.join("m", "2"))  # a plain re-export adds a version
    assert _save(base, version=7).endswith(os.path.join("m", "7"))
    assert saved_model.existing_versions(str(base)) == [1, 2, 7]
    with pytest.raises(saved_model.ExportError, match="pass --overwrite"):
        _save(base, version=2)
    marker = base / "2" / "assets" / "user-file"
    marker.write_text("kept until --overwrite")
    _save(base, version=2, overwrite=True, extra_assets={"note.txt": "new"})
    assert not marker.exists() and (base / "2" / "assets" / "note.txt").read_text() == "new"
    assert sorted(os.listdir(base)) == ["1", "2", "7"]
    # A directory that is not a SavedModel is never replaced, even with --overwrite.
    (base / "9").mkdir()
    (base / "9" / "data.txt").write_text("user data")
    with pytest.raises(saved_model.ExportError, match="not a SavedModel"):
        _save(base, version=9, overwrite=True)
    assert (base / "9" / "data.txt").read_text() == "user data"


def test_cli_errors_name_the_problem(tmp_path, capsys):
    args = ["--data-dir", str(tmp_path), "--model-name", "none"]
    assert export.main(args) == 1
    assert f"{tmp_path / 'models' / 'none'}: no such model folder" in capsys.readouterr().err
    assert export.main([*args, "--task", "sst"]) == 1
    assert "no such model folder" in capsys.readouterr().err
    assert not (tmp_path / "models" / "none").exists()
    # A model folder without the task's fine-tuning run names the file it looked for.
    (tmp_path / "models" / "none").mkdir(parents=True)
    assert export.main([*args, "--task", "sst"]) == 1
    assert "finetuning_config.json not found" in capsys.readouterr().err


def test_pretrained_is_read_once(exported, tmp_path, monkeypatch):
    """`--pretrained DIR` (here an original checkpoint with its config.json and vocab.txt):
    the format detected once, the config read once, the tensors once; the export is the one
    `--checkpoint DIR --vocab-file DIR/vocab.txt` gives."""
    from electra_tf.checkpoints import formats, pretrained

    counts = {"detect": 0, "config": 0, "tensors": 0}

    def count(module, name, key):
        function = getattr(module, name)

        def counted(*args, **kwargs):
            counts[key] += 1
            return function(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)

    count(formats, "detect_format", "detect")
    count(pretrained, "read_config_file", "config")  # the config.json beside the checkpoint
    count_format_reads(monkeypatch, counts)
    model_dir = str(exported["model_dir"])
    args = ["--data-dir", str(tmp_path), "--model-name", "other", "--kind", "encoder"]
    args += ["--max-seq-length", str(MAX_LEN), "--pretrained", model_dir]
    assert export.main(args) == 0
    assert counts == {"detect": 1, "config": 1, "tensors": 1}
    path = tmp_path / "models" / "other" / "serving" / "other_encoder" / "1" / "assets"
    original_assets = os.path.join(exported["paths"][1], "assets")
    for asset in ("config.json", "vocab.txt"):
        with open(os.path.join(original_assets, asset), encoding="utf-8") as f:
            assert (path / asset).read_text(encoding="utf-8") == f.read(), asset
    info = json.loads((path / "export.json").read_text())
    assert info["source"].startswith(model_dir) and info["global_step"] == 7
