"""Tasks are plugins: the task table's kinds, each task's serving options and its own part of
the TFRecord cache key, test splits by exact name, and docs/configuration.md's "Adding a task"
example run as written (a registered toy task fine-tunes, evaluates and exports)."""

from __future__ import annotations

import json
import os
import re
import runpy
import sys

import numpy as np
import pytest
from helpers_finetune import tiny_encoder

from electra_tf.finetuning import task_table
from electra_tf.finetuning.config import FinetuningConfig, finetuning_config, is_qa_task
from electra_tf.finetuning.glue import SST
from electra_tf.finetuning.preprocessing import Preprocessor
from electra_tf.finetuning.registry import get_task, make_tokenizer
from electra_tf.finetuning.task import Task
from electra_tf.serving.kinds import _task_module
from electra_tf.serving.module import KINDS
from electra_tf.serving.saved_model import ExportError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "the a good bad movie film great awful fun boring plot is cat dog sat on mat .".split()
CHUNK = "the DT B-NP\ncat NN I-NP\nsat VBD B-VP\n\non IN B-PP\na DT B-NP\nmat NN I-NP\n"


@pytest.fixture
def data_dir(tmp_path):
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n"
    )
    return tmp_path


def _write(data_dir, task: str, files: dict[str, str]) -> None:
    folder = data_dir / "finetuning_data" / task
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")


def _config(data_dir, tasks: str, **hparams) -> FinetuningConfig:
    return finetuning_config("m", str(data_dir), {"init_checkpoint": None, **hparams}, tasks)


# ------------------------------------------------------------------------ kinds and serving
def test_every_table_task_is_built_as_its_kind_and_served_as_one(data_dir):
    _write(data_dir, "chunk", {"train.txt": CHUNK})
    assert set(task_table.TASK_KINDS) <= set(KINDS)  # every table kind has an export
    config = _config(data_dir, ",".join(task_table.BUILT_IN_TASKS))
    tokenizer = make_tokenizer(config)
    kinds = {}
    for name in task_table.BUILT_IN_TASKS:
        kinds[name] = get_task(name, config, tokenizer).kind
        assert kinds[name] == task_table.find_task_type(name).kind, name
    assert set(kinds.values()) == set(task_table.TASK_KINDS)  # each kind reached


def test_serving_options_of_each_built_in_kind(data_dir):
    _write(data_dir, "chunk", {"train.txt": CHUNK})
    config = _config(data_dir, "sst,mrpc,mnli,sts,squad,chunk", max_query_length=5)
    tokenizer = make_tokenizer(config)

    def options(name):
        return get_task(name, config, tokenizer).serving_options()

    assert options("sst") == {"pair": False, "label_names": ["0", "1"]}
    assert options("mrpc") == {"pair": True, "label_names": ["0", "1"]}
    assert options("mnli") == {
        "pair": True,
        "label_names": ["contradiction", "entailment", "neutral"],
    }
    # STS targets are label / 5: the export multiplies back.
    assert options("sts") == {"pair": True, "score_scale": 5.0, "score_offset": 0.0}
    assert options("squad") == {
        "pair": True,
        "truncation": "first_fixed",
        "max_first_length": 5,
        "max_answer_length": 30,
    }
    # chunk: label ids are the sorted BIOES tags (B-NP E-NP S-PP S-VP), served in the files'
    # IOB2 (E- as I-, S- as B-); segment id 1 on a single text, as the original trained it.
    assert options("chunk") == {
        "label_names": ["B-NP", "I-NP", "B-PP", "B-VP"],
        "single_segment_id": 1,
    }


def _served(task, tasks=None):
    """(kind, the ServingModule's keyword arguments, the featurizer) `_task_module` builds
    for `task`, with the module captured instead of traced."""
    captured = {}

    def module(predict, model, featurizer, tokens, kind, **kwargs):
        captured.update(kind=kind, kwargs=kwargs, featurizer=featurizer)

    _task_module(None, task, tasks or [task], None, {"[CLS]": 2, "[SEP]": 3}, [], 16, module)
    return captured["kind"], captured["kwargs"], captured["featurizer"]


def test_the_export_serves_a_task_by_its_kind_and_options_only(data_dir):
    _write(data_dir, "chunk", {"train.txt": CHUNK})
    config = _config(data_dir, "sst,mrpc,sts,squad,chunk", max_query_length=5)
    tokenizer = make_tokenizer(config)
    for name in config.task_names:
        task = get_task(name, config, tokenizer)
        kind, kwargs, featurizer = _served(task)
        options = task.serving_options()
        assert kind == task.kind and kwargs == {k: v for k, v in options.items() if k in kwargs}
        assert featurizer.single_segment_id == options.get("single_segment_id", 0), name
        assert featurizer.truncation == options.get("truncation", "longest_first"), name
        assert featurizer.max_first_length == options.get("max_first_length"), name

    class Scores(Task):  # a task of no built-in class: the export needs only kind and options
        kind = "regression"
        get_examples = featurize = feature_specs = make_head = get_scorer = lambda *a: None
        write_test_predictions = lambda *a: None  # noqa: E731

        def serving_options(self):
            return {"pair": True, "score_scale": 2.0, "score_offset": -1.0}

    kind, kwargs, _ = _served(Scores(config, "scores", tokenizer))
    assert (kind, kwargs) == (
        "regression",
        {"pair": True, "score_scale": 2.0, "score_offset": -1.0},
    )


def test_a_task_the_export_cannot_serve_is_one_export_error(data_dir):
    config = _config(data_dir, "squad", joint_prediction=False)
    squad = get_task("squad", config, make_tokenizer(config))
    with pytest.raises(ExportError, match="squad: serving supports the joint-prediction"):
        _task_module(None, squad, [squad], None, {}, [], 16)

    class Odd(SST):
        def serving_options(self):
            return {"pair": False, "colour": "red"}

    odd = Odd(config, "sst", None)
    with pytest.raises(ExportError, match=r"serving_options\(\) \['colour'\]"):
        _task_module(None, odd, [odd], None, {}, [], 16)


@pytest.fixture
def registered():
    names = []

    def register(task_type):
        names.append(task_type.name)
        return task_table.register_task(task_type)

    yield register
    for name in names:
        task_table.unregister_task(name)


def test_a_registered_class_of_another_kind_is_refused(data_dir, registered):
    registered(task_table.TaskType("sentiment_score", SST, "regression"))
    config = _config(data_dir, "sentiment_score")
    with pytest.raises(TypeError, match="kind 'classification', but the task table says"):
        get_task("sentiment_score", config, make_tokenizer(config))


def test_configs_hash_with_dict_fields():
    assert hash(FinetuningConfig()) == hash(FinetuningConfig())
    description = {"name": "reviews", "kind": "classification", "labels": ["neg", "pos"]}
    one = FinetuningConfig(task_names=("reviews",), user_tasks={"reviews": description})
    same = FinetuningConfig(task_names=("reviews",), user_tasks={"reviews": dict(description)})
    other = FinetuningConfig(
        task_names=("reviews",), user_tasks={"reviews": {**description, "labels": ["a", "b"]}}
    )
    assert hash(one) == hash(same) and one == same
    assert {one, same, other} == {one, other}


def test_qa_tasks_are_the_tables_not_any_name_with_qa():
    assert is_qa_task("squad") and is_qa_task("triviaqa") and is_qa_task("squadv1")
    assert not is_qa_task("faq_intent") and not is_qa_task("squad_sentiment")
    assert not is_qa_task("mrpc") and not is_qa_task("chunk")


# ------------------------------------------------------------------------ the cache key
def _glue_files(data_dir) -> None:
    _write(data_dir, "sst", {"dev.tsv": "sentence\tlabel\nthe good movie\t1\nthe bad plot\t0\n"})
    rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    rows += [f"{y}\t{i}\t{i + 9}\tthe {w} movie\ta {w} film" for i, (y, w) in
             enumerate([(1, "good"), (0, "bad"), (1, "fun")])]  # fmt: skip
    _write(data_dir, "mrpc", {"train.tsv": "\n".join(rows) + "\n"})


def _records(data_dir, tasks: str, which: str, split: str, **hparams):
    """(record path, its mtime, the number of records) of task `which`'s `split`."""
    config = _config(data_dir, tasks, eval_batch_size=4, train_batch_size=4, **hparams)
    tokenizer = make_tokenizer(config)
    pre = Preprocessor(config, [get_task(name, config, tokenizer) for name in config.task_names])
    task = next(t for t in pre.tasks if t.name == which)
    path, n = pre.serialize([task], split, split == "train")
    return path, os.stat(path).st_mtime_ns, n


def test_a_task_only_setting_rekeys_only_that_tasks_records(data_dir, monkeypatch):
    _glue_files(data_dir)
    path, mtime, _ = _records(data_dir, "sst,squad", "sst", "dev")
    # QA's settings are squad's: the sst records of the same run are reused as they are (the
    # shared key held them, and every run's records were written again).
    for changed in ({"doc_stride": 64}, {"max_query_length": 9}, {"double_unordered": False}):
        assert _records(data_dir, "sst,squad", "sst", "dev", **changed)[:2] == (path, mtime)
    keys = []
    for config in (_config(data_dir, "sst,squad"), _config(data_dir, "sst,squad", doc_stride=64)):
        squad = get_task("squad", config, make_tokenizer(config))
        keys.append(Preprocessor(config, [squad])._cache_key([squad], "dev", 32, False))
    assert keys[0] != keys[1] and keys[1]["task_keys"]["squad"]["doc_stride"] == 64
    # double_unordered is MRPC's: its train records (with the swapped pairs) are re-keyed.
    doubled, _, n_doubled = _records(data_dir, "mrpc", "mrpc", "train")
    single, _, n_single = _records(data_dir, "mrpc", "mrpc", "train", double_unordered=False)
    assert doubled != single and (n_doubled, n_single) == (8, 4)  # 6 and 3 padded to batches
    # Nothing changed: the cache hits, no example is featurized again.
    monkeypatch.setattr(SST, "featurize", lambda *a: pytest.fail("featurized again"))
    assert _records(data_dir, "sst,squad", "sst", "dev")[:2] == (path, mtime)


# ------------------------------------------------------------------------ test splits
@pytest.mark.parametrize("split", ["latest", "contest", "dev_test_like"])
def test_a_split_with_test_in_its_name_is_read_with_labels(data_dir, split):
    _write(data_dir, "sst", {f"{split}.tsv": "sentence\tlabel\nthe good movie\t1\nbad\t0\n"})
    config = _config(data_dir, "sst")
    examples = get_task("sst", config, make_tokenizer(config)).get_examples(split)
    # The substring test read these as test files: column 1 as the text, labels all "0".
    assert [(e.text_a, e.label) for e in examples] == [("the good movie", "1"), ("bad", "0")]


def test_test_splits_are_read_without_labels(data_dir):
    _write(data_dir, "sst", {"test.tsv": "index\tsentence\n0\tthe good movie\n1\tbad plot\n"})
    config = _config(data_dir, "sst")
    examples = get_task("sst", config, make_tokenizer(config)).get_examples("test")
    assert [(e.text_a, e.label) for e in examples] == [("the good movie", "0"), ("bad plot", "0")]


# ------------------------------------------------------------------------ "Adding a task"
def docs_blocks(path: str, section: str) -> dict[str, str]:
    """The fenced python blocks of `section` in the markdown file `path`, by the file name
    their first line gives (`# my_tasks/moods.py`)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end > 0 else None]
    blocks = re.findall(r"```python\n(# (\S+\.py)\n.*?)```", body, re.S)
    return {name: code for code, name in blocks}


TINY = {
    "init_checkpoint": None,
    **tiny_encoder(),
    "vocab_size": 5 + len(WORDS),
    "max_seq_length": 12,
    "train_batch_size": 8,
    "eval_batch_size": 8,
    "learning_rate": 3e-3,
    "num_train_epochs": 2,
    "log_every_steps": 2,
}


@pytest.fixture
def docs_example(data_dir, monkeypatch):
    """docs/configuration.md's "Adding a task" files, written under the data dir and
    importable; the toy task unregistered and forgotten afterwards."""
    blocks = docs_blocks(os.path.join(REPO, "docs", "configuration.md"), "Adding a task")
    assert set(blocks) == {"my_tasks/moods.py", "finetune_moods.py", "export_moods.py"}
    for name, code in blocks.items():
        (data_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (data_dir / name).write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(data_dir))
    yield data_dir
    task_table.unregister_task("moods")
    for module in ("my_tasks.moods", "my_tasks"):
        sys.modules.pop(module, None)


def _launch(script, argv: list[str], monkeypatch) -> int:
    monkeypatch.setattr(sys, "argv", [str(script), *argv])
    with pytest.raises(SystemExit) as stopped:
        runpy.run_path(str(script), run_name="__main__")
    return stopped.value.code


def test_the_adding_a_task_example_trains_evaluates_and_exports(docs_example, monkeypatch):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's tokenizer ops)

    rng = np.random.default_rng(0)

    def lines(n):
        rows = []
        for _ in range(n):
            happy = bool(rng.integers(0, 2))
            word = rng.choice(["good", "great", "fun"] if happy else ["bad", "awful", "boring"])
            rows.append(f"{'happy' if happy else 'sad'}: the {word} movie .")
        return "\n".join(rows) + "\n"

    _write(docs_example, "moods", {"train.txt": lines(24), "dev.txt": lines(10)})
    common = ["--data-dir", str(docs_example), "--model-name", "tiny"]
    hparams = ["--hparams", json.dumps(TINY)]
    finetune = _launch(
        docs_example / "finetune_moods.py", [*common, "--tasks", "moods", *hparams], monkeypatch
    )
    assert finetune == 0
    assert "moods" in task_table.task_names()
    model_dir = docs_example / "models" / "tiny"
    results = json.loads((model_dir / "results" / "moods_results.json").read_text())
    accuracy = results["trials"][0]["moods"]["accuracy"]
    assert abs(accuracy / 10 - round(accuracy / 10)) < 1e-6  # 10 dev sentences, each once

    assert _launch(docs_example / "export_moods.py", [*common, "--task", "moods"], monkeypatch) == 0
    serve = tf.saved_model.load(str(model_dir / "serving" / "tiny_moods" / "1"))
    serve = serve.signatures["serving_default"]
    assert list(serve.structured_input_signature[1]) == ["text"]  # one text, not a pair
    out = serve(text=tf.constant(["the good movie .", "the awful plot", ""]))
    labels = [x.decode() for x in out["label"].numpy()]
    assert labels == [["happy", "sad"][i] for i in out["probabilities"].numpy().argmax(-1)]
    assert set(labels) <= {"happy", "sad"}
