"""A user's own `model.fit` on the project's fine-tuning models, interrupted mid-epoch and
resumed by Keras's `BackupAndRestore` (backups at each epoch's end), ends with the uninterrupted fit's weights (bit for bit:
dropout draws from the checkpointed `model.rng`); `ModelCheckpoint` saves those weights."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from electra_tf.config.model import ModelConfig
from electra_tf.finetuning.keras_models import ElectraClassifier
from electra_tf.modeling import TransformerEncoder

CONFIG = ModelConfig(
    vocab_size=30,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=1,
    intermediate_size=32,
    max_position_embeddings=16,
    embedding_size=8,
)


def dataset():
    """48 examples of 8 tokens, batches of 8: 6 steps an epoch; the same order every time."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 30, size=(48, 8)).astype(np.int32)
    features = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": 0 * ids}
    labels = (ids[:, 0] > 17).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(8)


def build():
    keras.utils.set_random_seed(0)
    model = ElectraClassifier(TransformerEncoder(CONFIG, name="electra"), 2, seed=0)
    model.compile(
        keras.optimizers.Adam(1e-2),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model(next(iter(dataset()))[0])  # built, as BackupAndRestore needs
    return model


class Interrupt(keras.callbacks.Callback):
    """Stands in for a kill: the fit dies after `at` steps (Keras's own test of the callback
    interrupts it so)."""

    def __init__(self, at):
        super().__init__()
        self.at, self.steps = at, 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.steps == self.at:
            raise RuntimeError("interrupted")


def callbacks(tmp_path):
    # Backups at epochs' ends: a fit resumed from a backup made mid-epoch (save_freq=N) starts
    # the epoch's data again while counting on from the batch (tf_keras's DataHandler), so it
    # trains on the epoch's first batches twice and never on its last.
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq="epoch")
    saved = keras.callbacks.ModelCheckpoint(str(tmp_path / "weights"), save_weights_only=True)
    return [backup, saved]


def test_a_fit_killed_mid_epoch_resumes_to_the_uninterrupted_weights(tmp_path):
    straight = build()
    straight.fit(dataset(), epochs=3, verbose=0)

    first = build()
    with pytest.raises(RuntimeError, match="interrupted"):
        # Step 9 of 18: mid-epoch (the second), the last backup at step 6.
        first.fit(dataset(), epochs=3, verbose=0, callbacks=[*callbacks(tmp_path), Interrupt(9)])
    resumed = build()  # a fresh process's model: its own initial weights, then the backup
    resumed.fit(dataset(), epochs=3, verbose=0, callbacks=callbacks(tmp_path))
    assert resumed.optimizer.iterations.numpy() == straight.optimizer.iterations.numpy() == 18
    for a, b in zip(straight.weights, resumed.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)
    # ModelCheckpoint's file is the end's weights.
    reloaded = build()
    reloaded.load_weights(str(tmp_path / "weights"))
    for a, b in zip(straight.trainable_weights, reloaded.trainable_weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)
