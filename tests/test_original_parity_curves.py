"""tools/original_parity/curves.py: its metrics against independent references (TF1's own
tf.metrics.auc, the rank formula, hand counts), its band rule and verdict (hand-built points and
simulated seeds), its injected bugs; and (only with ELECTRA_ORIGINAL_MIRROR set) a few steps of
the real thing, both sides, on a tiny TFRecord data dir.

Run from the repository root (`make test` / `python -m pytest`), where `tools` is importable.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tools.original_parity import curves

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------- metrics
def test_auc_matches_tf_v1_metrics_auc():
    """The original's disc_auc is tf.metrics.auc(labels * mask, probs * mask): padding scored 0
    counts as negatives; the numpy version must give TF1's number."""
    import tensorflow as tf

    rs = np.random.RandomState(3)
    labels = (rs.uniform(size=[6, 40]) < 0.2).astype(np.int32)
    probs = np.clip(0.3 * labels + rs.uniform(size=[6, 40]) * 0.7, 0.0, 1.0).astype(np.float32)
    mask = np.zeros([6, 40], np.int32)
    for b, n in enumerate([40, 33, 20, 9, 40, 2]):
        mask[b, :n] = 1
    graph = tf.Graph()
    with graph.as_default():
        value, update = tf.compat.v1.metrics.auc(
            tf.constant(labels * mask), tf.constant(probs * mask.astype(np.float32))
        )
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.local_variables_initializer())
            sess.run(update)
            want = float(sess.run(value))
    got = curves.auc_thresholded(labels * mask, probs * mask)
    assert got == pytest.approx(want, abs=2e-6)
    # Padding counted as negatives makes the score differ from the real tokens' alone.
    real = mask.astype(bool)
    assert abs(curves.auc_thresholded(labels[real], probs[real]) - got) > 1e-3


def test_auc_against_the_rank_formula():
    # By hand: positives 0.9, 0.35; negatives 0.8, 0.1, 0.5. Pairs won: 0.9 > all three,
    # 0.35 > 0.1 only: 4 of 6.
    labels = [1, 0, 1, 0, 0]
    scores = [0.9, 0.8, 0.35, 0.1, 0.5]
    assert curves.auc_thresholded(labels, scores) == pytest.approx(4 / 6, abs=1e-5)
    # Scores in distinct threshold bins: the thresholded AUC is the Mann-Whitney statistic.
    rs = np.random.RandomState(0)
    scores = (rs.permutation(199)[:120] + 0.5) / 199.0
    labels = rs.uniform(size=120) < 0.3
    pos, neg = scores[labels], scores[~labels]
    mann_whitney = np.mean(pos[:, None] > neg[None, :])
    assert curves.auc_thresholded(labels, scores) == pytest.approx(mann_whitney, abs=1e-5)
    # Weights drop entries: a weight-0 negative scored above every positive changes nothing.
    assert curves.auc_thresholded([1, 0, 0], [0.6, 0.2, 0.99], [1, 1, 0]) == pytest.approx(
        1.0, abs=1e-5
    )


def _batch(total, preds, ids, weights, labels, probs, disc_preds, mask, disc_loss):
    n = np.asarray(ids).shape
    return {
        "total_loss": total,
        "input_ids": np.zeros_like(mask),
        "masked_lm_preds": np.asarray(preds),
        "mlm_loss": np.arange(np.prod(n), dtype=np.float32).reshape(n),
        "masked_lm_ids": np.asarray(ids),
        "masked_lm_weights": np.asarray(weights, np.float32),
        "input_mask": np.asarray(mask),
        "disc_loss": np.asarray(disc_loss, np.float32),
        "disc_labels": np.asarray(labels),
        "disc_probs": np.asarray(probs, np.float32),
        "disc_preds": np.asarray(disc_preds),
        "sampled_tokids": np.asarray(ids) * 0 + 7,
    }


def test_eval_metrics_by_hand():
    a = _batch(
        10.0, preds=[[5, 6, 0]], ids=[[5, 9, 0]], weights=[[1, 1, 0]],
        labels=[[0, 1, 0, 0]], probs=[[0.2, 0.7, 0.6, 0.0]], disc_preds=[[0, 1, 1, 0]],
        mask=[[1, 1, 1, 0]], disc_loss=[0.5],
    )  # fmt: skip
    b = _batch(
        20.0, preds=[[7, 0, 0]], ids=[[7, 0, 0]], weights=[[1, 0, 0]],
        labels=[[1, 0, 0, 0]], probs=[[0.9, 0.1, 0.0, 0.0]], disc_preds=[[1, 0, 0, 0]],
        mask=[[1, 1, 0, 0]], disc_loss=[0.25],
    )  # fmt: skip
    m = curves.eval_metrics([a, b])
    assert m["total_loss"] == pytest.approx(15.0)
    # Masked LM: 2 of the 3 weighted slots right (the weight-0 slots do not count).
    assert m["masked_lm_accuracy"] == pytest.approx(2 / 3)
    assert m["masked_lm_loss"] == pytest.approx((0 + 1 + 0) / 3)
    assert m["sampled_masked_lm_accuracy"] == pytest.approx(1 / 3)
    # Discriminator: 4 of the 5 real tokens right (a's third token is a false positive).
    assert m["disc_accuracy"] == pytest.approx(4 / 5)
    assert m["disc_loss"] == pytest.approx(0.375)
    assert 0.0 <= m["disc_auc"] <= 1.0


# ---------------------------------------------------------------------------- band rule
def test_band_check_by_hand():
    original = [[1.0, 10.0, 5.0], [2.0, 10.0, 5.0], [3.0, 10.0, 5.0]]
    project = [[2.9, 10.0, 9.0], [2.9, 10.3, 9.0], [2.9, 10.0, 9.0]]
    band = curves.band_check(original, project, k=3.0)
    # Point 0: inside the original's seed range [1, 3]. SE = sqrt(1/3 + 0) there.
    assert band["inside"][0] and band["se"][0] == pytest.approx(np.sqrt(1 / 3))
    # Point 1: the original's seeds agree (range 0): inside only through k x SE of the
    # difference, SE = sd(project) / sqrt(3) = 0.1732 / 1.732 = 0.1, 3 SE = 0.3 > 0.1.
    assert band["se"][1] == pytest.approx(0.1) and band["inside"][1]
    assert band["hi"][1] == pytest.approx(10.3)
    # Point 2: every seed agrees on both sides, 4 apart: outside by 4, infinitely many SE.
    assert not band["inside"][2]
    assert band["excursion"][2] == pytest.approx(4.0)
    assert band["excursion_se"][2] == np.inf
    assert band["outside"] == 1 and band["worst"] == 2
    # A NaN (diverged) project point is outside.
    nan = curves.band_check([[1.0], [2.0]], [[np.nan], [1.5]])
    assert nan["outside"] == 1 and not nan["inside"][0]
    with pytest.raises(ValueError, match="seeds, points"):
        curves.band_check([1.0, 2.0], [[1.0, 2.0]])


def _seed_curves(rs, seeds, points, shift=0.0):
    """Per metric [seeds, points]: a falling curve, a persistent per-seed offset and noise."""
    t = np.arange(points)
    out = {}
    for i, name in enumerate(curves.METRICS + curves.EXTRA_METRICS):
        base = 5.0 / (1.0 + t) + i
        persistent = rs.normal(size=[seeds, 1]) * 0.07
        noise = rs.normal(size=[seeds, points]) * 0.07
        out[name] = (base + persistent + noise + shift).tolist()
    return out


def test_verdict_rarely_fails_equal_distributions_and_catches_a_shift():
    """Both sides drawn from one distribution (3 seeds each, seed effects persisting along the
    curve): CURVES OK in nearly every trial; a shift of 3 seed standard deviations: CURVES
    FAILED in most. The literal rule (the original's range or 2 SE of its mean) would put
    about 30% of the points outside even then."""
    rates = curves.calibrate(trials=300, seed=11)
    assert rates["failed_same_distribution"] <= 0.02, rates
    assert rates["failed_shift_3sd"] >= 0.7, rates
    assert rates["outside_this_rule"] < 0.08 < 0.2 < rates["outside_literal_rule"], rates
    # Every metric is checked: a shift in all four fails all four.
    rs = np.random.RandomState(2)
    moved = {"original": _seed_curves(rs, 3, 21), "project": _seed_curves(rs, 3, 21, 1.0)}
    assert len(curves.verdict(moved, list(range(21)), 3.0, 0.5)["failures"]) == 4


def test_verdict_lines_and_table():
    rs = np.random.RandomState(5)
    steps = [0, 100, 200]
    result = curves.verdict(
        {"original": _seed_curves(rs, 3, 3), "project": _seed_curves(rs, 3, 3, 5.0)},
        steps, 3.0, 0.5,
    )  # fmt: skip
    assert len(result["failures"]) == len(curves.METRICS)
    assert result["failures"][0].startswith("total_loss: 3 of 3 points outside the band (at most 1")
    table = curves.table_lines(result)
    assert len(table) == 1 + len(steps) and table[1].count("*") == len(curves.METRICS)
    assert "3 of 3 points outside" in curves.summary_lines(result)[0]


# ---------------------------------------------------------------------------- mutations
def test_masking_mutations_change_the_draw(monkeypatch):
    import tensorflow as tf

    from electra_tf.pretraining import pretrainer

    real_mask = pretrainer.mask_inputs
    # Registered for restoring: apply_mutation replaces these module attributes.
    monkeypatch.setattr(pretrainer, "mask_inputs", real_mask)
    monkeypatch.setattr(pretrainer, "gumbel_sample", pretrainer.gumbel_sample)
    ids = tf.constant(np.arange(1000, 1000 + 8 * 128).reshape(8, 128), tf.int32)
    mask = tf.ones([8, 128], tf.int32)
    seed = tf.constant([3, 4], tf.int64)

    def draw():
        """(active slots, distinct chosen positions, positions showing [MASK])."""
        out = pretrainer.mask_inputs(ids, mask, 19, 0.15, seed, mask_id=103)
        weights = out["masked_lm_weights"].numpy()
        positions = out["masked_lm_positions"].numpy()
        # Position 0 is never overwritten (the original's scatter_update ignores it).
        chosen = sum(
            len(set(p[(w > 0) & (p > 0)])) for p, w in zip(positions, weights, strict=True)
        )
        shown = int((out["masked_input_ids"].numpy() == 103).sum())
        return int(weights.sum()), chosen, shown

    slots, chosen, shown = draw()
    assert slots == 8 * 19 and shown < chosen  # about 15% of the chosen positions stay visible
    curves.apply_mutation("mask_token_always")
    slots, chosen, shown = draw()
    assert slots == 8 * 19 and shown == chosen  # every chosen position shows [MASK]
    monkeypatch.setattr(pretrainer, "mask_inputs", real_mask)
    curves.apply_mutation("mask_rate_010")
    assert draw()[0] == 8 * 13  # round(128 x 0.10) slots instead of round(128 x 0.15) = 19

    logits = tf.constant(np.random.RandomState(0).normal(size=[2, 5, 30]), tf.float32)
    sampled = pretrainer.gumbel_sample(logits, tf.constant([1, 2], tf.int64)).numpy()
    greedy = np.argmax(logits.numpy(), -1)
    assert not np.array_equal(sampled, greedy)
    curves.apply_mutation("greedy_sampling")
    assert np.array_equal(pretrainer.gumbel_sample(logits, tf.constant([1, 2])).numpy(), greedy)


def test_usage_errors(tmp_path):
    with pytest.raises(SystemExit, match="make default-data"):
        curves.check_data_dir(str(tmp_path))
    r = subprocess.run(
        [sys.executable, "-m", "tools.original_parity.curves", "--mutation", "nope"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2 and "mask_token_always" in r.stderr


def test_report_only_redraws_finished_runs_without_the_original(tmp_path, capsys):
    """--report-only reads the runs' JSONs and needs no mirror; the picture lands beside
    --json."""
    data = tmp_path / "data"
    for folder in ("pretrain_tfrecords", "eval_tfrecords"):
        (data / folder).mkdir(parents=True)
    (data / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    steps = [0, 100, 200]
    for side, shift in (("original", 0.0), ("project", 0.01)):
        for seed in (1, 2):
            values = {m: [1.0 + shift + 0.01 * seed + 0.1 * i for i in range(3)]
                      for m in curves.METRICS + curves.EXTRA_METRICS}  # fmt: skip
            run = {"side": side, "seed": seed, "steps": steps, "values": values,
                   "cpu_seconds": 1.0, "mutation": None, "complete": True}  # fmt: skip
            (runs / f"{side}_clean_seed{seed}.json").write_text(json.dumps(run))
    out = tmp_path / "report" / "curves.json"
    out.parent.mkdir()
    argv = ["--mirror", "", "--data-dir", str(data), "--runs-dir", str(runs), "--report-only",
            "--json", str(out)]  # fmt: skip
    assert curves.main(argv) == 0
    assert f"picture: {tmp_path / 'report' / 'curves.png'}" in capsys.readouterr().out
    assert (tmp_path / "report" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads(out.read_text())["verdict"].startswith("CURVES OK")
    with pytest.raises(SystemExit, match="no project run under greedy_sampling among the runs"):
        curves.main([*argv, "--also-mutation", "greedy_sampling"])
    # A report written into the runs folder is not read as a run the next time.
    inside = [*argv[:-1], str(runs / "curves.json")]
    assert curves.main(inside) == 0 and curves.main(inside) == 0


# ---------------------------------------------------------------------------- the real thing
def _tiny_data_dir(path, vocab_size=300):
    """vocab.txt in BERT's layout, 256 training and 128 evaluation records of length 128."""
    import tensorflow as tf

    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [f"w{i}" for i in range(len(tokens), vocab_size)]
    os.makedirs(path)
    with open(os.path.join(path, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    rs = np.random.RandomState(0)
    for split, count in (("pretrain_tfrecords", 256), ("eval_tfrecords", 128)):
        os.makedirs(os.path.join(path, split))
        name = os.path.join(path, split, "pretrain_data.tfrecord-0-of-1")
        with tf.io.TFRecordWriter(name) as w:
            for _ in range(count):
                n = int(rs.randint(20, 129))
                ids = [101, *rs.randint(104, vocab_size, size=n - 2), 102] + [0] * (128 - n)
                mask = [1] * n + [0] * (128 - n)
                feature = {
                    k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                    for k, v in (("input_ids", ids), ("input_mask", mask), ("segment_ids", [0] * 128))
                }  # fmt: skip
                w.write(
                    tf.train.Example(
                        features=tf.train.Features(feature=feature)
                    ).SerializeToString()
                )


@pytest.mark.skipif(
    not os.environ.get("ELECTRA_ORIGINAL_MIRROR"),
    reason="needs a git copy of google-research/electra in ELECTRA_ORIGINAL_MIRROR",
)
def test_real_curves_smoke(tmp_path):
    data = str(tmp_path / "data")
    _tiny_data_dir(data)
    out = str(tmp_path / "curves.json")
    r = subprocess.run(
        [sys.executable, "-m", "tools.original_parity.curves", "--data-dir", data, "--seeds", "1",
         "--steps", "4", "--every", "2", "--batch", "4", "--jobs", "2", "--json", out],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr[-2000:]
    result = json.load(open(out, encoding="utf-8"))
    assert result["steps"] == [0, 2, 4]
    for side in ("original", "project"):
        for name in curves.METRICS:
            values = result["curves"][side][name][0]
            assert len(values) == 3 and all(np.isfinite(values)), (side, name, values)
        assert all(0.0 <= v <= 1.0 for v in result["curves"][side]["disc_auc"][0])
    assert result["verdict"].startswith("CURVES")


def test_project_precision_reaches_the_project_runs_only():
    # `--project-precision mixed_bfloat16`: the project's runs train in bf16 against the
    # original's float32 band; the original's children are not told (it has no such option).
    args = argparse.Namespace(
        mirror="m", rev="HEAD", data_dir="d", steps=10, every=5, batch=4, threads=1,
        eval_set="e.npz", workdir="w", warmup=None, project_precision="mixed_bfloat16",
    )  # fmt: skip
    project = curves._child_cmd(args, "project", 1, "out.json")
    original = curves._child_cmd(args, "original", 1, "out.json")
    assert project[project.index("--project-precision") + 1] == "mixed_bfloat16"
    assert "--project-precision" not in original
