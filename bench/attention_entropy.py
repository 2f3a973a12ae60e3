"""Attention entropy per layer of a pre-training checkpoint: a collapse and context check.

    .venv/bin/python bench/attention_entropy.py --model-dir DATA/models/NAME \
        [--checkpoint ckpt-500] [--tfrecords 'DATA/pretrain_tfrecords/*-3-of-4'] [--batch 64]

For each transformer layer of the discriminator and the generator, prints the mean attention
entropy over real query tokens and heads, divided by log(number of real keys): 1.0 is uniform
attention (an untrained layer), values near 0 mean every query looks at a single key. Too high
a learning rate early in pre-training drives the discriminator's lower layers towards 0, after
which they pass little context on and the replaced-token task can only use token identity.

Then, for the discriminator, the attention mass each layer puts on the query's two neighbours
(2/n for uniform attention; a model that checks whether a token fits its context puts more
there), and the discriminator's AUC on two hand-made corruptions of the same batch: 9 tokens of
each sequence replaced with tokens drawn from elsewhere in the SAME sequence (the bag of words
is unchanged, so a context-blind model scores 0.5) and with tokens drawn from OTHER sequences.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def attention_stats(encoder, batch) -> tuple[list[float], list[float]]:
    """Per layer of `encoder` on `batch` (no dropout), averaged over real queries and heads:
    the attention entropy / log(real keys), and the attention mass on positions q-1 and q+1."""
    import numpy as np

    real = batch["input_mask"].numpy().astype(np.float64)[:, np.newaxis, :]  # [batch, 1, seq]
    log_keys = np.log(np.maximum(real.sum(-1, keepdims=True), 2.0))  # [batch, 1, 1]
    entropies, neighbours = [], []
    for layer_probs in encoder.attention_probs(batch):
        probs = layer_probs.numpy()  # [batch, heads, seq, seq]
        count = real.sum() * probs.shape[1]
        entropy = -(probs * np.log(probs + 1e-12)).sum(-1)  # [batch, heads, seq]
        entropies.append(float((entropy / log_keys * real).sum() / count))
        mass = np.zeros(probs.shape[:3])
        mass[..., 1:] += np.diagonal(probs, offset=-1, axis1=2, axis2=3)  # q -> q-1
        mass[..., :-1] += np.diagonal(probs, offset=1, axis1=2, axis2=3)  # q -> q+1
        neighbours.append(float((mass * real).sum() / count))
    return entropies, neighbours


def auc(scores, labels) -> float:
    """Area under the ROC curve by the rank-sum formula (no ties expected in float logits)."""
    import numpy as np

    ranks = np.empty(len(scores))
    ranks[np.argsort(scores, kind="stable")] = np.arange(1, len(scores) + 1)
    positive = labels == 1
    n_pos, n_neg = positive.sum(), (~positive).sum()
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def corruption_aucs(model, batch, special_ids, per_sequence: int = 9, seed: int = 0) -> dict:
    """Discriminator AUC on tokens swapped in from the same sequence and from other sequences."""
    import numpy as np

    ids, mask = batch["input_ids"].numpy(), batch["input_mask"].numpy()
    ordinary = (mask == 1) & ~np.isin(ids, list(special_ids))
    rng = np.random.default_rng(seed)
    out = {}
    for kind in ("same sequence", "other sequences"):
        corrupted, labels = ids.copy(), np.zeros_like(ids)
        for i in range(len(ids)):
            candidates = np.flatnonzero(ordinary[i])
            for pos in rng.choice(candidates, min(per_sequence, len(candidates)), replace=False):
                j = i if kind == "same sequence" else (i + rng.integers(1, len(ids))) % len(ids)
                token = ids[j][rng.choice(np.flatnonzero(ordinary[j]))]
                corrupted[i, pos] = token
                labels[i, pos] = int(token != ids[i, pos])
        features = {"input_ids": corrupted, "segment_ids": batch["segment_ids"], "input_mask": mask}
        hidden = model.discriminator(features, training=False)["sequence_output"]
        logits = model.discriminator_head(hidden).numpy()
        out[kind] = auc(logits[mask == 1], labels[mask == 1])
    return out


def add_run_arguments(parser: argparse.ArgumentParser, example_checkpoint: str) -> None:
    """`--model-dir` and `--checkpoint`, the two arguments `load_run` reads."""
    parser.add_argument("--model-dir", required=True, help="a pre-training run's directory")
    parser.add_argument("--checkpoint", help=f"e.g. {example_checkpoint} (default: the latest)")


def load_run(parser, model_dir: str, checkpoint: str | None, check=None):
    """A pre-training run's saved config, its pretrainer with `checkpoint`'s weights (default:
    the latest) and the checkpoint path; `parser.error` names what is missing. `check(model)`
    may return an error message to refuse the model before the weights are read."""
    import tensorflow as tf

    from electra_tf.checkpoints.native import restore_weights
    from electra_tf.checkpoints.training_state import config_from_saved
    from electra_tf.pretraining import loop

    config_path = os.path.join(model_dir, "config.json")
    with open(config_path, encoding="utf-8") as f:
        config = config_from_saved(json.load(f), config_path)
    if checkpoint:
        path = os.path.join(model_dir, checkpoint)
    else:
        path = tf.train.latest_checkpoint(model_dir)
        if path is None:
            parser.error(f"no checkpoint in {model_dir}")
    model = loop.build_model(config)
    problem = check(model) if check else None
    if problem:
        parser.error(problem)
    restore_weights(model, path)
    return config, model, path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_arguments(parser, "ckpt-500")
    parser.add_argument("--tfrecords", help="default: the run's eval_tfrecords")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args(argv)

    import tensorflow as tf

    from electra_tf.data.pretraining_input import pretraining_dataset

    config, model, path = load_run(parser, args.model_dir, args.checkpoint)
    pattern = args.tfrecords or config.eval_tfrecords or config.resolved_pretrain_tfrecords()
    dataset = pretraining_dataset(pattern, args.batch, config.max_seq_length, is_training=False)
    batch = next(iter(dataset))
    print(f"{path}: attention entropy / log(real keys), 1 = uniform, 0 = one key")
    networks = [("discriminator", model.discriminator)]
    if model.separate_generator:
        networks.append(("generator", model.generator))
    stats = {name: attention_stats(encoder, batch) for name, encoder in networks}
    for name, (entropies, _) in stats.items():
        values = " ".join(f"{v:.3f}" for v in entropies)
        print(f"{name:13s} layers 0..{len(entropies) - 1}: {values}")
    seq_len = float(tf.reduce_mean(tf.reduce_sum(tf.cast(batch["input_mask"], tf.float32), 1)))
    values = " ".join(f"{v:.3f}" for v in stats["discriminator"][1])
    print(f"discriminator attention on the two neighbours (uniform: {2 / seq_len:.3f}): {values}")
    if model.discriminator_head is not None:
        special = (model.special_ids["cls_id"], model.special_ids["sep_id"], 0)
        aucs = corruption_aucs(model, batch, special)
        print(
            "discriminator AUC on tokens swapped in from the same sequence "
            f"(0.5 = context-blind): {aucs['same sequence']:.3f}; "
            f"from other sequences: {aucs['other sequences']:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
