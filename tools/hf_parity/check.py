"""Checks an HF export of electra-tf weights in transformers' PyTorch ELECTRA.

Run it with a Python that has torch + transformers (NOT the project venv; they are not project
dependencies), e.g.

    python3.11 -m venv /tmp/hfenv
    /tmp/hfenv/bin/pip install torch==2.13.0 transformers numpy
    /tmp/hfenv/bin/python tools/hf_parity/check.py --export DIR/hf --logits DIR/logits.npz

`--logits` is the .npz written by `tools/hf_parity/make_case.py` (this project's outputs):
`input_ids`, `input_mask`, `segment_ids` [batch, seq_len], `disc_logits` [batch, seq_len],
`masked_positions` [batch, num_masked] and `gen_logits` [batch, num_masked, vocab]. The
discriminator folder is loaded as `ElectraForPreTraining`, the generator folder as
`ElectraForMaskedLM`; HF computes generator logits at every position, so they are compared at
`masked_positions`. Exits 1 when the max |difference| exceeds --tolerance.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch
from transformers import ElectraForMaskedLM, ElectraForPreTraining


def load(model_class, folder: str):
    """Loads a folder, failing on any missing, unexpected or mismatched tensor (transformers
    would otherwise initialise the missing ones randomly and only warn)."""
    model, info = model_class.from_pretrained(folder, output_loading_info=True)
    problems = {k: sorted(v) for k, v in info.items() if k != "error_msgs" and v}
    if problems or info.get("error_msgs"):
        raise SystemExit(f"{folder}: {model_class.__name__} loading problems: {problems} "
                         f"{info.get('error_msgs')}")  # fmt: skip
    print(f"{folder}: {model_class.__name__} loaded every tensor")
    return model.eval()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True, help="directory with discriminator/, generator/")
    parser.add_argument("--logits", required=True, help=".npz of electra-tf inputs and logits")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()

    case = np.load(args.logits)
    inputs = {
        "input_ids": torch.from_numpy(case["input_ids"].astype(np.int64)),
        "attention_mask": torch.from_numpy(case["input_mask"].astype(np.int64)),
        "token_type_ids": torch.from_numpy(case["segment_ids"].astype(np.int64)),
    }
    mask = case["input_mask"].astype(bool)
    worst = 0.0
    with torch.no_grad():
        disc = load(ElectraForPreTraining, os.path.join(args.export, "discriminator"))
        disc_logits = disc(**inputs).logits.numpy()  # [batch, seq_len]
        # Padded positions are not compared: neither side defines them the same way.
        diff = float(np.max(np.abs(disc_logits - case["disc_logits"])[mask]))
        print(f"ElectraForPreTraining logits {disc_logits.shape}: max |diff| = {diff:.3e}")
        worst = max(worst, diff)

        gen = load(ElectraForMaskedLM, os.path.join(args.export, "generator"))
        all_logits = gen(**inputs).logits.numpy()  # [batch, seq_len, vocab]
        positions = case["masked_positions"]
        # [batch, num_masked, vocab]
        at_masked = np.take_along_axis(all_logits, positions[:, :, None], axis=1)
        diff = float(np.max(np.abs(at_masked - case["gen_logits"])))
        print(f"ElectraForMaskedLM logits {at_masked.shape} at masked positions: "
              f"max |diff| = {diff:.3e}")  # fmt: skip
        worst = max(worst, diff)
    tied = gen.generator_lm_head.weight.data_ptr() == (
        gen.electra.embeddings.word_embeddings.weight.data_ptr()
    )
    print(f"generator_lm_head tied to word embeddings: {tied}")
    ok = worst <= args.tolerance and tied
    print(f"{'PASS' if ok else 'FAIL'}: max |diff| {worst:.3e} (tolerance {args.tolerance:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
