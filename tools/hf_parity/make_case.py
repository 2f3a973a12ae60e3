"""Writes an HF export plus this project's logits on a fixed batch, for tools/hf_parity/check.py.

    .venv/bin/python tools/hf_parity/make_case.py --output /tmp/parity [--input CKPT] \\
        [--preset small] [--hparams '{...}']

Without --input the weights are random, and every tensor (LayerNorm scales and biases and the
generator's output bias included, which initialise to constants) is perturbed so that a
swapped, untransposed or missing tensor shows up as a logit difference. Writes
`<output>/hf/{discriminator,generator}` and `<output>/logits.npz`.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import tensorflow as tf

from electra_tf import checkpoints
from electra_tf.config import pretraining_config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--input", help="checkpoint to export (any format); default: random")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--hparams", default="{}")
    parser.add_argument("--batch-size", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=40)
    parser.add_argument("--num-masked", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args()

    tf.random.set_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    config, model = _model(args, rng)
    disc_config, gen_config = config.discriminator_config(), config.generator_config()
    inputs, positions = _batch(args, rng, disc_config.vocab_size)

    # The pretrainer's own networks and heads, on fixed inputs (its call would mask and sample).
    hidden = model.discriminator(inputs)["sequence_output"]
    disc_logits = model.discriminator_head(hidden)  # [batch, seq_len]
    hidden = model.generator(inputs)["sequence_output"]
    gen_logits = model.generator_head(hidden, positions)  # [batch, num_masked, vocab]

    os.makedirs(args.output, exist_ok=True)
    checkpoints.save_weights(model, os.path.join(args.output, "hf"), "hf", overwrite=args.overwrite)
    np.savez(
        os.path.join(args.output, "logits.npz"),
        disc_logits=disc_logits.numpy(),
        gen_logits=gen_logits.numpy(),
        masked_positions=positions,
        **inputs,
    )
    print(f"wrote {args.output}/hf and {args.output}/logits.npz "
          f"(H={disc_config.hidden_size}, Hg={gen_config.hidden_size}, V={disc_config.vocab_size})")  # fmt: skip
    return 0


def _model(args, rng):
    """The config and the pretrainer: --input's weights, or random ones, every tensor perturbed."""
    source = checkpoints.read_weights(args.input) if args.input else None
    config = (
        source.config if source else pretraining_config(preset=args.preset, hparams=args.hparams)
    )
    model = checkpoints.build_pretrainer(config)
    variables = model.variable_map()
    if source is not None:
        checkpoints.assign(variables, source, where="parity model")
    else:
        for name, var in variables.items():
            base = 1.0 if name.endswith("/gamma") else 0.0
            var.assign(base + 0.05 * rng.standard_normal(var.shape).astype(np.float32))
    return config, model


def _batch(args, rng, vocab_size):
    """A fixed batch with two segments and one padded row; the masked positions."""
    batch, length = args.batch_size, args.seq_len
    input_ids = rng.integers(5, vocab_size, size=(batch, length)).astype(np.int32)
    input_mask = np.ones((batch, length), np.int32)
    input_mask[-1, length // 2 :] = 0  # one padded row checks the attention mask convention
    input_ids[input_mask == 0] = 0
    segment_ids = np.zeros((batch, length), np.int32)
    segment_ids[:, length // 3 :] = 1
    segment_ids[input_mask == 0] = 0
    positions = np.stack(
        [
            rng.choice(np.arange(1, length // 2), args.num_masked, replace=False)
            for _ in range(batch)
        ]
    ).astype(np.int32)  # [batch, num_masked]
    inputs = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
    return inputs, positions


if __name__ == "__main__":
    sys.exit(main())
