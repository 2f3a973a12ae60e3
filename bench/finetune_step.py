"""This project's fine-tuning train step, built as `electra_tf.finetune` builds it for one trial.

A GLUE classification task (SST-2's: 2 labels, the [CLS] head with dropout 0.1) on the small
preset's discriminator, randomly initialised: `runs.finetuning.ModelRunner` builds the model
(`FinetuningModel`: the loss summed over the batch, as the original's, under the config's
`precision`), the optimizer is the run's own (`ModelRunner.build_optimizer`: the config's
learning rate, weight decay, warm-up and layer-wise decay, loss scaling under float16), and
the step is the one `model.fit` runs: Keras' `make_train_function` around `FinetuningModel.train_step`. The batches are
synthetic full-length sequences, so the step is timed without the input pipeline's reading.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from bench.project_step import CLS_ID, SEP_ID, write_bench_vocab
from electra_tf.finetuning.config import finetuning_config
from electra_tf.finetuning.registry import get_tasks, make_tokenizer
from electra_tf.runs.finetuning import ModelRunner

TASK = "sst"
TRAIN_STEPS = 10_000  # the schedule's length; the timed steps stay in its warm-up


def synthetic_classification_batches(
    batch: int, seq: int, vocab: int, task: str = TASK, count: int = 4
) -> tf.data.Dataset:
    """`count` distinct batches of full-length single sentences with random labels, repeated."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, vocab, size=(count * batch, seq)).astype(np.int32)
    ids[:, 0], ids[:, -1] = CLS_ID, SEP_ID
    features = {
        "input_ids": ids,  # [count * batch, seq]
        "input_mask": np.ones_like(ids),
        "segment_ids": np.zeros_like(ids),
        "task_id": np.zeros(count * batch, np.int32),
        f"{task}_eid": np.arange(count * batch, dtype=np.int32),
        f"{task}_label_ids": rng.integers(0, 2, size=count * batch).astype(np.int32),
    }
    dataset = tf.data.Dataset.from_tensor_slices(features).batch(batch, drop_remainder=True)
    return dataset.cache().repeat().prefetch(tf.data.AUTOTUNE)


def build_finetune_step(
    batch: int, seq: int, hparams: dict[str, Any] | None = None, precision: str = "float32"
) -> tuple[Callable[[], None], int, dict[str, Any]]:
    """(run one step, number of trainable parameters, the resolved settings); `precision`: the
    fine-tuning config's (float32, mixed_bfloat16, mixed_float16)."""
    data_dir = tempfile.mkdtemp(prefix="electra-bench-finetune-")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    values = {
        "model_size": "small",
        "train_batch_size": batch,
        "max_seq_length": seq,
        "init_checkpoint": "",  # random initialisation: the speed does not depend on the values
        "precision": precision,
        **(hparams or {}),
    }
    config = finetuning_config("bench", data_dir, values, tasks=TASK)
    vocab_size = config.model_config().vocab_size
    write_bench_vocab(data_dir, vocab_size)
    tasks = get_tasks(config, make_tokenizer(config))
    runner = ModelRunner(config, tasks, data_dir)
    model = runner.model
    # The run's own optimizer: AdamW with the config's rates and layer-wise decay, wrapped for
    # loss scaling under mixed_float16.
    optimizer = runner.build_optimizer(TRAIN_STEPS)
    model.compile(optimizer=optimizer)
    train_function = model.make_train_function()
    iterator = iter(synthetic_classification_batches(batch, seq, vocab_size))

    def run_step() -> None:
        float(train_function(iterator)["loss"])

    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    resolved = {"precision": config.precision, "jit_compile": False}
    return run_step, params, resolved
