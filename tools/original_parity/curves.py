"""Curve parity: learning curves of electra_tf and of the ORIGINAL google-research/electra, each
with its OWN randomness, on real text.

    .venv/bin/python -m tools.original_parity.curves --mirror <git copy of google-research/electra>
        --data-dir data/default [--seeds 3] [--steps 2000] [--json out.json] [--csv out.csv]
        [--png out.png (default: beside --json)] [--runs-dir DIR [--report-only]]
        [--mutation NAME] [--original-from earlier.json] [--jobs 1]

check.py and trajectory.py feed the original the PROJECT's masks and samples, so they cannot see
a bug in how those are drawn (a masking rate, the [MASK] share, the sampler's noise). Here
nothing is shared but the data and the hyperparameters:

- the original: its whole pre-training graph under tf.compat.v1, unchanged (check.py's shims):
  its input function and feature parsing (`pretrain_data.get_input_fn`, reading the TFRecords),
  `run_pretraining.PretrainingModel` with its own dynamic masking (`pretrain_helpers.mask`),
  Gumbel sampling and losses, `optimization.create_optimizer` (warm-up x linear decay, clipping,
  AdamWeightDecay; its train op as `model_fn_builder` makes it), its own initializers, dropout
  and graph seed (`tf.set_random_seed(seed)`);
- the project: its training run's pieces (`build_model`, `build_optimizer`, the compiled
  `make_train_function` over `ElectraPretrainer.train_update`, `make_dataset`), seeded with
  `seed` (config and Keras), its own masking, sampling, initializers and dropout;

`--seeds` runs per side (each in its own process), the same tiny shape, batch, learning rate,
warm-up and schedule (see `hparams`). Dropout is the default 0.1 on both sides: each side runs as
it normally trains, and dropout is part of the randomness being compared.

Every `--every` (100) steps both sides are scored on one FIXED held-out set: the first
EVAL_BATCHES x EVAL_BATCH records of `<data-dir>/eval_tfrecords`, masked ONCE by the original's
own `pretrain_helpers.mask` (graph seed EVAL_SEED; the same positions and [MASK]s for every
run and step), with the generator's Gumbel noise fixed too (uniform draws from EVAL_SEED, fed to
the original's `sample_from_softmax` and to the project's `gumbel_sample`). So the differences
between evaluations are the weights', not the draw's. Metrics (`eval_metrics`, the original's
`metric_fn` definitions, computed in numpy from each side's raw outputs; on the original's side
its own metric_fn is run too and must agree): total loss (mean over the batches), generator
masked-LM accuracy, discriminator accuracy, discriminator AUC (tf.metrics.auc: 200 thresholds,
padding counted as negatives scored 0).

Band rule (`band_check`), per metric and step: with m_O, m_P the means over seeds and s_O, s_P
the seed standard deviations, the project's mean is inside when it lies in the original's seed
range [min_O, max_O] OR within k x SE of m_O, SE = sqrt(s_O^2/n_O + s_P^2/n_P) the standard
error of the DIFFERENCE of the two means (k = --k, 3). The verdict (`verdict`): CURVES OK when,
for every metric, at most --max-outside (half) of the sample points are outside. Why not the
original's SE alone and not every point: with 3 seeds per side and identical distributions, a
3-seed mean of the project falls outside [min_O, max_O] or 2 SE of the original's mean at
29% of points (simulated), and seed effects persist along a curve; see docs/parity.md.

Exit status 0: CURVES OK; 1: CURVES FAILED; 2: usage errors.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

from electra_tf import atomic_io
from tools.original_parity.original_side import import_original, install_shims
from tools.original_parity.project_side import build_optimizer
from tools.original_parity.runtime import (
    BASE_HPARAMS,
    DEFAULT_MIRROR,
    REPO_ROOT,
    Proxy,
    child_env,
    extract_original,
    log,
    patched,
    resolve_mirror,
    session_config,
    setup_tf,
)

METRICS = ("total_loss", "masked_lm_accuracy", "disc_accuracy", "disc_auc")
# Recorded, not gated.
EXTRA_METRICS = ("masked_lm_loss", "sampled_masked_lm_accuracy", "disc_loss", "train_loss")
# The keys of the original's eval_fn_inputs, in its order (run_pretraining.PretrainingModel).
ORIGINAL_EVAL_KEYS = (
    "input_ids", "masked_lm_preds", "mlm_loss", "masked_lm_ids", "masked_lm_weights",
    "input_mask", "disc_loss", "disc_labels", "disc_probs", "disc_preds", "sampled_tokids",
)  # fmt: skip
EVAL_BATCH, EVAL_BATCHES = 16, 4
EVAL_SEED = 4321
DEFAULT_DATA_DIR = "data/default"
MUTATIONS = {
    "mask_rate_010": "dynamic masking predicts 10% of the tokens instead of 15% (same slots N)",
    "mask_token_always": "every chosen position shows [MASK] (probability 1.0 instead of 0.85)",
    "greedy_sampling": "the generator's samples are its argmax: no Gumbel noise",
}


# ============================================================================ pure helpers
def hparams(steps: int, batch: int, warmup: int | None = None, vocab_size: int = 30522) -> dict:
    """Both sides' hyperparameters: trajectory.py's tiny model (discriminator 4 x 64, 4 heads,
    embedding 32, generator 16 wide with its projection, 2 layers) on the default corpus'
    vocabulary and sequence length, default dropout, the schedule spanning the run."""
    hp = dict(BASE_HPARAMS)
    hp["model_hparam_overrides"] = {
        k: v for k, v in hp["model_hparam_overrides"].items() if not k.endswith("dropout_prob")
    }
    hp.update(
        vocab_size=vocab_size,
        max_seq_length=128,
        generator_hidden_size=0.25,
        train_batch_size=batch,
        num_train_steps=steps,
        num_warmup_steps=max(1, steps // 10) if warmup is None else warmup,
    )
    return hp


def max_predictions(hp: dict) -> int:
    """The original's max_predictions_per_seq (configure_pretraining)."""
    return int((hp["mask_prob"] + 0.005) * hp["max_seq_length"])


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


# ============================================================================ mutations
def apply_mutation(name: str) -> None:
    """Monkeypatches the project in this process (MUTATIONS here, or mutations.py's)."""
    if name not in MUTATIONS:
        from tools.original_parity import mutations

        mutations.apply(name)
        return
    import tensorflow as tf

    from electra_tf.pretraining import pretrainer

    if name in ("mask_rate_010", "mask_token_always"):
        real = pretrainer.mask_inputs

        def mutated(input_ids, input_mask, max_predictions, mask_prob, seed, **kw):
            if name == "mask_rate_010":
                mask_prob = 0.10
            else:
                kw["mask_token_prob"] = 1.0
            return real(input_ids, input_mask, max_predictions, mask_prob, seed, **kw)

        pretrainer.mask_inputs = mutated
    elif name == "greedy_sampling":

        def greedy(logits, seed, temperature=1.0, disallow_ids=None, uniform=None):
            del seed, uniform
            return tf.argmax(tf.stop_gradient(tf.cast(logits, tf.float32)), -1, tf.int32)

        pretrainer.gumbel_sample = greedy


# ============================================================================ eval set
def eval_noise(np, hp: dict, i: int):
    """The fixed uniform draws of the generator's Gumbel noise for eval batch `i`: float32
    [EVAL_BATCH, N, vocab], made anew at each use (no 300 MB kept per run)."""
    shape = [EVAL_BATCH, max_predictions(hp), hp["vocab_size"]]
    return np.random.default_rng(EVAL_SEED + i).random(shape, dtype=np.float32)


def prepare_eval_set(args, hp: dict, out: str) -> None:
    """Child: the first EVAL_BATCHES x EVAL_BATCH records of the eval TFRecords (in order, as
    the original's parser reads them), masked once by the original's `pretrain_helpers.mask`
    (graph seed EVAL_SEED); written to `out` (npz)."""
    np, tf = setup_tf(args.threads)
    import tensorflow.compat.v1 as v1

    orig = _original_code(args, tf)
    config = orig.configure_pretraining.PretrainingConfig("curves", args.data_dir, **hp)
    files = sorted(v1.io.gfile.glob(os.path.join(args.data_dir, "eval_tfrecords", "*.tfrecord*")))
    count = EVAL_BATCH * EVAL_BATCHES
    graph = v1.Graph()
    with graph.as_default():
        v1.set_random_seed(EVAL_SEED)
        name_to_features = {
            k: v1.io.FixedLenFeature([config.max_seq_length], v1.int64)
            for k in ("input_ids", "input_mask", "segment_ids")
        }
        d = v1.data.TFRecordDataset(files).take(count)
        # The original's own record decoder (int64 -> int32).
        d = d.map(lambda r: orig.pretrain_data._decode_record(r, name_to_features))
        features = v1.data.make_one_shot_iterator(
            d.batch(EVAL_BATCH, drop_remainder=True)
        ).get_next()
        masked = orig.pretrain_helpers.mask(
            config, orig.pretrain_data.features_to_inputs(features), config.mask_prob
        )
        fetch = {k: features[k] for k in features}
        fetch.update({
            "masked_input_ids": masked.input_ids, "masked_lm_positions": masked.masked_lm_positions,
            "masked_lm_ids": masked.masked_lm_ids, "masked_lm_weights": masked.masked_lm_weights,
        })  # fmt: skip
    with v1.Session(graph=graph) as sess:
        parts = []
        for _ in range(EVAL_BATCHES):
            try:
                parts.append(sess.run(fetch))
            except v1.errors.OutOfRangeError:
                raise SystemExit(
                    f"ERROR: {args.data_dir}/eval_tfrecords has fewer than {count} records"
                ) from None
    np.savez(out, **{k: np.stack([p[k] for p in parts]) for k in fetch})


# ============================================================================ original side
def _original_code(args, tf):
    tmp = os.path.join(args.workdir, f"electra_original_{args.child}_{args.seed}")
    commit = extract_original(args.mirror, args.rev, tmp)
    install_shims(tf)
    orig = import_original(tmp)
    orig.commit = commit
    return orig


class OriginalEval:
    """The original's model at is_training=False in its own graph, on the fixed eval set:
    `mask` returns the fixed masking, `sample_from_softmax` draws its Gumbel noise from the
    fixed uniforms; its own metric_fn runs beside (`own_metrics`)."""

    def __init__(self, orig, config, eval_set, noise, threads: int):
        import tensorflow.compat.v1 as v1

        ph, pd, rp = orig.pretrain_helpers, orig.pretrain_data, orig.run_pretraining
        B, S, N = EVAL_BATCH, config.max_seq_length, config.max_predictions_per_seq
        self.eval_set, self.noise = eval_set, noise
        self.graph = v1.Graph()
        with self.graph.as_default():
            self.features = {
                k: v1.placeholder(v1.int32, [B, S], k)
                for k in ("input_ids", "input_mask", "segment_ids")
            }
            self.fixed = {
                "masked_input_ids": v1.placeholder(v1.int32, [B, S]),
                "masked_lm_positions": v1.placeholder(v1.int32, [B, N]),
                "masked_lm_ids": v1.placeholder(v1.int32, [B, N]),
                "masked_lm_weights": v1.placeholder(v1.float32, [B, N]),
            }
            self.uniform = v1.placeholder(v1.float32, [B, N, config.vocab_size])

            def fixed_mask(config_, inputs, mask_prob, *a, **k):
                f = self.fixed
                return pd.get_updated_inputs(
                    inputs, input_ids=f["masked_input_ids"],
                    masked_lm_positions=f["masked_lm_positions"],
                    masked_lm_ids=f["masked_lm_ids"], masked_lm_weights=f["masked_lm_weights"],
                )  # fmt: skip

            def fixed_uniform(shape, *a, **k):
                assert list(shape) == self.uniform.shape.as_list(), shape
                return self.uniform

            random = Proxy(v1.random, uniform=fixed_uniform)
            with (
                patched(ph, "mask", fixed_mask),
                patched(ph, "tf", Proxy(v1, random=random)),
            ):
                model = rp.PretrainingModel(config, dict(self.features), False)
            metric_fn, values = model.eval_metrics
            if len(values) != len(ORIGINAL_EVAL_KEYS):
                raise SystemExit(f"ERROR: the original's eval_fn_inputs has {len(values)} entries")
            self.fetch = dict(zip(ORIGINAL_EVAL_KEYS, values, strict=True))
            self.fetch["total_loss"] = model.total_loss
            own = metric_fn(*values)
            self.own_values = {k: v[0] for k, v in own.items()}
            self.fetch["_updates"] = [v[1] for v in own.values()]
            self.reset = v1.local_variables_initializer()
            self.saver = v1.train.Saver(var_list={v.op.name: v for v in v1.trainable_variables()})
        self.sess = v1.Session(graph=self.graph, config=session_config(threads))

    def run(self, prefix: str) -> tuple[dict, dict]:
        with self.graph.as_default():
            self.saver.restore(self.sess, prefix)
        self.sess.run(self.reset)
        batches = []
        for i in range(EVAL_BATCHES):
            feed = {self.features[k]: self.eval_set[k][i] for k in self.features}
            feed.update({self.fixed[k]: self.eval_set[k][i] for k in self.fixed})
            feed[self.uniform] = self.noise(i)
            batches.append(self.sess.run(self.fetch, feed))
        return eval_metrics(batches), {
            k: float(v) for k, v in self.sess.run(self.own_values).items()
        }


def run_original(args, hp: dict) -> dict:
    """Child: the original's training graph for --steps, evaluated every --every steps."""
    np, tf = setup_tf(args.threads)
    import tensorflow.compat.v1 as v1

    orig = _original_code(args, tf)
    rp, opt = orig.run_pretraining, orig.optimization
    config = orig.configure_pretraining.PretrainingConfig("curves", args.data_dir, **hp)
    eval_set = dict(np.load(args.eval_set))
    evaluator = OriginalEval(orig, config, eval_set, lambda i: eval_noise(np, hp, i), args.threads)
    graph = v1.Graph()
    with graph.as_default():
        v1.set_random_seed(args.seed)
        # As train_one_step / TPUEstimator.train feed it: the original's input_fn.
        input_fn = orig.pretrain_data.get_input_fn(config, True)
        dataset = input_fn({"batch_size": config.train_batch_size})
        features = v1.data.make_one_shot_iterator(dataset).get_next()
        model = rp.PretrainingModel(config, features, True)
        # model_fn_builder's TRAIN branch.
        train_op = opt.create_optimizer(
            model.total_loss, config.learning_rate, config.num_train_steps,
            weight_decay_rate=config.weight_decay_rate, use_tpu=config.use_tpu,
            warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power,
        )  # fmt: skip
        saver = v1.train.Saver(var_list={v.op.name: v for v in v1.trainable_variables()})
        init = v1.global_variables_initializer()
    sess = v1.Session(graph=graph, config=session_config(args.threads))
    sess.run(init)
    prefix = os.path.join(args.workdir, f"original_seed{args.seed}", "model.ckpt")
    record = _Recorder(args, "original")
    losses = []
    for step in range(args.steps + 1):
        if step % args.every == 0 or step == args.steps:
            with graph.as_default():
                saver.save(sess, prefix, write_meta_graph=False)
            mine, own = evaluator.run(prefix)
            for key in METRICS + ("masked_lm_loss", "disc_loss"):
                ref = own.get("loss" if key == "total_loss" else key)
                if ref is not None and not abs(ref - mine[key]) <= 1e-4 * max(1.0, abs(ref)):
                    raise SystemExit(
                        f"ERROR: eval_metrics' {key} {mine[key]} != the original's metric_fn {ref}"
                    )
            mine["train_loss"] = float(np.mean(losses)) if losses else float("nan")
            losses = []
            record.point(step, mine)
        if step == args.steps:
            break
        _, loss = sess.run([train_op, model.total_loss])
        losses.append(loss)
    return record.done()


# ============================================================================ project side
def run_project(args, hp: dict) -> dict:
    """Child: the project's training run pieces for --steps, evaluated every --every steps."""
    np, tf = setup_tf(args.threads)
    import tf_keras as keras

    import electra_tf
    from electra_tf.runs.pretraining_data import make_dataset
    from electra_tf.runs.pretraining_model import build_model, make_train_function

    if args.mutation:
        apply_mutation(args.mutation)
    keras.utils.set_random_seed(args.seed)
    precision = args.project_precision
    config = electra_tf.pretraining_config(
        "curves", args.data_dir,
        hparams=dict(hp, seed=args.seed, precision=precision, jit_compile=False),
    )  # fmt: skip
    keras.mixed_precision.set_global_policy(precision)  # as the training run sets it
    model = build_model(config)
    optimizer = build_optimizer(config, model)
    model.compile(optimizer=optimizer)
    strategy = tf.distribute.get_strategy()
    train_steps = make_train_function(model, strategy, jit=False)
    dataset = make_dataset(
        config, strategy, config.resolved_pretrain_tfrecords(), config.train_batch_size, True
    )
    iterator = iter(dataset)
    eval_set = dict(np.load(args.eval_set))
    B, S, N = EVAL_BATCH, config.max_seq_length, config.max_predictions_per_seq
    spec = {k: tf.TensorSpec([B, S], tf.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    mspec = {
        "masked_input_ids": tf.TensorSpec([B, S], tf.int32),
        "masked_lm_positions": tf.TensorSpec([B, N], tf.int32),
        "masked_lm_ids": tf.TensorSpec([B, N], tf.int32),
        "masked_lm_weights": tf.TensorSpec([B, N], tf.float32),
    }

    @tf.function(input_signature=[spec, mspec, tf.TensorSpec([B, N, config.vocab_size])])
    def evaluate(inputs, masked, uniform):
        draws = {"masked": masked, "sample_seed": tf.zeros([2], tf.int64), "uniform": uniform}
        out = model.forward(inputs, False, draws=draws)
        # float32 for the metrics, whatever the --project-precision computed in.
        out = {k: tf.cast(v, tf.float32) if v.dtype.is_floating else v for k, v in out.items()}
        mask = tf.cast(inputs["input_mask"], tf.float32)
        probs = tf.sigmoid(out["disc_logits"])
        return {
            "total_loss": out["loss"],
            "masked_lm_preds": tf.argmax(out["mlm_logits"], -1, output_type=tf.int32),
            "mlm_loss": out["masked_lm_losses"],
            "disc_loss": tf.reduce_sum(out["disc_losses"] * mask, -1) / (1e-6 + tf.reduce_sum(mask, -1)),
            "disc_labels": out["disc_labels"],
            "disc_probs": probs,
            "disc_preds": tf.cast(out["disc_logits"] > 0, tf.int32),
            "sampled_tokids": out["sampled_ids"],
        }  # fmt: skip

    record = _Recorder(args, "project")
    step = 0
    while True:
        batches = []
        for i in range(EVAL_BATCHES):
            inputs = {k: tf.constant(eval_set[k][i]) for k in spec}
            masked = {k: tf.constant(eval_set[k][i]) for k in mspec}
            res = {
                k: v.numpy()
                for k, v in evaluate(inputs, masked, tf.constant(eval_noise(np, hp, i))).items()
            }
            res.update(
                input_ids=eval_set["masked_input_ids"][i], input_mask=eval_set["input_mask"][i],
                masked_lm_ids=eval_set["masked_lm_ids"][i],
                masked_lm_weights=eval_set["masked_lm_weights"][i],
            )  # fmt: skip
            batches.append(res)
        values = eval_metrics(batches)
        loss = {m.name: float(m.result()) for m in model.metrics}.get("loss", float("nan"))
        values["train_loss"] = loss if step else float("nan")
        record.point(step, values)
        if step >= args.steps:
            break
        for m in model.metrics:
            m.reset_state()
        n = min(args.every, args.steps - step)
        train_steps(iterator, tf.constant(n))
        step += n
    return record.done()


class _Recorder:
    def __init__(self, args, side: str):
        self.args, self.side = args, side
        self.steps, self.values = [], {}
        self.t0 = time.time()
        self.cpu0 = time.process_time()

    def point(self, step: int, values: dict) -> None:
        self.steps.append(step)
        for k, v in values.items():
            self.values.setdefault(k, []).append(v)
        log(
            f"[{self.side} seed {self.args.seed}] step {step:5d} "
            + " ".join(f"{k} {values[k]:.4f}" for k in METRICS)
            + f" ({time.time() - self.t0:.0f} s)"
        )
        # The curve so far, after every point: a run stopped early still leaves it
        # (`--report-only` compares the steps every run has reached).
        self._write(complete=False)

    def _write(self, complete: bool) -> dict:
        result = {
            "side": self.side, "seed": self.args.seed, "steps": self.steps, "values": self.values,
            "seconds": round(time.time() - self.t0, 1),
            "cpu_seconds": round(time.process_time() - self.cpu0, 1),
            "mutation": self.args.mutation if self.side == "project" else None,
            "complete": complete,
        }  # fmt: skip
        partial = self.args.out + ".part"
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(result, f)
        os.replace(partial, self.args.out)
        return result

    def done(self) -> dict:
        return self._write(complete=True)


# ============================================================================ orchestration
def vocab_size_of(data_dir: str) -> int:
    with open(os.path.join(data_dir, "vocab.txt"), encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def check_data_dir(data_dir: str) -> None:
    needed = ["vocab.txt", "pretrain_tfrecords", "eval_tfrecords"]
    missing = [n for n in needed if not os.path.exists(os.path.join(data_dir, n))]
    if missing:
        raise SystemExit(
            f"ERROR: {data_dir}: no {', '.join(missing)}; build the default corpus with "
            f"`make default-data` (python data_prep/build_default_corpus.py --data-dir "
            f"{DEFAULT_DATA_DIR}) or pass --data-dir"
        )


def _child_cmd(args, role: str, seed: int, out: str, mutation: str | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "tools.original_parity.curves", "--child", role,
           "--seed", str(seed), "--out", out, "--mirror", args.mirror, "--rev", args.rev,
           "--data-dir", args.data_dir, "--steps", str(args.steps), "--every", str(args.every),
           "--batch", str(args.batch), "--threads", str(args.threads),
           "--eval-set", args.eval_set, "--workdir", args.workdir]  # fmt: skip
    if args.warmup is not None:
        cmd += ["--warmup", str(args.warmup)]
    if mutation:
        cmd += ["--mutation", mutation]
    if role == "project":
        cmd += ["--project-precision", args.project_precision]
    return cmd


def run_children(args, jobs: list[tuple]) -> list[dict]:
    """Each (side, seed, mutation) in its own process, --jobs at a time; their results."""
    pending, running, results = list(jobs), [], []
    while pending or running:
        while pending and len(running) < args.jobs:
            side, seed, mutation = pending.pop(0)
            out = os.path.join(args.runs_dir, f"{side}_{mutation or 'clean'}_seed{seed}.json")
            cmd = _child_cmd(args, side, seed, out, mutation)
            proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=child_env())
            running.append((proc, side, seed, out))
        time.sleep(1.0)
        for item in list(running):
            proc, side, seed, out = item
            if proc.poll() is None:
                continue
            running.remove(item)
            if proc.returncode != 0:
                for other in running:
                    other[0].kill()
                raise SystemExit(
                    f"ERROR: the {side} run with seed {seed} failed (exit {proc.returncode})"
                )
            with open(out, encoding="utf-8") as f:
                results.append(json.load(f))
    return results


def child_main(args) -> int:
    hp = hparams(args.steps, args.batch, args.warmup, vocab_size_of(args.data_dir))
    if args.child == "prepare":
        prepare_eval_set(args, hp, args.out)
        return 0
    if args.child == "original":
        run_original(args, hp)
    else:
        run_project(args, hp)
    return 0


def load_runs(runs_dir: str) -> list[dict]:
    """The runs' curves in `runs_dir`, cut to the sample steps that every run has reached
    (runs still going, or stopped, leave their curve so far)."""
    runs = []
    for name in sorted(os.listdir(runs_dir)):
        if name.endswith(".json"):
            with open(os.path.join(runs_dir, name), encoding="utf-8") as f:
                runs.append(json.load(f))
    if not runs:
        raise SystemExit(f"ERROR: no run results (*.json) in {runs_dir}")
    points = min(len(r["steps"]) for r in runs)
    for r in runs:
        r["steps"] = r["steps"][:points]
        r["values"] = {k: v[:points] for k, v in r["values"].items()}
    return runs


def execute(args, hp: dict, previous: dict | None) -> list[dict]:
    """Prepares the eval set, runs every (side, seed, mutation) child; their results."""
    args.workdir = tempfile.mkdtemp(prefix="electra_curves_")
    args.runs_dir = os.path.abspath(args.runs_dir or args.workdir)
    os.makedirs(args.runs_dir, exist_ok=True)
    try:
        args.eval_set = os.path.join(args.workdir, "eval_set.npz")
        r = subprocess.run(_child_cmd(args, "prepare", 0, args.eval_set), cwd=REPO_ROOT,
                           env=child_env())  # fmt: skip
        if r.returncode != 0:
            raise SystemExit("ERROR: preparing the evaluation set failed")
        log(
            f"curves: {args.seeds} seed(s) per side, {args.steps} steps (warm-up "
            f"{hp['num_warmup_steps']}), batch {args.batch} x {hp['max_seq_length']}, eval every "
            f"{args.every} on {EVAL_BATCHES} x {EVAL_BATCH} held-out records, mutation "
            f"{args.mutation or 'none'}"
            + (f", also under {', '.join(args.also_mutation)}" if args.also_mutation else "")
        )
        seeds = range(1, args.seeds + 1)
        jobs = [("original", s, None) for s in seeds] if previous is None else []
        for mutation in [args.mutation, *args.also_mutation]:
            jobs += [("project", s, mutation) for s in seeds]
        runs = run_children(args, jobs)
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    if previous is not None:
        runs += [r for r in previous["runs"] if r["side"] == "original"]
    return runs


def collect(runs: list[dict], mutation: str | None = None) -> tuple[dict, list[int]]:
    """{"original"|"project": {metric: [seeds][points]}} (the project's runs under `mutation`)
    and the sample steps (which must agree)."""
    curves = {"original": {}, "project": {}}
    steps = None
    for run in sorted(runs, key=lambda r: (r["side"], r["seed"])):
        if run["side"] == "project" and run.get("mutation") != mutation:
            continue
        if steps is None:
            steps = run["steps"]
        elif run["steps"] != steps:
            raise SystemExit(f"ERROR: the {run['side']} seed {run['seed']} run sampled other steps")
        for name in METRICS + EXTRA_METRICS:
            curves[run["side"]].setdefault(name, []).append(run["values"][name])
    for side, runs_of_side in curves.items():
        if not runs_of_side:  # e.g. --report-only before the first project run has a point
            under = f" under {mutation}" if side == "project" and mutation else ""
            raise SystemExit(f"ERROR: no {side} run{under} among the runs to compare")
    return curves, steps or []


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--mirror", default=DEFAULT_MIRROR,
                   help="git copy of google-research/electra (default $ELECTRA_ORIGINAL_MIRROR)")  # fmt: skip
    p.add_argument("--rev", default="HEAD")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="vocab.txt, pretrain_tfrecords/, eval_tfrecords/ (make default-data)")  # fmt: skip
    p.add_argument("--seeds", type=int, default=3, help="runs per side")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--every", type=int, default=100, help="evaluate every N steps")
    p.add_argument("--batch", type=int, default=4, help="training batch size (both sides)")
    p.add_argument("--warmup", type=int, help="warm-up steps (default steps // 10)")
    p.add_argument("--k", type=float, default=3.0, help="band: original mean +- k x SE")
    p.add_argument("--max-outside", type=float, default=0.5,
                   help="fraction of a metric's points allowed outside the band")  # fmt: skip
    names = ", ".join(MUTATIONS) + " or one of mutations.py's"
    p.add_argument("--mutation", help=f"inject a bug into the project side: {names}")
    p.add_argument("--project-precision", default="float32",
                   choices=("float32", "mixed_bfloat16", "mixed_float16"),
                   help="the project side's precision (the original's is float32): with "
                        "mixed_bfloat16, whether bf16 training stays in float32's band")  # fmt: skip
    p.add_argument("--also-mutation", action="append", default=[],
                   help="also run the project under this bug (repeatable) and report whether "
                   "the band check catches it; the exit status stays the clean run's")  # fmt: skip
    p.add_argument("--original-from", help="reuse the original's runs from an earlier --json")
    p.add_argument("--runs-dir", help="keep each run's curves here (default: a temporary dir)")
    p.add_argument("--report-only", action="store_true",
                   help="no runs: the report from the runs already in --runs-dir")  # fmt: skip
    p.add_argument("--jobs", type=int, default=1, help="runs at once")
    p.add_argument("--threads", type=int, default=1, help="TensorFlow threads per run")
    p.add_argument("--json", help="write every curve, band and the verdict here")
    p.add_argument("--csv", help="write one row per metric and sample step here")
    p.add_argument("--png", help="draw the curves here (default: beside --json, as .png)")
    p.add_argument("--print-every", type=int, default=5, help="table: every n-th sample point")
    p.add_argument("--calibrate", action="store_true",
                   help="only simulate the band rule on seeds from one distribution (no mirror)")  # fmt: skip
    for hidden in ("--child", "--out", "--eval-set", "--workdir"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    problem = atomic_io.make_parents(args.json, args.csv, args.png)
    if problem:
        p.error(problem)
    if args.child:
        return child_main(args)
    if args.calibrate:
        for key, value in calibrate(k=args.k, max_outside=args.max_outside).items():
            log(f"{key}: {value:.1%}")
        return 0
    if args.steps < 1 or args.every < 1 or args.seeds < 1 or args.jobs < 1:
        p.error("--steps, --every, --seeds and --jobs must be at least 1")
    from tools.original_parity import mutations

    for name in filter(None, [args.mutation, *args.also_mutation]):
        if name not in MUTATIONS and name not in mutations.ALL:
            p.error(f"--mutation: {name!r} is not one of {', '.join([*MUTATIONS, *mutations.ALL])}")
    if not args.report_only:  # a report from finished runs needs no copy of the original
        args.mirror = resolve_mirror(args.mirror)
    check_data_dir(args.data_dir)
    args.data_dir = os.path.abspath(args.data_dir)
    hp = hparams(args.steps, args.batch, args.warmup, vocab_size_of(args.data_dir))
    previous = None
    if args.original_from:
        with open(args.original_from, encoding="utf-8") as f:
            previous = json.load(f)
        if previous["meta"]["hparams"] != json.loads(json.dumps(hp)):
            raise SystemExit(f"ERROR: {args.original_from} was run with other hyperparameters")
    t0 = time.time()
    if args.report_only:
        if not args.runs_dir:
            p.error("--report-only needs --runs-dir")
        runs = load_runs(args.runs_dir)
    else:
        runs = execute(args, hp, previous)
    curves, steps = collect(runs, args.mutation)
    result = verdict(curves, steps, args.k, args.max_outside)
    partial = not all(r.get("complete", True) for r in runs)
    log("\n" + "\n".join(table_lines(result, args.print_every)))
    log("(original mean +- half the band width, project mean; * outside the band)\n")
    log("\n".join(summary_lines(result)))
    line = _verdict_line(result, args)
    if partial:
        line += (
            f" [PARTIAL: the runs compared up to step {steps[-1] if steps else 0} of {args.steps}]"
        )
    extra = {}
    for mutation in args.also_mutation:
        m_curves, _ = collect(runs, mutation)
        m_result = verdict(m_curves, steps, args.k, args.max_outside)
        caught = "caught" if m_result["failures"] else "NOT caught"
        m_line = f"{caught}: {_verdict_line(m_result, args)}"
        if partial:
            m_line += f" [PARTIAL: up to step {steps[-1] if steps else 0} of {args.steps}]"
        extra[mutation] = {"verdict": m_line,
                           "failures": m_result["failures"], "curves": m_curves["project"],
                           "bands": m_result["bands"]}  # fmt: skip
        log(f"\nmutation {mutation} ({MUTATIONS.get(mutation) or mutations.ALL[mutation]}):")
        log("\n".join(table_lines(m_result, args.print_every)))
        log("\n".join(summary_lines(m_result)))
        log(f"mutation {mutation}: {extra[mutation]['verdict']}")
    meta = {
        "hparams": hp, "seeds": args.seeds, "k": args.k, "max_outside": args.max_outside,
        "mutation": args.mutation, "eval": f"{EVAL_BATCHES} x {EVAL_BATCH} records",
        "partial": partial,
        "seconds": round(time.time() - t0, 1),
        "cpu_seconds": {f"{r['side']}_{r.get('mutation') or 'clean'}_{r['seed']}": r["cpu_seconds"] for r in runs},
    }  # fmt: skip
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"verdict": line, "failures": result["failures"], "steps": steps,
                       "curves": curves, "bands": result["bands"], "runs": runs,
                       "also_mutations": extra, "meta": meta}, f, indent=1)  # fmt: skip
    if args.csv:
        write_csv(args.csv, result, curves)
    from electra_tf.evaluation import plots

    png = plots.png_path(args.png, args.json)
    if png:
        draw(png, result, curves, extra, line, args.mutation)
        log(f"picture: {png}")
    log("")
    for failure in result["failures"]:
        log(f"  - {failure}")
    log(line)
    log(f"time: {meta['seconds']:.0f} s")
    return 1 if result["failures"] else 0


def draw(
    path: str, result: dict, curves: dict, extra: dict, line: str, mutation: str | None
) -> None:
    """The curves as a PNG (`plots.curve_parity`): the verdict, the points outside and each
    --also-mutation's outcome as its title; the mutated runs in colours of their own."""
    from electra_tf.evaluation import plots

    outside = sum(band["outside"] for band in result["bands"].values())
    points = len(result["steps"]) * len(result["bands"])
    title = f"{line.split(' (')[0]}: {outside} of {points} points outside the original's band"
    if "[PARTIAL" in line:
        title += " [" + line.split(" [PARTIAL: ")[1]
    project = f"electra-tf under {mutation}" if mutation else "electra-tf"
    for name, m in extra.items():
        title += f"; {name}: {m['verdict'].split(':')[0]}"
    mutated = [(f"electra-tf under {name}", m["curves"]) for name, m in extra.items()]
    plots.curve_parity(path, result["steps"], curves["original"], curves["project"],
                       result["bands"], mutated, project, title)  # fmt: skip


def _verdict_line(result: dict, args) -> str:
    rule = (
        f"band: original seed range or mean +- {args.k:g} SE of the difference; at most "
        f"{args.max_outside:g} of the points outside per metric"
    )
    if result["failures"]:
        return f"CURVES FAILED ({len(result['failures'])} metric(s); {rule})"
    return f"CURVES OK ({rule})"


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


if __name__ == "__main__":
    sys.exit(main())
