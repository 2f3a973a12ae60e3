"""The Keras models on raw text (`electra_tf.finetuning.keras_models`): the preprocessing layers
featurize exactly as the fine-tuning command does (its own Python code is the reference), the
models come from every weight home, `fit` on strings with string labels, and their exports answer
with the user's label names and tags."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

import electra_tf
from electra_tf import checkpoints
from electra_tf.cli import convert
from electra_tf.data.tokenization import FullTokenizer
from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.glue import featurize_pair
from electra_tf.finetuning.tagging import TaggingExample, TaggingTask
from electra_tf.finetuning.user_tagging import UserTaggingTask
from electra_tf.serving import ExportError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(ROOT, "pretrained", "electra-tiny-gutenberg")
VOCAB = os.path.join(SHIPPED, "vocab.txt")
with open(os.path.join(ROOT, "tests", "data", "heldout_sentences.txt"), encoding="utf-8") as f:
    SENTENCES = [line.strip() for line in f if line.strip()]

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
NER = [  # (sentence, its tags): words split on spaces
    ("John Smith lives in Paris", "B-PER I-PER O O B-LOC"),
    ("Mary went to London", "B-PER O O B-LOC"),
    ("Paris is far from John", "B-LOC O O O B-PER"),
    ("Anna Lee visited New York", "B-PER I-PER O B-LOC I-LOC"),
]


def _command_text(tokenizer, a, b, length):
    return featurize_pair(tokenizer, a, b, length)


@pytest.mark.parametrize("length", [128, 12])
def test_text_features_equal_the_commands(length):
    # Single texts and pairs (longest-first truncation at 12), an empty second text (a single
    # text then) and an empty first one, against the command's own featurize_pair.
    tokenizer = FullTokenizer(VOCAB)
    single = electra_tf.ElectraPreprocessor(VOCAB, max_seq_length=length)
    pair = electra_tf.ElectraPreprocessor(VOCAB, max_seq_length=length, pair=True)
    texts_a = SENTENCES[:40] + ["", "Short one."]
    texts_b = SENTENCES[40:80] + ["Only the second.", ""]
    got = single(texts_a)
    expected = [_command_text(tokenizer, a, None, length) for a in texts_a]
    for key in ("input_ids", "input_mask", "segment_ids"):
        assert got[key].shape == (len(texts_a), length)
        assert got[key].numpy().tolist() == [e[key] for e in expected], key
    got = pair((texts_a, texts_b))
    expected = [
        _command_text(tokenizer, a, b, length) for a, b in zip(texts_a, texts_b, strict=True)
    ]
    for key in ("input_ids", "input_mask", "segment_ids"):
        assert got[key].numpy().tolist() == [e[key] for e in expected], key
    # The export's input names, and one example (a dataset element before batching).
    named = pair({"text_a": texts_a[:2], "text_b": texts_b[:2]})
    assert named["input_ids"].numpy().tolist() == [e["input_ids"] for e in expected[:2]]
    one = pair((tf.constant(texts_a[0]), tf.constant(texts_b[0])))
    assert one["input_ids"].numpy().tolist() == expected[0]["input_ids"]


def _command_words(task_class, words, tags, length):
    config = FinetuningConfig(task_names=("chunk",), max_seq_length=length)
    extra = {"description": {}} if task_class is UserTaggingTask else {}
    task = task_class(config, "chunk", FullTokenizer(VOCAB), **extra)
    return task.featurize(TaggingExample(0, "chunk", words, tags), is_training=True)[0]


@pytest.mark.parametrize(
    "length, command",
    [(64, UserTaggingTask), (12, UserTaggingTask), (12, TaggingTask)],
    ids=["64-user-task", "12-user-task", "12-chunk"],
)
def test_word_features_equal_the_commands(length, command):
    # Words of several pieces, punctuation inside a word ("U.S." is 4 tokens, its first
    # labelled), a sentence of more words than the length allows, and the command's labels at
    # the first sub-tokens. A user's data: segment 0, a word kept while its pieces fit (a word
    # of more pieces than the room left ends the sentence). The original's chunking: segment 1,
    # its truncation counting the words left against the ids (at 12, a long sentence keeps
    # fewer words than fit; too many words leave [SEP] alone).
    sentences = [s.split() for s in SENTENCES[:30]] + [
        ["The", "U.S.", "envoy", "met", "Smith-Jones", "in", "Zürich"],
        ["word"] * (length - 2),
        [],
    ]
    if command is UserTaggingTask:  # the original's rule lets such a word overflow: no case
        sentences.append(["a", "Pneumonoultramicroscopicsilicovolcanoconiosis", "b", "c"])
    truncation = "original" if command is TaggingTask else "fit"
    preprocessor = electra_tf.ElectraTaggingPreprocessor(
        VOCAB, length, tags=TAGS, segment_id=command.segment_id, truncation=truncation
    )
    tag_ids = [[(i * 7 + j) % len(TAGS) for j in range(len(w))] for i, w in enumerate(sentences)]
    tags = tf.ragged.constant([[TAGS[t] for t in row] for row in tag_ids], tf.string)
    words = tf.ragged.constant(sentences, tf.string, row_splits_dtype=tf.int64)
    features, targets = preprocessor(words, tags)
    for i, (sentence, ids) in enumerate(zip(sentences, tag_ids, strict=True)):
        expected = _command_words(command, sentence, ids, length)
        for key in ("input_ids", "input_mask", "segment_ids"):
            assert features[key][i].numpy().tolist() == expected[key], (i, key)
        kept = int(sum(expected["chunk_labels_mask"]))
        positions = expected["chunk_labeled_positions"][:kept]
        row = targets[i].numpy()
        assert sorted(np.flatnonzero(row >= 0).tolist()) == sorted(set(positions)), i
        assert [row[p] for p in positions] == expected["chunk_labels"][:kept], i
    # Sentences as strings split on whitespace give the same features.
    joined = preprocessor([" ".join(s) for s in sentences[:30]])
    assert np.array_equal(joined["input_ids"].numpy(), features["input_ids"][:30].numpy())


def test_labels_outside_the_list_fail_naming_them():
    classes = electra_tf.ElectraPreprocessor(VOCAB, 16, labels=["neg", "pos"])
    assert classes(["a", "b"], ["pos", "neg"])[1].numpy().tolist() == [1, 0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="(?s)not one of the labels.*neutral"):
        classes(["a", "b"], ["pos", "neutral"])
    tagging = electra_tf.ElectraTaggingPreprocessor(VOCAB, 16, tags=TAGS)
    with pytest.raises(tf.errors.InvalidArgumentError, match="B-ORG"):
        tagging(["John lives"], ["B-ORG O"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="tags and words differ"):
        tagging(["John lives here"], ["B-PER O"])
    with pytest.raises(ValueError, match="pair=True"):
        classes((["a"], ["b"]))
    with pytest.raises(ValueError, match="more than once"):
        electra_tf.ElectraPreprocessor(VOCAB, 16, labels=["a", "a"])


def _served(path, **inputs):
    signature = tf.saved_model.load(path).signatures["serving_default"]
    return signature(**{k: tf.constant(v) for k, v in inputs.items()})


def test_classifier_fits_string_pairs_and_exports_its_labels(tmp_path):
    keras.utils.set_random_seed(0)
    labels = ["contradiction", "entailment"]
    model = electra_tf.ElectraClassifier.from_pretrained(
        SHIPPED, labels=labels, pair=True, max_seq_length=32
    )
    first, second = SENTENCES[:8], SENTENCES[8:16]
    answers = [labels[i % 2] for i in range(8)]
    train = tf.data.Dataset.from_tensor_slices(((first, second), answers)).batch(4)
    model.compile(optimizer=model.finetuning_optimizer(num_train_steps=4, learning_rate=1e-3))
    history = model.fit(train, epochs=2, verbose=0, validation_data=((first, second), answers))
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(history.history)
    # Lists in, as Keras takes arrays; unlabelled pairs (text_a, text_b) in a dataset.
    model.fit((first, second), answers, batch_size=4, epochs=1, verbose=0)
    predicted = model.predict_labels((first, second))
    unlabelled = tf.data.Dataset.from_tensor_slices((first, second)).batch(8)
    assert model.predict(unlabelled, verbose=0).shape == (8, 2)
    path = electra_tf.save_for_serving(model, str(tmp_path), name="nli")
    with open(os.path.join(path, "assets", "export.json"), encoding="utf-8") as f:
        info = json.load(f)
    assert info["kind"] == "classification" and info["labels"] == labels
    assert info["signatures"]["serving_default"]["inputs"] == ["text_a", "text_b"]
    served = _served(path, text_a=first, text_b=second)
    assert [s.decode() for s in served["label"].numpy()] == predicted
    np.testing.assert_allclose(
        served["logits"].numpy(), model.predict((first, second), verbose=0), atol=1e-4
    )
    # bfloat16: the model's twin computes; the answers in float32 close to the model's.
    half = electra_tf.save_for_serving(model, str(tmp_path), name="nli16", precision="bfloat16")
    probabilities = _served(half, text_a=first, text_b=second)["probabilities"].numpy()
    np.testing.assert_allclose(probabilities, served["probabilities"].numpy(), atol=0.05)


def test_tagger_fits_sentences_and_exports_the_users_tags(tmp_path):
    keras.utils.set_random_seed(0)
    model = electra_tf.ElectraTagger.from_pretrained(SHIPPED, tags=TAGS, max_seq_length=24)
    sentences, tags = [s for s, _ in NER], [t for _, t in NER]
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    train = tf.data.Dataset.from_tensor_slices((sentences, tags)).batch(2)
    history = model.fit(train, epochs=8, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0] / 2
    # Word lists with tag lists (ragged) train the same way.
    model.fit([s.split() for s in sentences], [t.split() for t in tags], batch_size=2, verbose=0)
    predicted = model.predict_tags([s.split() for s in sentences])
    assert [len(p) for p in predicted] == [len(s.split()) for s in sentences]
    assert {tag for row in predicted for tag in row} <= set(TAGS)
    path = electra_tf.save_for_serving(model, str(tmp_path), name="ner")
    served = _served(path, text=sentences)["tag"].numpy()
    assert [[t.decode() for t in row if t] for row in served] == predicted


def test_encoder_from_every_weight_home(tmp_path):
    # The shipped Hugging Face folder converted into each other home, each read back by
    # from_pretrained into the same encoder; a preset needs keras-hub, Model Garden its library.
    homes = {"hf": SHIPPED}
    for fmt, module in [("native", None), ("original", None), ("modelgarden", "official"),
                        ("kerashub", "keras_hub")]:  # fmt: skip
        if module is None or importlib.util.find_spec(module) is not None:
            homes[fmt] = str(tmp_path / fmt)
            args = ["--to", fmt, "--input", SHIPPED, "--output", homes[fmt]]
            assert convert.main([*args, "--discriminator-only"]) == 0, fmt
    reference = electra_tf.ElectraEncoder.from_pretrained(SHIPPED, max_seq_length=16)
    expected = checkpoints.model_weights(reference.encoder)
    texts = SENTENCES[:3]
    outputs = reference(texts)["sequence_output"].numpy()
    for fmt, path in homes.items():
        vocab = None if fmt != "native" or os.path.exists(f"{path}/vocab.txt") else VOCAB
        model = electra_tf.ElectraEncoder.from_pretrained(path, 16, vocab_file=vocab)
        got = checkpoints.model_weights(model.encoder)
        assert got.keys() == expected.keys(), fmt
        assert all(np.array_equal(got[k], expected[k]) for k in expected), fmt
        assert model.preprocessor.do_lower_case, fmt
        np.testing.assert_array_equal(model(texts)["sequence_output"].numpy(), outputs)
    assert set(homes) >= {"hf", "native", "original"}


def test_from_pretrained_refuses_a_wrong_vocabulary_or_length(tmp_path):
    small = tmp_path / "vocab.txt"
    small.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]) + "\n")
    with pytest.raises(checkpoints.CheckpointError, match="6 entries.*15971 embedding rows"):
        electra_tf.ElectraClassifier.from_pretrained(SHIPPED, ["a", "b"], vocab_file=str(small))
    with pytest.raises(checkpoints.CheckpointError, match="max_seq_length 1000"):
        electra_tf.ElectraTagger.from_pretrained(SHIPPED, TAGS, max_seq_length=1000)
    with pytest.raises(ValueError, match="give the labels"):
        electra_tf.ElectraClassifier.from_pretrained(SHIPPED)


def test_classifier_takes_features_without_a_preprocessor():
    # Over an encoder of one's own, ids in: the head named as the command's, integer labels,
    # and raw text refused for want of a preprocessor.
    config = electra_tf.ModelConfig(
        vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=1,
        intermediate_size=32, max_position_embeddings=16, embedding_size=8,
    )  # fmt: skip
    encoder = electra_tf.TransformerEncoder(config, name="electra")
    model = electra_tf.ElectraClassifier(encoder, num_labels=2, task_name="sst")
    assert tuple(model.variable_map()["task_specific/sst/dense/kernel"].shape) == (16, 2)
    ids = np.random.default_rng(0).integers(1, 30, (16, 8)).astype(np.int32)
    x = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(x, (ids[:, 1] > 15).astype(np.int32), batch_size=8, epochs=6, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert model.predict_labels(x) and set(model.predict_labels(x)) <= {"0", "1"}
    with pytest.raises(ValueError, match="need a preprocessor"):
        model.predict(["some text"])
    with pytest.raises(ExportError, match="pass vocab_file and max_seq_length"):
        electra_tf.save_for_serving(model, "unused")
