"""GLUE tasks (the original's `classification_tasks.py`): TSV readers, BERT featurization.

Each task reads `finetuning_data/<task>/<split>.tsv` with the original's column indices and
header handling. Unlike the original, which logged and silently dropped a bad row, a row with
too few columns or an unknown label is an error naming `file:line`.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import sys
from typing import Any

from electra_tf.finetuning import heads, scorers
from electra_tf.finetuning.task import DataError, FeatureSpec, Predict, Task, log
from electra_tf.runtime.atomic_io import write_text


@dataclasses.dataclass
class InputExample:
    eid: int
    task_name: str
    text_a: str
    text_b: str | None
    label: Any
    where: str = ""  # "file:line", for error messages


def read_tsv(path: str, max_lines: int | None = None) -> list[tuple[int, list[str]]]:
    """(line number, columns) for every row. Quoting is off: GLUE sentences contain quotes."""
    if not os.path.exists(path):
        raise DataError(f"{path}: file not found")
    rows: list[tuple[int, list[str]]] = []
    # utf-8-sig drops a BOM; newline="" lets csv see "\r\n" inside no field.
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            for i, row in enumerate(reader):
                if max_lines is not None and i >= max_lines:
                    break
                rows.append((i + 1, row))
        except UnicodeDecodeError as e:
            raise DataError(
                f"{path}:{_first_undecodable_line(path)}: not UTF-8 text ({e.reason}); "
                "save the file as UTF-8"
            ) from None
        except csv.Error as e:  # a field over csv's limit (131,072 characters), a NUL byte
            raise DataError(f"{path}:{len(rows) + 1}: unreadable row ({e})") from None
    return rows


def _first_undecodable_line(path: str) -> int:
    # The text layer decodes in chunks, so its error does not know the line: find it.
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 1


def warn_ragged_rows(path: str, rows: list[tuple[int, list[str]]]) -> None:
    """Columns are read by position: rows whose column count differs from the header's are
    read all the same, and the user hears about them once per file."""
    if not rows:
        return
    expected = len(rows[0][1])
    ragged = [line for line, row in rows[1:] if len(row) != expected]
    if ragged:
        print(
            f"warning: {path}: {len(ragged)} row(s) have a column count other than the "
            f"header's {expected} (first at line {ragged[0]}); columns are read by position",
            file=sys.stderr,
        )


def truncate_seq_pair(tokens_a: list[str], tokens_b: list[str], max_length: int) -> None:
    """Drops tokens from the end of the longer sequence until the pair fits (in place)."""
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def featurize_pair(
    tokenizer: Any, text_a: str, text_b: str | None, max_seq_length: int
) -> dict[str, list[int]]:
    """`[CLS] a [SEP] (b [SEP])`, segment ids 0 then 1, zero-padded to `max_seq_length`."""
    tokens_a = tokenizer.tokenize(text_a)
    tokens_b = tokenizer.tokenize(text_b) if text_b else None
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        tokens_a = tokens_a[: max_seq_length - 2]
    tokens = ["[CLS]", *tokens_a, "[SEP]"]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += [*tokens_b, "[SEP]"]
        segment_ids += [1] * (len(tokens_b) + 1)
    input_ids = list(tokenizer.convert_tokens_to_ids(tokens))
    pad = max_seq_length - len(input_ids)
    return {
        "input_ids": input_ids + [0] * pad,
        "input_mask": [1] * len(input_ids) + [0] * pad,
        "segment_ids": segment_ids + [0] * pad,
    }


class SentenceTask(Task):
    """A task with one prediction per example from a TSV file."""

    # (text_a column, text_b column or None, label column, skip header) per split kind.
    columns: tuple[int, int | None, int | None, bool] = (0, None, 1, True)
    test_columns: tuple[int, int | None, int | None, bool] | None = None
    double_train: bool = False  # the original's double_unordered tasks

    def split_file(self, split: str) -> str:
        return os.path.join(self.config.raw_data_dir(self.name), f"{split}.tsv")

    def get_examples(self, split: str) -> list[InputExample]:
        path = self.split_file(split)
        rows = read_tsv(path, max_lines=100 if self.config.debug else None)
        # By exact name: a split such as "latest" or "contest" has labels.
        is_test = split in self.get_test_splits()
        cols = self.test_columns if (is_test and self.test_columns) else self.columns
        if cols[3]:  # a header row to compare with
            warn_ragged_rows(path, rows)
        examples = self._load(path, rows, split, cols, is_test, swap=False, eid_offset=0)
        if not examples:
            # An empty dev set scored NaN into results.json; an empty train set crashed later.
            what = "only a header row" if rows else "no rows"
            raise DataError(f"{path}: no examples ({what}); task {self.name} needs at least one")
        if self.double_train and self.config.double_unordered and split == "train":
            examples += self._load(path, rows, split, cols, is_test, True, len(examples))
        return examples

    def _load(self, path, rows, split, cols, is_test, swap, eid_offset) -> list[InputExample]:
        a_col, b_col, label_col, skip_header = cols
        examples = []
        for index, (line, row) in enumerate(rows):
            if index == 0 and skip_header:
                continue
            where = f"{path}:{line}"
            try:
                text_a = row[a_col]
                text_b = row[b_col] if b_col is not None else None
                label = None if is_test else row[label_col]
            except IndexError:
                raise DataError(
                    f"{where}: {len(row)} tab-separated columns, task {self.name} needs "
                    f"columns {a_col}, {b_col}, {label_col} ({split} split)"
                ) from None
            label = self.dummy_label() if is_test else self.check_label(label, where)
            if swap:
                text_a, text_b = text_b, text_a
            eid = index - (1 if skip_header else 0) + eid_offset
            examples.append(InputExample(eid, self.name, text_a, text_b, label, where))
        return examples

    @property
    def pair(self) -> bool:
        """Whether the task's examples are sentence pairs (it reads a second text column)."""
        return self.columns[1] is not None

    def featurization_key(self) -> dict[str, Any]:
        # The swapped copies are in the train records of the double_unordered tasks only.
        return {"double_unordered": self.config.double_unordered} if self.double_train else {}

    def featurize(self, example: InputExample, is_training: bool) -> list[dict[str, Any]]:
        features = featurize_pair(
            self.tokenizer, example.text_a, example.text_b, self.config.max_seq_length
        )
        features["task_id"] = self.task_id
        features[f"{self.name}_eid"] = example.eid
        features.update(self.label_features(example))
        return [features]

    def dummy_label(self) -> Any:
        raise NotImplementedError

    def check_label(self, label: str, where: str) -> Any:
        raise NotImplementedError

    def label_features(self, example: InputExample) -> dict[str, Any]:
        raise NotImplementedError

    def write_test_predictions(self, predict: Predict, out_dir: str, trial: int) -> None:
        """GLUE's submission files: `<task>_<split>_<trial>.tsv` (index, label or 0-5 score)
        for every test split."""
        for split in self.get_test_splits():
            rows = []
            labels = self.label_strings()
            for result in predict(split):
                if labels is None:  # STS: back to the 0-5 scale
                    value = f"{float(result['predictions']) * self.max_value:.3f}"
                else:
                    value = labels[int(result["predictions"])]
                rows.append((result["eid"], value))
            path = os.path.join(out_dir, f"{self.name}_{split}_{trial}.tsv")
            write_text(
                path,
                "index\tprediction\n" + "".join(f"{i}\t{v}\n" for i, v in sorted(rows)),
            )
            log(f"Wrote {len(rows)} {self.name} {split} predictions to {path}")


class ClassificationTask(SentenceTask):
    kind = "classification"
    label_list: tuple[str, ...] = ("0", "1")

    def serving_options(self) -> dict[str, Any]:
        return {"pair": self.pair, "label_names": self.label_strings()}

    def dummy_label(self) -> str:
        return self.label_list[0]

    def check_label(self, label: str, where: str) -> str:
        if label not in self.label_list:
            raise DataError(f"{where}: label {label!r} is not one of {list(self.label_list)}")
        return label

    def label_features(self, example: InputExample) -> dict[str, Any]:
        return {f"{self.name}_label_ids": self.label_list.index(example.label)}

    def feature_specs(self) -> list[FeatureSpec]:
        return [FeatureSpec(f"{self.name}_eid", ()), FeatureSpec(f"{self.name}_label_ids", ())]

    def make_head(self, dtype: Any = None) -> heads.ClassificationHead:
        return heads.ClassificationHead(
            self.name, len(self.label_list), pooling=self.config.classifier_pooling, dtype=dtype
        )

    def get_scorer(self, split: str = "dev") -> scorers.Scorer:
        return scorers.AccuracyScorer()

    def label_strings(self) -> list[str]:
        return list(self.label_list)


class RegressionTask(SentenceTask):
    kind = "regression"
    min_value: float = 0.0
    max_value: float = 5.0

    def serving_options(self) -> dict[str, Any]:
        # Training targets are (label - min) / max (the original's normalisation): undone.
        return {"pair": self.pair, "score_scale": self.max_value, "score_offset": self.min_value}

    def dummy_label(self) -> float:
        return 0.0

    def check_label(self, label: str, where: str) -> float:
        try:
            value = float(label)
        except ValueError:
            raise DataError(f"{where}: label {label!r} is not a number") from None
        if not self.min_value <= value <= self.max_value:
            raise DataError(f"{where}: label {value} outside [{self.min_value}, {self.max_value}]")
        return value

    def label_features(self, example: InputExample) -> dict[str, Any]:
        # The original's normalisation: (label - min) / max, i.e. label / 5 for STS.
        return {f"{self.name}_targets": (example.label - self.min_value) / self.max_value}

    def feature_specs(self) -> list[FeatureSpec]:
        return [
            FeatureSpec(f"{self.name}_eid", ()),
            FeatureSpec(f"{self.name}_targets", (), is_int=False),
        ]

    def make_head(self, dtype: Any = None) -> heads.RegressionHead:
        return heads.RegressionHead(self.name, dtype=dtype)

    def get_scorer(self, split: str = "dev") -> scorers.Scorer:
        return scorers.RegressionScorer()


class MNLI(ClassificationTask):
    label_list = ("contradiction", "entailment", "neutral")
    columns = (8, 9, -1, True)

    def split_file(self, split: str) -> str:
        name = "dev_matched" if split == "dev" else split
        return os.path.join(self.config.raw_data_dir(self.name), f"{name}.tsv")

    def get_examples(self, split: str) -> list[InputExample]:
        if split == "diagnostic":
            self.test_columns = (1, 2, None, True)
        else:
            self.test_columns = None
        return super().get_examples(split)

    def get_test_splits(self) -> list[str]:
        return ["test_matched", "test_mismatched", "diagnostic"]


class MRPC(ClassificationTask):
    columns = (3, 4, 0, True)
    double_train = True


class CoLA(ClassificationTask):
    columns = (3, None, 1, False)
    test_columns = (1, None, None, True)

    def get_scorer(self, split: str = "dev") -> scorers.Scorer:
        return scorers.MCCScorer()


class SST(ClassificationTask):
    columns = (0, None, 1, True)
    test_columns = (1, None, None, True)


class QQP(ClassificationTask):
    columns = (3, 4, 5, True)
    test_columns = (1, 2, None, True)


class RTE(ClassificationTask):
    label_list = ("entailment", "not_entailment")
    columns = (1, 2, 3, True)


class QNLI(RTE):
    pass


class STS(RegressionTask):
    columns = (-3, -2, -1, True)
    test_columns = (-2, -1, None, True)
    double_train = True
