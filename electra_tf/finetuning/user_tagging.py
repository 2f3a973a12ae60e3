"""A user's token-tagging task (named entities, chunks, ...) from CoNLL or JSONL files.

Built by `user_tasks.make_user_task` for a task description of kind "tagging" (README,
"Fine-tuning on your own data"). Its files:

- CoNLL (`.conll .txt .bio .iob`): one "word ... tag" line per token (columns split on white
  space), a blank line between sentences, `-DOCSTART-` lines skipped. The word is the first
  column and the tag the last, unless the description's "text" / "label" give column
  indices (0-based, e.g. "label": "3"; "-1" the last).
- JSONL: one object a line, `{"tokens": [...], "tags": [...]}`, the keys named by the
  description's "text" and "label".

Labels are the tags AS WRITTEN in the train file (sorted, or the description's "labels"):
the model learns them and the export answers them, so IOB1 in is IOB1 out and BIO in is BIO
out. Dev metrics are entity-level precision, recall and F1 with seqeval's conventions
(`tag_schemes.get_entities`), which read IOB1, IOB2 and BIOES alike. Featurization is the
chunk task's (the first word-piece of each word labelled, its truncation) with segment ids 0,
as any single text.
"""

from __future__ import annotations

import json
import os
from typing import Any

from electra_tf.config import ConfigError
from electra_tf.finetuning import scorers
from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.tag_schemes import check_tag, detect_scheme, is_valid_tag
from electra_tf.finetuning.tagging import Sentence, TaggingTask, read_conll
from electra_tf.finetuning.task import DataError, Predict

JSONL_EXTENSIONS = (".jsonl", ".json")


def file_format(description: dict[str, Any], path: str) -> str:
    """ "jsonl" or "conll": the description's "format", else by `path`'s extension."""
    fmt = description.get("format")
    if fmt is None:
        fmt = "jsonl" if path.lower().endswith(JSONL_EXTENSIONS) else "conll"
    if fmt not in ("jsonl", "conll"):
        raise DataError(f"{path}: a tagging task reads 'conll' or 'jsonl' files, not {fmt!r}")
    return fmt


def _column(description: dict[str, Any], key: str, default: int) -> int:
    """A CoNLL column index the description gives as "text" / "label" ("3", "-1"), else
    `default` (a CoNLL file has no header: a column name there means the default)."""
    value = description.get(key)
    try:
        return int(value) if not isinstance(value, bool) else default
    except (TypeError, ValueError):
        return default


def _jsonl_sentence(path: str, number: int, line: str, keys: tuple[str, str]) -> Sentence:
    """One JSONL line's tokens and tags; DataError naming `path:line` and the fix."""
    where = f"{path}:{number}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: not JSON ({e.msg}); write one JSON object a line") from None
    if not isinstance(record, dict):
        raise DataError(f"{where}: a JSONL line must be an object like {{{keys[0]!r}: [...]}}")
    lists = []
    for key in keys:
        value = record.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise DataError(
                f"{where}: key {key!r} must be a list of strings (keys here: "
                f"{', '.join(map(repr, record))}); set the task file's 'text' / 'label'"
            )
        lists.append(value)
    tokens, tags = lists
    if len(tokens) != len(tags):
        raise DataError(
            f"{where}: {len(tokens)} {keys[0]} but {len(tags)} {keys[1]}; give every token "
            "exactly one tag"
        )
    if not tokens:
        raise DataError(f"{where}: no tokens; remove the line or give it tokens and tags")
    return Sentence(tokens, [check_tag(t, where) for t in tags], [number] * len(tags))


def read_jsonl_tags(path: str, keys: tuple[str, str], max_sentences: int | None = None):
    """The sentences of a JSONL tagging file (`keys`: the tokens' and the tags' keys)."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found; fix the path in the task file")
    sentences: list[Sentence] = []
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                sentences.append(_jsonl_sentence(path, number, line, keys))
                if max_sentences is not None and len(sentences) >= max_sentences:
                    break
    if not sentences:
        raise DataError(f"{path}: no sentence; write one JSON object a line")
    return sentences


def read_sentences(
    description: dict[str, Any], split: str, max_sentences: int | None = None
) -> list[Sentence]:
    """The sentences of the description's `split` file (CoNLL or JSONL)."""
    path = description[split]
    if file_format(description, path) == "jsonl":
        keys = (description.get("text", "tokens"), description.get("label", "tags"))
        return read_jsonl_tags(path, keys, max_sentences)
    word, tag = _column(description, "text", 0), _column(description, "label", -1)
    return read_conll(path, max_sentences, word, tag)


def read_tag_labels(description: dict[str, Any]) -> list[str]:
    """The sorted tags of the description's train file, as written (its `labels`)."""
    return sorted({tag for s in read_sentences(description, "train") for tag in s.tags})


def complete_description(description: dict[str, Any], where: str) -> dict[str, Any]:
    """`description` (a tagging task's, its paths and format resolved) with `labels` (the
    train file's tags, sorted; a user's list is kept, every train tag must be in it) and
    `tag_scheme` ("auto": detected from the train file) filled in.

    Args:
        description: the task description (`task_spec`); changed in place and returned.
        where: the task file, for errors about its keys.
    """
    sentences = read_sentences(description, "train")
    given = description.get("labels")
    if given:
        for label in given:
            if not isinstance(label, str) or not is_valid_tag(label):
                raise ConfigError(
                    f'{where}: "labels": {label!r} is not O or B-/I-/E-/S- followed by a type'
                )
        for sentence in sentences:
            for tag, line in zip(sentence.tags, sentence.lines, strict=True):
                if tag not in given:
                    raise DataError(
                        f"{description['train']}:{line}: tag {tag!r} is not in the task "
                        f'file\'s "labels"; add it there or remove "labels"'
                    )
    else:
        description["labels"] = sorted({t for s in sentences for t in s.tags})
    if description.get("tag_scheme", "auto") == "auto":
        description["tag_scheme"] = detect_scheme(s.tags for s in sentences)
    return description


class UserTaggingTask(TaggingTask):
    """A tagging task described by data files (`config.user_tasks[name]`).

    Args:
        config: the run's config.
        name: the task's name.
        tokenizer: a `FullTokenizer`.
        description: the task description (default `config.user_tasks[name]`): "train",
            "dev" (and optional "test") paths, "format", "text", "label", "labels".
    """

    segment_id = 0

    def truncates_before(self, index: int, n_words: int, n_ids: int, n_pieces: int) -> bool:
        """A word is kept while its pieces and the closing [SEP] fit (not the original's test,
        which cuts a sentence of n one-piece words past n = (max_seq_length - 4) / 2)."""
        last = index == n_words - 1  # the closing [SEP], whose room every word leaves
        return not last and n_ids + n_pieces + 1 > self.config.max_seq_length

    def __init__(
        self,
        config: FinetuningConfig,
        name: str,
        tokenizer: Any,
        description: dict[str, Any] | None = None,
    ):
        super().__init__(config, name, tokenizer)
        self.description = dict(config.user_tasks[name] if description is None else description)

    def split_file(self, split: str) -> str:
        return self.description.get(split) or ""

    def get_test_splits(self) -> list[str]:
        return ["test"] if self.description.get("test") else []

    def _sentences(self, split: str) -> list[Sentence]:
        return read_sentences(self.description, split, 100 if self.config.debug else None)

    def labels(self) -> list[str]:
        """The tags as written: the description's "labels", else the train file's."""
        return list(self.description.get("labels") or read_tag_labels(self.description))

    def label_mapping(self) -> dict[str, int]:
        if self._label_mapping is None:
            self._label_mapping = {tag: i for i, tag in enumerate(self.labels())}
        return self._label_mapping

    def label_ids(self, sentence: Sentence, path: str) -> list[int]:
        """The sentence's tags as written, as label ids; DataError for a tag train never had."""
        mapping = self.label_mapping()
        for tag, line in zip(sentence.tags, sentence.lines, strict=True):
            if tag not in mapping:
                raise DataError(
                    f"{path}:{line}: tag {tag!r} is not in the train file's tags "
                    f"({', '.join(mapping)}); fix the tag or add sentences with it to train"
                )
        return [mapping[tag] for tag in sentence.tags]

    def get_scorer(self, split: str = "dev") -> scorers.Scorer:
        return scorers.EntityLevelF1Scorer(self.label_mapping(), reading="seqeval")

    def serving_options(self) -> dict[str, Any]:
        """The tags as the user wrote them, in label-id order; segment ids 0."""
        return {"label_names": self.labels(), "single_segment_id": self.segment_id}

    def featurization_key(self) -> dict[str, Any]:
        """The complete description (files, columns, labels and their order)."""
        return {"description": self.description, "labels": self.labels()}

    def write_test_predictions(self, predict: Predict, out_dir: str, trial: int) -> None:
        self.skip_test_predictions()
