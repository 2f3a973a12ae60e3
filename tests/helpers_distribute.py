"""Shared set-up of the tf.distribute tests: a tiny config, tiny data and subprocess plumbing.

Every scenario runs in a subprocess with a timeout: logical-device splits and
MultiWorkerMirroredStrategy must be set up before TensorFlow's runtime starts, which in the
pytest process it already has.
"""

from __future__ import annotations

import json
import os
import socket

import numpy as np
from helpers_pretrainer import TINY_RUN_HPARAMS, write_bert_layout_vocab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORD_IDS = np.array([i for i in range(1, 128) if not 100 <= i <= 103])
SEQ_LEN = TINY_RUN_HPARAMS["max_seq_length"]
RESULT_TAG = "DISTRIBUTE_RESULT "
TINY_HPARAMS = dict(TINY_RUN_HPARAMS, train_batch_size=8, precision="float32")


ID_BASE = 10  # example i holds words ID_BASE + i // 10 and ID_BASE + i % 10 after [CLS]


def write_id_data(data_dir: str, num_files: int = 2, per_file: int = 48) -> list[str]:
    """A vocab and `num_files` TFRecord files of packed examples whose first two words encode
    the example's id (`example_ids` reads it back); returns the file paths."""
    import tensorflow as tf

    os.makedirs(os.path.join(data_dir, "pretrain_tfrecords"), exist_ok=True)
    write_bert_layout_vocab(data_dir)
    rng = np.random.default_rng(1)
    paths = []

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    for shard in range(num_files):
        path = os.path.join(data_dir, "pretrain_tfrecords", f"pretrain_data.tfrecord-{shard}")
        paths.append(path)
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(shard * per_file, (shard + 1) * per_file):
                length = int(rng.integers(SEQ_LEN // 2, SEQ_LEN + 1))
                split = length // 2
                ids = rng.choice(WORD_IDS, size=SEQ_LEN)
                ids[1], ids[2] = ID_BASE + i // 10, ID_BASE + i % 10
                ids[0], ids[split - 1], ids[length - 1] = 101, 102, 102  # [CLS] a [SEP] b [SEP]
                mask = (np.arange(SEQ_LEN) < length).astype(np.int64)
                segments = ((np.arange(SEQ_LEN) >= split) & (mask == 1)).astype(np.int64)
                features = {
                    "input_ids": ints(ids * mask),
                    "input_mask": ints(mask),
                    "segment_ids": ints(segments),
                }
                example = tf.train.Example(features=tf.train.Features(feature=features))
                writer.write(example.SerializeToString())
    return paths


# `python -c WORKER_WRAPPER IDS_FILE CPUS DIE_AT_STEP <pretrain CLI args...>`: the pretrain
# command line, with test-only hooks: the CPU split into CPUS logical devices (MirroredStrategy
# uses them), every train step writing "step id id ..." (the optimizer step before the update,
# the ids of the examples it consumed) to IDS_FILE, and, when DIE_AT_STEP > 0, the process
# sending itself SIGKILL inside that step (a worker dying abruptly mid-run).
WORKER_WRAPPER = f"""
import os, signal, sys
import tensorflow as tf
ids_file, cpus, die_at, argv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
if cpus > 1:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * cpus)
from electra_tf.pretraining import pretrainer
real_update = pretrainer.ElectraPretrainer.train_update

def die():
    os.kill(os.getpid(), signal.SIGKILL)
    return 0

def recording_update(self, data):
    inputs = data[0] if isinstance(data, tuple) else data
    ids = inputs["input_ids"]
    example_ids = (ids[:, 1] - {ID_BASE}) * 10 + ids[:, 2] - {ID_BASE}
    step = self.optimizer.iterations + 1
    tf.print(step, example_ids, summarize=-1, output_stream="file://" + ids_file)
    if die_at > 0:
        tf.cond(step == die_at, lambda: tf.py_function(die, [], tf.int32), lambda: 0)
    return real_update(self, data)

pretrainer.ElectraPretrainer.train_update = recording_update
from electra_tf.cli.pretrain import main
sys.exit(main(argv))
"""


def read_consumed(runs: list[list[str]]) -> dict[int, list[list[int]]]:
    """{step: [ids of one replica's batch, ...]} from WORKER_WRAPPER's files, given per run
    (one command on every worker) in the order they ran: a step run again after a restart
    keeps only the later run's records."""
    import re

    steps: dict[int, list[list[int]]] = {}
    for paths in runs:
        found: dict[int, list[list[int]]] = {}
        for path in paths:
            if not os.path.exists(path):
                continue
            with open(path, encoding="utf-8") as f:
                for line in f:
                    match = re.match(r"^(\d+) \[([\d ]*)\]$", line.strip())
                    assert match, line
                    ids = [int(v) for v in match.group(2).split()]
                    found.setdefault(int(match.group(1)), []).append(ids)
        steps.update(found)
    return steps


def tensorboard_scalars(model_dir: str, tag: str) -> dict[int, float]:
    """{step: value} of a TensorBoard scalar the chief wrote (every events file; a step
    written again by a resumed run keeps the later value)."""
    import glob

    import tensorflow as tf

    values: dict[int, float] = {}
    pattern = os.path.join(model_dir, "tensorboard", "train", "events.out.tfevents.*")
    for path in sorted(glob.glob(pattern), key=os.path.getmtime):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


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
    # The repository (electra_tf) and tests/ (helpers_pretrainer) are importable.
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
