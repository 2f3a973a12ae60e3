"""bench/order_probe.py: the shuffled pass moves only visible ordinary words."""

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import order_probe  # noqa: E402


def test_only_visible_ordinary_words_trade_places():
    cls, sep, mask = 101, 102, 103
    ids = np.array(
        [
            [cls, 10, 11, mask, 12, 13, 14, sep, 15, 16, sep, 0, 0],
            [cls, 20, mask, 21, 22, 23, 24, 25, 26, 27, 28, 29, sep],
        ]
    )
    input_mask = (ids != 0).astype(int)
    positions = np.array([[3, 5], [2, 9]])  # masked slots: a [MASK] and a kept token each
    rng = np.random.default_rng(3)
    out = order_probe.shuffle_visible(ids, input_mask, positions, {cls, sep, mask, 0}, rng)
    assert out is not ids and (ids[0, 1] == 10)  # the input is left as it was
    for row in range(2):
        fixed = set(positions[row].tolist()) | set(np.flatnonzero(np.isin(ids[row], [cls, sep, 0])))
        for j in fixed:
            assert out[row, j] == ids[row, j]
        movable = [j for j in range(ids.shape[1]) if j not in fixed]
        assert sorted(out[row, movable]) == sorted(ids[row, movable])
    # With this seed the second row's ten movable words are not left in order.
    assert not np.array_equal(out[1], ids[1])
