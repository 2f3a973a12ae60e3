"""The curve check's metrics and verdict: the original's metric_fn in numpy, the band rule
and the report lines (curves.py's docstring states the rule). Pure functions of the recorded
curves (no TensorFlow).
"""

from __future__ import annotations

import csv
import math

METRICS = ("total_loss", "masked_lm_accuracy", "disc_accuracy", "disc_auc")
# Recorded, not gated.
EXTRA_METRICS = ("masked_lm_loss", "sampled_masked_lm_accuracy", "disc_loss", "train_loss")
# The keys of the original's eval_fn_inputs, in its order (run_pretraining.PretrainingModel).
ORIGINAL_EVAL_KEYS = (
    "input_ids", "masked_lm_preds", "mlm_loss", "masked_lm_ids", "masked_lm_weights",
    "input_mask", "disc_loss", "disc_labels", "disc_probs", "disc_preds", "sampled_tokids",
)  # fmt: skip


def auc_thresholded(labels, scores, weights=None, num_thresholds: int = 200) -> float:
    """tf.compat.v1.metrics.auc (ROC, trapezoidal) in numpy: positives are labels != 0; a score
    counts as positive above each of `num_thresholds` thresholds (-1e-7, i/(n-1), 1 + 1e-7)."""
    import numpy as np

    labels = np.asarray(labels).reshape(-1) != 0
    scores = np.asarray(scores, np.float64).reshape(-1)
    w = np.ones_like(scores) if weights is None else np.asarray(weights, np.float64).reshape(-1)
    inner = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
    thresholds = np.array([0.0 - 1e-7, *inner, 1.0 + 1e-7])
    above = scores[None, :] > thresholds[:, None]  # [thresholds, n]
    tp = (above & labels).astype(np.float64) @ w
    fp = (above & ~labels).astype(np.float64) @ w
    fn = (~above & labels).astype(np.float64) @ w
    tn = (~above & ~labels).astype(np.float64) @ w
    eps = 1e-6
    tpr = (tp + eps) / (tp + fn + eps)
    fpr = fp / (fp + tn + eps)
    return float(np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2.0))


def eval_metrics(batches: list[dict]) -> dict[str, float]:
    """The original's metric_fn over eval batches, from raw outputs keyed as its
    eval_fn_inputs (ORIGINAL_EVAL_KEYS) plus `total_loss` (a scalar per batch)."""
    import numpy as np

    cat = {k: np.concatenate([np.asarray(b[k]) for b in batches]) for k in ORIGINAL_EVAL_KEYS}
    w = cat["masked_lm_weights"].astype(np.float64)
    mask = cat["input_mask"].astype(np.float64)

    def weighted(values, weights):
        total = weights.sum()
        return float((values * weights).sum() / total) if total > 0 else 0.0

    ids = cat["masked_lm_ids"]
    labels = cat["disc_labels"]
    return {
        "total_loss": float(np.mean([float(b["total_loss"]) for b in batches])),
        "masked_lm_accuracy": weighted(cat["masked_lm_preds"] == ids, w),
        "masked_lm_loss": weighted(cat["mlm_loss"], w),
        "sampled_masked_lm_accuracy": weighted(cat["sampled_tokids"] == ids, w),
        "disc_loss": float(np.mean(cat["disc_loss"])),
        "disc_accuracy": weighted(cat["disc_preds"] == labels, mask),
        "disc_auc": auc_thresholded(labels * cat["input_mask"], cat["disc_probs"] * mask),
    }


def band_check(original, project, k: float = 3.0) -> dict:
    """Per sample point, whether the project's mean over seeds is inside the band: the
    original's seed range [min, max] united with mean_O +- k x SE, SE = sqrt(s_O^2 / n_O +
    s_P^2 / n_P) (seed standard deviations, ddof 1; 0 with one seed).

    Args:
        original, project: [seeds, points] values of one metric.
    Returns:
        lists per point: `original_mean`, `original_min`, `original_max`, `se`, `lo`, `hi`
        (the band), `project_mean`, `inside`, `excursion` (distance outside the band, 0
        inside), `excursion_se` (that over SE); `outside` (count), `worst` (index of the
        largest excursion, or None).
    """
    import numpy as np

    o = np.asarray(original, np.float64)
    p = np.asarray(project, np.float64)
    if o.ndim != 2 or p.ndim != 2 or o.shape[1] != p.shape[1]:
        raise ValueError(f"band_check: shapes {o.shape} and {p.shape} are not [seeds, points]")

    def var(x):
        return x.var(0, ddof=1) if x.shape[0] > 1 else np.zeros(x.shape[1])

    m_o, m_p = o.mean(0), p.mean(0)
    se = np.sqrt(var(o) / o.shape[0] + var(p) / p.shape[0])
    lo = np.minimum(o.min(0), m_o - k * se)
    hi = np.maximum(o.max(0), m_o + k * se)
    # NaN (a diverged run) is outside.
    inside = (m_p >= lo) & (m_p <= hi)
    excursion = np.where(inside, 0.0, np.maximum(lo - m_p, m_p - hi))
    excursion = np.where(np.isnan(m_p), np.inf, excursion)
    with np.errstate(divide="ignore", invalid="ignore"):
        in_se = np.where(se > 0, excursion / se, np.where(excursion > 0, np.inf, 0.0))
    out = int((~inside).sum())
    return {
        "original_mean": m_o.tolist(), "original_min": o.min(0).tolist(),
        "original_max": o.max(0).tolist(), "se": se.tolist(), "lo": lo.tolist(),
        "hi": hi.tolist(), "project_mean": m_p.tolist(), "inside": inside.tolist(),
        "excursion": excursion.tolist(), "excursion_se": in_se.tolist(), "outside": out,
        "worst": int(np.argmax(excursion)) if out else None,
    }  # fmt: skip


def verdict(curves: dict, steps: list[int], k: float, max_outside: float) -> dict:
    """Band checks of every gated metric (of METRICS, those in `curves`); `failures`: one line
    per metric with more than `max_outside` (a fraction) of its points outside."""
    result = {"bands": {}, "failures": [], "steps": steps}
    allowed = math.floor(max_outside * len(steps))
    for name in (m for m in METRICS if m in curves["original"]):
        band = band_check(curves["original"][name], curves["project"][name], k)
        result["bands"][name] = band
        if band["outside"] > allowed:
            t = band["worst"]
            result["failures"].append(
                f"{name}: {band['outside']} of {len(steps)} points outside the band (at most "
                f"{allowed} allowed); worst at step {steps[t]}: project {band['project_mean'][t]:.4f}, "
                f"band [{band['lo'][t]:.4f}, {band['hi'][t]:.4f}] ({band['excursion_se'][t]:.1f} SE out)"
            )  # fmt: skip
    return result


def simulated_seeds(rs, points: int, shift: float = 0.0, sd: float = 0.07):
    """[3 seeds, points] of one metric: a falling curve, a per-seed offset that persists along
    the curve and point noise, each with standard deviation `sd`; `shift` added."""
    import numpy as np

    t = np.arange(points)
    return 5.0 / (1.0 + t) + rs.normal(size=[3, 1]) * sd + rs.normal(size=[3, points]) * sd + shift


def calibrate(trials: int = 2000, seed: int = 0, k: float = 3.0, max_outside: float = 0.5) -> dict:
    """The band rule on simulated seeds (`simulated_seeds`, 3 per side, 21 points): the share of
    points outside when both sides come from one distribution, under this rule and under the
    literal one (the original's range or 2 SE of the original's mean alone); how often the
    verdict fails then, and how often with the project shifted by 3 seed standard deviations
    (0.3: a seed's sd is 0.07 x sqrt 2)."""
    import numpy as np

    rs = np.random.RandomState(seed)
    steps = list(range(21))
    literal, ours, false_alarms, caught = [], [], 0, 0
    for _ in range(trials):
        o, p, moved = (simulated_seeds(rs, 21, shift) for shift in (0.0, 0.0, 0.3))
        se_o = o.std(0, ddof=1) / np.sqrt(3)
        inside = ((p.mean(0) >= o.min(0)) & (p.mean(0) <= o.max(0))) | (
            np.abs(p.mean(0) - o.mean(0)) <= 2 * se_o
        )
        literal.append(1 - inside.mean())
        ours.append(band_check(o, p, k)["outside"] / 21)
        for project, counter in ((p, "false"), (moved, "caught")):
            c = {"original": {METRICS[0]: o}, "project": {METRICS[0]: project}}
            failed = bool(verdict(c, steps, k, max_outside)["failures"])
            false_alarms += failed and counter == "false"
            caught += failed and counter == "caught"
    return {
        "outside_literal_rule": float(np.mean(literal)),
        "outside_this_rule": float(np.mean(ours)),
        "failed_same_distribution": false_alarms / trials,
        "failed_shift_3sd": caught / trials,
    }


def summary_lines(result: dict) -> list[str]:
    lines = []
    for name, band in result["bands"].items():
        t = band["worst"]
        worst = "none"
        if t is not None:
            worst = (
                f"worst {band['excursion'][t]:.4g} ({band['excursion_se'][t]:.1f} SE) at step "
                f"{result['steps'][t]}"
            )
        lines.append(
            f"  {name:20s} {band['outside']:3d} of {len(result['steps'])} points outside; {worst}"
        )
    return lines


def table_lines(result: dict, every: int = 1) -> list[str]:
    """step | per metric: original mean +- half band width, project mean (* outside)."""
    head = f"{'step':>5s}"
    for name in METRICS:
        head += f" | {name + ' O (band)':>22s} {'P':>7s}"
    lines = [head]
    for i, step in enumerate(result["steps"]):
        if i % every and i != len(result["steps"]) - 1:
            continue
        row = f"{step:5d}"
        for name in METRICS:
            b = result["bands"][name]
            half = (b["hi"][i] - b["lo"][i]) / 2
            mark = " " if b["inside"][i] else "*"
            row += (
                f" | {b['original_mean'][i]:10.4f} +-{half:8.4f} {b['project_mean'][i]:7.4f}{mark}"
            )
        lines.append(row)
    return lines


def write_csv(path: str, result: dict, curves: dict) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["metric", "step", "original_mean", "original_min", "original_max", "se",
                    "band_lo", "band_hi", "project_mean", "inside", "excursion",
                    "original_seeds", "project_seeds"])  # fmt: skip
        for name, band in result["bands"].items():
            for i, step in enumerate(result["steps"]):
                w.writerow([name, step] + [band[k][i] for k in (
                    "original_mean", "original_min", "original_max", "se", "lo", "hi",
                    "project_mean", "inside", "excursion")]
                    + [" ".join(f"{s[i]:.6g}" for s in curves[side][name]) for side in ("original", "project")])  # fmt: skip
