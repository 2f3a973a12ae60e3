"""Round trip of Hugging Face folders as people have them: hf -> native -> original -> hf.

Three folders written by transformers itself (random weights, every tensor perturbed): a bare
`ElectraModel` (`save_pretrained` keys without `electra.`), an `ElectraForPreTraining` and an
`ElectraForMaskedLM` (a generator on its own). Each is converted by this project
hf -> native -> original -> hf, loaded back by transformers (every tensor must load) and run
on a fixed batch: the outputs must equal the first folder's within --tolerance, and so must
this project's own model of the native checkpoint (`ours.npz`, written by `convert`).

    python3.11 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch==2.13.0 transformers numpy
    /tmp/hfenv/bin/python tools/hf_parity/round_trip.py make --dir /tmp/rt        # transformers
    .venv/bin/python tools/hf_parity/round_trip.py convert --dir /tmp/rt          # this project
    /tmp/hfenv/bin/python tools/hf_parity/round_trip.py check --dir /tmp/rt       # transformers
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

# name -> (transformers class, output compared, config overrides)
CASES = {
    "bare_model": ("ElectraModel", "last_hidden_state", {}),
    "pretraining": ("ElectraForPreTraining", "logits", {}),
    "generator": ("ElectraForMaskedLM", "logits", {}),
}
CONFIG = dict(
    vocab_size=120, embedding_size=32, hidden_size=128, num_hidden_layers=2,
    num_attention_heads=2, intermediate_size=512, max_position_embeddings=64,
)  # fmt: skip
STEPS = ("native", "original", "hf")


def _batch(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, CONFIG["vocab_size"], (3, 24)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[-1, 12:] = 0
    segments = (np.arange(24)[None] >= 8).astype(np.int64).repeat(3, 0)
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": segments * mask}


def _run(model, batch):
    import torch

    with torch.no_grad():
        inputs = {k: torch.from_numpy(v) for k, v in batch.items()}
        return model(**inputs)


def make(directory: str) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    batch = _batch()
    outputs = {}
    for name, (class_name, field, overrides) in CASES.items():
        model_class = getattr(transformers, class_name)
        model = model_class(transformers.ElectraConfig(**CONFIG, **overrides)).eval()
        with torch.no_grad():
            for param in model.parameters():  # off the constant initial values
                param.add_(0.05 * torch.randn_like(param))
        model.save_pretrained(os.path.join(directory, name), safe_serialization=True)
        outputs[name] = getattr(_run(model, batch), field).numpy()
        print(f"{name}: {class_name} saved, {field} {outputs[name].shape}")
    np.savez(os.path.join(directory, "outputs.npz"), **outputs, **batch)


def _our_outputs(name: str, native_dir: str, batch: dict[str, np.ndarray]) -> np.ndarray:
    """This project's model of the native checkpoint, on the batch: what transformers' model
    outputs for the same folder (sequence output, replaced-token logits, MLM logits)."""
    from electra_tf import checkpoints

    source = checkpoints.read_weights(native_dir)
    _, model = checkpoints.check_complete(source)  # the native kind, built
    checkpoints.assign(model.variable_map(), source)
    inputs = {
        "input_ids": batch["input_ids"].astype(np.int32),
        "input_mask": batch["attention_mask"].astype(np.int32),
        "segment_ids": batch["token_type_ids"].astype(np.int32),
    }
    if name == "bare_model":
        return model(inputs)["sequence_output"].numpy()
    if name == "pretraining":
        return model(inputs)["logits"].numpy()
    hidden = model.generator(inputs)["sequence_output"]  # the masked LM's one network
    positions = np.tile(np.arange(inputs["input_ids"].shape[1], dtype=np.int32), (3, 1))
    return model.generator_head(hidden, positions).numpy()  # [batch, seq_len, vocab]


def convert(directory: str) -> None:
    from electra_tf.cli import convert as convert_cli

    batch = _batch()
    ours = {}
    for name in CASES:
        source = os.path.join(directory, name)
        for step in STEPS:
            target = os.path.join(directory, f"{name}.{step}")
            args = ["--input", source, "--output", target, "--to", step, "--overwrite"]
            if convert_cli.main(args) != 0:
                raise SystemExit(f"{name}: conversion to {step} failed")
            source = target
        ours[name] = _our_outputs(name, os.path.join(directory, f"{name}.native"), batch)
    np.savez(os.path.join(directory, "ours.npz"), **ours)


def check(directory: str, tolerance: float) -> int:
    import transformers

    saved = np.load(os.path.join(directory, "outputs.npz"))
    ours = np.load(os.path.join(directory, "ours.npz"))
    batch = {k: saved[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    real = batch["attention_mask"].astype(bool)
    worst = 0.0
    for name, (class_name, field, _) in CASES.items():
        back = os.path.join(directory, f"{name}.hf")
        folder = os.path.join(back, "generator" if name == "generator" else "discriminator")
        model_class = getattr(transformers, class_name)
        model, info = model_class.from_pretrained(folder, output_loading_info=True)
        problems = {k: sorted(v) for k, v in info.items() if v and k != "error_msgs"}
        if problems or info.get("error_msgs"):
            print(f"FAIL {name}: {class_name} loading problems {problems}")
            return 1
        got = getattr(_run(model.eval(), batch), field).numpy()
        diff = float(np.max(np.abs(got - saved[name])[real]))  # padded positions differ by design
        project = float(np.max(np.abs(ours[name] - saved[name])[real]))
        worst = max(worst, diff, project)
        print(f"{name}: {class_name} from {folder}: every tensor loaded, max |diff| {diff:.2e}; "
              f"electra-tf's own model of the native checkpoint: max |diff| {project:.2e}")  # fmt: skip
    ok = worst <= tolerance
    print(f"{'PASS' if ok else 'FAIL'}: max |diff| {worst:.2e} (tolerance {tolerance:g})")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["make", "convert", "check"])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    if args.step == "make":
        make(args.dir)
    elif args.step == "convert":
        convert(args.dir)
    else:
        return check(args.dir, args.tolerance)
    return 0


if __name__ == "__main__":
    sys.exit(main())
