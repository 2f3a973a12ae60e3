"""This project's full ELECTRA-Small train step, built exactly as `electra_tf.pretrain` builds it.

The small preset (D 12 x 256, G 12 x 64 with 1 head, E 128, vocab 30522), the project's own
AdamWeightDecay and schedule, dynamic in-graph masking and Gumbel sampling, through the training
loop's own `make_train_function` (one step per call here, so each step can be timed).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras as keras

from electra_tf.config import pretraining_config
from electra_tf.device_defaults import probe_machine
from electra_tf.runs import pretraining_model

CLS_ID, SEP_ID = 101, 102  # BERT uncased ids; the masking excludes them from the positions


def write_bench_vocab(directory: str, size: int) -> str:
    """A vocab.txt with BERT uncased's special ids (the loop reads them from the run's vocab)."""
    tokens = [f"w{i}" for i in range(size)]
    for index, token in ((0, "[PAD]"), (100, "[UNK]"), (101, "[CLS]"), (102, "[SEP]")):
        tokens[index] = token
    tokens[103] = "[MASK]"
    path = os.path.join(directory, "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return path


def synthetic_batches(batch: int, seq: int, vocab: int, count: int = 4) -> tf.data.Dataset:
    """`count` distinct batches of packed two-segment sequences, repeated forever.

    Full-length sequences (no padding), as the packed TFRecords nearly always are.
    """
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, vocab, size=(count * batch, seq)).astype(np.int32)
    split = seq // 2
    ids[:, 0], ids[:, split - 1], ids[:, -1] = CLS_ID, SEP_ID, SEP_ID
    segments = np.zeros_like(ids)
    segments[:, split:] = 1
    features = {
        "input_ids": ids,  # [count * batch, seq]
        "input_mask": np.ones_like(ids),
        "segment_ids": segments,
    }
    dataset = tf.data.Dataset.from_tensor_slices(features).batch(batch, drop_remainder=True)
    return dataset.cache().repeat().prefetch(tf.data.AUTOTUNE)


def apply_config_threads(config) -> None:
    """The thread pools `python -m electra_tf.pretrain` sets for `config` (its "auto"
    resolution), where the caller has set none of its own; before TensorFlow starts."""
    threading = tf.config.threading
    if config.intra_op_threads and not threading.get_intra_op_parallelism_threads():
        threading.set_intra_op_parallelism_threads(config.intra_op_threads)
    if config.inter_op_threads and not threading.get_inter_op_parallelism_threads():
        threading.set_inter_op_parallelism_threads(config.inter_op_threads)


def build_project_step(
    batch: int, seq: int, precision: str, jit: str, extra: dict[str, Any] | None = None
) -> tuple[Callable[[], None], int, dict[str, Any]]:
    """(run one step, number of trainable parameters, the resolved precision/XLA settings);
    `extra`: more config fields (hparams)."""
    hparams: dict[str, Any] = {"train_batch_size": batch, "max_seq_length": seq, **(extra or {})}
    if precision != "auto":
        hparams["precision"] = precision
    if jit != "auto":
        hparams["jit_compile"] = jit == "on"
    data_dir = tempfile.mkdtemp(prefix="electra-bench-")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    config = pretraining_config(
        "bench", data_dir, preset="small", hparams=hparams, machine=probe_machine()
    )
    apply_config_threads(config)
    threading = tf.config.threading
    write_bench_vocab(data_dir, config.vocab_size)
    keras.mixed_precision.set_global_policy(config.precision)
    strategy = tf.distribute.get_strategy()
    model = pretraining_model.build_model(config)
    optimizer = pretraining_model.build_optimizer(config, model)
    model.compile(optimizer=optimizer)
    train_steps = pretraining_model.make_train_function(model, strategy, bool(config.jit_compile))
    iterator = iter(synthetic_batches(batch, seq, config.vocab_size))
    one = tf.constant(1)

    def run_step() -> None:
        train_steps(iterator, one).numpy()

    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    resolved = {
        "precision": config.precision,
        "jit_compile": bool(config.jit_compile),
        "parallel_micro_batches": config.parallel_micro_batches,
        "threads": [
            threading.get_intra_op_parallelism_threads(),
            threading.get_inter_op_parallelism_threads(),
        ],
    }
    return run_step, params, resolved
