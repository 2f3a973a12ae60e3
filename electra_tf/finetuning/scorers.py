"""Dev-set scorers (the original's `classification_metrics.py` / `tagging_metrics.py`).

Metrics are x100 (MSE and loss are not, as the original). Each scorer takes per-example result
dicts through `update` and reports an ordered list of (name, value) from `get_results`.
MCC, Pearson and Spearman are computed here in NumPy (the original called scikit-learn and
SciPy); the tests check them against those libraries.
"""

from __future__ import annotations

import numpy as np

from electra_tf.finetuning.tag_schemes import get_entities


class Scorer:
    def __init__(self) -> None:
        self._total_loss = 0.0
        self._count = 0

    def update(self, results: dict) -> None:
        self._total_loss += float(np.sum(results["loss"]))
        self._count += 1

    def get_loss(self) -> float:
        return self._total_loss / max(1, self._count)

    def get_results(self) -> list[tuple[str, float]]:
        raise NotImplementedError

    def results_str(self) -> str:
        return " - ".join(f"{k}: {v:.2f}" for k, v in self.get_results())


class SentenceLevelScorer(Scorer):
    def __init__(self) -> None:
        super().__init__()
        self._labels: list = []
        self._preds: list = []

    def update(self, results: dict) -> None:
        super().update(results)
        self._labels.append(results["label_ids"] if "label_ids" in results else results["targets"])
        self._preds.append(results["predictions"])


class AccuracyScorer(SentenceLevelScorer):
    def get_results(self) -> list[tuple[str, float]]:
        labels, preds = np.asarray(self._labels), np.asarray(self._preds)
        return [("accuracy", 100.0 * float(np.mean(labels == preds))), ("loss", self.get_loss())]


def macro_f1(labels, preds) -> float:
    """The unweighted mean of the per-class F1 over the classes present in `labels` or `preds`
    (scikit-learn's `f1_score(average="macro")`; a class with no true or predicted example
    would only add a 0 for a class the split does not test). 0/0 counts as 0."""
    labels, preds = np.asarray(labels), np.asarray(preds)
    scores = []
    for c in np.union1d(labels, preds):
        true_positive = float(np.sum((labels == c) & (preds == c)))
        denominator = float(np.sum(labels == c) + np.sum(preds == c))
        scores.append(2.0 * true_positive / denominator if denominator else 0.0)
    return float(np.mean(scores)) if scores else 0.0


class AccuracyF1Scorer(SentenceLevelScorer):
    """Accuracy and macro F1 (every class counted alike, however rare): user classification
    tasks, whose classes are often unbalanced."""

    def get_results(self) -> list[tuple[str, float]]:
        labels, preds = np.asarray(self._labels), np.asarray(self._preds)
        return [
            ("accuracy", 100.0 * float(np.mean(labels == preds))),
            ("macro_f1", 100.0 * macro_f1(labels, preds)),
            ("loss", self.get_loss()),
        ]


def matthews_corrcoef(labels, preds) -> float:
    """Multi-class MCC from the confusion matrix (Gorodkin's R_K); 0 when undefined."""
    labels, preds = np.asarray(labels), np.asarray(preds)
    classes = np.union1d(labels, preds)
    y = np.searchsorted(classes, labels)
    p = np.searchsorted(classes, preds)
    k = len(classes)
    confusion = np.zeros((k, k), dtype=np.float64)
    np.add.at(confusion, (y, p), 1.0)
    t_sum, p_sum = confusion.sum(axis=1), confusion.sum(axis=0)
    correct, n = np.trace(confusion), confusion.sum()
    cov_ytyp = correct * n - np.dot(t_sum, p_sum)
    cov_ypyp = n * n - np.dot(p_sum, p_sum)
    cov_ytyt = n * n - np.dot(t_sum, t_sum)
    if cov_ypyp * cov_ytyt == 0:
        return 0.0
    return float(cov_ytyp / np.sqrt(cov_ytyt * cov_ypyp))


def pearson(x, y) -> float:
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    y = np.asarray(y, dtype=np.float64) - np.mean(y)
    return float(np.sum(x * y) / np.sqrt(np.sum(x * x) * np.sum(y * y)))


def _average_ranks(x) -> np.ndarray:
    """1-based ranks with ties given their mean rank (as scipy.stats.rankdata)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    ranks = np.empty(len(x), dtype=np.float64)
    start = 0
    while start < len(x):
        end = start
        while end + 1 < len(x) and sorted_x[end + 1] == sorted_x[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(x, y) -> float:
    return pearson(_average_ranks(x), _average_ranks(y))


class MCCScorer(SentenceLevelScorer):
    def get_results(self) -> list[tuple[str, float]]:
        return [
            ("mcc", 100.0 * matthews_corrcoef(self._labels, self._preds)),
            ("loss", self.get_loss()),
        ]


class RegressionScorer(SentenceLevelScorer):
    def get_results(self) -> list[tuple[str, float]]:
        labels = np.asarray(self._labels, dtype=np.float64)
        preds = np.asarray(self._preds, dtype=np.float64).reshape(-1)
        return [
            ("pearson", 100.0 * pearson(labels, preds)),
            ("spearman", 100.0 * spearman(labels, preds)),
            ("mse", float(np.mean(np.square(labels - preds)))),
            ("loss", self.get_loss()),
        ]


# ---------------------------------------------------------------------- tagging
def get_span_labels(tags: list[str]) -> list[tuple[int, int, str]]:
    """Tags (BIOES / BIO / IO) -> entity spans (start, end inclusive, type), as the original.

    An entity here ends only at O, B- or S- (or after the sentence): inside a run of I- tags a
    change of type does not end it, and the span takes the type of its LAST tag (`I-PER I-LOC`
    is one LOC of two words; seqeval reads a PER and a LOC).
    """
    spans = []
    last, start = "O", -1
    for i, tag in enumerate(tags):
        prefix = None if tag == "O" else tag.split("-")[0]
        if (prefix in ("S", "B") or tag == "O") and last != "O":
            spans.append((start, i - 1, last.split("-")[-1]))
        if prefix in ("B", "S") or last == "O":
            start = i
        last = tag
    if tags and tags[-1] != "O":
        spans.append((start, len(tags) - 1, tags[-1].split("-")[-1]))
    return spans


def get_tags(spans: list[tuple[int, int, str]], length: int, encoding: str = "BIOES") -> list[str]:
    """Entity spans -> tags in `encoding` (the original re-encodes chunk tags to BIOES)."""
    tags = ["O"] * length
    for s, e, t in spans:
        for i in range(s, e + 1):
            tags[i] = "I-" + t
        if "E" in encoding:
            tags[e] = "E-" + t
        if "B" in encoding:
            tags[s] = "B-" + t
        if "S" in encoding and s == e:
            tags[s] = "S-" + t
    return tags


class EntityLevelF1Scorer(Scorer):
    """Entity-level precision / recall / F1 over the words of each sentence, x100.

    Args:
        label_mapping: tag -> the model's label id.
        reading: how a sentence's tags become entities. "original": the original's
            `get_span_labels` (the `chunk` task's default, so that its results compare with
            the original's); "seqeval": `tag_schemes.get_entities`, seqeval's default mode
            (`seqeval.metrics.f1_score`), right for IOB1, IOB2 and BIOES alike (user tagging
            tasks). They differ where a type changes inside I- tags: docs/faithfulness.md.

    The loss is the summed per-sentence loss over the number of words (the original added it
    twice; only the logged loss changed, not the F1).
    """

    READINGS = ("original", "seqeval")

    def __init__(self, label_mapping: dict[str, int], reading: str = "original") -> None:
        super().__init__()
        if reading not in self.READINGS:
            raise ValueError(f"reading {reading!r} is not one of {self.READINGS}")
        self._inv = {v: k for k, v in label_mapping.items()}
        self._entities = get_span_labels if reading == "original" else get_entities
        self._labels: list = []
        self._preds: list = []
        self._words = 0

    def update(self, results: dict) -> None:
        self._total_loss += float(np.sum(results["loss"]))
        n_words = int(round(float(np.sum(results["labels_mask"]))))
        self._labels.append(list(results["labels"][:n_words]))
        self._preds.append(list(results["predictions"][:n_words]))
        self._words += n_words

    def get_loss(self) -> float:
        return self._total_loss / max(1, self._words)

    def get_results(self) -> list[tuple[str, float]]:
        n_correct = n_predicted = n_gold = 0
        for labels, preds in zip(self._labels, self._preds, strict=True):
            gold = set(self._entities([self._inv[int(i)] for i in labels]))
            pred = set(self._entities([self._inv[int(i)] for i in preds]))
            n_correct += len(gold & pred)
            n_gold += len(gold)
            n_predicted += len(pred)
        if n_correct == 0:  # seqeval's zero_division: 0
            p = r = f1 = 0.0
        else:
            p = 100.0 * n_correct / n_predicted
            r = 100.0 * n_correct / n_gold
            f1 = 2 * p * r / (p + r)
        return [("precision", p), ("recall", r), ("f1", f1), ("loss", self.get_loss())]
