"""Shared set-up of the tf.distribute tests: a tiny config, tiny data and subprocess plumbing.

Every scenario runs in a subprocess with a timeout: logical-device splits and
MultiWorkerMirroredStrategy must be set up before TensorFlow's runtime starts, which in the
pytest process it already has. The two scenarios live in two test files so that `pytest -n 2`
runs them side by side.
"""

from __future__ import annotations

import json
import os
import socket

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# BERT's special ids (the pretrainer's defaults): [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102,
# [MASK] 103.
VOCAB = [f"w{i}" for i in range(128)]
VOCAB[0], VOCAB[100], VOCAB[101], VOCAB[102], VOCAB[103] = (
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
)
WORD_IDS = np.array([i for i in range(1, 128) if not 100 <= i <= 103])
SEQ_LEN = 32
RESULT_TAG = "DISTRIBUTE_RESULT "

# A tiny model (D 2 x 32, G 2 x 8, E 16), dropout off so replicas and one device must agree.
TINY_HPARAMS = {
    "model_size": "small",
    "model_hparam_overrides": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
    "embedding_size": 16,
    "vocab_size": len(VOCAB),
    "max_seq_length": SEQ_LEN,
    "train_batch_size": 8,
    "learning_rate": 1e-3,
    "num_warmup_steps": 0,
    "precision": "float32",
    "jit_compile": False,
}


def write_vocab(data_dir: str) -> None:
    with open(os.path.join(data_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")


def write_tiny_data(data_dir: str, num_examples: int = 64) -> str:
    """A vocab and one TFRecord file of packed [CLS] a [SEP] b [SEP] examples (some padded)."""
    import tensorflow as tf

    os.makedirs(os.path.join(data_dir, "pretrain_tfrecords"), exist_ok=True)
    write_vocab(data_dir)
    rng = np.random.default_rng(1)
    path = os.path.join(data_dir, "pretrain_tfrecords", "pretrain_data.tfrecord-0")
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(num_examples):
            length = int(rng.integers(SEQ_LEN // 2, SEQ_LEN + 1))
            split = length // 2
            ids = rng.choice(WORD_IDS, size=SEQ_LEN)
            ids[0], ids[split - 1], ids[length - 1] = 101, 102, 102  # [CLS] a [SEP] b [SEP]
            ids[length:] = 0
            mask = (np.arange(SEQ_LEN) < length).astype(np.int64)
            segments = ((np.arange(SEQ_LEN) >= split) & (mask == 1)).astype(np.int64)

            def ints(values):
                return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

            features = {
                "input_ids": ints(ids * mask),
                "input_mask": ints(mask),
                "segment_ids": ints(segments),
            }
            example = tf.train.Example(features=tf.train.Features(feature=features))
            writer.write(example.SerializeToString())
    return path


def free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def child_env(**extra: str) -> dict[str, str]:
    # The repository (electra_tf) and tests/ (pretrainer_fixtures) are importable.
    pythonpath = os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])
    env = dict(os.environ, PYTHONPATH=pythonpath, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def parse_result(stdout: str, stderr: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    raise AssertionError(f"no result from the subprocess:\n{stdout[-2000:]}\n{stderr[-4000:]}")
