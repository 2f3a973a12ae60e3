"""Electric exports: an Electric pre-training checkpoint -> export CLI -> SavedModel -> reload in
a FRESH process -> the `score_text` signature gives the Keras-side `score_text` scores.

The reference is `electric_scoring.score_text` on the pretrainer the checkpoint came from
(Python WordPiece featurization, eager Keras), itself checked against a NumPy re-derivation in
tests/test_electric.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import helpers_reference_numpy as ref
import numpy as np
import pytest
import tensorflow as tf
from helpers_pretrain_cli import export_config

from electra_tf import checkpoints
from electra_tf.cli import export
from electra_tf.data.tokenization import FullTokenizer
from electra_tf.finetuning.glue import featurize_pair
from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
from electra_tf.pretraining.electric_scoring import score_text
from electra_tf.pretraining.pretrainer import ElectraPretrainer
from electra_tf.serving import save_for_serving

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "the cat dog sat on a mat big red is was . , ! ##s ##ed un cafe naive 世 界".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
SPECIAL = {"cls_id": 2, "sep_id": 3, "mask_id": 4}
MAX_LEN = 20
TEXTS = [
    "The cat sat on the mat.",
    "the mat sat on the cat",
    "",  # [CLS] [SEP]: nothing scored, sentence score 0
    "Café naïve, big red dogs! 世界",  # accents stripped, ##s, CJK split
    " ".join(["a big red cat is on the mat ."] * 10),  # truncated to MAX_LEN
    "xyz unknown words",  # [UNK]s are scored like any token
]

LOADER = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # the tokenizer's ops, as a serving binary must link them
path, texts_file, ids_file, out_file = sys.argv[1:5]
texts = tf.constant(json.load(open(texts_file)))
ids = {k: tf.constant(v, tf.int32) for k, v in json.load(open(ids_file)).items()}
model = tf.saved_model.load(path)
def listed(v):
    if v.dtype == tf.string:
        return [[x.decode("utf-8") for x in row] for row in v.numpy()]
    return v.numpy().tolist()
calls = {
    "score_text": model.signatures["score_text"](text=texts),
    "serving_default": model.signatures["serving_default"](text=texts),
    "encode_ids": model.signatures["encode_ids"](**ids),
}
result = {sig: {k: listed(v) for k, v in out.items()} for sig, out in calls.items()}
result["signature_keys"] = sorted(model.signatures)
json.dump(result, open(out_file, "w"))
"""


def _config():
    return export_config(len(VOCAB), electric_objective=True)


def _python_features(tokenizer) -> dict[str, np.ndarray]:
    rows = [featurize_pair(tokenizer, text, None, MAX_LEN) for text in TEXTS]
    return {k: np.array([r[k] for r in rows], np.int32) for k in rows[0]}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny Electric pretrainer (perturbed weights) as a native checkpoint in a model dir ->
    `export.main` (discriminator and encoder) -> the discriminator export loaded and called in
    a fresh process."""
    root = tmp_path_factory.mktemp("electric_export")
    data_dir = root / "data"
    model_dir = data_dir / "models" / "tiny"
    model_dir.mkdir(parents=True)
    vocab_file = model_dir / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    tf.random.set_seed(1)
    config = _config()
    model = ElectraPretrainer(config, **SPECIAL)
    # Away from initial weights, where every energy is ~0 and any scoring looks right.
    ref.perturb(model.variable_map().values(), seed=3)
    checkpoints.write_native_files(model, str(model_dir), config, global_step=7)

    args = ["--data-dir", str(data_dir), "--model-name", "tiny", "--max-seq-length", str(MAX_LEN)]
    assert export.main(args) == 0
    serving = model_dir / "serving"
    path = str(serving / "tiny_discriminator" / "1")

    tokenizer = FullTokenizer(str(vocab_file))
    features = _python_features(tokenizer)
    texts_file, ids_file, out_file = root / "texts.json", root / "ids.json", root / "out.json"
    texts_file.write_text(json.dumps(TEXTS))
    ids_file.write_text(json.dumps({k: v.tolist() for k, v in features.items()}))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run(
        [sys.executable, "-c", LOADER, path, str(texts_file), str(ids_file), str(out_file)],
        check=True, env=env, cwd=REPO,
    )  # fmt: skip
    with open(os.path.join(path, "assets", "export.json"), encoding="utf-8") as f:
        info = json.load(f)
    return {
        "out": json.loads(out_file.read_text()),
        "info": info,
        "keras": score_text(model, tokenizer, TEXTS, max_seq_length=MAX_LEN),
        "features": features,
        "model": model,
        "vocab_file": str(vocab_file),
        "encoder_path": str(serving / "tiny_encoder" / "1"),
    }


def test_score_text_signature_equals_keras_score_text(exported):
    got = exported["out"]["score_text"]
    token_scores = np.asarray(got["token_scores"])
    scored = np.asarray(got["scored"]) == 1
    mask = np.asarray(got["input_mask"])
    length = token_scores.shape[1]
    assert length == MAX_LEN  # the long text sets the width; it was cut to MAX_LEN
    # The ids the graph featurized are the training featurization's, padded to the longest row.
    features = exported["features"]
    np.testing.assert_array_equal(got["input_ids"], features["input_ids"][:, :length])
    np.testing.assert_array_equal(mask, features["input_mask"][:, :length])
    for row, keras in enumerate(exported["keras"]):
        tokens = [t for t, s in zip(got["tokens"][row], scored[row], strict=True) if s]
        assert tokens == keras.tokens, row
        np.testing.assert_allclose(token_scores[row, scored[row]], keras.token_scores, atol=1e-5)
        np.testing.assert_allclose(got["sentence_score"][row], keras.score, atol=1e-5)
        assert got["num_scored"][row] == len(keras.tokens)
    # 0 at [CLS], [SEP] and padding; every real word scored, and the scores are not trivial.
    assert np.all(token_scores[~scored] == 0.0)
    assert np.all(scored <= mask) and not scored[:, 0].any()
    assert got["num_scored"][2] == 0 and got["sentence_score"][2] == 0.0
    assert exported["keras"][4].truncated and sum(mask[4]) == MAX_LEN
    assert got["tokens"][5][1:5] == ["[UNK]", "[UNK]", "[UNK]", "[SEP]"]
    assert np.std(token_scores[scored]) > 0.1
    # Swapping words changes the score: the scores read the context.
    assert abs(got["sentence_score"][0] - got["sentence_score"][1]) > 1e-3


def test_every_scoring_signature_gives_the_same_scores(exported):
    out = exported["out"]
    assert out["signature_keys"] == ["encode_ids", "score_text", "serving_default", "tokenize"]
    for signature in ("serving_default", "encode_ids"):
        got = out[signature]
        assert sorted(got) == sorted(out["score_text"]), signature
        np.testing.assert_allclose(
            got["token_scores"], out["score_text"]["token_scores"], atol=1e-6
        )
        np.testing.assert_allclose(
            got["sentence_score"], out["score_text"]["sentence_score"], atol=1e-6
        )


def test_an_electric_discriminator_presents_no_replaced_probability(exported):
    info = exported["info"]
    assert info["kind"] == "electric" and info["global_step"] == 7
    outputs = {
        "input_ids", "input_mask", "num_scored", "scored", "sentence_score", "token_scores",
        "tokens",
    }  # fmt: skip
    assert set(info["signatures"]) == {"serving_default", "score_text", "encode_ids", "tokenize"}
    for signature in ("serving_default", "score_text", "encode_ids"):
        assert set(info["signatures"][signature]["outputs"]) == outputs, signature
    assert info["signatures"]["score_text"]["inputs"] == ["text"]
    assert not any("probab" in key for key in exported["out"]["score_text"])
    # The encoder of an Electric model is exported as any encoder.
    assert os.path.isfile(os.path.join(exported["encoder_path"], "saved_model.pb"))


def test_save_for_serving_takes_electric_from_the_config(exported, tmp_path):
    # The one-call export of a model held in Python: a pre-training config with
    # electric_objective makes the discriminator an "electric" export; without one it stays a
    # replaced-token detector.
    config = _config()
    discriminator = ElectraDiscriminator(config.discriminator_config())
    discriminator(dummy_inputs())
    kinds = {}
    for name, extra in (("with_config", {"config": config}), ("bare", {})):
        path = save_for_serving(
            discriminator, str(tmp_path), exported["vocab_file"], MAX_LEN, name=name, **extra
        )
        with open(os.path.join(path, "assets", "export.json"), encoding="utf-8") as f:
            info = json.load(f)
        kinds[name] = (info["kind"], sorted(info["signatures"]))
    common = ["encode_ids", "serving_default", "tokenize"]
    assert kinds["with_config"] == ("electric", sorted([*common, "score_text"]))
    assert kinds["bare"] == ("discriminator", common)
