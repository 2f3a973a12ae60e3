"""A user's named-entity data (CoNLL-2003-style, in IOB1 and in IOB2) fine-tuned, evaluated
and exported by one command each: the dev entity F1 in the results is seqeval's on the same
predictions, and the export answers the tags as the user wrote them. Bad tagging data is one
line naming file:line before anything is written."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401 - the export's tokenizer ops
from helpers_finetune import tiny_encoder
from helpers_user_data import listing

from electra_tf.cli import export, finetune
from electra_tf.finetuning import tag_schemes
from electra_tf.finetuning.task_spec import load_task_file

seqeval_metrics = pytest.importorskip("seqeval.metrics")

PEOPLE, PLACES = ["john", "mary", "smith"], ["paris", "london", "berlin"]
OTHER = ["met", "in", "visited", "the", "and", "saw"]
WORDS = PEOPLE + PLACES + OTHER
TINY = {
    **tiny_encoder(),
    "vocab_size": 5 + len(WORDS),
    "max_seq_length": 20,  # the original's truncation keeps 2n + 4 <= 20: n <= 8 words
    "train_batch_size": 8,
    "eval_batch_size": 8,
    "learning_rate": 1e-2,
    "num_train_epochs": 8,
    "log_every_steps": 100,
    "init_checkpoint": None,
}


def sentences(rng, n: int, scheme: str) -> list[list[tuple[str, str]]]:
    """`n` sentences of people, places and other words, tagged in `scheme`; adjacent
    entities of one type are frequent (IOB1's B- case)."""
    out = []
    for _ in range(n):
        words, entities = [], []
        while len(words) < int(rng.integers(3, 8)):
            kind = rng.choice(["PER", "LOC", "O", "O"])
            if kind == "O":
                words.append(str(rng.choice(OTHER)))
                continue
            size = int(rng.integers(1, 3))
            names = PEOPLE if kind == "PER" else PLACES
            entities.append((str(kind), len(words), len(words) + size - 1))
            words += [str(rng.choice(names)) for _ in range(size)]
        tags = tag_schemes.entities_to_tags(entities, len(words), scheme)
        out.append(list(zip(words, tags, strict=True)))
    return out


def conll(sentences) -> str:
    lines = ["-DOCSTART- -X- -X- O", ""]
    for sentence in sentences:
        lines += [f"{word} NNP B-NP {tag}" for word, tag in sentence] + [""]
    return "\n".join(lines)


def served_tags(model_path: str, texts: list[str]) -> list[list[str]]:
    """The export's tag for each word (its first sub-token's; "" elsewhere)."""
    serve = tf.saved_model.load(model_path).signatures["serving_default"]
    out = serve(text=tf.constant(texts))
    tags = out["tag"].numpy().astype(str)
    return [[t for t in row if t] for row in tags]


def write_task(root, train, dev, files=None) -> str:
    """The vocabulary, `ner/{train,dev}.conll` and `ner/task.json`; the task file's path."""
    (root / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])
    )
    ner = root / "ner"
    ner.mkdir()
    (ner / "train.conll").write_text(conll(train))
    (ner / "dev.conll").write_text(conll(dev))
    for name, text in (files or {}).items():
        (ner / name).write_text(text)
    task = {"kind": "tagging", "train": "train.conll", "dev": "dev.conll"}
    (ner / "task.json").write_text(json.dumps(task))
    return str(ner / "task.json")


def run(root, task_file: str) -> int:
    args = ["--data-dir", str(root), "--model-name", "tiny", "--task-file", task_file]
    return finetune.main([*args, "--hparams", json.dumps(TINY)])


@pytest.mark.parametrize("scheme", ["IOB1", "IOB2"])
def test_ner_finetunes_scores_like_seqeval_and_exports_tags_as_written(tmp_path, scheme):
    rng = np.random.default_rng(5)
    train, dev = sentences(rng, 64, scheme), sentences(rng, 24, scheme)
    train_tags = sorted({t for s in train for _, t in s})
    assert {t for s in dev for _, t in s} <= set(train_tags)
    if scheme == "IOB1":
        assert "B-PER" in train_tags and "I-LOC" in train_tags  # IOB1's both prefixes
    task_file = write_task(tmp_path, train, dev)
    description = load_task_file(task_file)
    assert description["tag_scheme"] == scheme and description["labels"] == train_tags

    assert run(tmp_path, task_file) == 0  # one command: fine-tune and evaluate
    model_dir = tmp_path / "models" / "tiny"
    results = json.loads((model_dir / "results" / "ner_results.json").read_text())
    metrics = results["trials"][0]["ner"]

    # The labels were saved with the model (its task description): the export reads no data.
    (tmp_path / "ner").rename(tmp_path / "ner_moved")
    assert export.main(["--data-dir", str(tmp_path), "--model-name", "tiny", "--task", "ner"]) == 0
    path = str(model_dir / "serving" / "tiny_ner" / "1")
    predicted = served_tags(path, [" ".join(w for w, _ in s) for s in dev])
    gold = [[t for _, t in s] for s in dev]
    assert [len(p) for p in predicted] == [len(g) for g in gold]
    # The export answers the tags as written: IOB1 in, IOB1 out; BIO in, BIO out.
    assert {t for p in predicted for t in p} <= set(train_tags)
    # The dev entity scores written are seqeval's on the model's predictions.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = {
            "precision": seqeval_metrics.precision_score(gold, predicted),
            "recall": seqeval_metrics.recall_score(gold, predicted),
            "f1": seqeval_metrics.f1_score(gold, predicted),
        }
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(100 * value, abs=1e-6), name
    assert metrics["f1"] > 20  # the model learned something: the check is not 0 == 0
    if scheme == "IOB1":  # an entity after O starts with I- in the answers too
        assert any(p[i].startswith("I-") and (i == 0 or p[i - 1] == "O")
                   for p in predicted for i in range(len(p)))  # fmt: skip


def test_chunk_exports_without_its_data_files(tmp_path):
    # The original's chunk task reads its label mapping from the data (the BIOES tags of every
    # split). The trial saves it (`task_state.json`), so the export builds the model's head
    # and names its tags with the data folder gone, and answers what the data-built export does.
    rng = np.random.default_rng(7)
    train, dev = sentences(rng, 32, "IOB2"), sentences(rng, 8, "IOB2")
    write_task(tmp_path, train, dev)  # the vocabulary (and a user task left unused)
    chunk = tmp_path / "finetuning_data" / "chunk"
    chunk.mkdir(parents=True)
    (chunk / "train.txt").write_text(conll(train))
    (chunk / "dev.txt").write_text(conll(dev))
    hparams = json.dumps({**TINY, "num_train_epochs": 1})
    args = ["--data-dir", str(tmp_path), "--model-name", "tiny"]
    assert finetune.main([*args, "--tasks", "chunk", "--hparams", hparams]) == 0
    trial = tmp_path / "models" / "tiny" / "finetuning_models" / "chunk_model_1"
    saved = json.loads((trial / "task_state.json").read_text())["chunk"]["label_mapping"]
    assert "B-PER" in saved and "S-LOC" in saved  # BIOES: what the head's ids mean
    texts = [" ".join(w for w, _ in s) for s in dev]
    serving = tmp_path / "models" / "tiny" / "serving" / "tiny_chunk"
    assert export.main([*args, "--task", "chunk"]) == 0
    with_data = served_tags(str(serving / "1"), texts)
    chunk.rename(tmp_path / "chunk_moved")
    assert export.main([*args, "--task", "chunk"]) == 0  # a new version, from no data
    assert served_tags(str(serving / "2"), texts) == with_data
    assert [len(p) for p in with_data] == [len(s) for s in dev]
    assert {t for p in with_data for t in p} <= {t for s in train for _, t in s}  # IOB2


def _unseen_dev_tag(root):
    dev = root / "ner" / "dev.conll"
    dev.write_text(dev.read_text() + "\njohn NNP B-NP B-ORG\n")
    return r"dev\.conll:\d+: tag 'B-ORG' is not in the train file's tags"


def _malformed_tag(root):
    dev = root / "ner" / "dev.conll"
    dev.write_text(dev.read_text() + "\njohn NNP B-NP PER\n")
    return r"dev\.conll:\d+: tag 'PER' is not O or B-/I-/E-/S- followed by a type"


def _line_without_tag(root):
    dev = root / "ner" / "dev.conll"
    dev.write_text(dev.read_text() + "\njohn\n")
    return r"dev\.conll:\d+: expected 'word \.\.\. tag'"


def _sentence_less_dev(root):
    (root / "ner" / "dev.conll").write_text("-DOCSTART- -X- -X- O\n\n")
    return r"dev\.conll: no tagged sentence"


def _jsonl_lengths_differ(root):
    task_file = root / "ner" / "task.json"
    task = {**json.loads(task_file.read_text()), "dev": "dev.jsonl", "text": "tokens"}
    task_file.write_text(json.dumps({**task, "label": "tags"}))
    (root / "ner" / "dev.jsonl").write_text('{"tokens": ["john", "met"], "tags": ["B-PER"]}\n')
    return r"dev\.jsonl:1: 2 tokens but 1 tags"


BAD = {
    "a dev tag unseen in train": _unseen_dev_tag,
    "a malformed tag": _malformed_tag,
    "a line without a tag": _line_without_tag,
    "a file without a sentence": _sentence_less_dev,
    "a JSONL line whose tokens and tags differ in length": _jsonl_lengths_differ,
}


@pytest.mark.parametrize("case", BAD)
def test_bad_tagging_data_is_one_line_before_anything_is_written(tmp_path, capsys, case):
    rng = np.random.default_rng(1)
    task_file = write_task(tmp_path, sentences(rng, 8, "IOB2"), [[("john", "B-PER")]])
    if case == "a JSONL line whose tokens and tags differ in length":
        # The train file as JSONL too: the task's format follows its files.
        lines = [json.dumps({"tokens": [w for w, _ in s], "tags": [t for _, t in s]})
                 for s in sentences(rng, 8, "IOB2")]  # fmt: skip
        (tmp_path / "ner" / "train.jsonl").write_text("\n".join(lines) + "\n")
        task = json.loads((tmp_path / "ner" / "task.json").read_text())
        (tmp_path / "ner" / "task.json").write_text(json.dumps({**task, "train": "train.jsonl"}))
    message = BAD[case](tmp_path)
    before = listing(tmp_path)
    code = run(tmp_path, task_file)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert re.search(message, err[0]) and ";" in err[0], (message, err)  # the fix after ";"
    assert listing(tmp_path) == before  # no lock, no model folder, no TFRecord
