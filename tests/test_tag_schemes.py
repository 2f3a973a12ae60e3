"""Tag schemes and entity-level scoring against seqeval (installed with tf-models-official):
random sentences in IOB1, IOB2 and BIOES, and malformed mixes of the three."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from electra_tf.finetuning import scorers, tag_schemes
from electra_tf.finetuning.task import DataError

seqeval_metrics = pytest.importorskip("seqeval.metrics")
from seqeval.metrics.sequence_labeling import get_entities as seqeval_entities  # noqa: E402

TYPES = ("PER", "LOC", "ORG")


def random_entities(rng, length: int) -> list[tuple[str, int, int]]:
    """Non-overlapping entities, often adjacent and of the same type (IOB1's B- case)."""
    entities, i = [], 0
    while i < length:
        if rng.random() < 0.4:
            i += 1
            continue
        end = min(length - 1, i + int(rng.integers(0, 3)))
        entities.append((str(rng.choice(TYPES)), i, end))
        i = end + 1
    return entities


def random_sentences(rng, n: int, scheme: str | None) -> list[list[str]]:
    """`n` sentences written in `scheme`; None: any tag anywhere (malformed mixes)."""
    sentences = []
    for _ in range(n):
        length = int(rng.integers(1, 12))
        if scheme is None:
            tags = ["O", *[f"{p}-{t}" for p in "BIES" for t in TYPES]]
            sentences.append([str(rng.choice(tags)) for _ in range(length)])
        else:
            entities = random_entities(rng, length)
            sentences.append(tag_schemes.entities_to_tags(entities, length, scheme))
    return sentences


@pytest.mark.parametrize("scheme", ["IOB1", "IOB2", "BIOES", None])
def test_entities_equal_seqeval(scheme):
    rng = np.random.default_rng(7)
    for tags in random_sentences(rng, 400, scheme):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert tag_schemes.get_entities(tags) == seqeval_entities(tags), tags


@pytest.mark.parametrize("scheme", ["IOB1", "IOB2", "BIOES"])
def test_written_entities_read_back_and_scheme_detected(scheme):
    rng = np.random.default_rng(11)
    sentences = []
    for _ in range(200):
        length = int(rng.integers(1, 12))
        entities = random_entities(rng, length)
        tags = tag_schemes.entities_to_tags(entities, length, scheme)
        assert tag_schemes.get_entities(tags) == entities
        for other in ("IOB1", "IOB2", "BIOES"):
            assert tag_schemes.convert(tags, other) == tag_schemes.entities_to_tags(
                entities, length, other
            )
        # BIOES -> IOB2 tag by tag is the IOB2 of the same entities (the chunk export's).
        if scheme == "BIOES":
            iob2 = [tag_schemes.bioes_to_iob2(t) for t in tags]
            assert iob2 == tag_schemes.entities_to_tags(entities, length, "IOB2")
        sentences.append(tags)
    assert tag_schemes.detect_scheme(sentences) == scheme


def test_detect_scheme_by_hand():
    detect = tag_schemes.detect_scheme
    assert detect([["I-PER", "I-PER", "O", "I-LOC"]]) == "IOB1"
    assert detect([["B-PER", "I-PER", "B-PER"], ["O", "B-LOC"]]) == "IOB2"
    assert detect([["B-PER", "I-LOC"]]) == "IOB1"  # an I- of another type starts an entity
    assert detect([["S-PER"], ["B-LOC", "I-LOC"]]) == "BIOES"
    assert detect([["O", "O"], []]) == "IOB2"


def test_check_tag():
    for good in ("O", "B-PER", "I-MISC", "E-X", "S-B-C"):
        assert tag_schemes.check_tag(good, "f:1") == good
    for bad in ("PER", "B", "B-", "b-PER", "X-PER", "BPER", "o"):
        with pytest.raises(DataError, match=r"^train\.conll:7: tag .* is not O or B-/I-/E-/S-"):
            tag_schemes.check_tag(bad, "train.conll:7")


@pytest.mark.parametrize("scheme", ["IOB1", "IOB2", "BIOES", None])
def test_seqeval_scorer_equals_seqeval(scheme):
    """The user tagging scorer's P/R/F1 are seqeval's micro scores (x100) on the same tags."""
    rng = np.random.default_rng(3)
    gold = random_sentences(rng, 60, scheme)
    tags = sorted({t for s in gold for t in s} | {"O"} | {f"B-{t}" for t in TYPES})
    mapping = {t: i for i, t in enumerate(tags)}
    # Predictions: the gold tags with a third of them replaced by random tags.
    pred = [[t if rng.random() < 0.66 else str(rng.choice(tags)) for t in s] for s in gold]
    scorer = scorers.EntityLevelF1Scorer(mapping, reading="seqeval")
    length = 16
    for g, p in zip(gold, pred, strict=True):
        pad = [0] * (length - len(g))
        scorer.update(
            {
                "labels": [mapping[t] for t in g] + pad,
                "predictions": [mapping[t] for t in p] + pad,
                "labels_mask": [1.0] * len(g) + [0.0] * len(pad),
                "loss": 1.0,
            }
        )
    results = dict(scorer.get_results())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = {
            "precision": seqeval_metrics.precision_score(gold, pred),
            "recall": seqeval_metrics.recall_score(gold, pred),
            "f1": seqeval_metrics.f1_score(gold, pred),
        }
    for name, value in expected.items():
        assert results[name] == pytest.approx(100 * value), name
    assert 0 < results["f1"] < 100


def test_original_reading_differs_from_seqeval_on_iob1():
    """The chunk task's reading (the original's) merges a change of type inside I- tags and
    so misreads IOB1 files; seqeval's reading does not (docs/faithfulness.md)."""
    tags = ["I-PER", "I-LOC", "O", "I-PER", "B-PER"]
    assert scorers.get_span_labels(tags) == [(0, 1, "LOC"), (3, 3, "PER"), (4, 4, "PER")]
    assert tag_schemes.get_entities(tags) == [
        ("PER", 0, 0), ("LOC", 1, 1), ("PER", 3, 3), ("PER", 4, 4)
    ]  # fmt: skip
