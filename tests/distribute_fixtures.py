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
from pretrainer_fixtures import TINY_RUN_HPARAMS, write_bert_layout_vocab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORD_IDS = np.array([i for i in range(1, 128) if not 100 <= i <= 103])
SEQ_LEN = TINY_RUN_HPARAMS["max_seq_length"]
RESULT_TAG = "DISTRIBUTE_RESULT "
TINY_HPARAMS = dict(TINY_RUN_HPARAMS, train_batch_size=8, precision="float32")


def write_tiny_data(data_dir: str, num_examples: int = 64) -> str:
    """A vocab and one TFRecord file of packed [CLS] a [SEP] b [SEP] examples (some padded)."""
    import tensorflow as tf

    os.makedirs(os.path.join(data_dir, "pretrain_tfrecords"), exist_ok=True)
    write_bert_layout_vocab(data_dir)
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
