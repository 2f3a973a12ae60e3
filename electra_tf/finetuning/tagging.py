"""Token tagging: the original's chunking task (`tagging_tasks.py`) and the reading, labels,
featurization and head that user tagging tasks (`user_tagging.py`) share with it.

Chunk files are `finetuning_data/chunk/{train,dev,test}.txt` (CoNLL-2000, IOB2): one
"word ... tag" line per token, blank lines between sentences, `-DOCSTART-` lines skipped. As
the original, tags are read into spans with its reader (`scorers.get_span_labels`) and
re-encoded to BIOES; the label set is every BIOES tag of train, dev and test. Only the first
word-piece of each word is labelled; segment ids are 1 for every real token (unlike the
classification tasks), as the original. The export answers in the files' scheme, IOB2: a
BIOES prediction is served tag by tag as IOB2 (S-X -> B-X, E-X -> I-X).

The label set comes from the data on every run (reading the files is quick); it is part of
the task's TFRecord cache key, so records and heads built from other data are never mixed.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, NamedTuple

from electra_tf.finetuning import heads, scorers
from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.tag_schemes import bioes_to_iob2, check_tag
from electra_tf.finetuning.task import DataError, FeatureSpec, Predict, Task

LABEL_ENCODING = "BIOES"


@dataclasses.dataclass
class TaggingExample:
    eid: int
    task_name: str
    words: list[str]
    labels: list[int]


class Sentence(NamedTuple):
    """One sentence of a tagging file: its words, their tags and each tag's line number."""

    words: list[str]
    tags: list[str]
    lines: list[int]


def _conll_columns(
    path: str, number: int, line: str, word_column: int, tag_column: int
) -> tuple[str, str]:
    """(word, tag) of one line; DataError for a line without them (a word without its tag)."""
    columns = line.split()
    try:
        if len(columns) < 2:
            raise IndexError
        return columns[word_column], columns[tag_column]
    except IndexError:
        raise DataError(
            f"{path}:{number}: expected 'word ... tag' (word in column {word_column}, tag in "
            f"column {tag_column}), got {line.strip()!r}; give every token a tag"
        ) from None


def read_conll(
    path: str, max_sentences: int | None = None, word_column: int = 0, tag_column: int = -1
) -> list[Sentence]:
    """The sentences of a CoNLL file: "word ... tag" per line (columns split on white space;
    the word is column `word_column`, the tag column `tag_column`, default the last), blank
    lines between sentences, `-DOCSTART-` lines skipped. DataError naming `path:line` for a
    line without a tag or a tag that is not O / [BIES]-TYPE; for a file without a sentence."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    sentences: list[Sentence] = []
    current = Sentence([], [], [])
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                if current.words:
                    sentences.append(current)
                    current = Sentence([], [], [])
                    if max_sentences is not None and len(sentences) > max_sentences:
                        return sentences
                continue
            if line.split()[0] == "-DOCSTART-":
                continue
            word, tag = _conll_columns(path, number, line, word_column, tag_column)
            current.words.append(word)
            current.tags.append(check_tag(tag, f"{path}:{number}"))
            current.lines.append(number)
    if current.words:  # a file without a final blank line
        sentences.append(current)
    if not sentences:
        raise DataError(
            f"{path}: no tagged sentence; write one 'word ... tag' line per token and a blank "
            "line between sentences"
        )
    return sentences


class TaggingTask(Task):
    """Entity-level (span) tagging scored with span F1: the original's chunk task."""

    kind = "tagging"
    # The segment id of every real token (the original's chunking used 1).
    segment_id = 1

    def __init__(self, config: FinetuningConfig, name: str, tokenizer: Any):
        super().__init__(config, name, tokenizer)
        self._label_mapping: dict[str, int] | None = None

    def split_file(self, split: str) -> str:
        return os.path.join(self.config.raw_data_dir(self.name), f"{split}.txt")

    def _sentences(self, split: str) -> list[Sentence]:
        return read_conll(self.split_file(split), 100 if self.config.debug else None)

    def _bioes(self, sentence: Sentence) -> list[str]:
        spans = scorers.get_span_labels(sentence.tags)
        return scorers.get_tags(spans, len(sentence.words), LABEL_ENCODING)

    def label_mapping(self) -> dict[str, int]:
        """Sorted BIOES tags seen in any of train/dev/test (as the original), read from the
        data (not from a file another run left: the data may have changed since)."""
        if self._label_mapping is None:
            tags: set[str] = set()
            for split in ("train", "dev", "test"):
                if split == "train" or os.path.exists(self.split_file(split)):
                    for sentence in self._sentences(split):
                        tags.update(self._bioes(sentence))
            self._label_mapping = {tag: i for i, tag in enumerate(sorted(tags))}
        return self._label_mapping

    def trained_state(self) -> dict[str, Any]:
        """The label mapping (its ids are the head's outputs): the export needs no data."""
        return {"label_mapping": self.label_mapping()}

    def use_trained_state(self, state: dict[str, Any]) -> None:
        if "label_mapping" in state:
            self._label_mapping = {str(tag): int(i) for tag, i in state["label_mapping"].items()}

    def label_ids(self, sentence: Sentence, path: str) -> list[int]:
        """The label ids the model learns for `sentence` of the file `path`: its tags as BIOES
        (the original's re-encoding); every BIOES tag of the data has an id."""
        mapping = self.label_mapping()
        return [mapping[tag] for tag in self._bioes(sentence)]

    def get_examples(self, split: str) -> list[TaggingExample]:
        path = self.split_file(split)
        return [
            TaggingExample(i, self.name, sentence.words, self.label_ids(sentence, path))
            for i, sentence in enumerate(self._sentences(split))
        ]

    def featurize(self, example: TaggingExample, is_training: bool) -> list[dict[str, Any]]:
        length = self.config.max_seq_length
        # The original ran BERT's basic steps on each word (no whitespace split): tokenizing a
        # single word with the full tokenizer is the same.
        words = [["[CLS]"]] + [self.tokenizer.tokenize(w) for w in example.words] + [["[SEP]"]]
        input_ids: list[int] = []
        positions: list[int] = []
        for index, pieces in enumerate(words):
            if self.truncates_before(index, len(words), len(input_ids), len(pieces)):
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
                "segment_ids": pad([self.segment_id] * len(input_ids)),
                "task_id": self.task_id,
                f"{self.name}_eid": example.eid,
                f"{self.name}_labels": pad(example.labels[:length]),
                f"{self.name}_labels_mask": pad([1.0] * len(positions), 0.0),
                f"{self.name}_labeled_positions": pad(positions),
            }
        ]

    def truncates_before(self, index: int, n_words: int, n_ids: int, n_pieces: int) -> bool:
        """Whether the sentence is cut before word `index` of `n_words` ([CLS] and [SEP]
        counted), `n_ids` ids written so far and `n_pieces` the word's pieces. The original's
        test counts the words left, not their pieces: a sentence of n one-piece words is whole
        only while 2n + 4 <= max_seq_length (chunk keeps it, as the original)."""
        return n_words + n_ids + 1 > self.config.max_seq_length

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

    def serving_options(self) -> dict[str, Any]:
        """The tag names in label-id order, in the scheme of the chunk files (IOB2: the
        BIOES labels served tag by tag as IOB2); a single text's segment ids are 1, as in
        training."""
        mapping = self.label_mapping()
        names = [bioes_to_iob2(tag) for tag in sorted(mapping, key=mapping.get)]
        return {"label_names": names, "single_segment_id": self.segment_id}

    def featurization_key(self) -> dict[str, Any]:
        """The label ids of the records: the label mapping the data gives."""
        return {"label_mapping": self.label_mapping(), "label_encoding": LABEL_ENCODING}

    def write_test_predictions(self, predict: Predict, out_dir: str, trial: int) -> None:
        """Chunking has no benchmark submission format: none written."""
        self.skip_test_predictions()


def make_tagging_task(config: FinetuningConfig, name: str, tokenizer: Any) -> TaggingTask:
    return TaggingTask(config, name, tokenizer)
