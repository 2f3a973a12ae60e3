"""Attention entropy per layer of a pre-training checkpoint: a collapse check.

    .venv/bin/python bench/attention_entropy.py --model-dir DATA/models/NAME \
        [--checkpoint ckpt-500] [--tfrecords 'DATA/pretrain_tfrecords/*-3-of-4'] [--batch 16]

For each transformer layer of the discriminator and the generator, prints the mean attention
entropy over real query tokens and heads, divided by log(number of real keys): 1.0 is uniform
attention (an untrained layer), values near 0 mean every query looks at a single key. Too high
a learning rate early in pre-training drives the discriminator's lower layers towards 0, after
which they pass little context on and the replaced-token task can only use token identity.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def layer_entropies(encoder, batch) -> list[float]:
    """Normalised attention entropy of every layer of `encoder` on `batch` (no dropout)."""
    import numpy as np
    import tensorflow as tf

    mask = tf.cast(batch["input_mask"], tf.float32)  # [batch, seq]
    hidden = encoder.embeddings(batch["input_ids"], batch["segment_ids"], training=False)
    if encoder.embeddings_project is not None:
        hidden = encoder.embeddings_project(hidden)
    bias = (1.0 - mask)[:, tf.newaxis, tf.newaxis, :] * -10000.0  # [batch, 1, 1, seq]
    real = mask.numpy()[:, np.newaxis, :]  # [batch, 1, seq]: real query positions
    log_keys = np.log(np.maximum(real.sum(-1, keepdims=True), 2.0))  # [batch, 1, 1]
    out = []
    for layer in encoder.transformer_layers:
        probs = layer.attention_probs(hidden, bias).numpy()  # [batch, heads, seq, seq]
        entropy = -(probs * np.log(probs + 1e-12)).sum(-1)  # [batch, heads, seq]
        normalised = entropy / log_keys * real
        out.append(float(normalised.sum() / (real.sum() * probs.shape[1])))
        hidden = layer(hidden, bias, training=False)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", required=True, help="a pre-training run's directory")
    parser.add_argument("--checkpoint", help="e.g. ckpt-500 (default: the latest)")
    parser.add_argument("--tfrecords", help="default: the run's eval_tfrecords")
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)

    import tensorflow as tf

    from electra_tf.data.pretraining_input import pretraining_dataset
    from electra_tf.training import checkpointing, loop

    config_path = os.path.join(args.model_dir, "config.json")
    with open(config_path, encoding="utf-8") as f:
        config = checkpointing.config_from_saved(json.load(f), config_path)
    if args.checkpoint:
        path = os.path.join(args.model_dir, args.checkpoint)
    else:
        path = tf.train.latest_checkpoint(args.model_dir)
        if path is None:
            parser.error(f"no checkpoint in {args.model_dir}")
    model = loop.build_model(config)
    checkpointing.restore_weights(model, path)
    pattern = args.tfrecords or config.eval_tfrecords or config.resolved_pretrain_tfrecords()
    dataset = pretraining_dataset(pattern, args.batch, config.max_seq_length, is_training=False)
    batch = next(iter(dataset))
    print(f"{path}: attention entropy / log(real keys), 1 = uniform, 0 = one key")
    networks = [("discriminator", model.discriminator)]
    if model.separate_generator:
        networks.append(("generator", model.generator))
    for name, encoder in networks:
        values = " ".join(f"{v:.3f}" for v in layer_entropies(encoder, batch))
        print(f"{name:13s} layers 0..{len(encoder.transformer_layers) - 1}: {values}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
