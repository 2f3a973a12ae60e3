"""Sensitivity of the parity checks: inject one known bug into the project, expect a check to fail.

    .venv/bin/python -m tools.original_parity.mutations [--mirror DIR] [NAME ...]
    .venv/bin/python -m tools.original_parity.mutations --trajectory [--steps 200] [NAME ...]

Without --trajectory: each one-step mutation (MUTATIONS) runs one check.py scenario (A_dup; the
Electric ones C_electric) in a fresh process; the line per mutation says whether it was caught
(exit 1) and the first failure. Exit 0 iff every mutation was caught.

With --trajectory: each TRAJECTORY_MUTATIONS entry runs both the one-step check (scenario
A_dup) and trajectory.py (--steps, no resume leg), each in a fresh process; the line per
mutation gives both outcomes. Exit 0 iff the trajectory check catches every one and the
one-step check's outcome is the expected one (EXPECTED_ONE_STEP: some of these bugs leave the
step the one-step check looks at unchanged).

The bugs are monkeypatches applied in the child process (nothing in electra_tf is edited).
"""

import argparse
import os
import subprocess
import sys

from tools.original_parity.runtime import REPO_ROOT, child_env

MUTATIONS = {
    "gelu_tanh": "tanh-approximate gelu in every gelu Dense",
    "decay_all": "weight decay on LayerNorm and biases too",
    "lr_plus_one": "learning rate of step k+1",
    "dup_last_wins": "duplicate masked position: last sample wins, no floor-average",
    "no_clip": "no global-norm clipping",
    "electric_log_q_grad": "Electric: log q without stop_gradient (the disc loss trains q)",
    "electric_no_prior": "Electric: no log(mask_prob / (1 - mask_prob)) in the disc logit",
    "electric_shift_swapped": "Electric: the towers' one-position shifts the other way",
}
SCENARIO = {name: "C_electric" for name in MUTATIONS if name.startswith("electric_")}
# Bugs for the trajectory check: visible only over many steps, or visible to both.
TRAJECTORY_MUTATIONS = {
    "decay_from_warmup_end": "polynomial decay counted from the end of warm-up, "
    "peak x (1 - (s - w) / (T - w)) after it (the original's rate during warm-up)",
    "adam_beta2": "Adam beta_2 0.9991 instead of 0.999",
}
# Whether the one-step check (scenario A_dup, an update at step 4 of a 10-step warm-up) sees it.
EXPECTED_ONE_STEP = {"decay_from_warmup_end": False, "adam_beta2": True}
ALL = {**MUTATIONS, **TRAJECTORY_MUTATIONS}


def _gelu_tanh():
    import tensorflow as tf
    import tf_keras as keras

    from electra_tf.pretraining import pretrainer

    init = pretrainer.ElectraPretrainer.__init__

    def init2(self, *a, **k):
        init(self, *a, **k)
        for layer in self.submodules:
            if (
                isinstance(layer, keras.layers.Dense)
                and getattr(layer.activation, "__name__", "") == "gelu"
            ):
                layer.activation = lambda x: tf.nn.gelu(x, approximate=True)

    pretrainer.ElectraPretrainer.__init__ = init2


def _decay_all():
    from electra_tf import optimization

    optimization.AdamWeightDecay.uses_weight_decay = lambda self, v: bool(self.weight_decay_rate)


def _lr_plus_one():
    import tensorflow as tf

    from electra_tf import optimization

    call = optimization.ElectraSchedule.__call__
    optimization.ElectraSchedule.__call__ = lambda self, step: call(
        self, tf.cast(step, tf.float32) + 1.0
    )


def _dup_last_wins():
    import tensorflow as tf

    from electra_tf.pretraining import pretrainer, sampling

    real = sampling.scatter_update

    def last_wins(sequence, updates, positions):
        out, mask = real(sequence, updates, positions)
        b = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, None], tf.shape(positions))
        last = tf.tensor_scatter_nd_update(
            sequence, tf.stack([b, tf.cast(positions, tf.int32)], -1), updates
        )
        return tf.where(mask > 0, last, out), mask

    pretrainer.scatter_update = last_wins


def _optimizer_kwarg(key, value):
    """AdamWeightDecay built with `key=value` whatever its caller passes."""
    from electra_tf import optimization

    init = optimization.AdamWeightDecay.__init__

    def init2(self, *a, **k):
        k[key] = value
        init(self, *a, **k)

    optimization.AdamWeightDecay.__init__ = init2


def _decay_from_warmup_end():
    import tensorflow as tf

    from electra_tf import optimization

    call = optimization.ElectraSchedule.__call__

    def decay_after_warmup(self, step):
        lr = call(self, step)
        w = self.warmup
        if w <= 0:
            return lr
        s = tf.cast(step, tf.float32) + float(self.start_step)
        total = float(self.num_train_steps)
        after = self.learning_rate * tf.pow(
            1.0 - tf.minimum(s - w, total - w) / (total - w), self.power
        )
        return tf.where(s < w, lr, after)

    optimization.ElectraSchedule.__call__ = decay_after_warmup


def _electric_logits(which):
    from electra_tf.pretraining import electric, pretrainer

    real = electric.electric_logits

    def mutated(energies, cloze_logits, token_ids, mask_prob):
        out = real(energies, cloze_logits, token_ids, mask_prob)
        if which == "electric_no_prior":
            out["disc_logits"] = out["energies"] + out["log_q"]
        else:
            log_q = electric.token_log_probs(cloze_logits, token_ids)
            prior = electric.noise_prior(mask_prob)
            out["disc_logits"] = out["energies"] + log_q + prior
        return out

    pretrainer.electric_logits = mutated


def _electric_shift_swapped():
    from electra_tf.modeling import two_tower

    real = two_tower.shift_features
    two_tower.shift_features = lambda features, direction: real(features, -direction)


_APPLY = {
    "gelu_tanh": _gelu_tanh,
    "decay_all": _decay_all,
    "lr_plus_one": _lr_plus_one,
    "dup_last_wins": _dup_last_wins,
    "no_clip": lambda: _optimizer_kwarg("clip_norm", None),
    "decay_from_warmup_end": _decay_from_warmup_end,
    "adam_beta2": lambda: _optimizer_kwarg("beta_2", 0.9991),
    "electric_log_q_grad": lambda: _electric_logits("electric_log_q_grad"),
    "electric_no_prior": lambda: _electric_logits("electric_no_prior"),
    "electric_shift_swapped": _electric_shift_swapped,
}


def apply(which):
    """Injects the bug `which` (a key of ALL) into electra_tf in this process."""
    if which not in _APPLY:
        raise ValueError(f"unknown mutation {which!r}; known: {', '.join(ALL)}")
    _APPLY[which]()


def _outcome(rc, caught):
    """'caught', 'not caught' (a clean pass) or 'ERROR' (the check crashed: neither)."""
    if caught:
        return "caught"
    return "not caught" if rc == 0 else "ERROR"


def run_one_step(name, a):
    """(outcome, exit status, first failure / last line / stderr tail) of check.py under `name`."""
    cmd = [sys.executable, "-m", "tools.original_parity.mutations", "--one", name,
           "--project", a.project, "--threads", a.threads]  # fmt: skip
    if a.mirror:
        cmd += ["--mirror", a.mirror]
    r = subprocess.run(cmd, cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True)
    fails = [line.strip() for line in r.stdout.splitlines() if line.startswith("  - ")]
    outcome = _outcome(r.returncode, r.returncode == 1 and bool(fails))
    if fails:
        detail = fails[0]
    elif outcome == "not caught":
        detail = (r.stdout.strip().splitlines() or [""])[-1]
    else:
        detail = r.stderr.strip()[-300:]
    return outcome, r.returncode, detail


def run_trajectory(name, a):
    """(outcome, exit status, first failure / verdict / stderr tail) of trajectory.py under `name`."""
    cmd = [sys.executable, "-m", "tools.original_parity.trajectory", "--mutation", name,
           "--steps", str(a.steps), "--no-resume", "--threads", a.threads]  # fmt: skip
    if a.mirror:
        cmd += ["--mirror", a.mirror]
    r = subprocess.run(cmd, cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True)
    lines = r.stdout.strip().splitlines()
    fails = [line.strip() for line in lines if line.startswith("  - ")]
    verdict = next((line for line in reversed(lines) if line.startswith("PARITY")), "")
    outcome = _outcome(r.returncode, r.returncode == 1 and verdict.startswith("PARITY FAILED"))
    detail = fails[0] if fails else verdict or r.stderr.strip()[-300:]
    return outcome, r.returncode, detail


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--project", default=REPO_ROOT, help="electra_tf checkout (default: this repository)"
    )
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--threads", default="1", help="the checks' --threads")
    p.add_argument("--mirror", help="the checks' --mirror (default: $ELECTRA_ORIGINAL_MIRROR)")
    p.add_argument(
        "--trajectory", action="store_true", help="the trajectory mutations, both checks"
    )
    p.add_argument(
        "--steps", type=int, default=200, help="trajectory.py --steps (with --trajectory)"
    )
    p.add_argument("names", nargs="*")
    a = p.parse_args()
    if a.one:  # child: mutate, then run the check
        project = os.path.abspath(a.project)
        if project not in sys.path:
            sys.path.insert(0, project)  # the checkout under test, before apply() imports it
        from tools.original_parity import check

        apply(a.one)
        scenario = SCENARIO.get(a.one, "A_dup")
        argv = ["--project", project, "--scenario", scenario, "--threads", a.threads]
        sys.exit(check.main(argv + (["--mirror", a.mirror] if a.mirror else [])))
    table = TRAJECTORY_MUTATIONS if a.trajectory else MUTATIONS
    names = a.names or list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        p.error(f"unknown mutation(s) {unknown}; choose from {', '.join(table)}")
    bad = []
    for name in names:
        outcome, rc, detail = run_one_step(name, a)
        if not a.trajectory:
            shown = "MISSED" if outcome == "not caught" else outcome
            print(f"{name:22s} ({table[name]}): {shown} (exit {rc}); {detail}", flush=True)
            if outcome != "caught":
                bad.append(name)
            continue
        t_outcome, t_rc, t_detail = run_trajectory(name, a)
        expected = "caught" if EXPECTED_ONE_STEP[name] else "not caught"
        ok = t_outcome == "caught" and outcome == expected
        t_shown = "MISSED" if t_outcome == "not caught" else t_outcome
        print(f"{name:22s} ({table[name]}):\n"
              f"    one-step check:   {outcome} (exit {rc}; expected {expected}); {detail}\n"
              f"    trajectory check: {t_shown} (exit {t_rc}, {a.steps} steps); {t_detail}",
              flush=True)  # fmt: skip
        if not ok:
            bad.append(name)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
