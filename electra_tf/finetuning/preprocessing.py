"""Featurized TFRecords and their tf.data pipelines (the original's `preprocessing.py`).

As the original: training examples are shuffled before writing, every file is padded to a
multiple of the batch size with examples whose `task_id` is `len(task_names)` (they are skipped
by the loss and the scorers), training reads `repeat -> shuffle(100) -> batch(drop_remainder)`,
train steps = `int(n_examples // batch_size * num_train_epochs)`.

Unlike the original, a cached file is reused only when everything that shapes its records
matches: the shared settings (`FinetuningConfig.featurization_key()`), each of its tasks' own
(`Task.featurization_key()`: a QA task's doc_stride re-keys that task's records, not a GLUE
task's), the split, the tasks, the batch size and the raw files' size and modification time,
all recorded in the `.metadata` file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
from typing import Any

import tensorflow as tf

from electra_tf.config import ConfigError
from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.task import FeatureSpec, Task, shared_feature_specs
from electra_tf.runtime.atomic_io import write_json


def _feature(spec: FeatureSpec, values: Any) -> tf.train.Feature:
    if not isinstance(values, (list, tuple)):
        values = [values]
    if spec.is_int:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))
    return tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in values]))


class Preprocessor:
    """Writes / reuses the TFRecords of a set of tasks and builds their datasets."""

    def __init__(self, config: FinetuningConfig, tasks: list[Task]):
        self.config = config
        self.tasks = tasks
        self.specs = shared_feature_specs(config)
        for task in tasks:
            self.specs += task.feature_specs()
        self._by_name = {spec.name: spec for spec in self.specs}

    # ------------------------------------------------------------------ records
    def make_example(self, features: dict[str, Any]) -> tf.train.Example:
        unknown = set(features) - set(self._by_name)
        if unknown:
            raise ValueError(f"unknown features {sorted(unknown)}")
        feature = {
            spec.name: _feature(spec, features.get(spec.name, spec.default()))
            for spec in self.specs
        }
        return tf.train.Example(features=tf.train.Features(feature=feature))

    def padding_example(self) -> tf.train.Example:
        return self.make_example({"task_id": len(self.config.task_names)})

    def _cache_key(self, tasks: list[Task], split: str, batch_size: int, is_training: bool):
        raw = {}
        for task in tasks:
            path = task.split_file(split)
            stat = os.stat(path) if os.path.exists(path) else None
            raw[path] = [stat.st_size, stat.st_mtime_ns] if stat else None
        return {
            **self.config.featurization_key(),
            # A record's task_id is its task's index in task_names.
            "task_names": list(self.config.task_names),
            "task_keys": {t.name: t.featurization_key() for t in tasks},
            "split": split,
            "tasks": sorted(t.name for t in tasks),
            "batch_size": batch_size,
            "is_training": is_training,
            "seed": self.config.seed if is_training else None,
            "raw_files": raw,
            "features": [[s.name, list(s.shape), s.is_int] for s in self.specs],
        }

    def _examples(self, tasks: list[Task], split: str, is_training: bool) -> list[Any]:
        examples: list[Any] = []
        for task in tasks:
            task_examples = task.get_examples(split)
            if is_training and self.config.max_train_examples is not None:
                task_examples = task_examples[: self.config.max_train_examples]
            examples += [(task, e) for e in task_examples]
        if is_training:
            random.Random(self.config.seed).shuffle(examples)
        return examples

    def serialize(self, tasks: list[Task], split: str, is_training: bool) -> tuple[str, int]:
        """Returns (tfrecord path, number of records incl. padding)."""
        batch_size = self.config.train_batch_size if is_training else self.config.eval_batch_size
        key = self._cache_key(tasks, split, batch_size, is_training)
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
        name = "_".join(sorted(t.name for t in tasks)) + f"_{split}-{digest}"
        prefix = os.path.join(self.config.tfrecords_dir(), name)
        record_path, metadata_path = prefix + ".tfrecord", prefix + ".metadata"
        if self.config.use_tfrecords_if_existing and os.path.exists(metadata_path):
            with open(metadata_path, encoding="utf-8") as f:
                metadata = json.load(f)
            if metadata.get("key") == key and os.path.exists(record_path):
                return record_path, metadata["n_examples"]
        os.makedirs(self.config.tfrecords_dir(), exist_ok=True)
        n = 0
        tmp = f"{record_path}.tmp-{os.getpid()}"
        try:
            with tf.io.TFRecordWriter(tmp) as writer:
                for index, (task, example) in enumerate(self._examples(tasks, split, is_training)):
                    for features in task.featurize(example, is_training):
                        if self.config.log_examples and index == 0:
                            print(f"[{task.name} {split}] first example: {features}", flush=True)
                        writer.write(self.make_example(features).SerializeToString())
                        n += 1
                while n % batch_size:
                    writer.write(self.padding_example().SerializeToString())
                    n += 1
        except BaseException:  # bad data, Ctrl-C, SIGTERM: no half-written file left behind
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
        os.replace(tmp, record_path)
        write_json(metadata_path, {"n_examples": n, "key": key}, indent=2, sort_keys=True)
        return record_path, n

    # ------------------------------------------------------------------ datasets
    def decode(self, record: tf.Tensor) -> dict[str, tf.Tensor]:
        spec = {
            s.name: tf.io.FixedLenFeature(s.shape, tf.int64 if s.is_int else tf.float32)
            for s in self.specs
        }
        example = tf.io.parse_single_example(record, spec)
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in example.items()}

    def dataset(self, path: str, is_training: bool, start_step: int = 0) -> tf.data.Dataset:
        """The split's batches; training's from step `start_step` on (a resumed trial's: the
        stream is a function of the seed, so skipping the records of the steps done continues
        it where the stopped trial was, before any record is decoded)."""
        batch_size = self.config.train_batch_size if is_training else self.config.eval_batch_size
        d = tf.data.TFRecordDataset(path)
        if is_training:
            d = d.repeat().shuffle(100, seed=self.config.seed)
            if start_step:
                d = d.skip(start_step * batch_size)
        d = d.map(self.decode, num_parallel_calls=tf.data.AUTOTUNE)
        return d.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    def prepare_train(self, start_step: int = 0) -> tuple[tf.data.Dataset, int]:
        """(the training batches from `start_step` on, the trial's steps)."""
        path, n = self.serialize(self.tasks, "train", True)
        return self.dataset(path, True, start_step), self.count_steps(n)[0]

    def train_steps(self) -> tuple[int, int]:
        """(the trial's training steps, the steps of one epoch); ConfigError for 0 steps."""
        return self.count_steps(self.serialize(self.tasks, "train", True)[1])

    def count_steps(self, n: int) -> tuple[int, int]:
        """`train_steps` for a train file of `n` records."""
        batches = n // self.config.train_batch_size  # n is padded to whole batches
        steps = int(batches * self.config.num_train_epochs)
        if steps < 1:
            epochs = math.ceil(100 / max(batches, 1)) / 100
            raise ConfigError(
                f"num_train_epochs {self.config.num_train_epochs:g} gives 0 training steps: "
                f"the train split is {batches} batch(es) of train_batch_size "
                f"{self.config.train_batch_size} per epoch ({n} examples with padding); set "
                f"num_train_epochs to at least {epochs:g} or lower train_batch_size"
            )
        return steps, batches

    def prepare_predict(self, tasks: list[Task], split: str) -> tuple[tf.data.Dataset, int]:
        path, n = self.serialize(tasks, split, False)
        return self.dataset(path, False), n // self.config.eval_batch_size
