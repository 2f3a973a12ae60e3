"""Parity check: electra_tf (TF2 / tf_keras) against the ORIGINAL google-research/electra code.

The original TF1 files are extracted from a git mirror at run time (nothing of them is copied
here) and run unchanged under tf.compat.v1 graph mode. Only missing library pieces are shimmed
(`tensorflow.contrib.layers.layer_norm`, `tf.compat.v1.estimator.SessionRunHook`, and
`tf.compat.v1.layers` routed to tf_keras' legacy layers) and the random parts are replaced by
the project's draws:

- `pretrain_helpers.mask` returns the project's masked inputs (positions, ids, weights, masked
  input ids), and `pretrain_helpers.sample_from_softmax` returns the one-hot of the project's
  sampled ids, so both sides see the same masking and the same fake tokens;
- side checks run the ORIGINAL `mask` and `sample_from_softmax` with only their
  `tf.random.categorical` / `tf.random.uniform` calls replaced by the project's draws, and
  compare what they produce with the project's output.

Per scenario it compares: configs, generator MLM loss, discriminator loss, total loss, MLM
logits, discriminator logits and probabilities, fake input ids, discriminator labels (and with
Electric the cloze loss, the cloze logits at every position and the cloze weights), the
gradient of the total loss for every variable (names from the project's `variable_map()`), and
the weights after one optimizer step (what the original's `optimization.create_optimizer`
builds: its schedule, global-norm clipping and `AdamWeightDecayOptimizer.apply_gradients`
update, vs the project's `build_optimizer` + `ElectraPretrainer.train_update`) from the same
state at a step with a non-zero learning rate: once with fresh Adam slots, once with random
(identical) slots so that the gradient scale after clipping matters.

The original's whole train op also increments global_step in the same `tf.group`, with no
control dependency on the learning rate's read of global_step (model/optimization.py:35-66),
so which step's rate it applies depends on the executor's op order. The gated comparison runs
the optimizer's update op at global_step = k (the rate of step k, as the project's and as the
original's own schedule evaluated alone); the whole train op is run too and reported, not
gated.

Tolerances: losses, logits, probabilities and every gradient within --rtol (1e-5) of the
original's max |value|, with two rules for what is rounding by construction: attention query
and key weights (whose gradient is the upstream gradient through the softmax Jacobian, small
where the scores barely move the loss; a key bias's is 0 analytically) at the scale of their
attention block's query, key and value kernel gradients; the two-tower cloze logits
at padding positions, where the right-to-left query sees only masked keys and every score
carries the -10000 mask bias (float32 ulp ~1e-3), within 1e-3 (`PADDING_CLOZE_RTOL`). Ids,
labels, masks exactly; post-step weights within --step-rtol (1e-3) of max(the variable's max
|update|, lr).

Usage, from the repository root (tools/original_parity/README.md):
    .venv/bin/python -m tools.original_parity.check --mirror <git copy of google-research/electra>
Exit status 0 when every difference is within tolerance, 1 otherwise (the failures are listed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from tools.original_parity.one_step_compare import (  # noqa: F401 (re-exported)
    PADDING_CLOZE_RTOL,
    Report,
    compare,
    group_of,
    print_report,
)
from tools.original_parity.one_step_original import original_phase
from tools.original_parity.one_step_project import project_phase
from tools.original_parity.original_side import (  # noqa: F401 (re-exported)
    import_original,
    install_shims,
    project_draws,
)
from tools.original_parity.runtime import (  # noqa: F401 (re-exported)
    BASE_HPARAMS,
    BATCH,
    CLS,
    DEFAULT_MIRROR,
    MASK,
    NUM_TRAIN_STEPS,
    OPT_STEP,
    PAD,
    REPO_ROOT,
    SEP,
    SEQ,
    UNK,
    VOCAB_SIZE,
    WARMUP,
    extract_original,
    git_head,
    log,
    patched,
    resolve_mirror,
    setup_tf,
    write_vocab,
)

LENGTHS = (32, 25, 18, 9)  # real tokens per sequence ([CLS]/[SEP] included); 32 = no padding

SCENARIOS = [
    {
        "name": "A_dup",
        "what": "gen hidden 32 (x1/2, = embedding size: no generator projection), "
        "2 of 4 layers; positions with replacement, a duplicated masked position whose two "
        "samples differ (floor-average quirk)",
        "hparams": {"generator_hidden_size": 0.5},
        "want_duplicate": True,
    },
    {
        "name": "B_proj",
        "what": "gen hidden 16 (x1/4, != embedding size: generator/embeddings_project), "
        "2 of 4 layers; no duplicated position",
        "hparams": {"generator_hidden_size": 0.25},
        "want_duplicate": False,
    },
    {
        "name": "C_electric",
        "what": "Electric (electric_objective): two-tower cloze generator, towers "
        "generator_ltr / generator_rtl 16 wide (x1/4, each its own embeddings_project onto the "
        "shared electra/embeddings), 2 of 4 layers, head cloze_predictions; disc logit = "
        "energy + log q + log(mask_prob / (1 - mask_prob)), every sampled position labelled "
        "noise; a duplicated masked position whose two samples differ",
        "hparams": {"electric_objective": True, "generator_hidden_size": 0.25},
        "want_duplicate": True,
    },
    {
        "name": "D_electric_untied",
        "what": "Electric with untied_generator_embeddings: each tower owns 16-wide "
        "embeddings (generator_ltr/embeddings, generator_rtl/embeddings), the cloze head tied to "
        "the ltr tower's table; no duplicated position",
        "hparams": {
            "electric_objective": True,
            "generator_hidden_size": 0.25,
            "untied_generator_embeddings": True,
        },
        "want_duplicate": False,
    },
]


def make_batch(np):
    """4 sequences [CLS] a [SEP] b [SEP] + padding, two segments; a literal [MASK] and [UNK]."""
    rs = np.random.RandomState(7)
    ids = np.zeros([BATCH, SEQ], np.int32)
    mask = np.zeros([BATCH, SEQ], np.int32)
    seg = np.zeros([BATCH, SEQ], np.int32)
    for b, n in enumerate(LENGTHS):
        len_a = (n - 3) // 2
        len_b = n - 3 - len_a
        a = rs.randint(104, VOCAB_SIZE, size=len_a)
        bb = rs.randint(104, VOCAB_SIZE, size=len_b)
        row = [CLS, *a, SEP, *bb, SEP]
        ids[b, :n] = row
        mask[b, :n] = 1
        seg[b, len_a + 2 : n] = 1
    ids[0, 3] = MASK  # not a masking candidate on either side
    ids[1, 2] = UNK
    return {"input_ids": ids, "input_mask": mask, "segment_ids": seg}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--project", default=REPO_ROOT,
                   help="electra_tf checkout to import (default: this repository)")  # fmt: skip
    p.add_argument(
        "--mirror", default=DEFAULT_MIRROR, help="bare git dir of google-research/electra"
    )
    p.add_argument("--rev", default="HEAD")
    p.add_argument("--rtol", type=float, default=1e-5, help="losses, logits, gradients")
    p.add_argument("--step-rtol", type=float, default=1e-3,
                   help="post-step weights, relative to the variable's max |update|")  # fmt: skip
    p.add_argument("--weight-std", type=float, default=0.2)
    p.add_argument("--slot-scale", type=float, default=2e-3, help="random Adam slot magnitude")
    p.add_argument("--max-seed-scan", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--scenario", action="append",
        help="run only these (" + ", ".join(sc["name"] for sc in SCENARIOS) + ")",
    )  # fmt: skip
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--keep-tmp", action="store_true")
    p.add_argument("--gpu", action="store_true", help="do not hide GPUs (TF32 disabled)")
    p.add_argument("--dense", choices=["auto", "fallback"], default="auto",
                   help="tf.layers.dense: tf_keras legacy layers (auto) or the get_variable shim")  # fmt: skip
    return p


def run_scenario(scen, batch, orig, tmp, rep, meta, args, np, tf) -> dict:
    """One scenario: the project's phase, the original's, their comparison into `rep`; the
    per-group table's numbers."""
    workdir = os.path.join(tmp, scen["name"])
    os.makedirs(workdir)
    write_vocab(os.path.join(workdir, "vocab.txt"))
    log(f"== scenario {scen['name']}: {scen['what']}")
    proj = project_phase(scen, batch, workdir, args, np, tf)
    proj["_input_mask"] = batch["input_mask"]
    log(
        f"   project: seed {proj['seed']}, loss {float(proj['loss']):.6f}; duplicated "
        f"positions (batch, slot, slot, pos): {proj['dup']}; with different samples "
        f"(..., ids): {proj['dup_diff']}"
    )
    orig_res = original_phase(scen, batch, proj, orig, workdir, args, np, tf)
    log(
        f"   original: loss {float(orig_res['total_loss']):.6f}, global grad norm "
        f"{orig_res['global_norm']:.3f} (clip 1.0), lr {orig_res['lr']:.6g}"
    )
    groups = compare(scen, proj, orig_res, rep, args, np)
    meta[f"{scen['name']} masked positions"] = proj["masked_lm_positions"].tolist()
    meta[f"{scen['name']} masked_lm_weights"] = proj["masked_lm_weights"].astype(int).tolist()
    meta[f"{scen['name']} sampled ids"] = proj["sampled_ids"].tolist()
    meta[f"{scen['name']} disc labels (sum per seq)"] = proj["disc_labels"].sum(-1).tolist()
    meta[f"{scen['name']} global grad norm (original)"] = round(orig_res["global_norm"], 4)
    return groups


def _run_all(args, project, tmp, np, tf) -> Report:
    """Every chosen scenario against the original's code; the report printed (and --json)."""
    orig_dir = os.path.join(tmp, "electra_original")
    commit = extract_original(args.mirror, args.rev, orig_dir)
    shims = install_shims(tf, args.dense)
    orig = import_original(orig_dir)
    batch = make_batch(np)
    rep = Report(args.rtol)
    all_groups = {}
    meta = {
        "original": f"google-research/electra {commit} (extracted to {orig_dir})",
        "project": f"{project} (git {git_head(project)})",
        "tensorflow": tf.__version__,
    }
    scenarios = [s for s in SCENARIOS if not args.scenario or s["name"] in args.scenario]
    for scen in scenarios:
        all_groups[scen["name"]] = run_scenario(scen, batch, orig, tmp, rep, meta, args, np, tf)
    meta["shims"] = shims
    print_report(rep, all_groups, meta)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {"rows": rep.rows, "groups": all_groups, "per_var": rep.per_var, "race": rep.race, "failures": rep.failures, "meta": meta},
                f, indent=1, default=str,
            )  # fmt: skip
    return rep


def main(argv=None):
    args = _parser().parse_args(argv)
    project = os.path.abspath(args.project)
    if project not in sys.path:
        sys.path.insert(0, project)
    # CPU float32 on both sides unless --gpu (a GPU's TF32 matmuls alone would exceed 1e-5).
    np, tf = setup_tf(args.threads, args.gpu)
    import electra_tf

    if not os.path.abspath(electra_tf.__file__).startswith(project):
        raise SystemExit(f"ERROR: electra_tf imported from {electra_tf.__file__}, not {project}")

    tmp = tempfile.mkdtemp(prefix="electra_parity_")
    try:
        rep = _run_all(args, project, tmp, np, tf)
    finally:
        if args.keep_tmp:
            log(f"temp dir kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if rep.failures:
        log(f"\nPARITY FAILED: {len(rep.failures)} difference(s) beyond tolerance:")
        for f in rep.failures[:60]:
            log(f"  - {f}")
        if len(rep.failures) > 60:
            log(f"  ... and {len(rep.failures) - 60} more")
        return 1
    log("\nPARITY OK: every compared quantity is within tolerance.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
