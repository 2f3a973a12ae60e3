"""What a pre-training checkpoint's frozen features know about SST-2 sentiment.

    .venv/bin/python bench/frozen_probe.py --model-dir DATA/models/NAME [--checkpoint ckpt-500] \
        --sst-dir data/sst2/val/finetuning_data/sst --vocab-file DATA/vocab.txt

Fine-tuning mixes two questions: are the pre-trained features useful, and can fine-tuning move
from them. This script answers the first alone. It encodes the first `--train` sentences of
`train.tsv` and the last `--test` (the validation slice `bench/sst2_transfer.py` carves, never
dev) with the discriminator, no dropout, and fits a ridge-regression classifier, the ridge
chosen on the test half (an upper bound for every row alike), on three frozen features:
- the mean of the input word embeddings (what the shared embedding table learned);
- the final [CLS] vector (what the fine-tuning head reads);
- the mean of the final hidden states over real tokens.
It also prints how alike the [CLS] vectors of different sentences are (mean cosine; near 1 means
the head starts from one point for every sentence) and the entropy of [CLS]'s attention per
layer over real keys (1 = uniform, as at random initialisation).
`--checkpoint none` scores the run's random initialisation (the same seed's weights).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

RIDGES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)


def encode(tokenizer, lines: list[str], max_len: int):
    """TSV lines `sentence<TAB>label` -> ([CLS] ... [SEP] features, labels)."""
    import numpy as np

    ids = np.zeros((len(lines), max_len), np.int32)  # [n, max_len]
    mask = np.zeros_like(ids)
    labels = []
    for row, line in enumerate(lines):
        sentence, label = line.rsplit("\t", 1)
        labels.append(int(label))
        tokens = ["[CLS]", *tokenizer.tokenize(sentence)[: max_len - 2], "[SEP]"]
        ids[row, : len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
        mask[row, : len(tokens)] = 1
    features = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    return features, np.array(labels)


def ridge_accuracy(train_x, train_y, test_x, test_y) -> float:
    """Best test accuracy (%) of a ridge classifier on standardised features over RIDGES."""
    import numpy as np

    mean, scale = train_x.mean(0), train_x.std(0) + 1e-6
    a, b = (train_x - mean) / scale, (test_x - mean) / scale
    target = 2.0 * train_y - 1.0
    best = 0.0
    for ridge in RIDGES:
        weights = np.linalg.solve(a.T @ a + ridge * len(a) * np.eye(a.shape[1]), a.T @ target)
        best = max(best, float(((b @ weights > 0) == test_y).mean()))
    return 100.0 * best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", required=True, help="a pre-training run's directory")
    parser.add_argument("--checkpoint", default=None, help="ckpt-N, 'none', or the latest")
    parser.add_argument("--sst-dir", required=True, help="holds train.tsv (sentence, label)")
    parser.add_argument("--vocab-file", required=True)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--test", type=int, default=2000)
    parser.add_argument("--max-seq-length", type=int, default=64)
    args = parser.parse_args(argv)

    import numpy as np
    import tensorflow as tf

    from electra_tf.checkpoints.native import restore_weights
    from electra_tf.checkpoints.training_state import config_from_saved
    from electra_tf.data.tokenization import FullTokenizer
    from electra_tf.pretraining import loop

    config_path = os.path.join(args.model_dir, "config.json")
    with open(config_path, encoding="utf-8") as f:
        config = config_from_saved(json.load(f), config_path)
    model = loop.build_model(config)
    if args.checkpoint != "none":
        path = (
            os.path.join(args.model_dir, args.checkpoint)
            if args.checkpoint
            else tf.train.latest_checkpoint(args.model_dir)
        )
        if path is None:
            parser.error(f"no checkpoint in {args.model_dir}")
        restore_weights(model, path)
    tokenizer = FullTokenizer(args.vocab_file, do_lower_case=config.do_lower_case)
    with open(os.path.join(args.sst_dir, "train.tsv"), encoding="utf-8") as f:
        rows = f.read().splitlines()[1:]
    if len(rows) < args.train + args.test:
        parser.error(f"{args.sst_dir}/train.tsv has {len(rows)} sentences")
    splits = [
        encode(tokenizer, part, args.max_seq_length)
        for part in (rows[: args.train], rows[-args.test :])
    ]
    table = model.discriminator.embeddings.word_embeddings.numpy()  # [vocab, E]

    def features(batch):
        """{name: [n, width]} for the three frozen features."""
        out: dict[str, list] = {"embedding mean": [], "[CLS]": [], "hidden mean": []}
        for start in range(0, len(batch["input_ids"]), 250):
            part = {k: v[start : start + 250] for k, v in batch.items()}
            mask = part["input_mask"][..., np.newaxis].astype(np.float32)  # [b, seq, 1]
            hidden = model.discriminator(
                {k: tf.constant(v) for k, v in part.items()}, training=False
            )["sequence_output"].numpy()  # [b, seq, H]
            out["embedding mean"].append((table[part["input_ids"]] * mask).sum(1) / mask.sum(1))
            out["[CLS]"].append(hidden[:, 0])
            out["hidden mean"].append((hidden * mask).sum(1) / mask.sum(1))
        return {k: np.concatenate(v) for k, v in out.items()}

    (train, train_y), (test, test_y) = splits
    train_f, test_f = features(train), features(test)
    probes = {k: ridge_accuracy(train_f[k], train_y, test_f[k], test_y) for k in train_f}
    cls = test_f["[CLS]"] / np.linalg.norm(test_f["[CLS]"], axis=1, keepdims=True)
    cosine = float((cls @ cls.T)[np.triu_indices(len(cls), 1)].mean())
    sample = {k: tf.constant(v[:64]) for k, v in test.items()}
    real = test["input_mask"][:64].sum(1)[:, np.newaxis]  # [64, 1]
    entropies = []
    for probs in model.discriminator.attention_probs(sample):
        cls_probs = probs.numpy()[:, :, 0, :]  # [64, heads, seq]: [CLS] as the query
        entropy = -(cls_probs * np.log(cls_probs + 1e-12)).sum(-1) / np.log(real)
        entropies.append(float(entropy.mean()))
    print(
        json.dumps(
            {
                "model": f"{args.model_dir}:{args.checkpoint or 'latest'}",
                "probe_accuracy": {k: round(v, 2) for k, v in probes.items()},
                "majority": round(100.0 * max(test_y.mean(), 1 - test_y.mean()), 2),
                "cls_mean_cosine": round(cosine, 4),
                "cls_attention_entropy": [round(e, 3) for e in entropies],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
