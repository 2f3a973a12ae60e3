"""The shipped model (pretrained/electra-tiny-gutenberg): it loads, its config matches its
weights, its discriminator finds replaced words in text it never saw, and fine-tuning and export
start from it with the one documented flag."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import ElectraDiscriminator, FullTokenizer, load_weights, read_weights
from electra_tf.modeling.discriminator import dummy_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.environ.get(
    "ELECTRA_PRETRAINED_DIR", os.path.join(ROOT, "pretrained", "electra-tiny-gutenberg")
)
# 100 sentences of a book held out of pre-training (The War of the Worlds, public domain).
SENTENCES = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "data", "heldout_sentences.txt"
)
# Measured on the shipped model over these 100 sentences and swap draws 0-2 (MODEL_CARD.md):
# mean replaced-token probability at the swapped word minus that at untouched words 0.022-0.041;
# the swapped word scored above the original word at the same place in 74-79 of 100 sentences
# (chance: 50, so 65 is three standard deviations above it).
MIN_GAP = 0.01
MIN_PAIRED_WINS = 65


@pytest.fixture(scope="module")
def shipped():
    source = read_weights(SHIPPED)
    model = ElectraDiscriminator(source.config.discriminator_config())
    model(dummy_inputs())
    result = load_weights(model, SHIPPED)
    tokenizer = FullTokenizer(os.path.join(SHIPPED, "vocab.txt"))
    return source, model, result, tokenizer


def test_loads_whole_and_config_matches_weights(shipped):
    source, model, result, tokenizer = shipped
    assert source.fmt == "hf"
    assert not result.unused and not result.fresh  # every weight has its place, and no more
    with open(os.path.join(SHIPPED, "config.json"), encoding="utf-8") as f:
        recorded = json.load(f)
    disc = source.config.discriminator_config()
    overrides = recorded["model_hparam_overrides"]
    assert (disc.hidden_size, disc.num_hidden_layers) == (
        overrides["hidden_size"],
        overrides["num_hidden_layers"],
    )
    assert disc.embedding_size == recorded["embedding_size"]
    assert disc.vocab_size == recorded["vocab_size"] == len(tokenizer.vocab)
    table = model.variable_map()["electra/embeddings/word_embeddings"]
    assert table.shape == (recorded["vocab_size"], recorded["embedding_size"])
    size = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(SHIPPED) for f in files
    )
    assert size <= 16 * 2**20


def _swap_one_word(tokenizer, sentences, rng):
    """Per sentence: ids with one single-piece word replaced by a random whole word of the
    vocabulary, and the swapped position (counting [CLS])."""
    words = [i for t, i in tokenizer.vocab.items() if t.isalpha() and not t.startswith("[")]
    cases = []
    for sentence in sentences:
        tokens = tokenizer.tokenize(sentence)
        single = [
            k
            for k, t in enumerate(tokens)
            if t.isalpha() and (k + 1 == len(tokens) or not tokens[k + 1].startswith("##"))
        ]
        k = int(rng.choice(single))
        ids = tokenizer.convert_tokens_to_ids(tokens)
        replacement = ids[k]
        while replacement == ids[k]:
            replacement = int(rng.choice(words))
        ids[k] = replacement
        cases.append((ids, k + 1))
    return cases


def replaced_probabilities(model, tokenizer, cases, length=64):
    """(probability at each swapped position, mean probability at the untouched ones)."""
    cls, sep = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    ids = np.zeros([len(cases), length], np.int32)
    mask = np.zeros_like(ids)
    for row, (pieces, _) in enumerate(cases):
        seq = [cls, *pieces[: length - 2], sep]
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    inputs = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    probs = tf.sigmoid(model(inputs)["logits"]).numpy()  # [batch, length]
    swapped, untouched = [], []
    for row, (pieces, position) in enumerate(cases):
        real = range(1, min(len(pieces), length - 2) + 1)  # no [CLS], [SEP] or padding
        swapped.append(probs[row, position])
        untouched.extend(probs[row, p] for p in real if p != position)
    return np.array(swapped), float(np.mean(untouched))


def test_discriminator_finds_swapped_words_in_unseen_text(shipped):
    _, model, _, tokenizer = shipped
    with open(SENTENCES, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    assert len(sentences) == 100
    cases = _swap_one_word(tokenizer, sentences, np.random.default_rng(0))
    swapped, untouched = replaced_probabilities(model, tokenizer, cases)
    print(f"mean replaced probability: swapped {swapped.mean():.3f}, untouched {untouched:.3f}")
    assert swapped.mean() - untouched > MIN_GAP
    # The same sentences unchanged: the original word at each swapped place looks less replaced.
    original = [
        (tokenizer.convert_tokens_to_ids(tokenizer.tokenize(s)), p)
        for s, (_, p) in zip(sentences, cases, strict=True)
    ]
    at_same_place, _ = replaced_probabilities(model, tokenizer, original)
    assert swapped.mean() - at_same_place.mean() > MIN_GAP
    assert int(np.sum(swapped > at_same_place)) >= MIN_PAIRED_WINS


def test_finetune_and_export_start_from_it(tmp_path):
    from electra_tf.cli import export, finetune

    sst = tmp_path / "finetuning_data" / "sst"
    sst.mkdir(parents=True)
    rows = ["sentence\tlabel"] + [
        f"{w} story .\t{y}" for w, y in [("a fine", 1), ("a dull", 0)] * 8
    ]
    (sst / "train.tsv").write_text("\n".join(rows) + "\n")
    (sst / "dev.tsv").write_text("\n".join(rows[:5]) + "\n")
    hparams = {"max_seq_length": 16, "num_train_epochs": 1, "train_batch_size": 8}
    argv = ["--data-dir", str(tmp_path), "--model-name", "tiny", "--tasks", "sst"]
    assert finetune.main([*argv, "--hparams", json.dumps(hparams), "--pretrained", SHIPPED]) == 0
    results = json.loads(
        (tmp_path / "models" / "tiny" / "results" / "sst_results.json").read_text()
    )
    assert 0 <= results["median"]["sst"]["accuracy"] <= 100
    out = tmp_path / "serving"
    argv = ["--data-dir", str(tmp_path), "--model-name", "tiny", "--output-dir", str(out)]
    assert export.main([*argv, "--kind", "discriminator", "--pretrained", SHIPPED]) == 0
    loaded = tf.saved_model.load(str(out / "tiny_discriminator" / "1"))
    assert loaded.signatures  # a raw-text SavedModel answered by TF Serving
    # The fine-tuned classifier exports too, with the shipped vocabulary.
    assert export.main([*argv, "--task", "sst"]) == 0
    classifier = tf.saved_model.load(str(out / "tiny_sst" / "1"))
    vocab = (out / "tiny_sst" / "1" / "assets" / "vocab.txt").read_text(encoding="utf-8")
    with open(os.path.join(SHIPPED, "vocab.txt"), encoding="utf-8") as f:
        assert vocab == f.read()
    assert classifier.signatures
