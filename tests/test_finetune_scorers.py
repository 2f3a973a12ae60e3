"""Scorers against hand-computed values and independent references (scikit-learn, SciPy,
Model Garden's copies of the official SQuAD v1.1 / v2.0 evaluation scripts)."""

import math

import numpy as np
import pytest

from electra_tf.finetuning import scorers, squad_eval


def feed(scorer, labels, preds, key="label_ids"):
    for y, p in zip(labels, preds, strict=True):
        scorer.update({key: y, "predictions": p, "loss": 0.5})
    return dict(scorer.get_results())


def test_accuracy_by_hand():
    results = feed(scorers.AccuracyScorer(), [0, 1, 1, 0], [0, 1, 0, 0])
    assert results == {"accuracy": 75.0, "loss": 0.5}


def test_mcc_by_hand_and_vs_sklearn():
    # TP=2, TN=1, FP=1, FN=1: (2*1 - 1*1) / sqrt(3*3*2*2) = 1/6.
    labels, preds = [1, 1, 1, 0, 0], [1, 1, 0, 1, 0]
    assert dict(feed(scorers.MCCScorer(), labels, preds))["mcc"] == pytest.approx(100 / 6)
    assert scorers.matthews_corrcoef([1, 1, 1], [1, 1, 1]) == 0.0  # undefined -> 0, as sklearn
    sklearn = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for k in (2, 3):
        y, p = rng.integers(0, k, 200), rng.integers(0, k, 200)
        p[:120] = y[:120]
        assert scorers.matthews_corrcoef(y, p) == pytest.approx(sklearn.matthews_corrcoef(y, p))


def test_regression_by_hand_and_vs_scipy():
    labels, preds = [0.0, 0.2, 0.4, 0.8], [0.1, 0.1, 0.5, 0.7]
    results = feed(scorers.RegressionScorer(), labels, preds, key="targets")
    x, y = np.array(labels), np.array(preds)
    expected_pearson = np.sum((x - x.mean()) * (y - y.mean())) / math.sqrt(
        np.sum((x - x.mean()) ** 2) * np.sum((y - y.mean()) ** 2)
    )
    assert results["pearson"] == pytest.approx(100 * expected_pearson)
    # Ranks: labels 1,2,3,4; preds 1.5,1.5,3,4 -> Pearson of the ranks.
    assert results["spearman"] == pytest.approx(
        100 * scorers.pearson([1, 2, 3, 4], [1.5, 1.5, 3, 4])
    )
    assert results["mse"] == pytest.approx(np.mean((x - y) ** 2))  # not x100, as the original
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    a = rng.integers(0, 6, 100).astype(float)  # many ties
    b = a + rng.normal(size=100)
    assert scorers.spearman(a, b) == pytest.approx(stats.spearmanr(a, b)[0])
    assert scorers.pearson(a, b) == pytest.approx(stats.pearsonr(a, b)[0])


def test_entity_f1_by_hand():
    mapping = {"B-NP": 0, "E-NP": 1, "O": 2, "S-VP": 3, "S-NP": 4}
    scorer = scorers.EntityLevelF1Scorer(mapping)
    # gold: NP(0,1), VP(2,2); pred: NP(0,1), NP(2,2) -> 1 correct of 2 predicted, 2 gold.
    scorer.update(
        {"labels": [0, 1, 3, 2, 2], "predictions": [0, 1, 4, 2, 2, 2, 2],
         "labels_mask": [1, 1, 1, 0, 0], "loss": 3.0}
    )  # fmt: skip
    # gold: VP(0,0); pred: none.
    scorer.update({"labels": [3, 2], "predictions": [2, 2], "labels_mask": [1, 0], "loss": 1.0})
    r = dict(scorer.get_results())
    p, rc = 100 * 1 / 2, 100 * 1 / 3
    assert (r["precision"], r["recall"]) == (pytest.approx(p), pytest.approx(rc))
    assert r["f1"] == pytest.approx(2 * p * rc / (p + rc))
    assert r["loss"] == pytest.approx(4.0 / 4)  # summed loss over labelled words


def squad_dataset():
    qas = [
        ("q1", ["Paris", "the city of Paris"]),
        ("q2", ["1990"]),
        ("q3", []),  # unanswerable
        ("q4", ["a big red dog"]),
        ("q5", []),
        ("q6", ["Eiffel Tower"]),
    ]
    return [
        {
            "paragraphs": [
                {
                    "context": "unused",
                    "qas": [
                        {
                            "id": q,
                            "question": "?",
                            "answers": [{"text": a, "answer_start": 0} for a in answers],
                        }
                        for q, answers in qas
                    ],
                }
            ]
        }
    ]


PREDICTIONS = {
    "q1": "paris.",  # exact after normalisation
    "q2": "in 1990",  # partial
    "q3": "",  # correct no-answer
    "q4": "the big dog",  # partial, article dropped
    "q5": "something",  # wrong: should be empty
    # q6 unanswered
}
NULL_ODDS = {"q1": -5.0, "q2": -1.0, "q3": 3.0, "q4": -3.0, "q5": -2.0, "q6": 0.5}


def test_squad_f1_and_em_by_hand():
    assert squad_eval.normalize_answer("The  Big, red dog!") == "big red dog"
    # "in 1990" vs "1990": P = 1/2, R = 1 -> F1 = 2/3.
    assert squad_eval.f1_score_v1("1990", "in 1990") == pytest.approx(2 / 3)
    assert squad_eval.f1_score_v2("", "") == 1.0 and squad_eval.f1_score_v1("", "") == 0.0


def v1_dataset():
    data = squad_dataset()
    data[0]["paragraphs"][0]["qas"] = [q for q in data[0]["paragraphs"][0]["qas"] if q["answers"]]
    return data


def test_squad_v1_matches_model_garden():
    official = pytest.importorskip("official.nlp.tools.squad_evaluate_v1_1")
    mine = squad_eval.evaluate_v1(v1_dataset(), PREDICTIONS)
    theirs = official.evaluate(v1_dataset(), PREDICTIONS)
    assert mine["exact_match"] == pytest.approx(100 * theirs["exact_match"])
    assert mine["f1"] == pytest.approx(100 * theirs["final_f1"])
    # By hand: 4 questions; EM: q1 only; F1: q1 1, q2 2/3, q4 "big dog" vs "big red dog" 0.8.
    assert mine["exact_match"] == pytest.approx(25.0)
    assert mine["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0.8 + 0) / 4)


@pytest.mark.parametrize("threshold", [-2.75, 1.0, -10.0])
def test_squad_v2_matches_model_garden(threshold):
    official = pytest.importorskip("official.nlp.tools.squad_evaluate_v2_0")
    # Every question answered: Model Garden drops unanswered ones from the dataset, the
    # official script does not.
    preds = {**PREDICTIONS, "q6": "tower"}
    mine = squad_eval.evaluate_v2(squad_dataset(), preds, NULL_ODDS, threshold)
    # Model Garden's evaluate() has the threshold fixed at its default 1.0; apply ours by
    # shifting the odds, which moves only the "exact/f1" block, not the best_* sweep.
    shifted = {k: v - threshold + 1.0 for k, v in NULL_ODDS.items()}
    theirs = official.evaluate(squad_dataset(), preds, shifted)
    for key in ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"):
        assert mine[key] == pytest.approx(theirs[key]), key
    # Model Garden calls the official script's best_* keys final_*.
    unshifted = official.evaluate(squad_dataset(), preds, NULL_ODDS)
    for key in ("exact", "exact_thresh", "f1", "f1_thresh"):
        assert mine[f"best_{key}"] == pytest.approx(unshifted[f"final_{key}"]), key


def test_squad_v2_by_hand_at_default_threshold():
    preds = {**PREDICTIONS, "q6": "tower"}
    r = squad_eval.evaluate_v2(squad_dataset(), preds, NULL_ODDS, -2.75)
    # Odds > -2.75 -> answered "": q2 (-1), q3, q5 (-2), q6 (0.5); q1 (-5), q4 (-3) keep text.
    # exact: q1 1, q2 0, q3 1, q4 0, q5 1, q6 0 -> 3/6.
    assert r["exact"] == pytest.approx(50.0)
    # f1: q1 1, q2 0, q3 1, q4 0.8, q5 1, q6 0 -> 3.8/6.
    assert r["f1"] == pytest.approx(100 * 3.8 / 6)
    assert (r["HasAns_total"], r["NoAns_total"]) == (4, 2)
    # Sweep by rising odds from "all empty" (2 right): q1 +1 -> 3 (best, at -5), q4 +0,
    # q5 -1 (answered a no-answer question), q2 +0, q6 +0, q3 +0.
    assert (r["best_exact"], r["best_exact_thresh"]) == (pytest.approx(50.0), -5.0)


def test_mrqa_skips_unanswered():
    answers = {"a": ["Paris"], "b": ["1990", "in 1990"], "c": ["x"]}
    r = squad_eval.evaluate_mrqa(answers, {"a": "paris", "b": "1990 ."})
    assert r == {"exact_match": 100.0, "f1": 100.0}  # "c" skipped, not scored 0
    r = squad_eval.evaluate_mrqa(answers, {"a": "paris", "b": "in"})
    assert r["exact_match"] == pytest.approx(50.0)
    assert r["f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)  # "in" vs "in 1990": P 1, R 1/2
