"""Sensitivity check of check.py: inject one known bug into the project, expect check.py to fail.

    PYTHONPATH=<checkout> <checkout>/.venv/bin/python mutations.py --project <checkout> [NAME ...]

Each mutation runs one check.py scenario (A_dup; the Electric ones C_electric) in a fresh
process; the line per mutation says whether it was caught (exit 1) and the first failures.
Exit 0 iff every mutation was caught.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
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


def apply(which):
    import tensorflow as tf

    if which == "gelu_tanh":
        import tf_keras as keras
        from electra_tf.pretraining import pretrainer

        init = pretrainer.ElectraPretrainer.__init__

        def init2(self, *a, **k):
            init(self, *a, **k)
            for layer in self.submodules:
                if isinstance(layer, keras.layers.Dense) and getattr(layer.activation, "__name__", "") == "gelu":
                    layer.activation = lambda x: tf.nn.gelu(x, approximate=True)

        pretrainer.ElectraPretrainer.__init__ = init2
    elif which == "decay_all":
        from electra_tf import optimization

        optimization.AdamWeightDecay.uses_weight_decay = lambda self, v: bool(self.weight_decay_rate)
    elif which == "lr_plus_one":
        from electra_tf import optimization

        call = optimization.ElectraSchedule.__call__
        optimization.ElectraSchedule.__call__ = lambda self, step: call(self, tf.cast(step, tf.float32) + 1.0)
    elif which == "dup_last_wins":
        from electra_tf.pretraining import pretrainer, sampling

        real = sampling.scatter_update

        def last_wins(sequence, updates, positions):
            out, mask = real(sequence, updates, positions)
            b = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, None], tf.shape(positions))
            last = tf.tensor_scatter_nd_update(sequence, tf.stack([b, tf.cast(positions, tf.int32)], -1), updates)
            return tf.where(mask > 0, last, out), mask

        pretrainer.scatter_update = last_wins
    elif which == "no_clip":
        from electra_tf import optimization

        init = optimization.AdamWeightDecay.__init__

        def init2(self, *a, **k):
            k["clip_norm"] = None
            init(self, *a, **k)

        optimization.AdamWeightDecay.__init__ = init2
    elif which in ("electric_log_q_grad", "electric_no_prior"):
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
    elif which == "electric_shift_swapped":
        from electra_tf.modeling import two_tower

        real = two_tower.shift_features
        two_tower.shift_features = lambda features, direction: real(features, -direction)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--project", required=True)
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--threads", default="2", help="check.py's --threads")
    p.add_argument("--mirror", help="check.py's --mirror (default: $ELECTRA_ORIGINAL_MIRROR)")
    p.add_argument("names", nargs="*", default=list(MUTATIONS))
    a = p.parse_args()
    if a.one:  # child: mutate, then run the check
        sys.path.insert(0, HERE)
        sys.path.insert(0, os.path.abspath(a.project))
        import check

        apply(a.one)
        scenario = SCENARIO.get(a.one, "A_dup")
        argv = ["--project", a.project, "--scenario", scenario, "--threads", a.threads]
        sys.exit(check.main(argv + (["--mirror", a.mirror] if a.mirror else [])))
    missed = []
    for name in a.names:
        r = subprocess.run(
            [sys.executable, __file__, "--project", a.project, "--one", name, "--threads", a.threads]
            + (["--mirror", a.mirror] if a.mirror else []),
            capture_output=True, text=True,
        )  # fmt: skip
        fails = [line.strip() for line in r.stdout.splitlines() if line.startswith("  - ")]
        caught = r.returncode == 1 and fails
        print(f"{name:14s} ({MUTATIONS[name]}): {'caught' if caught else 'MISSED'} "
              f"(exit {r.returncode}); {fails[0] if fails else r.stderr.strip()[-300:]}", flush=True)
        if not caught:
            missed.append(name)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
