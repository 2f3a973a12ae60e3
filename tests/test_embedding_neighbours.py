"""bench/embedding_neighbours.py: nearest neighbours of mean-centred word vectors."""

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import embedding_neighbours  # noqa: E402


def test_neighbours_rank_by_cosine_after_removing_the_shared_direction():
    shared = np.array([10.0, 0.0, 0.0])  # a large direction all rows share
    table = np.stack(
        [
            shared + [0, 1.0, 0.0],  # good
            shared + [0, 0.9, 0.1],  # fine: close to good once the shared part is gone
            shared + [0, -1.0, 0.0],  # bad: opposite
            shared + [0, 0.0, 1.0],  # the
        ]
    )
    vocab = ["good", "fine", "bad", "the"]
    # Raw cosines are all above 0.98 here; centred ones are not.
    found = embedding_neighbours.neighbours(table, vocab, ["good", "boring"], top=3)
    assert found["boring"] is None
    assert [w for w, _ in found["good"]] == ["fine", "the", "bad"]
    centred = table - table.mean(axis=0)
    expected = centred[1] @ centred[0] / np.linalg.norm(centred[1]) / np.linalg.norm(centred[0])
    assert found["good"][0][1] == pytest.approx(expected)
    assert found["good"][2][1] < -0.5


def test_vocabulary_size_must_match_the_table():
    with pytest.raises(ValueError, match="3 entries, the table 4"):
        embedding_neighbours.neighbours(np.ones((4, 2)), ["a", "b", "c"], ["a"], top=1)
