"""Shared fixtures for the pre-training CLI / resume tests: a tiny corpus and a tiny model.

The TFRecords are written here with plain tf.train.Example code (the original's format), so the
tests depend only on the reader; the model is the tiny preset shrunk to one 32-wide layer.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ_LEN = 16
WORDS = [f"w{i}" for i in range(59)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]  # 64 entries

# Shrinks the tiny preset: one 32-wide layer, batch 4, sequences of 16, no dropout (a resumed
# run equals the uninterrupted one with dropout too: tests/test_resume.py).
TINY = {
    "model_hparam_overrides": {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
    "embedding_size": 16,
    "max_seq_length": SEQ_LEN,
    "train_batch_size": 4,
    "eval_batch_size": 4,
    "num_warmup_steps": 2,
    "learning_rate": 1e-3,
    "iterations_per_loop": 2,
    "save_checkpoints_steps": 2,
    "keep_checkpoint_max": 10,
    "num_eval_steps": 3,
    "precision": "float32",
    "jit_compile": False,
}


def export_config(vocab_size, **hparams):
    """The export tests' pre-training config: 2 layers of 32 with two heads of 16 (not the
    H // 64 rule, so an export must read the saved config) and E 16 != H (embeddings_project)."""
    from electra_tf.config import pretraining_config

    overrides = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    }
    values = {"vocab_size": vocab_size, "embedding_size": 16, "model_hparam_overrides": overrides}
    return pretraining_config("tiny", hparams={**values, **hparams})


def write_corpus(data_dir, num_records=48, seed=0):
    """vocab.txt + pretrain_tfrecords/pretrain_data.tfrecord-{0,1} with random sentences."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(data_dir, "pretrain_tfrecords"), exist_ok=True)
    with open(os.path.join(data_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")

    def feature(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    for shard in range(2):
        path = os.path.join(data_dir, "pretrain_tfrecords", f"pretrain_data.tfrecord-{shard}")
        with tf.io.TFRecordWriter(path) as writer:
            for _ in range(num_records // 2):
                n = int(rng.integers(6, SEQ_LEN + 1))
                ids = [2, *rng.integers(5, len(VOCAB), n - 2).tolist(), 3] + [0] * (SEQ_LEN - n)
                mask = [1] * n + [0] * (SEQ_LEN - n)
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "input_ids": feature(ids),
                            "input_mask": feature(mask),
                            "segment_ids": feature([0] * SEQ_LEN),
                        }
                    )
                )
                writer.write(example.SerializeToString())
    return data_dir


def hparams(**overrides):
    return json.dumps({**TINY, **overrides})


def run_pretrain(data_dir, model_name="m", **overrides):
    """`python -m electra_tf.pretrain` in this process: the tiny preset shrunk by TINY, plus
    `overrides`; returns its exit code."""
    from electra_tf.cli import pretrain

    argv = ["--data-dir", str(data_dir), "--model-name", model_name, "--preset", "tiny"]
    return pretrain.main([*argv, "--hparams", hparams(**overrides)])


def cli_command(data_dir, model_name, **overrides):
    return [
        sys.executable,
        "-m",
        "electra_tf.pretrain",
        "--data-dir",
        str(data_dir),
        "--model-name",
        model_name,
        "--preset",
        "tiny",
        "--hparams",
        hparams(**overrides),
    ]


def cli_env():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def checkpoint_values(prefix):
    """Every numeric tensor of a checkpoint (the data iterator's state is a variant: skipped)."""
    reader = tf.train.load_checkpoint(prefix)
    values = {}
    for name, dtype in reader.get_variable_to_dtype_map().items():
        if name == "_CHECKPOINTABLE_OBJECT_GRAPH" or dtype in (tf.variant, tf.string):
            continue
        values[name] = reader.get_tensor(name)
    return values


def assert_same_weights(a, b):
    """Two `checkpoints.read_weights` results hold the same variables, bit for bit, and the
    same discriminator and generator configs."""
    assert sorted(a.weights) == sorted(b.weights)
    for name, value in a.weights.items():
        np.testing.assert_array_equal(b.weights[name], value, err_msg=name)
    assert b.config.discriminator_config() == a.config.discriminator_config()
    assert b.config.generator_config() == a.config.generator_config()


def pretrained_and_converted(tmp_path_factory, fmt):
    """A tiny pretrainer after 4 steps (`TINY`, in a fresh data dir) and its `convert --to fmt`
    output: (data dir, model dir, converted dir)."""
    from electra_tf.cli import convert

    data = tmp_path_factory.mktemp(f"{fmt}_data")
    write_corpus(str(data))
    assert run_pretrain(str(data), num_train_steps=4) == 0
    model_dir = str(data / "models" / "m")
    converted = str(data / fmt)
    assert convert.main(["--to", fmt, "--input", model_dir, "--output", converted]) == 0
    return str(data), model_dir, converted


def count_format_reads(monkeypatch, counts):
    """Counts under "config" and "tensors" every format's config and tensor reads, where the
    checkpoints package asks for them: through the format registry (`format_registry.get`),
    which every reader goes through. A format's reader calling its own helpers counts once."""
    import dataclasses

    from electra_tf.checkpoints import format_registry

    get = format_registry.get

    def counted(key, function):
        def call(*args, **kwargs):
            counts[key] += 1
            return function(*args, **kwargs)

        return call

    def counted_get(name):
        found = get(name)
        return dataclasses.replace(
            found,
            read_config=counted("config", found.read_config),
            read=counted("tensors", found.read),
        )

    monkeypatch.setattr(format_registry, "get", counted_get)
