"""Chunking (the original's `tagging_tasks.py`): CoNLL-2000 text, BIOES, first sub-tokens.

Files are `finetuning_data/chunk/{train,dev,test}.txt`: one "word ... tag" line per token, blank
lines between sentences, `-DOCSTART-` lines skipped. Tags are re-encoded to BIOES. Only the first
word-piece of each word is labelled; segment ids are 1 for every real token (unlike the
classification tasks), as the original.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from electra_tf.atomic_io import write_json
from electra_tf.finetuning import heads, scorers
from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.task import DataError, FeatureSpec, Predict, Task

LABEL_ENCODING = "BIOES"


@dataclasses.dataclass
class TaggingExample:
    eid: int
    task_name: str
    words: list[str]
    labels: list[int]


def read_conll(path: str, max_sentences: int | None = None) -> list[tuple[list[str], list[str]]]:
    """(words, tags) per sentence; the tag is the last column, the word the first."""
    if not os.path.exists(path):
        raise DataError(f"{path}: file not found")
    sentences: list[tuple[list[str], list[str]]] = []
    words: list[str] = []
    tags: list[str] = []
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, start=1):
            columns = line.strip().split()
            if not columns:
                if words:
                    sentences.append((words, tags))
                    words, tags = [], []
                    if max_sentences is not None and len(sentences) > max_sentences:
                        return sentences
                continue
            if columns[0] == "-DOCSTART-":
                continue
            if len(columns) < 2:
                raise DataError(f"{path}:{number}: expected 'word ... tag', got {line.strip()!r}")
            tag = columns[-1]
            if tag != "O" and (len(tag) < 3 or tag[1] != "-" or tag[0] not in "BIES"):
                raise DataError(f"{path}:{number}: tag {tag!r} is not O or [BIES]-TYPE")
            words.append(columns[0])
            tags.append(tag)
    if words:  # a file without a final blank line
        sentences.append((words, tags))
    return sentences


class TaggingTask(Task):
    """Entity-level (span) tagging scored with span F1."""

    def __init__(self, config: FinetuningConfig, name: str, tokenizer: Any):
        super().__init__(config, name, tokenizer)
        self._label_mapping: dict[str, int] | None = None

    def split_file(self, split: str) -> str:
        return os.path.join(self.config.raw_data_dir(self.name), f"{split}.txt")

    def _sentences(self, split: str):
        return read_conll(self.split_file(split), 100 if self.config.debug else None)

    def label_mapping(self) -> dict[str, int]:
        """Sorted BIOES tags seen in any of train/dev/test (as the original), stored next to
        the cached records so that a model and its records agree."""
        if self._label_mapping is None:
            path = os.path.join(self.config.tfrecords_dir(), f"{self.name}_label_mapping.json")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    self._label_mapping = json.load(f)
            else:
                tags = set()
                for split in ("train", "dev", "test"):
                    if not os.path.exists(self.split_file(split)):
                        continue
                    for words, sentence_tags in self._sentences(split):
                        spans = scorers.get_span_labels(sentence_tags)
                        tags.update(scorers.get_tags(spans, len(words), LABEL_ENCODING))
                if not tags:  # no data at all: a head with no labels fails deep in Keras
                    raise DataError(
                        f"{self.split_file('train')}: task {self.name} has no tagged sentences "
                        "in its train/dev/test.txt (one 'word ... tag' line per token)"
                    )
                self._label_mapping = {tag: i for i, tag in enumerate(sorted(tags))}
                write_json(path, self._label_mapping)
        return self._label_mapping

    def get_examples(self, split: str) -> list[TaggingExample]:
        mapping = self.label_mapping()
        examples = []
        for i, (words, tags) in enumerate(self._sentences(split)):
            bioes = scorers.get_tags(scorers.get_span_labels(tags), len(words), LABEL_ENCODING)
            examples.append(TaggingExample(i, self.name, words, [mapping[t] for t in bioes]))
        return examples

    def featurize(self, example: TaggingExample, is_training: bool) -> list[dict[str, Any]]:
        length = self.config.max_seq_length
        # The original ran BERT's basic steps on each word (no whitespace split): tokenizing a
        # single word with the full tokenizer is the same.
        words = [["[CLS]"]] + [self.tokenizer.tokenize(w) for w in example.words] + [["[SEP]"]]
        input_ids: list[int] = []
        positions: list[int] = []
        for index, pieces in enumerate(words):
            if len(words) + len(input_ids) + 1 > length:
                # The original's truncation test (it counts words, not pieces, left to add).
                input_ids.append(self.tokenizer.convert_tokens_to_ids(["[SEP]"])[0])
                break
            if 0 < index < len(words) - 1:
                positions.append(len(input_ids))
            input_ids += list(self.tokenizer.convert_tokens_to_ids(pieces))

        def pad(values, value=0):
            return values + [value] * (length - len(values))

        return [
            {
                "input_ids": pad(input_ids),
                "input_mask": pad([1] * len(input_ids)),
                "segment_ids": pad([1] * len(input_ids)),
                "task_id": self.task_id,
                f"{self.name}_eid": example.eid,
                f"{self.name}_labels": pad(example.labels[:length]),
                f"{self.name}_labels_mask": pad([1.0] * len(positions), 0.0),
                f"{self.name}_labeled_positions": pad(positions),
            }
        ]

    def feature_specs(self) -> list[FeatureSpec]:
        length = self.config.max_seq_length
        return [
            FeatureSpec(f"{self.name}_eid", ()),
            FeatureSpec(f"{self.name}_labels", (length,)),
            FeatureSpec(f"{self.name}_labels_mask", (length,), is_int=False),
            FeatureSpec(f"{self.name}_labeled_positions", (length,)),
        ]

    def make_head(self, dtype: Any = None) -> heads.TaggingHead:
        return heads.TaggingHead(self.name, len(self.label_mapping()), dtype=dtype)

    def get_scorer(self, split: str = "dev") -> scorers.Scorer:
        return scorers.EntityLevelF1Scorer(self.label_mapping())

    def write_test_predictions(self, predict: Predict, out_dir: str, trial: int) -> None:
        """Chunking has no benchmark submission format: none written."""
        self.skip_test_predictions()


def make_tagging_task(config: FinetuningConfig, name: str, tokenizer: Any) -> TaggingTask:
    return TaggingTask(config, name, tokenizer)
