"""The train steps that `bench_train`'s workers time, on synthetic batches, each built as its
command builds it:

- `build_project_step`: this project's full ELECTRA-Small pre-training step, built exactly as
  `electra_tf.pretrain` builds it. The small preset (D 12 x 256, G 12 x 64 with 1 head, E 128,
  vocab 30522), the project's own AdamWeightDecay and schedule, dynamic in-graph masking and
  Gumbel sampling, through the training loop's own `make_train_function` (one step per call
  here, so each step can be timed).
- `build_finetune_step`: this project's fine-tuning train step, as `electra_tf.finetune` builds
  it for one trial (below).
- `build_peer_step`: Model Garden's `ElectraPretrainer` of the same shapes, a benchmark peer
  only (below).

The whole commands set beside these steps (the `*-run` rows) are in bench/whole_run.py.
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
from electra_tf.runs import pretraining_model
from electra_tf.runtime.device_defaults import probe_machine

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


def resolved_layout(config, jit_compile: bool) -> dict[str, Any]:
    """What a row prints of a step's resolved settings: precision, XLA, the micro-batches side
    by side and the thread pools in force (0 = TensorFlow's default)."""
    threading = tf.config.threading
    return {
        "precision": config.precision,
        "jit_compile": jit_compile,
        "parallel_micro_batches": config.parallel_micro_batches,
        "threads": [
            threading.get_intra_op_parallelism_threads(),
            threading.get_inter_op_parallelism_threads(),
        ],
    }


def project_train_steps(config) -> tuple[keras.Model, Callable, Any]:
    """(model, `train_steps(iterator, n)`, iterator) for `config`: its precision policy set, the
    pretrainer built and compiled with the run's optimizer, the training loop's own train
    function, and synthetic batches of the config's shapes (its vocabulary written already)."""
    keras.mixed_precision.set_global_policy(config.precision)
    model = pretraining_model.build_model(config)
    model.compile(optimizer=pretraining_model.build_optimizer(config, model))
    strategy = tf.distribute.get_strategy()
    train_steps = pretraining_model.make_train_function(model, strategy, bool(config.jit_compile))
    batches = synthetic_batches(config.train_batch_size, config.max_seq_length, config.vocab_size)
    return model, train_steps, iter(batches)


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
    write_bench_vocab(data_dir, config.vocab_size)
    model, train_steps, iterator = project_train_steps(config)
    one = tf.constant(1)

    def run_step() -> None:
        train_steps(iterator, one).numpy()

    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return run_step, params, resolved_layout(config, bool(config.jit_compile))


# ---------------------------------------------------------------------------------- fine-tuning
# This project's fine-tuning train step, built as `electra_tf.finetune` builds it for one trial.
#
# A GLUE classification task (SST-2's: 2 labels, the [CLS] head with dropout 0.1) on the small
# preset's discriminator, randomly initialised: `runs.finetuning.ModelRunner` builds the model
# (`FinetuningModel`: the loss summed over the batch, as the original's, under the config's
# `precision`), the optimizer is the run's own (`ModelRunner.build_optimizer`: the config's
# learning rate, weight decay, warm-up and layer-wise decay, loss scaling under float16), and
# the step is the one `model.fit` runs: Keras' `make_train_function` around
# `FinetuningModel.train_step`. The batches are synthetic full-length sequences, so the step is
# timed without the input pipeline's reading.
TASK = "sst"
TRAIN_STEPS = 10_000  # the schedule's length; the timed steps stay in its warm-up


def synthetic_task_batches(
    batch: int, seq: int, vocab: int, task: str = TASK, count: int = 4
) -> tf.data.Dataset:
    """`count` distinct batches of full-length single sentences with random labels (`task`
    "squad": random answer spans of SQuAD features), repeated forever."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, vocab, size=(count * batch, seq)).astype(np.int32)
    ids[:, 0], ids[:, -1] = CLS_ID, SEP_ID
    features = {
        "input_ids": ids,  # [count * batch, seq]
        "input_mask": np.ones_like(ids),
        "segment_ids": np.zeros_like(ids),
        "task_id": np.zeros(count * batch, np.int32),
        f"{task}_eid": np.arange(count * batch, dtype=np.int32),
    }
    if task == "squad":
        starts = rng.integers(1, seq - 1, size=count * batch).astype(np.int32)
        features["squad_start_positions"] = starts
        features["squad_end_positions"] = np.minimum(starts + 3, seq - 2).astype(np.int32)
        features["squad_is_impossible"] = np.zeros(count * batch, np.int32)
    else:
        labels = rng.integers(0, 2, size=count * batch).astype(np.int32)
        features[f"{task}_label_ids"] = labels
    dataset = tf.data.Dataset.from_tensor_slices(features).batch(batch, drop_remainder=True)
    return dataset.cache().repeat().prefetch(tf.data.AUTOTUNE)


def build_finetune_step(
    batch: int,
    seq: int,
    hparams: dict[str, Any] | None = None,
    precision: str = "float32",
    task: str = TASK,
) -> tuple[Callable[[], None], int, dict[str, Any]]:
    """(run one step, number of trainable parameters, the resolved settings); `precision`: the
    fine-tuning config's (float32, mixed_bfloat16, mixed_float16); `task`: "sst" (a GLUE
    classifier) or "squad" (SQuAD 1.1's span head)."""
    # Imported here: the pre-training rows (and a --baseline's package) need none of it.
    from electra_tf.finetuning.config import finetuning_config
    from electra_tf.finetuning.registry import get_tasks, make_tokenizer
    from electra_tf.runs.finetuning import ModelRunner

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
    # Resolved as `python -m electra_tf.finetune` resolves it on this machine (precision, the
    # micro-batches side by side and the thread pools that "auto" picks), the pools set first.
    config = finetuning_config("bench", data_dir, values, tasks=task).resolve(probe_machine())
    apply_config_threads(config)
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
    iterator = iter(synthetic_task_batches(batch, seq, vocab_size, task))

    def run_step() -> None:
        float(train_function(iterator)["loss"])

    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return run_step, params, resolved_layout(config, False)


def build_peer_step(
    batch: int, seq: int, jit: bool = False, vocab: int = 30522
) -> tuple[Callable[[dict[str, tf.Tensor]], tf.Tensor], dict[str, tf.Tensor], int]:
    """Model Garden's ElectraPretrainer step at ELECTRA-Small shape.

    Returns the compiled step, its (fixed) inputs and the number of trainable parameters.
    """
    # Imported here so that project-only bench workers never pay for Model Garden's imports.
    from official.modeling.optimization import legacy_adamw

    num_predictions = int((0.15 + 0.005) * seq)
    model = peer_model(vocab, num_predictions)
    optimizer = legacy_adamw.AdamWeightDecay(
        learning_rate=5e-4,
        weight_decay_rate=0.01,
        exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"],
    )

    inputs = peer_inputs(batch, seq, vocab, num_predictions)

    @tf.function(jit_compile=jit)
    def step(x: dict[str, tf.Tensor]) -> tf.Tensor:
        with tf.GradientTape() as tape:
            outputs = model(x, training=True)
            lm_logits = tf.cast(outputs["lm_outputs"], tf.float32)
            mlm = keras.losses.sparse_categorical_crossentropy(
                x["masked_lm_ids"], lm_logits, from_logits=True
            )
            weights = x["masked_lm_weights"]
            mlm_loss = tf.reduce_sum(mlm * weights) / tf.reduce_sum(weights)
            rtd = tf.nn.sigmoid_cross_entropy_with_logits(
                logits=tf.cast(outputs["disc_logits"], tf.float32),
                labels=tf.cast(outputs["disc_label"], tf.float32),
            )
            loss = mlm_loss + 50.0 * tf.reduce_mean(rtd)
        grads = tape.gradient(loss, model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    step(inputs)  # builds the variables
    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return step, inputs, params


def peer_model(vocab: int, num_predictions: int) -> keras.Model:
    """Model Garden's `ElectraPretrainer` at ELECTRA-Small shape (built on its first call)."""
    from official.nlp.modeling import models, networks

    def initializer() -> keras.initializers.Initializer:
        return keras.initializers.TruncatedNormal(stddev=0.02)

    common: dict[str, Any] = dict(
        vocab_size=vocab,
        max_sequence_length=512,
        type_vocab_size=2,
        embedding_width=128,
        dict_outputs=True,
    )
    discriminator = networks.BertEncoder(
        hidden_size=256,
        num_layers=12,
        num_attention_heads=4,
        inner_dim=1024,
        initializer=initializer(),
        **common,
    )
    # Model Garden ties only the word-embedding layer (see PEERS.md section 2).
    generator = networks.BertEncoder(
        hidden_size=64,
        num_layers=12,
        num_attention_heads=1,
        inner_dim=256,
        initializer=initializer(),
        embedding_layer=discriminator.get_embedding_layer(),
        **common,
    )
    model = models.ElectraPretrainer(
        generator_network=generator,
        discriminator_network=discriminator,
        vocab_size=vocab,
        num_classes=2,
        num_token_predictions=num_predictions,
        mlm_activation=keras.activations.gelu,
        mlm_initializer=initializer(),
        disallow_correct=False,
    )
    return model


def peer_inputs(batch: int, seq: int, vocab: int, num_predictions: int) -> dict[str, tf.Tensor]:
    """One fixed batch of random ids, with statically masked positions."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, vocab, size=(batch, seq)).astype(np.int32)
    # Static masking (Model Garden reads positions from the TFRecords): sorted, no duplicates.
    positions = np.stack(
        [np.sort(rng.choice(seq, num_predictions, replace=False)) for _ in range(batch)]
    ).astype(np.int32)  # [batch, num_predictions]
    inputs = {
        "input_word_ids": tf.constant(ids),
        "input_mask": tf.ones((batch, seq), tf.int32),
        "input_type_ids": tf.zeros((batch, seq), tf.int32),
        "masked_lm_positions": tf.constant(positions),
        # [batch, num_predictions]
        "masked_lm_ids": tf.constant(np.take_along_axis(ids, positions, axis=1)),
        "masked_lm_weights": tf.ones((batch, num_predictions), tf.float32),
    }
    return inputs
