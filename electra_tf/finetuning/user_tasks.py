"""Tasks described by data files (`FinetuningConfig.user_tasks`): sentence and sentence-pair
classification, regression, and (from `user_tagging`) token tagging.

A classification or regression task reads its CSV / TSV / JSONL files by column name
(`task_spec`, `readers`) and is featurized, headed and scored as a GLUE task of its kind
(`glue.featurize_pair`: `[CLS] a [SEP] (b [SEP])`): a user task runs as fast as the built-in
ones. Its label set is the complete description's (read from the train file when the task file
was loaded, saved with the model): a dev or test label outside it, an empty text, an empty
split are DataErrors naming file:line, raised when the split is read (`data_check` reads every
split before the first step).

Dev metrics: accuracy and macro F1 (classification), Pearson and Spearman (regression).
"""

from __future__ import annotations

import os
from typing import Any

from electra_tf.config import ConfigError
from electra_tf.finetuning import readers, scorers, task_spec
from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.glue import ClassificationTask, InputExample, RegressionTask
from electra_tf.finetuning.task import DataError, Predict, Task, log
from electra_tf.runtime.atomic_io import write_text

# What a complete description of each kind holds beyond the common keys (`task_spec`).
_COMPLETED = {"classification": "labels", "regression": "label_range", "tagging": "labels"}


def make_user_task(name: str, config: FinetuningConfig, tokenizer: Any) -> Task:
    """The task `config.user_tasks[name]` describes (a complete description: `task_spec`)."""
    description = check_complete(name, config.user_tasks[name])
    kind = description["kind"]
    if kind == "tagging":
        from electra_tf.finetuning.user_tagging import UserTaggingTask

        return UserTaggingTask(config, name, tokenizer, description)
    cls = UserClassificationTask if kind == "classification" else UserRegressionTask
    return cls(config, name, tokenizer, description)


def check_complete(name: str, description: Any) -> dict[str, Any]:
    """`description` if it is complete (what `task_spec.load_task_file` returns), else a
    ConfigError saying how to make it so."""
    where = f"user_tasks[{name!r}]"
    if not isinstance(description, dict) or description.get("kind") not in _COMPLETED:
        raise ConfigError(f'{where}: not a task description (a dict with a known "kind")')
    missing = [k for k in ("format", _COMPLETED[description["kind"]]) if description.get(k) is None]
    if missing or description.get("name") != name:
        raise ConfigError(
            f"{where}: an incomplete description (no {', '.join(missing) or 'matching name'}); "
            "pass it through electra_tf.finetuning.task_spec.complete_description (or give "
            "the command --task-file), which reads the label set from the train file"
        )
    return description


class _UserSentenceTask:
    """What the classification and regression user tasks share: reading by column name."""

    description: dict[str, Any]

    def _setup(self, description: dict[str, Any]) -> None:
        self.description = description
        # (text_a, text_b, label, header) as the GLUE tasks' `columns`: `pair` reads it.
        self.columns = (0, 1 if description.get("text_pair") else None, 2, True)
        self._examples: dict[str, list[InputExample]] = {}

    def split_file(self, split: str) -> str:
        path = self.description.get(split)
        if path is None:
            raise DataError(
                f"task {self.name}: its task file names no {split!r} file; add "
                f'"{split}": "<file>" to it'
            )
        return path

    def get_test_splits(self) -> list[str]:
        return ["test"] if self.description.get("test") else []

    def featurization_key(self) -> dict[str, Any]:
        # Files, columns, label set and scaling: everything that shapes this task's records.
        return dict(self.description)

    def get_examples(self, split: str) -> list[InputExample]:
        """The split's examples (read once per task object); DataError naming file:line."""
        if split not in self._examples:
            self._examples[split] = self._read(split)
        return self._examples[split]

    def _read(self, split: str) -> list[InputExample]:
        path, desc = self.split_file(split), self.description
        labelled = split not in self.get_test_splits()
        rows = task_spec.read_split(desc, split, labelled)
        if self.config.debug:
            rows = rows[:100]  # the GLUE tasks' debug cut
        if not rows:
            raise DataError(
                f"{path}: no examples (only a header row or nothing); task {self.name} needs at "
                f"least one in its {split} file"
            )
        labels = self.read_labels(path, rows) if labelled else [self.dummy_label()] * len(rows)
        examples = []
        for index, (row, label) in enumerate(zip(rows, labels, strict=True)):
            text_a = readers.text_value(path, row, desc["text"])
            text_b = readers.text_value(path, row, desc["text_pair"]) if desc["text_pair"] else None
            where = f"{path}:{row.line}"
            examples.append(InputExample(index, self.name, text_a, text_b, label, where))
        return examples

    def read_labels(self, path: str, rows: list[readers.Row]) -> list[Any]:
        """Every row's label, checked (DataError naming file:line)."""
        raise NotImplementedError

    def _write_predictions(self, predict: Predict, out_dir: str, trial: int, value) -> None:
        """`<task>_test_<trial>.tsv`: a header, then (row index in the test file, `value`)."""
        for split in self.get_test_splits():
            rows = sorted((r["eid"], value(r["predictions"])) for r in predict(split))
            path = os.path.join(out_dir, f"{self.name}_{split}_{trial}.tsv")
            write_text(path, "index\tprediction\n" + "".join(f"{i}\t{v}\n" for i, v in rows))
            log(f"Wrote {len(rows)} {self.name} {split} predictions to {path}")


class UserClassificationTask(_UserSentenceTask, ClassificationTask):
    """A user's sentence (or sentence-pair) classification task: string labels, the label set
    of its description, GLUE's featurization and head; accuracy and macro F1."""

    def __init__(self, config: FinetuningConfig, name: str, tokenizer: Any, description: dict):
        super().__init__(config, name, tokenizer)
        self._setup(description)
        self.label_list = tuple(description["labels"])

    def read_labels(self, path: str, rows: list[readers.Row]) -> list[str]:
        found = readers.label_texts(path, rows, self.description["label"])
        return [self.check_label(label, f"{path}:{line}") for line, label in found]

    def check_label(self, label: str, where: str) -> str:
        if label not in self.label_list:
            raise DataError(
                f"{where}: label {label!r} is not among the train file's labels "
                f"{list(self.label_list)}; fix it (a class never trained on cannot be "
                'predicted), or add examples of it to the train file (or to "labels")'
            )
        return label

    def get_scorer(self, split: str = "dev") -> scorers.Scorer:
        return scorers.AccuracyF1Scorer()

    def write_test_predictions(self, predict: Predict, out_dir: str, trial: int) -> None:
        """The test file's predictions as label names."""
        self._write_predictions(predict, out_dir, trial, lambda p: self.label_list[int(p)])


class UserRegressionTask(_UserSentenceTask, RegressionTask):
    """A user's regression task: targets `(y - min) / (max - min)` over the description's
    `label_range` (the train labels' span), mapped back by the export; Pearson and Spearman."""

    def __init__(self, config: FinetuningConfig, name: str, tokenizer: Any, description: dict):
        super().__init__(config, name, tokenizer)
        self._setup(description)
        self.min_value, self.max_value = (float(x) for x in description["label_range"])

    def read_labels(self, path: str, rows: list[readers.Row]) -> list[float]:
        return [readers.number_value(path, row, self.description["label"]) for row in rows]

    def label_features(self, example: InputExample) -> dict[str, Any]:
        scale = self.max_value - self.min_value
        return {f"{self.name}_targets": (example.label - self.min_value) / scale}

    def serving_options(self) -> dict[str, Any]:
        return {
            "pair": self.pair,
            "score_scale": self.max_value - self.min_value,
            "score_offset": self.min_value,
        }

    def write_test_predictions(self, predict: Predict, out_dir: str, trial: int) -> None:
        """The test file's predictions on the labels' scale."""
        scale = self.max_value - self.min_value
        self._write_predictions(
            predict, out_dir, trial, lambda p: f"{float(p) * scale + self.min_value:.6g}"
        )
