"""SQuAD v1.1 / v2.0 and MRQA evaluation, computing what the official scripts compute.

- v1.1: exact_match / f1 over all questions (unanswered ones score 0), x100.
- v2.0: exact / f1 / total after the no-answer threshold, HasAns_* / NoAns_* splits, and
  best_exact / best_f1 with their thresholds (the original evaluates at na_prob_thresh -2.75
  with the answerability logit as the "probability").
- MRQA: the v1.1 metrics over answers keyed by `qid`; unanswered questions are skipped, as the
  original's call (`skip_no_answer=True`).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_score(gold: str, pred: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(pred))


def f1_score_v1(gold: str, pred: str) -> float:
    """v1.1 F1: 0 when nothing is shared (even if both are empty)."""
    pred_toks, gold_toks = normalize_answer(pred).split(), normalize_answer(gold).split()
    same = sum((collections.Counter(pred_toks) & collections.Counter(gold_toks)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def f1_score_v2(gold: str, pred: str) -> float:
    """v2.0 F1: two empty answers agree (1), one empty answer scores 0."""
    gold_toks, pred_toks = normalize_answer(gold).split(), normalize_answer(pred).split()
    if not gold_toks or not pred_toks:
        return float(gold_toks == pred_toks)
    return f1_score_v1(gold, pred)


def _questions(dataset: list[dict]) -> Iterable[dict]:
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def evaluate_v1(dataset: list[dict], predictions: dict[str, str]) -> dict[str, float]:
    """`dataset` is the SQuAD json's "data" list."""
    em = f1 = 0.0
    total = 0
    for qa in _questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            continue
        golds = [a["text"] for a in qa["answers"]]
        pred = predictions[qa["id"]]
        em += max(exact_score(g, pred) for g in golds)
        f1 += max(f1_score_v1(g, pred) for g in golds)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


def _best_threshold(preds, scores, na_probs, has_ans) -> tuple[float, float]:
    """The official sweep: start from answering nothing, add questions by rising na_prob."""
    current = best = sum(1 for q in has_ans if not has_ans[q])
    threshold = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_ans[qid]:
            current += scores[qid]
        else:
            current += -1 if preds[qid] else 0
        if current > best:
            best, threshold = current, na_probs[qid]
    return 100.0 * best / len(scores), threshold


def evaluate_v2(
    dataset: list[dict],
    predictions: dict[str, str],
    na_probs: dict[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    has_ans = {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}
    exact_raw: dict[str, float] = {}
    f1_raw: dict[str, float] = {}
    for qa in _questions(dataset):
        qid = qa["id"]
        if qid not in predictions:
            continue
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        pred = predictions[qid]
        exact_raw[qid] = max(exact_score(g, pred) for g in golds)
        f1_raw[qid] = max(f1_score_v2(g, pred) for g in golds)
    if na_probs is None:
        na_probs = {k: 0.0 for k in predictions}

    def thresholded(raw):
        return {
            q: (float(not has_ans[q]) if na_probs[q] > na_prob_thresh else s)
            for q, s in raw.items()
        }

    exact_t, f1_t = thresholded(exact_raw), thresholded(f1_raw)

    def summary(qids):
        return {
            "exact": 100.0 * sum(exact_t[q] for q in qids) / len(qids),
            "f1": 100.0 * sum(f1_t[q] for q in qids) / len(qids),
            "total": len(qids),
        }

    out = summary(list(exact_t))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in exact_t if has_ans[q] == wanted]
        if qids:
            out.update({f"{prefix}_{k}": v for k, v in summary(qids).items()})
    out["best_exact"], out["best_exact_thresh"] = _best_threshold(
        predictions, exact_raw, na_probs, has_ans
    )
    out["best_f1"], out["best_f1_thresh"] = _best_threshold(predictions, f1_raw, na_probs, has_ans)
    return out


def evaluate_mrqa(answers: dict[str, list[str]], predictions: dict[str, str]) -> dict[str, float]:
    """`answers`: qid -> gold answer strings. Questions without a prediction are skipped."""
    em = f1 = 0.0
    total = 0
    for qid, golds in answers.items():
        if qid not in predictions:
            continue
        total += 1
        em += max(exact_score(g, predictions[qid]) for g in golds)
        f1 += max(f1_score_v1(g, predictions[qid]) for g in golds)
    total = max(total, 1)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}
