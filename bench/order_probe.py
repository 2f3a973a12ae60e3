"""Does a pre-trained generator (or BERT-baseline model) use word order? Masked-LM accuracy on
held-out text, once as it is and once with every unmasked word shuffled within its sequence.

    .venv/bin/python bench/order_probe.py --model-dir DATA/models/NAME [--checkpoint ckpt-N]
        [--tfrecords PATTERN] [--batches 4]

Each sequence keeps its masked slots (the same positions, [MASK] tokens and targets in both
passes) and its [CLS]/[SEP]; only the visible ordinary words trade places. A model that reads
its context as a bag of words scores the same on both; one that uses neighbours loses accuracy
on the shuffled pass. Prints both accuracies, their difference (the "order gain") and both mean
losses.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def shuffle_visible(input_ids, input_mask, positions, special_ids, rng):
    """A copy of `input_ids` [batch, seq] with the real, unmasked, non-special tokens of each row
    permuted among themselves; masked `positions` [batch, N] and special tokens stay put."""
    import numpy as np

    out = input_ids.copy()
    for row in range(len(out)):
        real = np.flatnonzero(input_mask[row] == 1)
        keep = set(positions[row].tolist())
        movable = [j for j in real if j not in keep and out[row, j] not in special_ids]
        values = out[row, movable].copy()
        rng.shuffle(values)
        out[row, movable] = values
    return out


def order_accuracies(model, dataset, config, batches: int, seed: int = 0) -> dict[str, float]:
    """Masked-LM accuracy and mean loss (nats) of `model`'s generator on `batches` batches,
    ordered and shuffled: keys `ordered`, `shuffled`, `ordered_loss`, `shuffled_loss`."""
    import numpy as np
    import tensorflow as tf

    from electra_tf.pretraining.masking import mask_inputs

    rng = np.random.default_rng(seed)
    special = {
        model.special_ids["cls_id"],
        model.special_ids["sep_id"],
        model.special_ids["mask_id"],
        0,
    }
    hits = {"ordered": 0.0, "shuffled": 0.0}
    nll = {"ordered": 0.0, "shuffled": 0.0}
    total = 0.0
    for index, batch in enumerate(dataset.take(batches)):
        ids = tf.cast(batch["input_ids"], tf.int32)
        mask = tf.cast(batch["input_mask"], tf.int32)
        masked = mask_inputs(
            ids,
            mask,
            config.max_predictions_per_seq,
            config.mask_prob,
            tf.constant([seed, index]),
            with_replacement=config.mask_positions_with_replacement,
            **model.special_ids,
        )
        positions = masked["masked_lm_positions"].numpy()
        weights = masked["masked_lm_weights"].numpy()
        targets = masked["masked_lm_ids"].numpy()
        base = masked["masked_input_ids"].numpy()
        variants = {
            "ordered": base,
            "shuffled": shuffle_visible(base, mask.numpy(), positions, special, rng),
        }
        for name, input_ids in variants.items():
            features = {
                "input_ids": tf.constant(input_ids),
                "input_mask": mask,
                "segment_ids": tf.cast(batch["segment_ids"], tf.int32),
            }
            hidden = model.generator(features, training=False)["sequence_output"]
            logits = model.generator_head(hidden, masked["masked_lm_positions"]).numpy()
            hits[name] += float(((logits.argmax(-1) == targets) * weights).sum())
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits).numpy()
            nll[name] += float((losses * weights).sum())
        total += float(weights.sum())
    return {
        **{name: value / total for name, value in hits.items()},
        **{f"{name}_loss": value / total for name, value in nll.items()},
    }


def main(argv: list[str] | None = None) -> int:
    from attention_entropy import add_run_arguments, load_run

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_arguments(parser, "ckpt-500")
    parser.add_argument("--tfrecords", help="default: the run's eval_tfrecords")
    parser.add_argument("--batches", type=int, default=4, help="batches of 128 sequences")
    args = parser.parse_args(argv)

    from electra_tf.data.pretraining_input import pretraining_dataset

    def needs_generator(model):
        if model.generator_head is None:
            return "this model has no masked-LM generator (uniform or two-tower)"
        return None

    config, model, path = load_run(parser, args.model_dir, args.checkpoint, needs_generator)
    pattern = args.tfrecords or config.eval_tfrecords
    if not pattern:
        parser.error("the run has no eval_tfrecords; pass --tfrecords")
    dataset = pretraining_dataset(pattern, 128, config.max_seq_length, is_training=False)
    accuracy = order_accuracies(model, dataset, config, args.batches)
    gain = accuracy["ordered"] - accuracy["shuffled"]
    print(
        f"{path}: masked-LM accuracy {accuracy['ordered']:.4f} in order, "
        f"{accuracy['shuffled']:.4f} with the visible words shuffled; order gain {gain:+.4f}; "
        f"loss {accuracy['ordered_loss']:.3f} in order, {accuracy['shuffled_loss']:.3f} shuffled"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
