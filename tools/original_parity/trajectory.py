"""Trajectory parity: many training steps of electra_tf next to the ORIGINAL google-research/electra.

    .venv/bin/python -m tools.original_parity.trajectory --mirror <git copy of google-research/electra>
        [--steps 1000] [--json out.json] [--csv per_step.csv] [--mutation NAME]

Both sides start from the same weights (the project's initial weights, every bias and LayerNorm
parameter moved by N(0, 0.02) so that they matter, exported with the project's converter and
restored into the original's graph with a TF1 Saver) and see the same fixed stream of
synthetic batches (`batch_at`: batch 4, length 32, two segments, padding, Zipf-distributed
tokens). At every step the project draws its masking and its generator samples
(`ElectraPretrainer`'s own RNG) and the original gets exactly those (check.py's
`project_draws`: its `pretrain_helpers.mask` / `sample_from_softmax` return the project's), so
the two runs differ only by how they compute.

- The project: `ElectraPretrainer(config, ...)`, the optimizer its training run builds
  (`build_optimizer`: AdamWeightDecay on the original's schedule), one `train_update` per step
  in a `tf.function` (the training loop's step); the losses are those of the step's forward pass
  on the step's draws (checked against what `train_update` logs).
- The original: its own `run_pretraining.PretrainingModel` and `optimization.create_optimizer`
  (warm-up times polynomial decay read from global_step, global-norm clipping at 1.0,
  AdamWeightDecayOptimizer without bias correction, decay skipped for LayerNorm/bias), its code
  unchanged under tf.compat.v1. Its train op groups the update with the global_step increment
  without ordering them (check.py's docstring); here the increment runs after the update
  (a control dependency), so step k uses the rate of step k on both sides.

Tolerance (the float32 drift rule). A second copy of the original runs the same steps with the
same draws, except that after the restore and after every update each of its weights is moved
by one float32 ulp in a random direction: rounding noise injected at every step. Its distance
from the unperturbed original, per step, is how far two float32 computations of the same
training drift apart (the original is the copy perturbed because it takes its samples fed; a
perturbed project would draw its own, and a sample flipped by a near-tie is a jump, not drift).
The band at step t is

    tol(t) = factor x max_{s <= t} drift(s) + floor

per quantity (each loss: |original - perturbed original|, floor --loss-rtol x |loss|; weights:
max |difference| over all weights, floor --weight-floor), factor --tol-factor (10). PARITY OK
needs, at every step, every loss deviation |project - original| and the max weight distance
inside their bands.

Resume: the project's run saves its training checkpoint (model with its RNG, optimizer with its
Adam slots and step counter: `TrainingCheckpoints`, as the training loop) after step N/2, a NEW
process (`--resume-child`) restores it and runs the remaining steps; its losses at every step
and its final weights must match the uninterrupted run's within the same band (the report says
whether they are bit-identical).

Exit status 0: PARITY OK; 1: a deviation beyond the band (a failing report); 2: usage errors.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

from tools.original_parity import check

LOSSES = ("total", "generator", "discriminator")
# Tiny shape: check.py's BASE_HPARAMS (disc 4 x 64, 4 heads, embedding 32, vocab 200, length 32,
# batch 4, dropout 0) with its B_proj generator (16 wide: its own embeddings_project).
GENERATOR_HIDDEN_SIZE = 0.25
DATA_SEED = 20_000


# ============================================================================ pure helpers
def hparams(steps: int, warmup: int | None = None) -> dict:
    """The run's hyperparameters (shared by both sides); the schedule spans the run."""
    hp = dict(check.BASE_HPARAMS)
    hp["model_hparam_overrides"] = dict(hp["model_hparam_overrides"])
    hp.update(
        generator_hidden_size=GENERATOR_HIDDEN_SIZE,
        num_train_steps=steps,
        num_warmup_steps=max(1, steps // 10) if warmup is None else warmup,
    )
    return hp


def batch_at(step: int, np, seed: int = DATA_SEED) -> dict:
    """The stream's batch for `step` (a pure function of both): [CLS] a [SEP] b [SEP] + padding,
    lengths 9..32, tokens Zipf-distributed over the 96 ordinary ids (so the losses can fall)."""
    rs = np.random.RandomState(seed + step)
    words = np.arange(104, check.VOCAB_SIZE)
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    B, S = check.BATCH, check.SEQ
    ids = np.zeros([B, S], np.int32)
    mask = np.zeros([B, S], np.int32)
    seg = np.zeros([B, S], np.int32)
    for b in range(B):
        n = S if b == 0 else int(rs.randint(9, S + 1))
        len_a = (n - 3) // 2
        len_b = n - 3 - len_a
        a = rs.choice(words, size=len_a, p=p)
        bb = rs.choice(words, size=len_b, p=p)
        ids[b, :n] = [check.CLS, *a, check.SEP, *bb, check.SEP]
        mask[b, :n] = 1
        seg[b, len_a + 2 : n] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": seg}


def running_max(values):
    out, top = [], 0.0
    for v in values:
        top = max(top, float(v))
        out.append(top)
    return out


def tolerance_band(drift, factor: float, floor) -> list[float]:
    """tol(t) = factor * max_{s<=t} drift(s) + floor(t); `floor` a number or one per step."""
    floors = floor if isinstance(floor, list | tuple) else [floor] * len(drift)
    return [factor * m + f for m, f in zip(running_max(drift), floors, strict=True)]


def outside(dev: list[float], band: list[float]) -> tuple[list[int], float]:
    """The steps whose deviation is outside the band (NaN counts as outside), and the largest
    deviation / band ratio over the steps with a band above 0."""
    bad = [t for t in range(len(dev)) if not dev[t] <= band[t]]
    ratios = [d / b for d, b in zip(dev, band, strict=True) if b > 0]
    return bad, max(ratios, default=0.0)


def evaluate(curves: dict, factor: float, loss_rtol: float, weight_floor: float) -> dict:
    """The verdict from per-step curves: `project_<loss>`, `original_<loss>`,
    `reference_<loss>` (the perturbed original) for each of LOSSES, `weight_distance`
    (project vs original) and `reference_weight_distance`. Returns bands, worst ratios and
    `failures` (one line per quantity: its first step outside the band)."""
    out = {"failures": [], "max_loss_deviation": 0.0, "max_weight_distance": 0.0, "bands": {}}
    steps = len(curves["weight_distance"])
    worst_ratio = 0.0
    for name in LOSSES:
        ref = [
            abs(a - b)
            for a, b in zip(curves[f"original_{name}"], curves[f"reference_{name}"], strict=True)
        ]
        dev = [
            abs(a - b)
            for a, b in zip(curves[f"project_{name}"], curves[f"original_{name}"], strict=True)
        ]
        band = tolerance_band(ref, factor, [loss_rtol * abs(x) for x in curves[f"original_{name}"]])
        out["bands"][name] = band
        out[f"deviation_{name}"] = dev
        out["max_loss_deviation"] = max(out["max_loss_deviation"], max(dev, default=0.0))
        bad, ratio = outside(dev, band)
        worst_ratio = max(worst_ratio, ratio)
        if bad:
            t = bad[0]
            out["failures"].append(
                f"{name} loss: {len(bad)} step(s) outside the band, first at step {t}: "
                f"|project - original| {dev[t]:.3e} > tol {band[t]:.3e} (project {curves[f'project_{name}'][t]:.6f}, "
                f"original {curves[f'original_{name}'][t]:.6f})"
            )
    dev = list(curves["weight_distance"])
    band = tolerance_band(curves["reference_weight_distance"], factor, weight_floor)
    out["bands"]["weights"] = band
    out["max_weight_distance"] = max(dev, default=0.0)
    bad, ratio = outside(dev, band)
    worst_ratio = max(worst_ratio, ratio)
    if bad:
        t = bad[0]
        out["failures"].append(
            f"weights: {len(bad)} step(s) outside the band, first after step {t}: max|project - "
            f"original| {dev[t]:.3e} > tol {band[t]:.3e}"
        )
    out["worst_ratio"] = worst_ratio
    out["final_loss_band"] = {name: out["bands"][name][-1] for name in LOSSES} if steps else {}
    out["final_weight_band"] = band[-1] if steps else 0.0
    return out


def verdict_line(result: dict, factor: float) -> str:
    tol = (
        f"tolerance {factor:g} x running max of the 1-ulp-per-step drift of the original + floor "
        f"(at the last step: losses {', '.join(f'{k} {v:.2e}' for k, v in result['final_loss_band'].items())}; "
        f"weights {result['final_weight_band']:.2e}); worst deviation / band {result['worst_ratio']:.2f}"
    )
    if result["failures"]:
        return f"PARITY FAILED ({len(result['failures'])} quantity(ies) outside the band; {tol})"
    return (
        f"PARITY OK (max per-step loss deviation {result['max_loss_deviation']:.3e}, max weight "
        f"distance {result['max_weight_distance']:.3e}, {tol})"
    )


def max_distance(a: dict, b: dict, np) -> float:
    return max(float(np.max(np.abs(a[n].astype(np.float64) - b[n]))) for n in a)


# ============================================================================ project side
class ProjectSide:
    """The project's pre-training step on the tiny config (train_update in a tf.function)."""

    def __init__(self, hp: dict, workdir: str, tf, keras_seed: int = 0):
        import tf_keras as keras

        import electra_tf

        hp = dict(hp, precision="float32", jit_compile=False, seed=0)
        self.tf = tf
        self.config = electra_tf.pretraining_config("trajectory", workdir, hparams=hp)
        keras.utils.set_random_seed(keras_seed)
        self.model = electra_tf.ElectraPretrainer(
            self.config, cls_id=check.CLS, sep_id=check.SEP, mask_id=check.MASK
        )
        self.vmap = self.model.variable_map()
        self.names = sorted(self.vmap)
        self.optimizer = check.find_build_optimizer()(self.config, self.model)
        self.model.compile(optimizer=self.optimizer)
        model = self.model
        spec = {
            k: tf.TensorSpec([check.BATCH, check.SEQ], tf.int32)
            for k in ("input_ids", "input_mask", "segment_ids")
        }
        self._forward = tf.function(
            lambda inputs: model(inputs, training=True), input_signature=[spec]
        )
        self._update = tf.function(model.train_update, input_signature=[spec])
        # Traced now: building the original's graph (tf_keras' legacy TF1 layers) afterwards
        # invalidates Keras layers for any later call in Python, not the traced functions.
        self._forward.get_concrete_function()
        self._update.get_concrete_function()

    def perturb_initial_weights(self, np, seed: int = 1234, std: float = 0.02) -> None:
        """Biases and LayerNorm parameters (zeros and ones at init) get N(0, std) added."""
        rs = np.random.RandomState(seed)
        for n in self.names:
            if n.endswith(("/bias", "/beta", "/gamma")) or n.endswith("output_bias"):
                var = self.vmap[n]
                var.assign(var.numpy() + rs.normal(0.0, std, size=var.shape).astype(np.float32))

    def weights(self) -> dict:
        return {n: self.vmap[n].numpy() for n in self.names}

    def step(self, batch: dict) -> dict:
        """One training step; the losses of its forward pass and its draws (numpy)."""
        tf = self.tf
        inputs = {k: tf.constant(v, tf.int32) for k, v in batch.items()}
        state = self.model.rng.state.numpy().copy()
        out = self._forward(inputs)
        self.model.rng.reset(state)  # train_update draws the same masking and samples
        for metric in self.model.metrics:
            metric.reset_state()
        self._update(inputs)
        logged = {m.name: float(m.result()) for m in self.model.metrics}
        res = {
            "total": float(out["loss"]),
            "generator": float(out["masked_lm_loss"]),
            "discriminator": float(out["disc_loss"]),
            "logged_loss": logged.get("loss", float("nan")),
            "lr": logged.get("learning_rate", float("nan")),
        }
        for key in (
            "masked_input_ids",
            "masked_lm_positions",
            "masked_lm_ids",
            "masked_lm_weights",
            "sampled_ids",
        ):
            res[key] = out[key].numpy()
        return res

    def checkpoints(self, directory: str):
        """The training run's checkpoint object (model with its RNG, optimizer, step)."""
        objects = {
            "model": self.model,
            "optimizer": self.optimizer,
            "step": self.optimizer.iterations,
        }
        try:
            from electra_tf.checkpoints.training_state import TrainingCheckpoints
        except ImportError:  # pragma: no cover - a project without it
            return _PlainCheckpoints(directory, self.tf, objects)
        return TrainingCheckpoints(directory, 1, **objects)


class _PlainCheckpoints:
    def __init__(self, directory, tf, objects):
        self.directory, self.tf = directory, tf
        self.checkpoint = tf.train.Checkpoint(**objects)

    def save(self, step):
        return self.checkpoint.write(os.path.join(self.directory, f"ckpt-{step}"))

    def restore_latest(self):
        path = self.tf.train.latest_checkpoint(self.directory) or _latest_by_name(self.directory)
        self.checkpoint.read(path).assert_existing_objects_matched()
        return path


def _latest_by_name(directory):
    prefixes = sorted({f.split(".")[0] for f in os.listdir(directory) if f.startswith("ckpt-")})
    return os.path.join(directory, prefixes[-1]) if prefixes else None


# ============================================================================ original side
class OriginalSide:
    """The original's model, losses, optimizer and schedule in one TF1 graph and session, fed
    each step's batch and the project's draws through placeholders."""

    def __init__(
        self, orig, hp: dict, workdir: str, ckpt_prefix: str, threads: int, perturb_seed=None
    ):
        import tensorflow.compat.v1 as v1

        rp, opt_mod = orig.run_pretraining, orig.optimization
        B, S = check.BATCH, check.SEQ
        hp = dict(hp, vocab_file=os.path.join(workdir, "vocab.txt"))
        captured = {}
        real_disc_out = rp.PretrainingModel._get_discriminator_output
        real_apply = opt_mod.AdamWeightDecayOptimizer.apply_gradients

        def cap_disc_out(self_, *a, **k):
            captured["disc"] = real_disc_out(self_, *a, **k)
            return captured["disc"]

        def cap_apply(self_, grads_and_vars, *a, **k):
            captured["lr"] = self_.learning_rate
            # The optimizer's update alone: create_optimizer's step increment is unordered.
            captured["apply_op"] = real_apply(self_, list(grads_and_vars), *a, **k)
            return captured["apply_op"]

        self.graph = v1.Graph()
        with self.graph.as_default():
            self.features = {
                k: v1.placeholder(v1.int32, [B, S], name=k)
                for k in ("input_ids", "input_mask", "segment_ids")
            }
            config = orig.configure_pretraining.PretrainingConfig("trajectory", workdir, **hp)
            N = config.max_predictions_per_seq
            self.draws = {
                "masked_input_ids": v1.placeholder(v1.int32, [B, S]),
                "masked_lm_positions": v1.placeholder(v1.int32, [B, N]),
                "masked_lm_ids": v1.placeholder(v1.int32, [B, N]),
                "masked_lm_weights": v1.placeholder(v1.float32, [B, N]),
                "sampled_ids": v1.placeholder(v1.int32, [B, N]),
            }
            with contextlib.ExitStack() as stack:
                stack.enter_context(check.project_draws(orig, self.draws))
                stack.enter_context(
                    check.patched(rp.PretrainingModel, "_get_discriminator_output", cap_disc_out)
                )
                model = rp.PretrainingModel(config, dict(self.features), True)
            with check.patched(opt_mod.AdamWeightDecayOptimizer, "apply_gradients", cap_apply):
                # As run_pretraining.model_fn_builder calls it.
                opt_mod.create_optimizer(
                    model.total_loss, config.learning_rate, config.num_train_steps,
                    weight_decay_rate=config.weight_decay_rate, use_tpu=config.use_tpu,
                    warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power,
                )  # fmt: skip
            global_step = v1.train.get_global_step()
            with v1.control_dependencies([captured["apply_op"]]):
                step_op = global_step.assign_add(1)
            tvars = v1.trainable_variables()
            self.model_vars = {v.name.split(":")[0]: v for v in tvars}
            saver = v1.train.Saver(var_list={**self.model_vars, "global_step": global_step})
            self.fetch = {
                "step": step_op,
                "total": model.total_loss,
                "generator": model.mlm_output.loss,
                "discriminator": captured["disc"].loss,
                "lr": captured["lr"],
            }
            self.perturb = None
            if perturb_seed is not None:
                ops = []
                for i, v in enumerate(sorted(tvars, key=lambda x: x.name)):
                    up = v1.random.uniform(v.shape, seed=perturb_seed + i) < 0.5
                    target = v1.where(
                        up, v1.fill(v.shape, float("inf")), v1.fill(v.shape, float("-inf"))
                    )
                    ops.append(v.assign(v1.math.nextafter(v, target)))
                self.perturb = v1.group(*ops)
            init = v1.global_variables_initializer()
            self.graph.finalize()
        session_config = v1.ConfigProto(
            intra_op_parallelism_threads=threads, inter_op_parallelism_threads=1
        )
        session_config.graph_options.rewrite_options.disable_meta_optimizer = True
        self.sess = v1.Session(graph=self.graph, config=session_config)
        with self.graph.as_default():  # a TF1 Saver restores in graph mode only
            self.sess.run(init)
            saver.restore(self.sess, ckpt_prefix)
        if self.perturb is not None:
            self.sess.run(self.perturb)

    def step(self, batch: dict, draws: dict) -> dict:
        feed = {self.features[k]: batch[k] for k in self.features}
        feed.update({self.draws[k]: draws[k] for k in self.draws})
        res = self.sess.run(self.fetch, feed)
        if self.perturb is not None:
            self.sess.run(self.perturb)
        return {k: float(res[k]) for k in ("total", "generator", "discriminator", "lr")}

    def weights(self) -> dict:
        return self.sess.run(self.model_vars)


# ============================================================================ runs
def setup_tf(threads: int, gpu: bool = False):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    warnings.filterwarnings("ignore", message=r".*tf\.layers\.dense.* is deprecated")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    return np, tf


def resume_child(args) -> int:
    """In a new process: restore the project's checkpoint, run the remaining steps, save the
    per-step losses and the final weights to --out (npz)."""
    np, tf = setup_tf(args.threads, args.gpu)
    if args.mutation:
        from tools.original_parity import mutations

        mutations.apply(args.mutation)
    workdir = os.path.dirname(args.resume_child.rstrip("/"))
    project = ProjectSide(hparams(args.steps, args.warmup), workdir, tf)
    path = project.checkpoints(args.resume_child).restore_latest()
    start = int(project.optimizer.iterations.numpy())
    losses = {name: [] for name in LOSSES}
    for t in range(start, args.steps):
        res = project.step(batch_at(t, np))
        for name in LOSSES:
            losses[name].append(res[name])
    w = project.weights()
    np.savez(
        args.out,
        start=start,
        restored=path,
        **{f"loss_{k}": np.array(v) for k, v in losses.items()},
        **{f"w/{n}": w[n] for n in w},
    )
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--mirror",
        default=check.DEFAULT_MIRROR,
        help="git copy of google-research/electra (default $ELECTRA_ORIGINAL_MIRROR)",
    )
    p.add_argument("--rev", default="HEAD")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--warmup", type=int, help="warm-up steps (default steps // 10)")
    p.add_argument(
        "--tol-factor", type=float, default=10.0, help="band = factor x running max drift + floor"
    )
    p.add_argument(
        "--loss-rtol", type=float, default=1e-5, help="loss band floor, relative to the loss"
    )
    p.add_argument("--weight-floor", type=float, default=1e-6, help="weight band floor (absolute)")
    p.add_argument("--no-resume", action="store_true", help="skip the checkpoint/resume leg")
    p.add_argument(
        "--mutation", help="inject one of mutations.ALL into the project side (mutations.py)"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--print-every", type=int, help="table rows (default: 20 rows)")
    p.add_argument("--json", help="write the per-step curves and the verdict here")
    p.add_argument("--csv", help="write the per-step table here")
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--resume-child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps < 2:
        p.error("--steps must be at least 2")
    if args.mutation:
        from tools.original_parity import mutations

        if args.mutation not in mutations.ALL:
            p.error(f"--mutation: {args.mutation!r} is not one of {', '.join(mutations.ALL)}")
    if args.resume_child:
        return resume_child(args)
    mirror = check.resolve_mirror(args.mirror)  # SystemExit naming how to get one
    t_start = time.time()
    np, tf = setup_tf(args.threads, args.gpu)
    import electra_tf

    if args.mutation:
        from tools.original_parity import mutations

        mutations.apply(args.mutation)
    tmp = tempfile.mkdtemp(prefix="electra_trajectory_")
    try:
        orig_dir = os.path.join(tmp, "electra_original")
        commit = check.extract_original(mirror, args.rev, orig_dir)
        shims = check.install_shims(tf)
        orig = check.import_original(orig_dir)
        workdir = os.path.join(tmp, "run")
        os.makedirs(workdir)
        check.write_vocab(os.path.join(workdir, "vocab.txt"))
        hp = hparams(args.steps, args.warmup)

        project = ProjectSide(hp, workdir, tf)
        project.perturb_initial_weights(np)
        w_init = project.weights()
        export_dir = os.path.join(workdir, "init_original")
        electra_tf.save_weights(project.model, export_dir, "original", global_step=0)
        prefix = os.path.join(export_dir, "model.ckpt-0")
        original = OriginalSide(orig, hp, workdir, prefix, args.threads)
        reference = OriginalSide(orig, hp, workdir, prefix, args.threads, perturb_seed=777)
        w0 = original.weights()
        if set(w0) != set(w_init):
            raise SystemExit(f"ERROR: variable names differ: {sorted(set(w0) ^ set(w_init))[:8]}")
        init_distance = max_distance(w_init, w0, np)

        half = args.steps // 2
        ckpt_dir = os.path.join(workdir, "project_ckpt")
        curves = {
            f"{side}_{n}": [] for side in ("project", "original", "reference") for n in LOSSES
        }
        curves.update(
            weight_distance=[], reference_weight_distance=[], lr_project=[], lr_original=[]
        )
        problems = []
        print_every = args.print_every or max(1, args.steps // 20)
        log = check.log
        log(f"trajectory: {args.steps} steps, warm-up {hp['num_warmup_steps']}, peak lr {hp['learning_rate']:g}, "
            f"original google-research/electra {commit[:12]}, mutation {args.mutation or 'none'}")  # fmt: skip
        log(f"{'step':>5s} {'lr':>9s} | {'total P':>10s} {'total O':>10s} {'|dP-O|':>8s} | {'gen P':>8s} {'gen O':>8s} "
            f"{'|dP-O|':>8s} | {'disc P':>8s} {'disc O':>8s} {'|dP-O|':>8s} | {'w dist':>8s} {'w drift':>8s}")  # fmt: skip
        t_loop = time.time()
        split = {"project": 0.0, "original": 0.0, "weights": 0.0}
        for t in range(args.steps):
            batch = batch_at(t, np)
            t0 = time.time()
            pr = project.step(batch)
            t1 = time.time()
            draws = {k: pr[k] for k in original.draws}
            orr = original.step(batch, draws)
            rr = reference.step(batch, draws)
            t2 = time.time()
            split["project"] += t1 - t0
            split["original"] += t2 - t1
            if not abs(pr["logged_loss"] - pr["total"]) <= 1e-5 * abs(pr["total"]):
                problems.append(
                    f"step {t}: train_update logged loss {pr['logged_loss']} != its forward's {pr['total']}"
                )
            wp, wo, wr = project.weights(), original.weights(), reference.weights()
            for n in LOSSES:
                curves[f"project_{n}"].append(pr[n])
                curves[f"original_{n}"].append(orr[n])
                curves[f"reference_{n}"].append(rr[n])
            curves["weight_distance"].append(max_distance(wp, wo, np))
            curves["reference_weight_distance"].append(max_distance(wr, wo, np))
            split["weights"] += time.time() - t2
            curves["lr_project"].append(pr["lr"])
            curves["lr_original"].append(orr["lr"])
            if t % print_every == 0 or t == args.steps - 1:
                log(f"{t:5d} {orr['lr']:9.3e} | {pr['total']:10.5f} {orr['total']:10.5f} {abs(pr['total'] - orr['total']):8.1e} | "
                    f"{pr['generator']:8.5f} {orr['generator']:8.5f} {abs(pr['generator'] - orr['generator']):8.1e} | "
                    f"{pr['discriminator']:8.5f} {orr['discriminator']:8.5f} {abs(pr['discriminator'] - orr['discriminator']):8.1e} | "
                    f"{curves['weight_distance'][-1]:8.1e} {curves['reference_weight_distance'][-1]:8.1e}")  # fmt: skip
            if t + 1 == half and not args.no_resume:
                project.checkpoints(ckpt_dir).save(half)
        loop_s = time.time() - t_loop
        result = evaluate(curves, args.tol_factor, args.loss_rtol, args.weight_floor)
        lr_diff = max(
            abs(a - b) for a, b in zip(curves["lr_project"], curves["lr_original"], strict=True)
        )
        if not lr_diff <= 1e-6 * hp["learning_rate"]:
            result["failures"].append(
                f"learning rate: max|project - original| {lr_diff:.3e} over the run"
            )
        if init_distance != 0.0:
            result["failures"].append(
                f"initial weights differ by {init_distance:.3e} after the export"
            )
        result["failures"] += problems

        resume = None
        if not args.no_resume:
            resume = run_resume_child(args, ckpt_dir, half, curves, result, project.weights(), np)
            result["failures"] += resume["failures"]
        # Per-step table.
        if args.csv:
            write_csv(args.csv, curves, result)
        meta = {
            "original": f"google-research/electra {commit}",
            "tensorflow": tf.__version__,
            "steps": args.steps,
            "warmup": hp["num_warmup_steps"],
            "mutation": args.mutation,
            "loop_seconds": round(loop_s, 1),
            "seconds_per_step": round(loop_s / args.steps, 4),
            "total_seconds": round(time.time() - t_start, 1),
            "shims": shims,
        }
        if resume:
            meta["resume"] = {k: v for k, v in resume.items() if k != "failures"}
        log(f"\nlearning rate: max|project - original| {lr_diff:.2e} over the run")
        if resume:
            log(f"resume: checkpoint after step {half}, {args.steps - half} steps in a new process "
                f"({resume['child_seconds']:.0f} s): max loss deviation from the uninterrupted run "
                f"{resume['max_loss_deviation']:.3e}, final weights {resume['final_weight_distance']:.3e} "
                f"({'bit-identical' if resume['bit_identical'] else 'not bit-identical'})")  # fmt: skip
        log(f"time: {loop_s:.0f} s for {args.steps} steps ({1000 * loop_s / args.steps:.0f} ms/step: project, "
            f"original and perturbed original), {meta['total_seconds']:.0f} s in all; per step: "
            + ", ".join(f"{k} {1000 * v / args.steps:.0f} ms" for k, v in split.items()))  # fmt: skip
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"verdict": verdict_line(result, args.tol_factor), "failures": result["failures"],
                           "curves": curves, "bands": result["bands"], "meta": meta}, f, indent=1)  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report(result, args.tol_factor)


def report(result: dict, factor: float) -> int:
    """Prints the verdict (and failures); the exit status."""
    check.log("")
    for line in result["failures"]:
        check.log(f"  - {line}")
    check.log(verdict_line(result, factor))
    return 1 if result["failures"] else 0


def run_resume_child(args, ckpt_dir, half, curves, result, final_weights, np) -> dict:
    out = os.path.join(ckpt_dir, "child.npz")
    cmd = [sys.executable, "-m", "tools.original_parity.trajectory", "--resume-child", ckpt_dir,
           "--out", out, "--steps", str(args.steps), "--threads", str(args.threads)]  # fmt: skip
    if args.warmup is not None:
        cmd += ["--warmup", str(args.warmup)]
    if args.mutation:
        cmd += ["--mutation", args.mutation]
    if args.gpu:
        cmd += ["--gpu"]
    t0 = time.time()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [check.REPO_ROOT] + [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x]
    )
    r = subprocess.run(cmd, cwd=check.REPO_ROOT, env=env, capture_output=True, text=True)
    res = {"child_seconds": time.time() - t0, "failures": [], "max_loss_deviation": float("nan"),
           "final_weight_distance": float("nan"), "bit_identical": False}  # fmt: skip
    if r.returncode != 0:
        res["failures"].append(
            f"resume: the child process failed (exit {r.returncode}): {r.stderr.strip()[-800:]}"
        )
        return res
    data = np.load(out)
    if int(data["start"]) != half:
        res["failures"].append(f"resume: restored step {int(data['start'])}, expected {half}")
        return res
    worst, identical = 0.0, True
    for name in LOSSES:
        got = data[f"loss_{name}"]
        ref = curves[f"project_{name}"][half:]
        band = result["bands"][name][half:]
        dev = [abs(float(a) - b) for a, b in zip(got, ref, strict=True)]
        identical &= all(d == 0.0 for d in dev)
        worst = max(worst, max(dev, default=0.0))
        bad = [i for i, d in enumerate(dev) if not d <= band[i]]
        if bad:
            i = bad[0]
            res["failures"].append(
                f"resume: {name} loss at step {half + i}: resumed {float(got[i]):.6f} vs uninterrupted {ref[i]:.6f} (tol {band[i]:.2e})"
            )
    wd = max(
        float(np.max(np.abs(data[f"w/{n}"].astype(np.float64) - final_weights[n])))
        for n in final_weights
    )
    identical &= wd == 0.0
    if not wd <= result["bands"]["weights"][-1]:
        res["failures"].append(
            f"resume: final weights differ from the uninterrupted run's by {wd:.3e}"
        )
    res.update(max_loss_deviation=worst, final_weight_distance=wd, bit_identical=identical)
    return res


def write_csv(path, curves, result):
    names = ["step", "lr"]
    for n in LOSSES:
        names += [f"{n}_project", f"{n}_original", f"{n}_deviation", f"{n}_tolerance"]
    names += [
        "weight_distance",
        "weight_tolerance",
        "reference_drift_loss_total",
        "reference_drift_weights",
    ]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(names)
        for t in range(len(curves["weight_distance"])):
            row = [t, curves["lr_original"][t]]
            for n in LOSSES:
                row += [
                    curves[f"project_{n}"][t],
                    curves[f"original_{n}"][t],
                    result[f"deviation_{n}"][t],
                    result["bands"][n][t],
                ]
            row += [curves["weight_distance"][t], result["bands"]["weights"][t],
                    abs(curves["original_total"][t] - curves["reference_total"][t]), curves["reference_weight_distance"][t]]  # fmt: skip
            w.writerow(row)


if __name__ == "__main__":
    sys.exit(main())
