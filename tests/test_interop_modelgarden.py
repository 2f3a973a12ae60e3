"""Model Garden (tf-models-official) checkpoints both ways: its own BertEncoder, ElectraPretrainer
and sentence-prediction task restore what `convert --to modelgarden` writes, and compute what
this project computes; its pretrainer checkpoints read back to native.

One tiny model pre-trained by the tiny preset (4 steps) serves every test of the module; the
held-out text test uses the shipped model (pretrained/electra-tiny-gutenberg: E 128 != H 256).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("official.nlp.modeling")

import tf_keras  # noqa: E402
from helpers_pretrain_cli import assert_same_weights, pretrained_and_converted  # noqa: E402
from official.nlp.modeling import models, networks  # noqa: E402

from electra_tf import FullTokenizer, checkpoints  # noqa: E402
from electra_tf.checkpoints import modelgarden  # noqa: E402
from electra_tf.checkpoints.native import build_model  # noqa: E402
from electra_tf.cli import convert  # noqa: E402
from electra_tf.modeling.discriminator import dummy_inputs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(ROOT, "pretrained", "electra-tiny-gutenberg")
SENTENCES = os.path.join(ROOT, "tests", "data", "heldout_sentences.txt")
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A pretrainer of the tiny preset after 4 steps (E 16 != H 32, a 2-layer generator of
    width 8 with its own projection) and its Model Garden export."""
    _, model_dir, export = pretrained_and_converted(tmp_path_factory, "modelgarden")
    return model_dir, export


def _mg_encoder(folder: str):
    """Model Garden's own encoder from the export's JSON, restored the way its tasks'
    init_checkpoint restores one."""
    with open(os.path.join(folder, modelgarden.ENCODER_CONFIG_FILE), encoding="utf-8") as f:
        encoder = networks.BertEncoder(**json.load(f))
    status = tf.train.Checkpoint(encoder=encoder).read(tf.train.latest_checkpoint(folder))
    status.expect_partial().assert_existing_objects_matched()
    return encoder


def _pretrainer(path: str):
    source = checkpoints.read_weights(path)
    model = checkpoints.build_pretrainer(source.config)
    checkpoints.load_weights(model, path)
    return model, source


def _batch(ids_list: list[list[int]], length: int) -> dict[str, tf.Tensor]:
    ids = np.zeros([len(ids_list), length], np.int32)
    for row, ids_row in enumerate(ids_list):
        ids[row, : len(ids_row)] = ids_row[:length]
    mask = (ids != 0).astype(np.int32)
    return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask)}


def _mg_output(encoder, batch) -> np.ndarray:
    ids, mask = batch["input_ids"], batch["input_mask"]
    outputs = encoder([ids, mask, tf.zeros_like(ids)])
    return outputs["sequence_output"].numpy()


def _ours(encoder, batch) -> np.ndarray:
    inputs = {**batch, "segment_ids": tf.zeros_like(batch["input_ids"])}
    return encoder(inputs)["sequence_output"].numpy()


def _max_real_difference(a: np.ndarray, b: np.ndarray, mask) -> float:
    """Largest difference at real (not padded) positions."""
    real = np.asarray(mask, bool)
    return float(np.max(np.abs(a - b)[real]))


def test_modelgarden_encoder_matches_on_heldout_text(tmp_path):
    """The shipped discriminator (E 128 -> H 256 through the projection) in Model Garden's
    BertEncoder gives this project's sequence output on 100 held-out sentences."""
    export = str(tmp_path / "mg")
    assert convert.main(["--to", "modelgarden", "--input", SHIPPED, "--output", export]) == 0
    encoder = _mg_encoder(export)
    assert encoder.get_config()["embedding_width"] == 128
    tokenizer = FullTokenizer(os.path.join(SHIPPED, "vocab.txt"))
    with open(SENTENCES, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    cls, sep = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    ids = [[cls, *tokenizer.convert_tokens_to_ids(tokenizer.tokenize(s))[:62], sep] for s in lines]
    batch = _batch(ids, 64)
    source = checkpoints.read_weights(SHIPPED)
    ours = build_model(source.config, "discriminator")
    checkpoints.load_weights(ours, SHIPPED)
    expected = _ours(ours.encoder, batch)
    got = _mg_output(encoder, batch)
    assert _max_real_difference(got, expected, batch["input_mask"]) < TOLERANCE


def test_generator_and_discriminator_restore_in_modelgarden(tiny):
    """Both networks of a pretrainer: the discriminator from `encoder`, the generator from
    generator/, each Model Garden's BertEncoder, each giving this project's output."""
    model_dir, export = tiny
    ours, _ = _pretrainer(model_dir)
    rng = np.random.default_rng(1)
    batch = _batch([[2, *rng.integers(5, 64, n - 2).tolist(), 3] for n in (16, 9, 5)], 16)
    disc = _mg_encoder(export)
    gen = _mg_encoder(os.path.join(export, modelgarden.GENERATOR))
    assert (disc.get_config()["embedding_width"], disc.get_config()["hidden_size"]) == (16, 32)
    assert (gen.get_config()["embedding_width"], gen.get_config()["hidden_size"]) == (16, 8)
    mask = batch["input_mask"]
    assert _max_real_difference(_mg_output(disc, batch), _ours(ours.discriminator, batch), mask) < (
        TOLERANCE
    )
    assert _max_real_difference(_mg_output(gen, batch), _ours(ours.generator, batch), mask) < (
        TOLERANCE
    )


def test_shared_embeddings_are_one_layer_in_modelgarden(tiny):
    """The generator reads the discriminator's word-embedding layer (one object in the
    checkpoint); Model Garden's pretrainer restores it shared."""
    model_dir, export = tiny
    prefix = tf.train.latest_checkpoint(export)
    graph = modelgarden._ObjectGraph(prefix)
    word = "_embedding_layer/embeddings"
    assert graph.key(f"model/generator_network/{word}") == graph.key(f"encoder/{word}")
    position = "_position_embedding_layer/embeddings"
    assert graph.key(f"model/generator_network/{position}") != graph.key(f"encoder/{position}")
    np.testing.assert_array_equal(
        graph.tensor(f"model/generator_network/{position}"), graph.tensor(f"encoder/{position}")
    )


def test_native_modelgarden_native_is_bit_exact(tiny, tmp_path):
    model_dir, export = tiny
    back = str(tmp_path / "back")
    assert convert.main(["--from", "modelgarden", "--to", "native", "--input", export,
                         "--output", back]) == 0  # fmt: skip
    a, b = checkpoints.read_weights(model_dir), checkpoints.read_weights(back)
    assert_same_weights(a, b)
    assert b.global_step == a.global_step == 4
    assert not b.config.untied_generator_embeddings  # the shared block came back shared
    assert os.path.isfile(os.path.join(back, "vocab.txt"))


def test_modelgarden_trainer_checkpoint_reads_to_native(tmp_path):
    """A checkpoint as Model Garden's trainer writes it (global_step, model, optimizer with
    its slots, encoder), word embeddings tied the Model Garden way (the other tables the
    generator's own): read back, the discriminator's logits and the generator's output equal
    Model Garden's."""
    disc = networks.BertEncoder(
        vocab_size=40, hidden_size=32, num_layers=2, num_attention_heads=4, inner_dim=48,
        max_sequence_length=24, type_vocab_size=2, inner_activation="gelu",
        embedding_width=16, dict_outputs=True,
    )  # fmt: skip
    gen = networks.BertEncoder(
        vocab_size=40, hidden_size=16, num_layers=1, num_attention_heads=1, inner_dim=64,
        max_sequence_length=24, type_vocab_size=2, inner_activation="gelu",
        embedding_width=16, dict_outputs=True, embedding_layer=disc.get_embedding_layer(),
    )  # fmt: skip
    pretrainer = models.ElectraPretrainer(
        generator_network=gen, discriminator_network=disc, vocab_size=40, num_classes=2,
        num_token_predictions=2, mlm_activation=tf_keras.activations.get("gelu"),
    )  # fmt: skip
    pretrainer(modelgarden._dummy_pretrainer_inputs())
    optimizer = tf_keras.optimizers.Adam()
    optimizer.build(pretrainer.trainable_variables)
    step = tf.Variable(7, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(
        global_step=step, model=pretrainer, optimizer=optimizer, encoder=disc
    )
    checkpoint.save(str(tmp_path / "mg" / "ckpt"))
    assert checkpoints.detect_format(str(tmp_path / "mg")) == "modelgarden"
    native = str(tmp_path / "native")
    assert (
        convert.main(["--to", "native", "--input", str(tmp_path / "mg"), "--output", native]) == 0
    )
    ours, source = _pretrainer(native)
    assert source.global_step == 7
    # Only the word table was shared: the generator got its own copy of it.
    assert source.config.untied_generator_embeddings
    rng = np.random.default_rng(2)
    batch = _batch([[2, *rng.integers(5, 40, n - 2).tolist(), 3] for n in (12, 7)], 12)
    ids, mask = batch["input_ids"], batch["input_mask"]
    mg_sequence = disc([ids, mask, tf.zeros_like(ids)])["sequence_output"]
    mg_logits = pretrainer.discriminator_head(pretrainer.discriminator_projection(mg_sequence))
    inputs = {**batch, "segment_ids": tf.zeros_like(ids)}
    our_logits = ours.discriminator_head(ours.discriminator(inputs)["sequence_output"])
    shape = ids.shape  # [batch, seq]: ours and Model Garden's keep a trailing 1 or not
    our_logits, mg_logits = our_logits.numpy().reshape(shape), mg_logits.numpy().reshape(shape)
    assert _max_real_difference(our_logits, mg_logits, mask) < TOLERANCE
    assert _max_real_difference(_mg_output(gen, batch), _ours(ours.generator, batch), mask) < (
        TOLERANCE
    )
    mlm = pretrainer.masked_lm
    np.testing.assert_array_equal(
        source.weights["generator_predictions/output_bias"], mlm.bias.numpy()
    )


def test_sentence_prediction_trains_one_step_from_the_export(tiny):
    """Model Garden's sentence-prediction task initialises a BertClassifier from the export
    (its own `initialize`, i.e. `Checkpoint(encoder=...)` from init_checkpoint) and trains."""
    from official.nlp.configs import bert, encoders
    from official.nlp.tasks import sentence_prediction

    model_dir, export = tiny
    with open(os.path.join(export, modelgarden.ENCODER_CONFIG_FILE), encoding="utf-8") as f:
        encoder = networks.BertEncoder(**json.load(f))
    classifier = models.BertClassifier(encoder, num_classes=2, use_encoder_pooler=False)
    config = sentence_prediction.SentencePredictionConfig(
        init_checkpoint=export,
        model=sentence_prediction.ModelConfig(
            num_classes=2, encoder=encoders.EncoderConfig(type="bert")
        ),
    )
    del bert  # the task config pulls it in; imported for its registration only
    task = sentence_prediction.SentencePredictionTask(config)
    task.initialize(classifier)
    source = checkpoints.read_weights(model_dir)
    np.testing.assert_array_equal(
        encoder.get_embedding_table().numpy(), source.weights["electra/embeddings/word_embeddings"]
    )
    ids = tf.constant([[2, 7, 9, 3, 0, 0], [2, 11, 12, 13, 14, 3]], tf.int32)
    features = {
        "input_word_ids": ids,
        "input_mask": tf.cast(ids != 0, tf.int32),
        "input_type_ids": tf.zeros_like(ids),
    }
    before = encoder.get_embedding_table().numpy().copy()
    optimizer = tf_keras.optimizers.SGD(learning_rate=0.1)
    labels = {"label_ids": tf.constant([0, 1])}
    logs = task.train_step((features, labels), classifier, optimizer, metrics=task.build_metrics())
    assert np.isfinite(float(logs["loss"]))
    assert not np.array_equal(before, encoder.get_embedding_table().numpy())


def test_detection_and_partial_exports(tiny, tmp_path):
    model_dir, export = tiny
    assert checkpoints.detect_format(export) == "modelgarden"
    assert checkpoints.detect_format(tf.train.latest_checkpoint(export)) == "modelgarden"
    assert checkpoints.detect_format(model_dir) == "native"
    pretrained = checkpoints.read_pretrained(export)  # what --pretrained and init_checkpoint use
    assert (pretrained.fmt, os.path.basename(pretrained.vocab_file)) == ("modelgarden", "vocab.txt")
    ours = build_model(pretrained.config, "discriminator")
    ours(dummy_inputs())
    result = checkpoints.load_weights(ours, export)
    assert result.fmt == "modelgarden" and not result.fresh
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / modelgarden.ENCODER_CONFIG_FILE).write_text("{}")
    with pytest.raises(checkpoints.CheckpointError, match="a Model Garden export"):
        checkpoints.detect_format(str(partial))
