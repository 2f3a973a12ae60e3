"""How far a pre-training run's weights moved, and how large its clipped gradients are.

    .venv/bin/python bench/disc_gradients.py --model-dir data/g64/models/s6-electra --checkpoint ckpt-2500

Issue #12's question: does the discriminator stall because Adam's epsilon (1e-6) swamps tiny
clipped gradients, or because its gradients carry no consistent direction? Prints, per group
of variables (shared embeddings, discriminator, its head, generator):
- the standard deviation of every kernel against the initialiser's (truncated normal 0.02,
  whose standard deviation is 0.0176) and of the layer-norm gains against 1;
- the per-element RMS of the gradient after global-norm clipping, on `--batches` training
  batches (the run's own input, masking and dropout);
- sqrt(Adam's v slot), the denominator of the update, for a few named variables.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def group_of(name: str) -> str:
    if name.startswith(("generator", "cloze")):
        return "generator"
    if "embeddings" in name:
        return "embeddings"
    if name.startswith("discriminator_predictions"):
        return "disc head"
    return "discriminator"


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    import tensorflow as tf

    from electra_tf.config import PretrainingConfig
    from electra_tf.pretraining import loop

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True, help="A pre-training run (config.json).")
    parser.add_argument("--checkpoint", default=None, help="ckpt-N; default: the latest.")
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args(argv)

    with open(os.path.join(args.model_dir, "config.json"), encoding="utf-8") as f:
        values = json.load(f)
    fields = {field.name for field in dataclasses.fields(PretrainingConfig)}
    config = PretrainingConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in fields}
    )
    model = loop.build_model(config)
    optimizer = loop.build_optimizer(config, model)
    model.optimizer = optimizer
    prefix = (
        os.path.join(args.model_dir, args.checkpoint)
        if args.checkpoint
        else tf.train.latest_checkpoint(args.model_dir)
    )
    tf.train.Checkpoint(model=model, optimizer=optimizer).read(prefix).expect_partial()
    names = {id(v): n for n, v in model.variable_map().items()}

    print(f"{prefix}: weights")
    for group in ("embeddings", "discriminator", "disc head", "generator"):
        kernels = [
            float(np.std(v.numpy()))
            for v in model.trainable_variables
            if group_of(names.get(id(v), v.name)) == group
            and names.get(id(v), "").endswith("kernel")
        ]
        gains = [
            float(np.std(v.numpy() - 1.0))
            for v in model.trainable_variables
            if group_of(names.get(id(v), v.name)) == group
            and names.get(id(v), "").endswith("gamma")
        ]
        if kernels:
            print(
                f"  {group:13s} kernel std {min(kernels):.4f}-{max(kernels):.4f} (init 0.0176)"
                + (f"; layer-norm gain spread around 1: {max(gains):.4f}" if gains else "")
            )

    dataset = loop.make_dataset(
        config,
        tf.distribute.get_strategy(),
        config.resolved_pretrain_tfrecords(),
        config.train_batch_size,
        True,
    )
    batches = iter(dataset)
    rms: dict[str, list[float]] = {}
    for _ in range(args.batches):
        gradients, outputs = model._gradients(next(batches), model.trainable_variables)
        dense = [tf.convert_to_tensor(g) for g in gradients]
        norm = float(tf.linalg.global_norm(dense))
        scale = min(1.0, 1.0 / norm)  # the optimizer's global-norm clipping at 1.0
        print(f"  batch: loss {float(outputs['loss']):.3f}, gradient global norm {norm:.3f}")
        for variable, gradient in zip(model.trainable_variables, dense, strict=True):
            group = group_of(names.get(id(variable), variable.name))
            value = float(tf.sqrt(tf.reduce_mean(tf.square(gradient)))) * scale
            rms.setdefault(group, []).append(value)
    print("clipped gradient, per-element RMS per variable (Adam's epsilon is 1e-6):")
    for group, values in rms.items():
        v = np.array(values)
        print(f"  {group:13s} median {np.median(v):.2e}, max {v.max():.2e}")
    print("sqrt(Adam's v), median per variable:")
    for key, slot in sorted(optimizer.slot_map().items()):
        if key.endswith("/adam_v") and (
            "layer_0/attention/self/query/kernel" in key
            or "layer_3/output/dense/kernel" in key
            or key.startswith("discriminator_predictions/dense/kernel")
            or "word_embeddings" in key
        ):
            print(f"  {key[: -len('/adam_v')]:62s} {np.median(np.sqrt(slot.numpy())):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
