"""The task interface shared by GLUE, QA and tagging (the original's `finetune/task.py`).

A task reads its raw split files into examples, featurizes an example into one or more flat
feature dicts (`input_ids`, `input_mask`, `segment_ids`, `task_id` and `<task>_*` keys, the
original's names), declares those keys' shapes (`feature_specs`), builds its head and its scorer,
and writes its test-split predictions in its benchmark's submission format. Its `kind` and
`serving_options()` are all the export needs to serve it; its `featurization_key()` is its
part of the TFRecord cache key. A new task is a subclass registered in the task table
(`task_table.register_task`; docs/configuration.md, "Adding a task").
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
from collections.abc import Callable, Iterable
from typing import Any

import tf_keras as keras

from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.runtime.atomic_io import write_json

# In each trial's folder: every task's `trained_state()` by task name.
TASK_STATE_FILE = "task_state.json"


class DataError(ValueError):
    """A malformed input file; the message names the file and line."""


class NotServable(ValueError):
    """A task model that cannot be exported as it was trained (the message says why and what
    to change); the export reports it as its own error."""


# `Task.serving_options()`' keys. What the export's `TextFeaturizer` takes (how raw strings
# become ids, as `featurize` makes them in training) ...
FEATURIZER_OPTIONS = ("truncation", "max_first_length", "single_segment_id")
# ... and what its `ServingModule` takes (the signature's inputs and the outputs' post-processing).
MODULE_OPTIONS = ("pair", "label_names", "score_scale", "score_offset", "max_answer_length")


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One TFRecord feature: fixed shape, int64 (cast to int32 on read) or float32."""

    name: str
    shape: tuple[int, ...]
    is_int: bool = True

    def default(self) -> list:
        size = 1
        for d in self.shape:
            size *= d
        return [0 if self.is_int else 0.0] * size


def shared_feature_specs(config: FinetuningConfig) -> list[FeatureSpec]:
    length = config.max_seq_length
    return [
        FeatureSpec("input_ids", (length,)),
        FeatureSpec("input_mask", (length,)),
        FeatureSpec("segment_ids", (length,)),
        FeatureSpec("task_id", ()),
    ]


# `Task.write_test_predictions`' source: a split's name -> the task's per-example result dicts.
Predict = Callable[[str], Iterable[dict[str, Any]]]


def log(*args: Any) -> None:
    """A console line, flushed at once (runs are watched live, often through a pipe)."""
    print(*args, flush=True)


class Task(abc.ABC):
    """A fine-tuning task. `tokenizer` is a `FullTokenizer` (tokenize/convert_tokens_to_ids).

    Attributes:
        kind: what the task predicts, one of `task_table.TASK_KINDS` ("classification",
            "regression", "qa", "tagging"): the export serves the model as that kind, and a
            task of the table must be of its table row's kind.
    """

    kind: str = ""

    def __init__(self, config: FinetuningConfig, name: str, tokenizer: Any):
        self.config = config
        self.name = name
        self.tokenizer = tokenizer

    @property
    def task_id(self) -> int:
        return self.config.task_names.index(self.name)

    @abc.abstractmethod
    def get_examples(self, split: str) -> list[Any]:
        """Reads `finetuning_data/<task>/<split>.*`."""

    @abc.abstractmethod
    def featurize(self, example: Any, is_training: bool) -> list[dict[str, Any]]:
        """One example -> a list of flat feature dicts (QA gives one per document span)."""

    @abc.abstractmethod
    def feature_specs(self) -> list[FeatureSpec]:
        """This task's own features (`<task>_*`)."""

    @abc.abstractmethod
    def make_head(self, dtype: Any = None) -> keras.layers.Layer:
        """The prediction head: `head(encoder_outputs, features, training) -> (losses [B],
        outputs dict)`, with `variable_map()` keyed `task_specific/<task>/...`; `dtype`: its
        dtype policy (the model's; None: Keras' global policy), float32 losses under any."""

    @abc.abstractmethod
    def get_scorer(self, split: str = "dev") -> Any:
        """A fresh scorer (`update(per-example result dict)`, `get_results()`)."""

    def get_test_splits(self) -> list[str]:
        """The splits read without labels, by exact name."""
        return ["test"]

    def serving_options(self) -> dict[str, Any]:
        """How the export serves this task's model: keyword arguments for its `TextFeaturizer`
        and `ServingModule` (only the ones that differ from their defaults).

        Featurizer (`FEATURIZER_OPTIONS`), so that served text becomes the ids `featurize`
        makes: `truncation` ("longest_first" or "first_fixed"), `max_first_length` (the first
        text's cap under "first_fixed"), `single_segment_id` (the segment id of a single
        text's tokens, 0 or 1). Module (`MODULE_OPTIONS`): `pair` (the signature takes
        `text_a` and `text_b`), `label_names` (classification: the class names in label-id
        order; tagging: the tag names in label-id order), `score_scale` / `score_offset`
        (regression: output = prediction * scale + offset, back on the label scale),
        `max_answer_length` (qa). Raises `NotServable` for a model the export cannot serve.
        """
        return {}

    def featurization_key(self) -> dict[str, Any]:
        """Every setting of this task that changes its featurized records, beyond the shared
        ones (`FinetuningConfig.featurization_key`): its part of the TFRecord cache key, so
        that changing it re-featurizes this task's records and no other task's. JSON values."""
        return {}

    def label_strings(self) -> list[str] | None:
        """Label names for submission files; None for regression / span tasks."""
        return None

    def trained_state(self) -> dict[str, Any]:
        """What this task read from its data that the trained model depends on and the config
        does not hold (JSON values; {} for none): saved with each trial (`TASK_STATE_FILE`),
        so that the export builds the task without the data files."""
        return {}

    def use_trained_state(self, state: dict[str, Any]) -> None:
        """Takes back `trained_state()`'s dict (a trial's, at export) instead of reading it from
        the data."""
        del state  # a task that saves nothing takes nothing back

    @abc.abstractmethod
    def write_test_predictions(self, predict: Predict, out_dir: str, trial: int) -> None:
        """This trial's test-split predictions, in the task's benchmark submission format,
        written under `out_dir` (`write_test_outputs`); `predict(split)` yields the trained
        model's result dict for every real example of the split. A task whose benchmark
        takes no submission says so (`skip_test_predictions`)."""

    def skip_test_predictions(self) -> None:
        """The console line of a task that writes no test predictions."""
        log(f"Skipping {self.name}: writing test predictions is GLUE / SQuAD 2.0 only")


def save_trained_state(tasks: list[Task], directory: str) -> None:
    """Writes the tasks' `trained_state()` into a trial's `directory` (atomically)."""
    states = {task.name: task.trained_state() for task in tasks}
    write_json(os.path.join(directory, TASK_STATE_FILE), states, indent=2, sort_keys=True)


def use_trained_state(tasks: list[Task], directory: str) -> None:
    """Gives each task its state saved in the trial `directory`, where the trial has one (a
    trial from before this file existed: the tasks read their data as they did)."""
    path = os.path.join(directory, TASK_STATE_FILE)
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        states = json.load(f)
    for task in tasks:
        task.use_trained_state(states.get(task.name, {}))
