"""How fast does a tiny encoder learn to use context? A synthetic bigram language, ours vs Model
Garden's BertEncoder, both trained as a plain masked LM.

    .venv/bin/python bench/bigram_toy.py --out /tmp/bigram_toy [--steps 400] [--lr 5e-4]
        [--seq-len 64] [--batch 32] [--warmup 50] [--hparams JSON] [--impl both|ours|mg]

The language has 50 "a" words and 50 "b" words; every sentence is pairs `a<x> b<f(x)>` with f a
bijection, so every masked token is fully determined by its neighbour and every word is equally
frequent: masked-LM accuracy above 1/50 = 2% needs position, far above it needs the neighbour.
Both models have the tiny preset's discriminator shape (3 x 144, 4 heads, FFN 576, embeddings
128), batch `--batch` x `--seq-len` (32 x 64), int(0.155 x length) masked positions per sequence
(9; 85% [MASK]), peak lr `--lr` with `--warmup` steps and linear decay. Ours runs through
`python -m electra_tf.pretrain` with `"electra_objective": false`; Model Garden's with its own `BertEncoder` + `MaskedLM` and Adam.
Each prints masked-LM accuracy along the way. What it answers: if ours learned context much
more slowly than the reference, the encoder or the training step would be at fault. Both sit on
a plateau (a bag-of-words solution) before they use the neighbour; the flags measure what moves
the end of that plateau (bench/README.md, "The recipe search, fourth round").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
N_WORDS = 50


def write_language(out: str, seed: int = 0) -> tuple[str, str]:
    """Writes vocab.txt and corpus/bigram.txt (3,000 documents of 4 sentences) under `out`."""
    rng = random.Random(seed)
    words = [f"a{i}" for i in range(N_WORDS)] + [f"b{i}" for i in range(N_WORDS)]
    vocab = os.path.join(out, "vocab.txt")
    corpus = os.path.join(out, "corpus")
    os.makedirs(corpus, exist_ok=True)
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(SPECIALS + words) + "\n")
    with open(os.path.join(corpus, "bigram.txt"), "w", encoding="utf-8") as f:
        for _ in range(3000):
            for _ in range(4):
                pairs = [rng.randrange(N_WORDS) for _ in range(rng.randint(5, 15))]
                f.write(" ".join(f"a{x} b{(7 * x + 3) % N_WORDS}" for x in pairs) + "\n")
            f.write("\n")
    return vocab, corpus


def run_ours(
    out: str, vocab: str, records: str, steps: int, lr: float, shape: dict[str, Any]
) -> None:
    hparams = {
        "num_train_steps": steps,
        "num_warmup_steps": shape["warmup"],
        "learning_rate": lr,
        "train_batch_size": shape["batch"],
        "max_seq_length": shape["seq_len"],
        "iterations_per_loop": 50,
        "save_checkpoints_steps": steps,
        "electra_objective": False,
        "vocab_file": vocab,
        "vocab_size": len(SPECIALS) + 2 * N_WORDS,
        "pretrain_tfrecords": records,
        "do_eval": False,
        **shape["hparams"],
    }

    cmd = [sys.executable, "-m", "electra_tf.pretrain", "--data-dir", out, "--model-name"]
    cmd += ["ours", "--preset", "tiny", "--hparams", json.dumps(hparams)]
    subprocess.run(cmd, check=True, cwd=REPO)


def run_model_garden(
    records: str, steps: int, lr: float, shape: dict[str, Any], seed: int = 0
) -> None:
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras
    from official.nlp.modeling import layers, networks

    vocab_size, mask_id = len(SPECIALS) + 2 * N_WORDS, SPECIALS.index("[MASK]")
    seq_len, batch_size, warmup = shape["seq_len"], shape["batch"], shape["warmup"]
    # The original's count of masked slots: int((0.15 + 0.005) * length), 9 at 64.
    masked = int(0.155 * seq_len)
    spec = {k: tf.io.FixedLenFeature([seq_len], tf.int64) for k in ("input_ids", "input_mask")}
    dataset = (
        tf.data.TFRecordDataset(tf.io.gfile.glob(records))
        .map(lambda r: tf.io.parse_single_example(r, spec))
        .repeat()
        .shuffle(1000, seed=seed)
        .batch(batch_size)
    )
    keras.utils.set_random_seed(seed)
    encoder = networks.BertEncoder(
        vocab_size=vocab_size,
        hidden_size=144,
        num_layers=3,
        num_attention_heads=4,
        inner_dim=576,
        max_sequence_length=512,
        type_vocab_size=2,
        embedding_width=128,
        dict_outputs=True,
    )
    mlm = layers.MaskedLM(embedding_table=encoder.get_embedding_table())
    decay = keras.optimizers.schedules.PolynomialDecay(lr, steps, 0.0)

    class Schedule(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            return tf.where(step < warmup, lr * step / warmup, decay(step))

    optimizer = keras.optimizers.Adam(Schedule(), epsilon=1e-6)

    @tf.function
    def train_step(ids, mask, positions, labels):
        with tf.GradientTape() as tape:
            features = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": 0 * ids}
            hidden = encoder(features, training=True)["sequence_output"]
            logits = mlm(hidden, masked_positions=positions)
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            )
        variables = encoder.trainable_variables + mlm.trainable_variables
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), 1.0)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        hits = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels)
        return tf.reduce_mean(tf.cast(hits, tf.float32))

    rng = np.random.default_rng(seed)
    accuracies = []
    for step, batch in enumerate(dataset.take(steps), start=1):
        ids = batch["input_ids"].numpy().astype(np.int32)
        mask = batch["input_mask"].numpy().astype(np.int32)
        positions = np.stack(
            [
                rng.choice(np.flatnonzero((m == 1) & (row >= len(SPECIALS))), masked, False)
                for row, m in zip(ids, mask, strict=True)
            ]
        ).astype(np.int32)
        labels = np.take_along_axis(ids, positions, 1)
        inputs = ids.copy()
        np.put_along_axis(
            inputs, positions, np.where(rng.random(labels.shape) < 0.85, mask_id, labels), 1
        )
        accuracies.append(float(train_step(inputs, mask, positions, labels)))
        if step % 50 == 0:
            print(
                f"model garden step {step}/{steps} | masked_lm_accuracy "
                f"{np.mean(accuracies[-50:]):.4f} (mean of the last 50 steps)",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="a new or empty scratch directory")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--impl", choices=("both", "ours", "mg"), default="both")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument(
        "--hparams",
        default="{}",
        help="JSON merged into ours' pre-training hparams, e.g. "
        "'{\"model_hparam_overrides\": {...}}' (that key replaces the preset's whole shape)",
    )
    args = parser.parse_args(argv)
    if os.path.isdir(args.out) and os.listdir(args.out):
        parser.error(f"--out {args.out} is not empty; give a new directory")
    shape = {"seq_len": args.seq_len, "batch": args.batch, "warmup": args.warmup}
    shape["hparams"] = json.loads(args.hparams)
    vocab, corpus = write_language(args.out)
    tfrecords = os.path.join(args.out, "tfrecords")
    build = [sys.executable, "data_prep/build_tfrecords.py", "--corpus-dir", corpus]
    build += [
        "--vocab-file",
        vocab,
        "--output-dir",
        tfrecords,
        "--max-seq-length",
        str(args.seq_len),
    ]
    build += ["--num-processes", "1", "--num-out-files", "1"]
    subprocess.run(build, check=True, cwd=REPO)
    records = os.path.join(tfrecords, "pretrain_data.tfrecord-*")
    if args.impl in ("both", "ours"):
        run_ours(args.out, vocab, records, args.steps, args.lr, shape)
    if args.impl in ("both", "mg"):
        run_model_garden(records, args.steps, args.lr, shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
