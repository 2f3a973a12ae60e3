"""Span QA tasks (the original's `qa_tasks.py`): SQuAD 2.0 / 1.1 json and MRQA jsonl.

Examples keep the whitespace-split document; featurization cuts the word-piece document into
spans of `max_seq_length - len(query) - 3` tokens every `doc_stride` tokens,
`[CLS] query [SEP] span [SEP]`, segment ids 0 then 1. A training answer outside a span (and an
impossible question) points at [CLS] (position 0). Prediction post-processing is in
`qa_predictions.py`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from electra_tf.finetuning import heads
from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.task import DataError, FeatureSpec, NotServable, Predict, Task, log
from electra_tf.runtime.atomic_io import write_json


@dataclasses.dataclass
class QAExample:
    task_name: str
    eid: int
    qas_id: str | None  # SQuAD question id
    qid: str | None  # MRQA question id
    question_text: str
    doc_tokens: list[str]
    orig_answer_text: str | None = None
    start_position: int | None = None  # word index in doc_tokens
    end_position: int | None = None
    is_impossible: bool = False
    answers: list[str] = dataclasses.field(default_factory=list)  # gold texts (MRQA eval)

    @property
    def example_id(self) -> str:
        # SQuAD questions carry an "id", MRQA ones a "qid" (not the task's name: a registered
        # QA task may be called anything).
        return self.qas_id if self.qas_id is not None else self.qid


def _is_whitespace(c: str) -> bool:
    return c in " \t\r\n" or ord(c) == 0x202F


def split_document(text: str) -> tuple[list[str], list[int]]:
    """Whitespace words and, per character, the index of the word it belongs to."""
    words: list[str] = []
    char_to_word: list[int] = []
    prev_space = True
    for c in text:
        if _is_whitespace(c):
            prev_space = True
        else:
            if prev_space:
                words.append(c)
            else:
                words[-1] += c
            prev_space = False
        char_to_word.append(len(words) - 1)
    return words, char_to_word


def _doc_spans(doc_length: int, max_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) windows of at most `max_doc` tokens, `doc_stride` apart, covering the
    document (the original's sliding window)."""
    spans: list[tuple[int, int]] = []
    offset = 0
    while offset < doc_length:
        length = min(doc_length - offset, max_doc)
        spans.append((offset, length))
        if offset + length == doc_length:
            break
        offset += min(length, doc_stride)
    return spans


def _max_context(spans: list[tuple[int, int]], span_index: int, position: int) -> bool:
    """True when `span_index` gives token `position` the most context (BERT's rule)."""
    best_score, best_index = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, i
    return span_index == best_index


class QATask(Task):
    """SQuAD-style span extraction; `v2` adds unanswerable questions."""

    kind = "qa"

    def __init__(self, config: FinetuningConfig, name: str, tokenizer: Any, v2: bool = False):
        super().__init__(config, name, tokenizer)
        self.v2 = v2
        self._examples: dict[str, list[QAExample]] = {}
        self.failures = 0

    # ------------------------------------------------------------------ reading
    def split_file(self, split: str) -> str:
        raise NotImplementedError

    def add_paragraph(self, examples: list, paragraph: dict, split: str, where: str) -> None:
        try:
            context = paragraph["context"]
            qas = paragraph["qas"]
        except (KeyError, TypeError) as e:
            raise DataError(f"{where}: paragraph without {e}") from None
        doc_tokens, char_to_word = split_document(context)
        for qa in qas:
            try:
                example = self._make_example(qa, doc_tokens, char_to_word, split, len(examples))
            except (KeyError, IndexError, TypeError) as e:
                raise DataError(f"{where}: malformed question ({type(e).__name__}: {e})") from None
            if example is None:
                self.failures += 1
            else:
                examples.append(example)

    def _make_example(self, qa, doc_tokens, char_to_word, split, eid) -> QAExample | None:
        gold = [a["text"] for a in qa.get("answers", []) if isinstance(a, dict)]
        gold += [a for a in qa.get("answers", []) if isinstance(a, str)]  # MRQA gives strings
        example = QAExample(
            task_name=self.name,
            eid=eid,
            qas_id=qa.get("id"),
            qid=qa.get("qid"),
            question_text=qa["question"],
            doc_tokens=doc_tokens,
            answers=gold,
        )
        if split != "train":
            return example
        if self.v2 and qa["is_impossible"]:
            example.is_impossible = True
            example.start_position = example.end_position = -1
            example.orig_answer_text = ""
            return example
        if "detected_answers" in qa:  # MRQA
            answer = qa["detected_answers"][0]
            offset = answer["char_spans"][0][0]
        else:
            answer = qa["answers"][0]
            offset = answer["answer_start"]
        text = answer["text"]
        if offset + len(text) - 1 >= len(char_to_word):
            return None  # the original skips answers past the document's end
        start, end = char_to_word[offset], char_to_word[offset + len(text) - 1]
        actual = " ".join(doc_tokens[start : end + 1]).lower()
        if actual.find(" ".join(text.split()).lower()) == -1:
            return None  # ... and answers whose text is not in the document
        example.orig_answer_text, example.start_position, example.end_position = text, start, end
        return example

    # ------------------------------------------------------------------ features
    def featurization_key(self) -> dict[str, Any]:
        return {
            "max_query_length": self.config.max_query_length,
            "doc_stride": self.config.doc_stride,
        }

    def serving_options(self) -> dict[str, Any]:
        """`[CLS] question [SEP] context [SEP]`, the question cut to `max_query_length` as in
        training; one window of context (no document stride at serving)."""
        if not self.config.joint_prediction:
            raise NotServable("serving supports the joint-prediction QA head only")
        return {
            "pair": True,
            "truncation": "first_fixed",
            "max_first_length": self.config.max_query_length,
            "max_answer_length": self.config.max_answer_length,
        }

    def feature_specs(self) -> list[FeatureSpec]:
        return [
            FeatureSpec(f"{self.name}_eid", ()),
            FeatureSpec(f"{self.name}_start_positions", ()),
            FeatureSpec(f"{self.name}_end_positions", ()),
            FeatureSpec(f"{self.name}_is_impossible", ()),
        ]

    def _improve_span(self, doc_tokens, start, end, answer_text) -> tuple[int, int]:
        """The tightest token span whose text equals the tokenized answer (BERT's fix-up)."""
        target = " ".join(self.tokenizer.tokenize(answer_text))
        for new_start in range(start, end + 1):
            for new_end in range(end, new_start - 1, -1):
                if " ".join(doc_tokens[new_start : new_end + 1]) == target:
                    return new_start, new_end
        return start, end

    def _answer_tokens(
        self, example: QAExample, orig_to_tok: list[int], doc: list[str]
    ) -> tuple[int, int]:
        """The answer's first and last WordPiece positions in the document."""
        tok_start = orig_to_tok[example.start_position]
        if example.end_position < len(example.doc_tokens) - 1:
            tok_end = orig_to_tok[example.end_position + 1] - 1
        else:
            tok_end = len(doc) - 1
        return self._improve_span(doc, tok_start, tok_end, example.orig_answer_text)

    def featurize(
        self, example: QAExample, is_training: bool, for_eval: bool = False
    ) -> list[dict[str, Any]]:
        config = self.config
        query = self.tokenizer.tokenize(example.question_text)[: config.max_query_length]
        tok_to_orig, orig_to_tok, doc = [], [], []
        for i, word in enumerate(example.doc_tokens):
            orig_to_tok.append(len(doc))
            for piece in self.tokenizer.tokenize(word):
                tok_to_orig.append(i)
                doc.append(piece)

        tok_start = tok_end = None
        if is_training and not example.is_impossible:
            tok_start, tok_end = self._answer_tokens(example, orig_to_tok, doc)
        max_doc = config.max_seq_length - len(query) - 3
        spans = _doc_spans(len(doc), max_doc, config.doc_stride)

        features = []
        for span_index, (span_start, span_length) in enumerate(spans):
            tokens = ["[CLS]", *query, "[SEP]"]
            segment_ids = [0] * len(tokens)
            token_to_orig, is_max_context = {}, {}
            for i in range(span_length):
                position = span_start + i
                token_to_orig[len(tokens)] = tok_to_orig[position]
                is_max_context[len(tokens)] = _max_context(spans, span_index, position)
                tokens.append(doc[position])
                segment_ids.append(1)
            tokens.append("[SEP]")
            segment_ids.append(1)
            input_ids = list(self.tokenizer.convert_tokens_to_ids(tokens))
            pad = config.max_seq_length - len(input_ids)
            start_position = end_position = 0
            if is_training and not example.is_impossible:
                span_end = span_start + span_length - 1
                if span_start <= tok_start and tok_end <= span_end:
                    start_position = tok_start - span_start + len(query) + 2
                    end_position = tok_end - span_start + len(query) + 2
            feature: dict[str, Any] = {
                "task_id": self.task_id,
                f"{self.name}_eid": 1000 * example.eid + span_index,
                "input_ids": input_ids + [0] * pad,
                "input_mask": [1] * len(input_ids) + [0] * pad,
                "segment_ids": segment_ids + [0] * pad,
            }
            if is_training:
                feature[f"{self.name}_start_positions"] = start_position
                feature[f"{self.name}_end_positions"] = end_position
                feature[f"{self.name}_is_impossible"] = int(example.is_impossible)
            if for_eval:
                feature.update(
                    tokens=tokens,
                    token_to_orig_map=token_to_orig,
                    token_is_max_context=is_max_context,
                )
            features.append(feature)
        return features

    def make_head(self, dtype: Any = None) -> heads.SpanQAHead:
        c = self.config
        return heads.SpanQAHead(
            self.name,
            beam_size=c.beam_size,
            joint_prediction=c.joint_prediction,
            answerable_classifier=c.answerable_classifier,
            answerable_uses_start_logits=c.answerable_uses_start_logits,
            answerable_weight=c.answerable_weight,
            dtype=dtype,
        )

    def get_scorer(self, split: str = "dev"):
        from electra_tf.finetuning.qa_predictions import SpanQAScorer

        return SpanQAScorer(self.config, self, split, self.v2)

    def write_test_predictions(self, predict: Predict, out_dir: str, trial: int) -> None:
        """SQuAD 2.0's submission: `squad_test_<trial>_predictions.json` (the answers, "" where
        the null odds exceed `qa_na_threshold`) and `..._null_odds.json`; other QA tasks none."""
        if not (self.v2 and isinstance(self, SQuADTask)):
            self.skip_test_predictions()
            return
        scorer = self.get_scorer("test")
        for result in predict("test"):
            scorer.update(result)
        predictions, null_odds = scorer.write_predictions()
        answers = {
            q: ("" if null_odds[q] > self.config.qa_na_threshold else a)
            for q, a in predictions.items()
        }
        path = os.path.join(out_dir, f"{self.name}_test_{trial}_predictions.json")
        write_json(path, answers, indent=2)
        write_json(path.replace("_predictions.json", "_null_odds.json"), null_odds)
        log(f"Wrote {len(answers)} SQuAD test answers to {path}")


class SQuADTask(QATask):
    def split_file(self, split: str) -> str:
        suffix = "-debug" if self.config.debug else ""
        return os.path.join(self.config.raw_data_dir(self.name), f"{split}{suffix}.json")

    def load_dataset(self, split: str) -> list[dict]:
        path = self.split_file(split)
        try:
            with open(path, encoding="utf-8-sig") as f:
                return json.load(f)["data"]
        except FileNotFoundError:
            raise DataError(f"{path}: file not found") from None
        except (json.JSONDecodeError, KeyError) as e:
            raise DataError(f"{path}: not a SQuAD json file ({e})") from None

    def get_examples(self, split: str) -> list[QAExample]:
        if split not in self._examples:
            examples: list[QAExample] = []
            path = self.split_file(split)
            for a, article in enumerate(self.load_dataset(split)):
                for p, paragraph in enumerate(article.get("paragraphs", [])):
                    where = f"{path}: data[{a}].paragraphs[{p}]"
                    self.add_paragraph(examples, paragraph, split, where)
            self._examples[split] = examples
        return self._examples[split]


class MRQATask(QATask):
    def split_file(self, split: str) -> str:
        return os.path.join(self.config.raw_data_dir(self.name), f"{split}.jsonl")

    def get_examples(self, split: str) -> list[QAExample]:
        if split not in self._examples:
            examples: list[QAExample] = []
            path = self.split_file(split)
            if not os.path.exists(path):
                raise DataError(f"{path}: file not found")
            with open(path, encoding="utf-8-sig") as f:
                for i, line in enumerate(f):
                    if self.config.debug and i > 10:
                        break
                    if not line.strip():
                        continue
                    try:
                        paragraph = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise DataError(f"{path}:{i + 1}: invalid JSON ({e})") from None
                    if "header" in paragraph:
                        continue
                    self.add_paragraph(examples, paragraph, split, f"{path}:{i + 1}")
            self._examples[split] = examples
        return self._examples[split]


def squad_v2(config: FinetuningConfig, name: str, tokenizer: Any) -> QATask:
    """SQuAD 2.0 (unanswerable questions), as the task table builds it."""
    return SQuADTask(config, name, tokenizer, v2=True)


def squad_v1(config: FinetuningConfig, name: str, tokenizer: Any) -> QATask:
    """SQuAD 1.1."""
    return SQuADTask(config, name, tokenizer, v2=False)


def mrqa(config: FinetuningConfig, name: str, tokenizer: Any) -> QATask:
    """An MRQA task (NewsQA, Natural Questions, TriviaQA, SearchQA): JSONL paragraphs."""
    return MRQATask(config, name, tokenizer, v2=False)
