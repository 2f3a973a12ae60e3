"""QA post-processing and scoring (the original's `qa_metrics.py`).

Per question: candidates from every feature's start beam x end beam, kept when both ends map
to document words, the start is not [CLS], the start token has its max context in that span,
end >= start and the length <= `max_answer_length`; ranked by start + end log-prob; the best
text (projected back onto the original words) is the answer. For SQuAD 2.0 the null score is the
minimum answerability logit over the question's features and the question is answered "" when
it exceeds the threshold (official v2 script, `qa_na_threshold` -2.75).
"""

from __future__ import annotations

import collections
import functools
import os

import numpy as np

from electra_tf.data.tokenization import BasicTokenizer
from electra_tf.finetuning import squad_eval
from electra_tf.finetuning.scorers import Scorer
from electra_tf.runtime.atomic_io import write_json


@functools.lru_cache(maxsize=2)
def _basic_tokenizer(do_lower_case: bool) -> BasicTokenizer:
    return BasicTokenizer(do_lower_case=do_lower_case)


def _basic_tokenize(text: str, do_lower_case: bool) -> list[str]:
    # BERT's BasicTokenizer, as the original's get_final_text (the project's, which gives Model
    # Garden's tokens: tests/test_tokenization.py); used only to align a predicted span with the
    # document's original characters.
    return _basic_tokenizer(do_lower_case).tokenize(text)


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool) -> str:
    """Maps word-piece text back onto the original span by aligning the two strings with
    spaces removed; falls back to the whole original span when they do not align."""

    def strip_spaces(text):
        chars, ns_to_s = [], {}
        for i, c in enumerate(text):
            if c == " ":
                continue
            ns_to_s[len(chars)] = i
            chars.append(c)
        return "".join(chars), ns_to_s

    tok_text = " ".join(_basic_tokenize(orig_text, do_lower_case))
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    orig_ns, orig_ns_to_s = strip_spaces(orig_text)
    tok_ns, tok_ns_to_s = strip_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        return orig_text
    tok_s_to_ns = {s: ns for ns, s in tok_ns_to_s.items()}
    if start not in tok_s_to_ns or end not in tok_s_to_ns:
        return orig_text
    orig_start = orig_ns_to_s.get(tok_s_to_ns[start])
    orig_end = orig_ns_to_s.get(tok_s_to_ns[end])
    if orig_start is None or orig_end is None:
        return orig_text
    return orig_text[orig_start : orig_end + 1]


class SpanQAScorer(Scorer):
    """Collects per-feature head outputs, writes predictions (+ null odds), scores them."""

    def __init__(self, config, task, split: str, v2: bool):
        super().__init__()
        self.config, self.task, self.split, self.v2 = config, task, split, v2
        self.name = task.name
        self._results: dict[int, dict] = {}

    def update(self, results: dict) -> None:
        super().update(results)
        self._results[int(results["eid"])] = results

    def predictions_path(self) -> str:
        return os.path.join(self.config.qa_dir(), f"{self.name}_preds.json")

    def null_odds_path(self) -> str:
        return os.path.join(self.config.qa_dir(), f"{self.name}_null_odds.json")

    def _candidates(self, feature, result):
        c = self.config
        n_tokens = len(feature["tokens"])
        to_orig, max_ctx = feature["token_to_orig_map"], feature["token_is_max_context"]
        if c.joint_prediction:
            starts = result["start_top_index"]
            ends_per_start = result["end_top_index"]
        else:
            order = list(np.argsort(-np.asarray(result["start_logits"]), kind="stable"))
            starts = order[: c.n_best_size]
            end_order = list(np.argsort(-np.asarray(result["end_logits"]), kind="stable"))
            ends_per_start = [end_order[: c.n_best_size]] * len(starts)
        for i, start in enumerate(starts):
            for j, end in enumerate(ends_per_start[i]):
                start, end = int(start), int(end)
                if start >= n_tokens or end >= n_tokens or start == 0:
                    continue
                if start not in to_orig or end not in to_orig or not max_ctx.get(start, False):
                    continue
                if end < start or end - start + 1 > c.max_answer_length:
                    continue
                if c.joint_prediction:
                    score = (
                        float(result["start_top_log_probs"][i]),
                        float(result["end_top_log_probs"][i][j]),
                    )
                else:
                    score = (float(result["start_logits"][start]), float(result["end_logits"][end]))
                yield start, end, score

    def write_predictions(self) -> tuple[dict[str, str], dict[str, float]]:
        predictions: dict[str, str] = collections.OrderedDict()
        null_odds: dict[str, float] = collections.OrderedDict()
        for example in self.task.get_examples(self.split):
            features = self.task.featurize(example, False, for_eval=True)
            prelim = []
            score_null = 1000000.0
            for feature_index, feature in enumerate(features):
                result = self._results[feature[f"{self.name}_eid"]]
                if self.v2:
                    if self.config.answerable_classifier:
                        null = float(result["answerable_logit"])
                    else:
                        null = float(result["start_logits"][0] + result["end_logits"][0])
                    score_null = min(score_null, null)
                for start, end, (s, e) in self._candidates(feature, result):
                    prelim.append((s + e, feature_index, start, end, s, e))
            prelim.sort(key=lambda x: x[0], reverse=True)
            nbest, seen = [], set()
            for _, feature_index, start, end, s, e in prelim:
                if len(nbest) >= self.config.n_best_size:
                    break
                feature = features[feature_index]
                tok_text = " ".join(feature["tokens"][start : end + 1])
                tok_text = " ".join(tok_text.replace(" ##", "").replace("##", "").strip().split())
                orig_start = feature["token_to_orig_map"][start]
                orig_end = feature["token_to_orig_map"][end]
                orig_text = " ".join(example.doc_tokens[orig_start : orig_end + 1])
                text = get_final_text(tok_text, orig_text, self.config.do_lower_case)
                if text in seen:
                    continue
                seen.add(text)
                nbest.append((text, s, e))
            if not nbest:
                nbest.append(("empty", 0.0, 0.0))
            best_non_null = next((n for n in nbest if n[0]), nbest[0])
            qid = example.example_id
            if not self.v2:
                predictions[qid] = nbest[0][0]
            else:
                if self.config.answerable_classifier:
                    null_odds[qid] = score_null
                else:
                    null_odds[qid] = score_null - best_non_null[1] - best_non_null[2]
                predictions[qid] = best_non_null[0]
        write_json(self.predictions_path(), predictions, indent=2)
        if self.v2:
            write_json(self.null_odds_path(), null_odds, indent=2)
        return predictions, null_odds

    def get_results(self) -> list[tuple[str, float]]:
        predictions, null_odds = self.write_predictions()
        # By the task's data, not its name: a registered SQuAD-format task scores as SQuAD.
        if hasattr(self.task, "load_dataset") and self.v2:  # SQuAD 2.0 json
            dataset = self.task.load_dataset(self.split)
            results = squad_eval.evaluate_v2(
                dataset, predictions, null_odds, self.config.qa_na_threshold
            )
        elif hasattr(self.task, "load_dataset"):  # SQuAD 1.1 json
            results = squad_eval.evaluate_v1(self.task.load_dataset(self.split), predictions)
        else:  # MRQA jsonl
            answers = {e.qid: e.answers for e in self.task.get_examples(self.split)}
            results = squad_eval.evaluate_mrqa(answers, predictions)
        return sorted(results.items()) + [("loss", self.get_loss())]
