"""A task described by data files (a "task file", JSON), read and checked into a COMPLETE
description: what `FinetuningConfig.user_tasks` holds, saves with the model and keys the
TFRecord cache.

    {"name": "reviews", "kind": "classification",
     "train": "train.csv", "dev": "dev.csv", "test": "test.csv",
     "text": "sentence", "text_pair": null, "label": "label"}

Complete means: the files' paths absolute (a relative one is relative to the task file's
folder), `format` set (else from the files' extension), `labels` filled from the train file
(sorted; numbers by value) unless given (then kept in the user's order, every train label in
it), `label_range` (regression: the train labels' min and max unless given) and `tag_scheme`
(tagging: detected from the train file by `user_tagging.complete_description`). The export of
the fine-tuned model reads its labels from here, with no data file at hand.

A problem with the file is a ConfigError naming the task file, the key and the fix (an unknown
key also the closest valid one); a problem with the data a DataError naming file:line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

from electra_tf.config import ConfigError, closest_key
from electra_tf.finetuning import readers

KINDS = ("classification", "regression", "tagging")
FORMATS = ("csv", "tsv", "jsonl", "conll")
TAG_SCHEMES = ("auto", "IOB1", "IOB2", "BIOES")
SPLITS = ("train", "dev", "test")
# Every key of a task file, with its default (None: absent). `labels`, `label_range` and
# `tag_scheme` are also written by the completion.
KEYS: dict[str, Any] = {
    "name": None,
    "kind": None,
    "train": None,
    "dev": None,
    "test": None,
    "format": None,
    "text": "text",
    "text_pair": None,
    "label": "label",
    "quoting": "minimal",
    "labels": None,
    "label_range": None,
    "tag_scheme": "auto",
}
TASK_FILE = "task.json"  # <data_dir>/finetuning_data/<name>/task.json: found by --tasks <name>


def find_task_file(data_dir: str, name: str) -> str | None:
    """`<data_dir>/finetuning_data/<name>/task.json`, if there is one."""
    path = os.path.join(data_dir, "finetuning_data", name, TASK_FILE)
    return path if os.path.isfile(path) else None


def load_task_file(path: str) -> dict[str, Any]:
    """The complete description of the task file `path` (JSON); ConfigError / DataError."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise ConfigError(f"--task-file {path}: file not found")
    try:
        with open(path, encoding="utf-8-sig") as f:
            spec = json.load(f)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}: not JSON ({e.msg}); fix the task file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason}); save it as UTF-8") from None
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: a JSON {type(spec).__name__}, not an object like {EXAMPLE}")
    if "name" not in spec:  # finetuning_data/reviews/task.json -> reviews; reviews.json -> reviews
        stem = os.path.splitext(os.path.basename(path))[0]
        spec = {**spec, "name": os.path.basename(os.path.dirname(path)) if stem == "task" else stem}
    return complete_description(spec, os.path.dirname(path), where=path)


EXAMPLE = '{"name": "reviews", "kind": "classification", "train": "train.csv", "dev": "dev.csv"}'


def complete_description(
    spec: Mapping[str, Any], base_dir: str = ".", where: str = "user_tasks"
) -> dict[str, Any]:
    """`spec` checked and completed (module docstring); relative paths are under `base_dir`;
    `where` names the description in errors (the task file)."""
    check_keys(spec, where)
    desc = {**KEYS, **spec}
    _check_values(desc, where)
    for split in SPLITS:
        if desc[split] is not None:
            desc[split] = os.path.abspath(os.path.join(base_dir, desc[split]))
            if not os.path.isfile(desc[split]):
                raise ConfigError(
                    f'{where}: "{split}": {desc[split]} not found; fix the path (relative to '
                    "the task file's folder)"
                )
    desc["format"] = desc["format"] or _format_from_extensions(desc, where)
    _check_format(desc, where)
    if desc["kind"] == "tagging":
        return _complete_tagging(desc, where)
    del desc["tag_scheme"]
    if desc["kind"] == "regression":
        del desc["labels"]
        desc["label_range"] = label_range(desc)
    else:
        del desc["label_range"]
        desc["labels"] = train_labels(desc)
    return desc


def check_keys(spec: Mapping[str, Any], where: str) -> None:
    """Every key is one of `KEYS` (a ConfigError naming the closest); name, kind, train given."""
    for key in spec:
        if key not in KEYS:
            hint = closest_key(key, list(KEYS))
            suggestion = f'; did you mean "{hint}"?' if hint else f"; keys: {', '.join(KEYS)}"
            raise ConfigError(f'{where}: unknown key "{key}"{suggestion}')
    for key in ("name", "kind", "train"):
        if spec.get(key) in (None, ""):
            raise ConfigError(f'{where}: "{key}" is required, e.g. {EXAMPLE}')


def _check_values(desc: dict[str, Any], where: str) -> None:
    name = desc["name"]
    if not isinstance(name, str) or not name.replace("_", "").isalnum() or not name.islower():
        raise ConfigError(
            f'{where}: "name": {name!r}; use lower-case letters, digits and "_" (it names '
            "folders, files and feature keys)"
        )
    _one_of(desc, "kind", KINDS, where)
    _one_of(desc, "quoting", ("minimal", "none"), where)
    _one_of(desc, "tag_scheme", TAG_SCHEMES, where)
    if desc["format"] is not None:
        _one_of(desc, "format", FORMATS, where)
    for key in ("train", "dev", "test", "text", "label", "text_pair"):
        if desc[key] is not None and (not isinstance(desc[key], str) or not desc[key]):
            raise ConfigError(f'{where}: "{key}": {desc[key]!r} is not a non-empty string')
    if desc["kind"] != "regression" and desc["label_range"] is not None:
        raise ConfigError(f'{where}: "label_range" is for "kind": "regression" only; remove it')
    if desc["kind"] == "regression" and desc["labels"] is not None:
        raise ConfigError(f'{where}: "labels" names classes; a regression task has none')
    if desc["kind"] == "tagging" and desc["text_pair"] is not None:
        raise ConfigError(f'{where}: "text_pair": a tagging task tags one text; remove it')
    if desc["kind"] != "tagging" and desc["tag_scheme"] != "auto":
        raise ConfigError(f'{where}: "tag_scheme" is for "kind": "tagging" only; remove it')
    _check_labels(desc["labels"], where)
    _check_range(desc["label_range"], where)


def _one_of(desc: dict[str, Any], key: str, valid: tuple[str, ...], where: str) -> None:
    if desc[key] not in valid:
        raise ConfigError(f'{where}: "{key}": {desc[key]!r} is not one of {", ".join(valid)}')


def _check_labels(labels: Any, where: str) -> None:
    if labels is None:
        return
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
        raise ConfigError(f'{where}: "labels": a list of label strings, e.g. ["neg", "pos"]')
    if len(set(labels)) != len(labels):
        raise ConfigError(f'{where}: "labels": {labels} names a label twice; remove the repeat')


def _check_range(value: Any, where: str) -> None:
    if value is None:
        return
    ok = isinstance(value, list) and len(value) == 2
    ok = ok and all(isinstance(x, int | float) and not isinstance(x, bool) for x in value)
    if not ok or not math.isfinite(value[0]) or not math.isfinite(value[1]) or value[0] >= value[1]:
        raise ConfigError(f'{where}: "label_range": {value!r} must be [min, max] with min < max')


def _format_from_extensions(desc: dict[str, Any], where: str) -> str:
    found = {split: readers.format_of(desc[split]) for split in SPLITS if desc[split]}
    if None in found.values():
        split = next(s for s, f in found.items() if f is None)
        raise ConfigError(
            f'{where}: "{split}": {os.path.basename(desc[split])} has no known extension '
            f'(.csv .tsv .jsonl .conll .txt .bio .iob); set "format" to one of {", ".join(FORMATS)}'
        )
    if len(set(found.values())) > 1:
        raise ConfigError(
            f"{where}: the files' extensions name formats {found}; use one format for a task's "
            'files, or set "format"'
        )
    return next(iter(found.values()))


def _check_format(desc: dict[str, Any], where: str) -> None:
    tagging = desc["kind"] == "tagging"
    if tagging and desc["format"] not in ("conll", "jsonl"):
        raise ConfigError(
            f'{where}: "format": {desc["format"]!r}; a tagging task reads CoNLL (one word and '
            "its tag a line) or JSONL (token and tag lists)"
        )
    if not tagging and desc["format"] == "conll":
        raise ConfigError(
            f'{where}: "format": "conll" is for "kind": "tagging"; a {desc["kind"]} task reads '
            "csv, tsv or jsonl"
        )


def _complete_tagging(desc: dict[str, Any], where: str) -> dict[str, Any]:
    """The tag set and the scheme, read from the train file by the tagging task's own reader."""
    del desc["label_range"], desc["text_pair"]
    try:
        from electra_tf.finetuning import user_tagging
    except ModuleNotFoundError as e:  # the tagging task's module not installed (yet)
        if e.name != "electra_tf.finetuning.user_tagging":
            raise
        return desc
    return user_tagging.complete_description(desc, where)


def _columns(desc: Mapping[str, Any], labelled: bool = True) -> list[str]:
    columns = [desc["text"]] + ([desc["text_pair"]] if desc.get("text_pair") else [])
    return columns + ([desc["label"]] if labelled else [])


def read_split(desc: Mapping[str, Any], split: str, labelled: bool = True) -> list[readers.Row]:
    """The rows of `split` (a CSV / TSV / JSONL file), with the description's columns."""
    return readers.read_rows(desc[split], desc["format"], _columns(desc, labelled), desc["quoting"])


def train_labels(desc: Mapping[str, Any]) -> list[str]:
    """The label set: the user's `labels` (every train label in it), else the train file's
    labels sorted (by value when all are numbers). DataError naming file:line."""
    path, rows = desc["train"], read_split(desc, "train")
    labels = readers.label_texts(path, rows, desc["label"])
    if desc.get("labels") is not None:
        for line, label in labels:
            if label not in desc["labels"]:
                raise readers.DataError(
                    f'{path}:{line}: label {label!r} is not in the task file\'s "labels" '
                    f"{desc['labels']}; add it there, or fix the label"
                )
        return list(desc["labels"])
    found = {label for _, label in labels}
    if not found:
        raise readers.DataError(f"{path}: no rows under the header; the train file needs examples")
    if all(readers.is_number(label) for label in found):
        return sorted(found, key=lambda x: (float(x), x))
    return sorted(found)


def label_range(desc: Mapping[str, Any]) -> list[float]:
    """Regression: the user's `label_range` (every train value in it), else the train values'
    [min, max] (a DataError if they are all equal: nothing to scale by)."""
    path, rows = desc["train"], read_split(desc, "train")
    values = [(row.line, readers.number_value(path, row, desc["label"])) for row in rows]
    if not values:
        raise readers.DataError(f"{path}: no rows under the header; the train file needs examples")
    given = desc.get("label_range")
    if given is not None:
        for line, value in values:
            if not given[0] <= value <= given[1]:
                raise readers.DataError(
                    f'{path}:{line}: label {value:g} is outside the task file\'s "label_range" '
                    f"{given}; widen the range, or fix the label"
                )
        return [float(given[0]), float(given[1])]
    low, high = min(v for _, v in values), max(v for _, v in values)
    if low == high:
        raise readers.DataError(
            f"{path}: every label is {low:g}; a regression task needs at least two values (or "
            'give "label_range" in the task file)'
        )
    return [low, high]


def with_task_files(
    hparams: Mapping[str, Any],
    tasks: str | None,
    task_files: list[str],
    data_dir: str,
) -> tuple[dict[str, Any], str | None]:
    """The command's `--task-file`s and `<data_dir>/finetuning_data/<name>/task.json` folders
    added to a run: (hparams with `user_tasks` holding their complete descriptions, the
    `--tasks` string naming them too; None where it was None and no task file was given).

    A task file adds its task to the tasks named (by `--tasks`, else the hparams'
    `task_names`): several task files and named tasks make one multi-task run. A named task
    that is not registered is read from its folder's task.json when it has one.
    """
    from electra_tf.finetuning import task_table

    named = tasks.split(",") if tasks is not None else hparams.get("task_names")
    if isinstance(named, str):
        named = named.split(",")
    names = [n.strip() for n in named or [] if n.strip()]
    user_tasks = dict(hparams.get("user_tasks") or {})
    from_files: list[str] = []
    for path in task_files:
        description = load_task_file(path)
        name = description["name"]
        if name in from_files or name in user_tasks:
            raise ConfigError(f"--task-file {path}: a task named {name!r} is given twice")
        user_tasks[name] = description
        from_files.append(name)
    for name in names:
        found = find_task_file(data_dir, name)
        if found and name not in user_tasks and task_table.find_task_type(name) is None:
            user_tasks[name] = load_task_file(found)
    if not user_tasks:
        return dict(hparams), tasks
    names += [name for name in from_files if name not in names]
    return {**hparams, "user_tasks": user_tasks}, ",".join(names)
