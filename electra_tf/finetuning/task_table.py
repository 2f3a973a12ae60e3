"""The one table of fine-tuning tasks: every task name, built in or added, and what it is.

A `TaskType` says how to build a task (`build`: a callable, or "module:attribute" imported on
first use so that this table imports no TensorFlow), what kind of task it is (`kind`: the
serving export and the scorer family follow from it) and the original's defaults for a run of
that task alone (`rules`, applied by `FinetuningConfig` before the user's values). The config
validates task names against this table, the runs build tasks from it and the export reads a
task's kind from the task it builds: there is no other list of task names.

Tasks described by data files (`FinetuningConfig.user_tasks`: a CSV, TSV, JSONL or CoNLL task
given by a small JSON description) are not registered here: their kind is in their description
and they are built by `electra_tf.finetuning.user_tasks`. A task class written in Python is
registered with `register_task` (docs/configuration.md, "Adding a task").
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from electra_tf.config import ConfigError

# What a task predicts; the export kind of a fine-tuned model is its task's kind.
TASK_KINDS = ("classification", "regression", "qa", "tagging")


@dataclasses.dataclass(frozen=True)
class TaskType:
    """One task name of the table.

    Args:
        name: the task's name (`--tasks`, `task_names`, feature keys `<name>_*`).
        build: `build(config, name, tokenizer) -> Task`, or "module:attribute" naming it.
        kind: one of `TASK_KINDS`.
        rules: config values the original sets when this task runs alone (e.g. QA's
            `max_seq_length` 512); the user's values win over them.
        summary: one line for listings and error messages.
    """

    name: str
    build: str | Callable[..., Any]
    kind: str
    rules: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    summary: str = ""

    def __post_init__(self) -> None:
        if self.kind not in TASK_KINDS:
            raise ValueError(f"task {self.name!r}: kind {self.kind!r} is not one of {TASK_KINDS}")
        if not self.name or not self.name.replace("_", "").isalnum() or not self.name.islower():
            raise ValueError(
                f"task name {self.name!r}: use lower-case letters, digits and '_' (it names "
                "folders, files and feature keys)"
            )
        object.__setattr__(self, "rules", MappingProxyType(dict(self.rules)))

    def builder(self) -> Callable[..., Any]:
        """The callable `build` names (imported on first use)."""
        if callable(self.build):
            return self.build
        module, _, attribute = self.build.partition(":")
        return getattr(importlib.import_module(module), attribute)


def _glue(name: str, cls: str, kind: str = "classification", epochs: float = 3.0) -> TaskType:
    return TaskType(
        name, f"electra_tf.finetuning.glue:{cls}", kind, {"num_train_epochs": epochs}, f"GLUE {cls}"
    )


def _qa(name: str, build: str, summary: str) -> TaskType:
    rules = {"max_seq_length": 512, "num_train_epochs": 2.0, "write_test_outputs": False}
    return TaskType(name, f"electra_tf.finetuning.qa:{build}", "qa", rules, summary)


# The original's tasks, in its order. Their rules are its `configure_finetuning.py`'s.
_BUILT_IN = (
    _glue("cola", "CoLA"),
    _glue("sst", "SST"),
    _glue("mrpc", "MRPC"),
    _glue("sts", "STS", "regression", 10.0),
    _glue("qqp", "QQP"),
    _glue("mnli", "MNLI"),
    _glue("qnli", "QNLI"),
    _glue("rte", "RTE", epochs=10.0),
    _qa("squad", "squad_v2", "SQuAD 2.0"),
    _qa("squadv1", "squad_v1", "SQuAD 1.1"),
    _qa("newsqa", "mrqa", "MRQA NewsQA"),
    _qa("naturalqs", "mrqa", "MRQA Natural Questions"),
    _qa("triviaqa", "mrqa", "MRQA TriviaQA"),
    _qa("searchqa", "mrqa", "MRQA SearchQA"),
    TaskType(
        "chunk",
        "electra_tf.finetuning.tagging:make_tagging_task",
        "tagging",
        {"max_seq_length": 256},
        "CoNLL-2000 chunking",
    ),
)

_TABLE: dict[str, TaskType] = {t.name: t for t in _BUILT_IN}
BUILT_IN_TASKS: tuple[str, ...] = tuple(_TABLE)

# The defaults of a task alone that the table does not name (a user's task): the original's
# `else` branch.
DEFAULT_RULES: Mapping[str, Any] = MappingProxyType({"num_train_epochs": 3.0})


def register_task(task_type: TaskType, replace: bool = False) -> TaskType:
    """Adds `task_type` to the table (in this process); `replace` for a name already there.

    A built-in task is never replaced: its name is the original's and results are compared
    with the original's under it.
    """
    if task_type.name in BUILT_IN_TASKS:
        raise ValueError(f"task {task_type.name!r} is built in; register yours under another name")
    if task_type.name in _TABLE and not replace:
        raise ValueError(f"task {task_type.name!r} is registered already; pass replace=True")
    _TABLE[task_type.name] = task_type
    return task_type


def unregister_task(name: str) -> None:
    """Removes a task `register_task` added (tests, notebooks); built-in tasks stay."""
    if name in BUILT_IN_TASKS:
        raise ValueError(f"task {name!r} is built in")
    _TABLE.pop(name, None)


def task_names() -> tuple[str, ...]:
    """Every registered task name: the built-in ones in the original's order, then added ones."""
    return tuple(_TABLE)


def find_task_type(name: str) -> TaskType | None:
    """The registered `TaskType` of `name`, or None."""
    return _TABLE.get(name)


def is_qa_task(name: str) -> bool:
    """Whether `name` is a registered question-answering task (the table's kind; the original
    tested for "squad" or "qa" in the name, which also matched e.g. a user's "faq_intent")."""
    found = find_task_type(name)
    return found is not None and found.kind == "qa"


def check_task_names(names: tuple[str, ...], user_tasks: Mapping[str, Any]) -> None:
    """Every name is a registered task or one of `user_tasks`, once; a user task does not take
    a registered name; every user task is run (a ConfigError naming the name)."""
    known = task_names()
    for name in names:
        if name not in known and name not in user_tasks:
            raise ConfigError(
                f"task_names: unknown task {name!r}; known: {', '.join(known)} (or describe your "
                "own data with --task-file, README 'Fine-tuning on your own data')"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"task_names: duplicate task in {names}")
    for name in user_tasks:
        if name in known:
            raise ConfigError(f"user_tasks: {name!r} is a registered task's name; rename yours")
        if name not in names:
            raise ConfigError(f"user_tasks: {name!r} is described but not in task_names {names}")
