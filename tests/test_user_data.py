"""A user's data files: the CSV / TSV / JSONL readers (rows by column name, the line each record
starts on), the task file and its completion (label set, label range), the user tasks'
examples and features, macro F1 against scikit-learn."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from helpers_user_data import csv_text, make_user_data, next_line, readme_task_file

from electra_tf.config import ConfigError
from electra_tf.finetuning import readers, scorers, task_spec
from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.glue import featurize_pair
from electra_tf.finetuning.registry import get_task
from electra_tf.finetuning.task import DataError


def test_csv_rows_keep_quoted_commas_line_breaks_and_quotes_with_their_start_line(tmp_path):
    rows = [["sentence", "label"], ["a, b", "x"], ["one\ntwo\nthree", "y"], ['say "hi"', "x"]]
    path = tmp_path / "t.csv"
    path.write_text(csv_text(rows) + "\r\n", encoding="utf-8")  # a trailing blank line
    got = readers.read_rows(str(path), "csv", ["sentence", "label"])
    # The BOM is not in the first column's name; CRLF is not in the last field.
    assert [r.values for r in got] == [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]
    # Line 3's record spans lines 3-5, so the next starts on line 6.
    assert [r.line for r in got] == [2, 3, 6]


def test_tsv_quoting_none_reads_quotes_as_text(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text('sentence\tlabel\n"quoted" start\t1\nit"s\t0\n', encoding="utf-8")
    got = readers.read_rows(str(path), "tsv", ["sentence"], quoting="none")
    assert [r.values["sentence"] for r in got] == ['"quoted" start', 'it"s']
    with pytest.raises(DataError, match=r"t\.tsv:2: unreadable record"):
        readers.read_rows(str(path), "tsv", ["sentence"])  # csv's quoting: a stray quote


@pytest.mark.parametrize(
    "text, columns, message",
    [
        ("a,b\n1,2\n", ["text"], r"x\.csv:1: no column 'text'; the header has a, b"),
        ("a,b\n1,2\n3,4,5\n", [], r"x\.csv:3: 3 comma-separated fields, the header has 2"),
        ('a,b\n1,2\n"open,3\n', [], r"x\.csv:3: unreadable record"),
        ("a,a\n1,2\n", [], r"x\.csv:1: column 'a' twice"),
        ("", [], r"x\.csv: empty file"),
    ],
)
def test_csv_errors_name_file_line_and_fix(tmp_path, text, columns, message):
    path = tmp_path / "x.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        readers.read_rows(str(path), "csv", columns)


def test_invalid_utf8_names_its_line(tmp_path):
    path = tmp_path / "x.csv"
    path.write_bytes(b"a,b\n1,2\n\xff\xfe,3\n")
    with pytest.raises(DataError, match=r"x\.csv:3: not UTF-8"):
        readers.read_rows(str(path), "csv")
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "\xc3"}\n')
    with pytest.raises(DataError, match=r"x\.jsonl:2: not UTF-8"):
        readers.read_rows(str(path), "jsonl")


@pytest.mark.parametrize(
    "line, message",
    [
        ('["a", "b"]', r"x\.jsonl:3: a JSON list, not an object"),
        ('{"text": "a",', r"x\.jsonl:3: not JSON"),
        ('{"txt": "a"}', r"x\.jsonl:3: no key 'text' \(this line has txt\)"),
    ],
)
def test_jsonl_errors_name_file_line_and_fix(tmp_path, line, message):
    path = tmp_path / "x.jsonl"
    path.write_text('\ufeff{"text": "a"}\n\n' + line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=message):
        readers.read_rows(str(path), "jsonl", ["text"])


def test_label_column_mixing_numbers_and_names_names_the_odd_line(tmp_path):
    rows = [readers.Row(i + 2, {"y": y}) for i, y in enumerate(["pos", "neg", "1", "pos"])]
    with pytest.raises(DataError, match=r"f:4: label '1' in 'y' mixes numbers and names"):
        readers.label_texts("f", rows, "y")
    numbers = [readers.Row(2, {"y": 1}), readers.Row(3, {"y": "2"})]  # JSON and text numbers
    assert readers.label_texts("f", numbers, "y") == [(2, "1"), (3, "2")]


def test_task_file_is_completed_from_the_train_file(tmp_path):
    files = make_user_data(tmp_path)
    desc = task_spec.load_task_file(files["reviews"])
    assert desc["labels"] == ["negative", "positive"]  # sorted, from train.csv
    assert desc["format"] == "csv" and desc["train"] == str(tmp_path / "reviews" / "train.csv")
    assert desc == task_spec.complete_description(desc)  # complete: unchanged when re-read
    scores = task_spec.load_task_file(files["scores"])
    assert scores["name"] == "scores"  # finetuning_data/scores/task.json
    values = [json.loads(x)["score"] for x in open(scores["train"], encoding="utf-8")]
    assert scores["label_range"] == [min(values), max(values)]


def test_labels_given_keep_their_order_and_numbers_sort_by_value(tmp_path):
    (tmp_path / "t.csv").write_text("text,label\na,10\nb,9\nc,2\n", encoding="utf-8")
    spec = {"name": "t", "kind": "classification", "train": "t.csv"}
    assert task_spec.complete_description(spec, str(tmp_path))["labels"] == ["2", "9", "10"]
    given = {**spec, "labels": ["10", "2", "9", "11"]}
    assert task_spec.complete_description(given, str(tmp_path))["labels"] == given["labels"]
    with pytest.raises(DataError, match=r"t\.csv:3: label '9' is not in the task file's"):
        task_spec.complete_description({**spec, "labels": ["10", "2"]}, str(tmp_path))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"lables": ["a"]}, r'unknown key "lables"; did you mean "labels"\?'),
        ({"kind": "classify"}, r'"kind": \'classify\' is not one of classification'),
        ({"train": "nope.csv"}, r'"train": .*nope\.csv not found'),
        ({"name": "My Task"}, r'"name": \'My Task\'; use lower-case'),
        ({"label_range": [0, 1]}, r'"label_range" is for "kind": "regression" only'),
        ({"format": "conll"}, r'"format": "conll" is for "kind": "tagging"'),
        ({"dev": "d.tsv"}, r"the files' extensions name formats"),
    ],
)
def test_task_file_errors_name_the_file_and_key(tmp_path, change, message):
    (tmp_path / "t.csv").write_text("text,label\na,x\n", encoding="utf-8")
    (tmp_path / "d.tsv").write_text("text\tlabel\na\tx\n", encoding="utf-8")
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"kind": "classification", "train": "t.csv", **change}))
    with pytest.raises(ConfigError, match=rf"mine\.json: {message}"):
        task_spec.load_task_file(str(path))


def test_user_tasks_featurize_as_glue_and_scale_regression_targets(tmp_path):
    from electra_tf.data.tokenization import FullTokenizer

    files = make_user_data(tmp_path)
    user_tasks = {n: task_spec.load_task_file(files[n]) for n in ("reviews", "pairs", "scores")}
    config = FinetuningConfig(
        task_names=tuple(user_tasks), user_tasks=user_tasks, max_seq_length=16
    )
    tokenizer = FullTokenizer(str(tmp_path / "vocab.txt"))
    pairs = get_task("pairs", config, tokenizer)
    example = pairs.get_examples("dev")[0]
    features = pairs.featurize(example, is_training=False)[0]
    expected = featurize_pair(tokenizer, example.text_a, example.text_b, 16)
    assert {k: features[k] for k in expected} == expected
    assert pairs.serving_options() == {"pair": True, "label_names": ["contradiction", "entailment"]}
    assert pairs.get_test_splits() == ["test"] and pairs.kind == "classification"
    scores = get_task("scores", config, tokenizer)
    low, high = user_tasks["scores"]["label_range"]
    for example in scores.get_examples("train"):
        target = scores.featurize(example, True)[0]["scores_targets"]
        assert target == pytest.approx((example.label - low) / (high - low))
    options = scores.serving_options()
    assert options["score_scale"] == pytest.approx(high - low) and options["score_offset"] == low
    assert scores.get_test_splits() == [] and scores.kind == "regression"
    assert scores.featurization_key() == user_tasks["scores"]


def test_readme_task_file_is_the_tests_csv_task():
    spec = readme_task_file()
    assert spec["train"].endswith(".csv") and spec["kind"] == "classification"
    task_spec.check_keys(spec, "README.md")


def test_macro_f1_matches_sklearn():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    for n_classes in (2, 3, 7):
        labels = rng.integers(0, n_classes, 50)
        preds = np.where(rng.random(50) < 0.6, labels, rng.integers(0, n_classes, 50))
        expected = f1_score(labels, preds, average="macro")
        assert scorers.macro_f1(labels, preds) == pytest.approx(expected)
    # A class predicted but absent from the labels counts, as scikit-learn counts it.
    assert scorers.macro_f1([0, 0, 1], [0, 2, 1]) == pytest.approx(
        f1_score([0, 0, 1], [0, 2, 1], average="macro", zero_division=0)
    )
    scorer = scorers.AccuracyF1Scorer()
    for y, p in [(0, 0), (1, 0), (1, 1), (2, 2)]:
        scorer.update({"loss": 0.5, "label_ids": y, "predictions": p})
    results = dict(scorer.get_results())
    assert results["accuracy"] == 75.0
    assert results["macro_f1"] == pytest.approx(
        100 * f1_score([0, 1, 1, 2], [0, 0, 1, 2], average="macro")
    )


def test_csv_reader_agrees_with_csv_module_on_random_fields(tmp_path):
    # Random fields with the characters quoting exists for, written by the csv module.
    rng = np.random.default_rng(1)
    alphabet = list('ab ,"\n\t;')
    rows = [["x", "y"]] + [
        ["".join(rng.choice(alphabet, rng.integers(1, 8))), str(i)] for i in range(40)
    ]
    text = csv_text(rows)
    (tmp_path / "r.csv").write_text(text, encoding="utf-8")
    got = readers.read_rows(str(tmp_path / "r.csv"), "csv", ["x", "y"])
    assert [[r.values["x"], r.values["y"]] for r in got] == rows[1:]
    # Each record's start line: one past the line breaks written before it.
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    starts = []
    for row in rows:
        starts.append(next_line(buffer.getvalue()))
        writer.writerow(row)
    assert [r.line for r in got] == starts[1:]
