"""One's own data, one command each: a CSV of sentences and a sentence-pair JSONL fine-tuned,
evaluated and exported, the export answering with the user's label names; two task files (and
a task folder) as one multi-task run; every bad file refused before anything is written."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import tensorflow as tf
from helpers_user_data import TINY, csv_text, listing, make_user_data, next_line

from electra_tf.cli import export, finetune


def run(data_dir, *args, hparams=None) -> int:
    argv = ["--data-dir", str(data_dir), "--model-name", "tiny", *args]
    return finetune.main([*argv, "--hparams", json.dumps({**TINY, **(hparams or {})})])


def exported_answers(data_dir, task: str, **inputs) -> list[str]:
    """`make export TASK=<task>` of the fine-tuned model, then its answers to `inputs`."""
    import tensorflow_text  # noqa: F401 - the export's tokenizer ops

    assert export.main(["--data-dir", str(data_dir), "--model-name", "tiny", "--task", task]) == 0
    path = data_dir / "models" / "tiny" / "serving" / f"tiny_{task}" / "1"
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    out = serve(**{k: tf.constant(v) for k, v in inputs.items()})
    return [x.decode("utf-8") for x in out["label"].numpy()]


def test_predictions(data_dir, task: str) -> tuple[list[str], list[str]]:
    """(the indices, the labels) of the run's test predictions file."""
    path = data_dir / "models" / "tiny" / "test_predictions" / f"{task}_test_1.tsv"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "index\tprediction"
    rows = [line.split("\t") for line in lines[1:]]
    return [r[0] for r in rows], [r[1] for r in rows]


test_predictions.__test__ = False  # a helper, not a test


@pytest.fixture(scope="module")
def user_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    return root, make_user_data(root)


def test_csv_task_fine_tunes_evaluates_and_exports_its_labels(user_data):
    root, files = user_data
    assert run(root, "--task-file", files["reviews"], hparams={"write_test_outputs": True}) == 0
    results = json.loads((root / "models/tiny/results/reviews_results.json").read_text())
    metrics = results["trials"][0]["reviews"]
    assert set(metrics) == {"accuracy", "macro_f1", "loss"}
    # 8 dev examples: accuracy is a multiple of 100/8.
    assert metrics["accuracy"] * 8 / 100 == pytest.approx(round(metrics["accuracy"] * 8 / 100))
    saved = json.loads(
        (root / "models/tiny/finetuning_models/reviews_model_1/finetuning_config.json").read_text()
    )
    assert saved["user_tasks"]["reviews"]["labels"] == ["negative", "positive"]
    index, predicted = test_predictions(root, "reviews")
    assert index == ["0", "1", "2"] and set(predicted) <= {"negative", "positive"}
    # The export answers with the label names, as the run's own test predictions (the graph's
    # tokenizer on the test file's texts, line break included).
    texts = ["the good, fun movie", "the awful\nboring plot", "a bad film"]
    assert exported_answers(root, "reviews", text=texts) == predicted


def test_pair_jsonl_task_exports_a_two_string_signature(user_data):
    root, files = user_data
    assert run(root, "--task-file", files["pairs"], hparams={"write_test_outputs": True}) == 0
    results = json.loads((root / "models/tiny/results/pairs_results.json").read_text())
    assert "macro_f1" in results["trials"][0]["pairs"]
    _, predicted = test_predictions(root, "pairs")
    answers = exported_answers(root, "pairs", text_a=["the cat sat ."], text_b=["a dog sat"])
    assert answers == predicted and answers[0] in ("contradiction", "entailment")


def test_two_task_files_and_a_task_folder_run_as_one_multi_task_run(user_data):
    root, files = user_data
    # `--tasks scores` reads finetuning_data/scores/task.json; the task file adds reviews.
    assert run(root, "--tasks", "scores", "--task-file", files["reviews"]) == 0
    results = json.loads((root / "models/tiny/results/scores,reviews_results.json").read_text())
    trial = results["trials"][0]
    assert {"pearson", "spearman"} <= set(trial["scores"])
    assert {"accuracy", "macro_f1"} <= set(trial["reviews"])
    assert set(results["config"]["user_tasks"]) == {"scores", "reviews"}


# ------------------------------------------------------------------ bad data: one line, exit 2
def _append(path, text):
    with open(path, "a", encoding="utf-8", newline="") as f:
        f.write(text)


def _csv_line(path) -> int:
    return next_line(path.read_text(encoding="utf-8-sig"))


def _bad_missing_column(root):
    path = root / "reviews" / "train.csv"
    path.write_text(csv_text([["text", "label"], ["the film", "positive"]]), encoding="utf-8")
    return r"train\.csv:1: no column 'sentence'; the header has text, label"


def _bad_empty_text(root):
    path = root / "reviews" / "dev.csv"
    line = _csv_line(path)
    _append(path, '"  ",positive\r\n')
    return rf"dev\.csv:{line}: empty text in 'sentence'"


def _bad_dev_label(root):
    path = root / "reviews" / "dev.csv"
    line = _csv_line(path)
    _append(path, "the film,neutral\r\n")
    return rf"dev\.csv:{line}: label 'neutral' is not among the train file's labels"


def _bad_mixed_labels(root):
    path = root / "reviews" / "train.csv"
    line = _csv_line(path)
    _append(path, "the film,1\r\n")
    return rf"train\.csv:{line}: label '1' in 'label' mixes numbers and names"


def _bad_field_count(root):
    path = root / "reviews" / "dev.csv"
    line = _csv_line(path)
    _append(path, "the film, a cat,positive\r\n")  # the comma not quoted
    return rf"dev\.csv:{line}: 3 comma-separated fields, the header has 2"


def _bad_jsonl_line(root):
    path = root / "pairs" / "dev.jsonl"
    line = len(path.read_text().splitlines()) + 1
    _append(path, '["the cat", "a dog", "entailment"]\n')
    return rf"dev\.jsonl:{line}: a JSON list, not an object"


def _bad_regression_label(root):
    path = root / "finetuning_data" / "scores" / "dev.jsonl"
    line = len(path.read_text().splitlines()) + 1
    _append(path, '{"text": "the film", "score": "high"}\n')
    return rf"dev\.jsonl:{line}: label 'high' in 'score' is not a number"


def _bad_utf8(root):
    path = root / "reviews" / "test.csv"
    line = _csv_line(path)
    with open(path, "ab") as f:
        f.write(b"the \xff film\r\n")
    return rf"test\.csv:{line}: not UTF-8"


def _bad_header_only_dev(root):
    path = root / "reviews" / "dev.csv"
    path.write_text(csv_text([["sentence", "label"]]), encoding="utf-8")
    return r"dev\.csv: no examples \(only a header row"


BAD = {
    "missing column": _bad_missing_column,
    "empty text": _bad_empty_text,
    "dev label not in train": _bad_dev_label,
    "labels mixing numbers and names": _bad_mixed_labels,
    "CSV row with the wrong field count": _bad_field_count,
    "JSONL line not an object": _bad_jsonl_line,
    "regression label not a number": _bad_regression_label,
    "test file not UTF-8": _bad_utf8,
    "header-only dev file": _bad_header_only_dev,
}


@pytest.mark.parametrize("case", BAD)
def test_bad_data_is_one_line_before_anything_is_written(tmp_path, capsys, case):
    files = make_user_data(tmp_path)
    message = BAD[case](tmp_path)
    before = listing(tmp_path)
    code = run(
        tmp_path,
        "--tasks", "scores",
        "--task-file", files["reviews"],
        "--task-file", files["pairs"],
        hparams={"write_test_outputs": True},
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert any(c in err[0] for c in (";", "needs")), err  # the fix
    assert re.search(message, err[0]), (message, err)
    assert listing(tmp_path) == before  # no lock, no model folder, no TFRecord


def test_builtin_header_only_dev_tsv_is_reported_before_training(tmp_path, capsys):
    make_user_data(tmp_path)
    sst = tmp_path / "finetuning_data" / "sst"
    sst.mkdir(parents=True)
    (sst / "train.tsv").write_text("sentence\tlabel\nthe good film\t1\nthe bad film\t0\n")
    (sst / "dev.tsv").write_text("sentence\tlabel\n")
    before = listing(tmp_path)
    assert run(tmp_path, "--tasks", "sst") == 2
    err = capsys.readouterr().err
    assert "dev.tsv: no examples (only a header row)" in err
    assert listing(tmp_path) == before
    shutil.rmtree(sst)
