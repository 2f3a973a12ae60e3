"""Which part of a pre-trained encoder helps or hurts fine-tuning? Writes a hybrid checkpoint.

    .venv/bin/python bench/hybrid_init.py --model-dir DATA/models/NAME --checkpoint ckpt-1950 \
        --out data/hybrid/NAME-layers --fresh electra/encoder
    .venv/bin/python bench/hybrid_init.py ... --out data/hybrid/NAME-word --keep word_embeddings

Loads a pre-training run's checkpoint and replaces some of its discriminator's weights (the
variables under `electra/`, the ones fine-tuning reads) with a random initialisation of the
same config at `--init-range` (default 0.02, what a randomly initialised fine-tuning row
uses): `--fresh A,B` replaces every variable whose name contains A or B, `--keep A,B` every
one whose name contains neither. The result is a native checkpoint (`ckpt-1` plus the run's
config.json) that `electra_tf.finetune` takes as `init_checkpoint`, so a probe can ask e.g.
"the pre-trained embeddings with random layers" or "random attention queries and keys".
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

ENCODER_SCOPE = "electra/"


def names_to_reinitialise(
    names: list[str], fresh: list[str] | None, keep: list[str] | None
) -> list[str]:
    """The discriminator variables (scope `electra/`) that `--fresh` / `--keep` select."""
    if bool(fresh) == bool(keep):
        raise ValueError("give exactly one of --fresh and --keep")
    chosen = []
    for name in names:
        if not name.startswith(ENCODER_SCOPE):
            continue  # the generator and the heads: fine-tuning does not read them
        hit = any(part in name for part in (fresh or keep))
        if hit == bool(fresh):
            chosen.append(name)
    return chosen


def main(argv: list[str] | None = None) -> int:
    from attention_entropy import add_run_arguments, load_run

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_arguments(parser, "ckpt-1950")
    parser.add_argument("--out", required=True, help="directory for the hybrid checkpoint")
    parser.add_argument("--fresh", help="comma-separated name parts to reinitialise")
    parser.add_argument("--keep", help="comma-separated name parts to keep; the rest is fresh")
    parser.add_argument("--init-range", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    split = lambda value: [p for p in value.split(",") if p] if value else None  # noqa: E731
    if os.path.exists(os.path.join(args.out, "checkpoint")):
        parser.error(f"{args.out} already holds a checkpoint; choose another --out")

    import tensorflow as tf

    from electra_tf.checkpoints.native import write_native_files
    from electra_tf.pretraining import loop

    config, model, path = load_run(parser, args.model_dir, args.checkpoint)
    variables = model.variable_map()
    try:
        chosen = names_to_reinitialise(list(variables), split(args.fresh), split(args.keep))
    except ValueError as error:
        parser.error(str(error))
    if not chosen:
        parser.error(
            "no discriminator variable matches; names look like "
            "electra/encoder/layer_0/attention/self/query/kernel"
        )
    overrides = {**config.model_hparam_overrides, "initializer_range": args.init_range}
    tf.random.set_seed(args.seed)
    fresh = loop.build_model(dataclasses.replace(config, model_hparam_overrides=overrides))
    fresh_variables = fresh.variable_map()
    for name in chosen:
        variables[name].assign(fresh_variables[name])
    os.makedirs(args.out, exist_ok=True)
    written = write_native_files(model, args.out, config, 1)
    print(
        f"{path}: {len(chosen)} of {sum(n.startswith(ENCODER_SCOPE) for n in variables)} "
        f"discriminator variables reinitialised (range {args.init_range}) -> {written}"
    )
    for name in chosen:
        print(f"  fresh: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
