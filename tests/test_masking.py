"""Dynamic masking (the original's `pretrain_helpers.mask`): hand-written expectations."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.pretraining.masking import candidates_mask, mask_inputs

CLS, SEP, MASK = 101, 102, 103


def batch(lengths, seq_len=12):
    """[CLS] w w ... [SEP] then padding; word ids from 1000 up so none is special."""
    ids = np.zeros((len(lengths), seq_len), np.int32)
    for row, n in enumerate(lengths):
        ids[row, :n] = 1000 + np.arange(n)
        ids[row, 0] = CLS
        ids[row, n - 1] = SEP
    mask = (ids != 0).astype(np.int32)
    return ids, mask


def run(ids, mask, seed=(1, 2), **kwargs):
    kwargs.setdefault("max_predictions", 5)
    kwargs.setdefault("mask_prob", 0.15)
    out = mask_inputs(tf.constant(ids), tf.constant(mask), seed=tf.constant(seed), **kwargs)
    return {k: v.numpy() for k, v in out.items()}


def test_count_is_max_1_min_n_round_half_even():
    # mask_prob 0.5: 5 tokens -> 2.5 -> 2 (ties to even), 7 -> 3.5 -> 4, 9 -> 4.5 -> 4,
    # 3 -> 1.5 -> 2; 12 tokens -> 6 capped at N=5. mask_prob 0.1 on 3 tokens -> 0 -> floor 1.
    ids, mask = batch([5, 7, 9, 3, 12])
    out = run(ids, mask, mask_prob=0.5, max_predictions=5)
    np.testing.assert_array_equal(out["masked_lm_weights"].sum(-1), [2, 4, 4, 2, 5])
    # Active slots come first.
    np.testing.assert_array_equal(out["masked_lm_weights"][0], [1, 1, 0, 0, 0])
    out = run(*batch([3]), mask_prob=0.1)
    np.testing.assert_array_equal(out["masked_lm_weights"], [[1, 0, 0, 0, 0]])


def test_candidates_exclude_specials_and_padding():
    ids, mask = batch([10, 6])
    ids[0, 4] = MASK  # an input [MASK] is never chosen again
    ids[0, 5] = SEP  # nor a mid-sequence [SEP]
    cand = candidates_mask(tf.constant(ids), tf.constant(mask)).numpy()
    expected = (mask == 1) & ~np.isin(ids, [CLS, SEP, MASK])
    np.testing.assert_array_equal(cand, expected)
    chosen = set()
    for seed in range(30):
        out = run(ids, mask, seed=(seed, 0), mask_prob=0.5)
        active = out["masked_lm_weights"] == 1
        rows = np.nonzero(active)[0]
        cols = out["masked_lm_positions"][active]
        assert expected[rows, cols].all()
        chosen |= set(zip(rows.tolist(), cols.tolist(), strict=True))
    # Uniform over candidates: every candidate was drawn at least once in 30 tries.
    assert chosen == set(zip(*np.nonzero(expected), strict=True))


def test_inactive_slots_are_position_zero_id_zero():
    ids, mask = batch([4, 12])
    out = run(ids, mask)
    inactive = out["masked_lm_weights"] == 0
    assert inactive.any()
    assert (out["masked_lm_positions"][inactive] == 0).all()
    assert (out["masked_lm_ids"][inactive] == 0).all()
    rows = np.arange(2)[:, None]
    gathered = ids[rows, out["masked_lm_positions"]]
    np.testing.assert_array_equal(out["masked_lm_ids"], gathered * out["masked_lm_weights"])


@pytest.mark.parametrize("with_replacement", [True, False])
def test_all_or_none_shown_as_mask(with_replacement):
    ids, mask = batch([12, 9, 5])
    kwargs = {"with_replacement": with_replacement, "mask_prob": 0.4}
    everything = run(ids, mask, mask_token_prob=1.0, **kwargs)
    chosen = np.zeros_like(ids, bool)
    rows = np.arange(3)[:, None].repeat(5, 1)
    active = everything["masked_lm_weights"] == 1
    chosen[rows[active], everything["masked_lm_positions"][active]] = True
    np.testing.assert_array_equal(everything["masked_input_ids"], np.where(chosen, MASK, ids))
    nothing = run(ids, mask, mask_token_prob=0.0, **kwargs)
    np.testing.assert_array_equal(nothing["masked_input_ids"], ids)
    # The same seed picks the same positions whatever the [MASK] rate.
    np.testing.assert_array_equal(nothing["masked_lm_positions"], everything["masked_lm_positions"])


def test_mask_rate_is_about_85_percent():
    ids, mask = batch([12] * 64, seq_len=12)
    out = run(ids, mask, max_predictions=3, mask_prob=0.3, with_replacement=False)
    rows = np.arange(64)[:, None]
    shown = out["masked_input_ids"][rows, out["masked_lm_positions"]] == MASK
    assert 0.75 < shown.mean() < 0.95


def test_with_and_without_replacement():
    # 5 candidates, 10 slots: with replacement, duplicates are certain (pigeonhole); without,
    # the active slots stop at the number of candidates and are all distinct.
    ids, mask = batch([7], seq_len=12)
    out = run(ids, mask, max_predictions=10, mask_prob=0.99, with_replacement=True)
    active = out["masked_lm_positions"][out["masked_lm_weights"] == 1]
    assert len(active) == 7 and len(set(active.tolist())) < 7
    out = run(ids, mask, max_predictions=10, mask_prob=0.99, with_replacement=False)
    active = out["masked_lm_positions"][out["masked_lm_weights"] == 1]
    assert sorted(active.tolist()) == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="without replacement"):
        run(ids, mask, max_predictions=13, with_replacement=False)


def test_no_candidates_predicts_nothing():
    ids, mask = batch([2, 6])  # [CLS] [SEP] only in the first row
    out = run(ids, mask)
    np.testing.assert_array_equal(out["masked_lm_weights"][0], 0)
    np.testing.assert_array_equal(out["masked_input_ids"][0], ids[0])
    assert out["masked_lm_weights"][1].sum() == 1


def test_custom_special_ids_under_xla():
    # XLA's stateless RNG is a different bit stream from the eager kernels': check properties.
    ids, mask = batch([12, 8])
    ids[ids == CLS], ids[ids == SEP] = 2, 3
    fn = tf.function(
        lambda i, m, s: mask_inputs(
            i, m, 5, 0.4, s, cls_id=2, sep_id=3, mask_id=4, mask_token_prob=1.0
        ),
        jit_compile=True,
    )
    out = {k: v.numpy() for k, v in fn(tf.constant(ids), tf.constant(mask), [4, 2]).items()}
    np.testing.assert_array_equal(out["masked_lm_weights"].sum(-1), [5, 3])
    active = out["masked_lm_weights"] == 1
    positions = out["masked_lm_positions"]
    assert not np.isin(positions[active], [0, 7, 11]).any()
    assert (positions[~active] == 0).all()
    rows = np.arange(2)[:, None].repeat(5, 1)
    np.testing.assert_array_equal(out["masked_lm_ids"][active], ids[rows, positions][active])
    chosen = np.zeros_like(ids, bool)
    chosen[rows[active], positions[active]] = True
    np.testing.assert_array_equal(out["masked_input_ids"], np.where(chosen, 4, ids))


# Chi-square critical values at p = 0.001 (fixed seeds make each test deterministic; the
# threshold says how unlikely a correct sampler is to fail with another seed).
CHI2_999 = {1: 10.828, 9: 27.877}


def chi_square(observed, expected):
    observed, expected = np.asarray(observed, float), np.asarray(expected, float)
    return float(((observed - expected) ** 2 / expected).sum())


def test_positions_are_uniform_over_the_candidates():
    # 12 tokens: [CLS] + 10 words + [SEP]; positions 1..10 are the candidates. With
    # replacement (the original's tf.random.categorical), each slot is an independent uniform
    # draw among them, duplicates included.
    ids, mask = batch([12] * 400, seq_len=12)
    out = run(ids, mask, seed=(3, 4), max_predictions=5, mask_prob=0.4, with_replacement=True)
    active = out["masked_lm_positions"][out["masked_lm_weights"] == 1]
    assert len(active) == 400 * 5
    counts = np.bincount(active, minlength=12)
    assert counts[0] == counts[11] == 0  # [CLS] and [SEP] are never candidates
    stat = chi_square(counts[1:11], [len(active) / 10] * 10)
    assert stat < CHI2_999[9], (stat, counts)


def test_85_15_split_with_replacement():
    # The original draws [MASK]-or-keep per slot (85/15); with replacement a position can be
    # chosen twice, so only slots whose position is unique in their row are counted.
    ids, mask = batch([12] * 400, seq_len=12)
    out = run(ids, mask, seed=(5, 6), max_predictions=3, mask_prob=0.25, with_replacement=True)
    shown, slots = 0, 0
    for row in range(400):
        positions = out["masked_lm_positions"][row][out["masked_lm_weights"][row] == 1]
        unique = [p for p in positions if (positions == p).sum() == 1]
        slots += len(unique)
        shown += sum(int(out["masked_input_ids"][row, p] == MASK) for p in unique)
    assert slots > 900
    stat = chi_square([shown, slots - shown], [0.85 * slots, 0.15 * slots])
    assert stat < CHI2_999[1], (shown, slots)
    assert abs(shown / slots - 0.85) < 0.05
