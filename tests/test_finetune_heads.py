"""Fine-tuning heads and models: shapes, variable names, losses vs NumPy re-derivations."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from electra_tf.config import ModelConfig
from electra_tf.finetuning import heads
from electra_tf.finetuning.keras_models import ElectraClassifier
from electra_tf.finetuning.model import FinetuningModel
from electra_tf.finetuning.task import FeatureSpec
from electra_tf.modeling import TransformerEncoder
from electra_tf.optimization import layerwise_lr_multipliers

B, L, H = 3, 6, 8
_erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def np_dense(layer, x):
    return x @ layer.kernel.numpy() + layer.bias.numpy()


@pytest.fixture
def hidden():
    rng = np.random.default_rng(0)
    return rng.normal(size=(B, L, H)).astype(np.float32)


def test_classification_head(hidden):
    head = heads.ClassificationHead("rte", 3)
    labels = np.array([0, 2, 1])
    losses, out = head({"cls_output": hidden[:, 0]}, {"rte_label_ids": labels}, training=False)
    logits = np_dense(head.dense, hidden[:, 0])
    expected = -log_softmax(logits)[np.arange(B), labels]
    np.testing.assert_allclose(losses.numpy(), expected, rtol=1e-5)
    np.testing.assert_array_equal(out["predictions"].numpy(), logits.argmax(-1))
    names = {k: tuple(v.shape) for k, v in head.variable_map().items()}
    assert names == {"task_specific/rte/dense/kernel": (H, 3), "task_specific/rte/dense/bias": (3,)}
    # Training applies dropout 0.1 to the [CLS] vector only.
    tf.random.set_seed(1)
    train_losses, _ = head({"cls_output": hidden[:, 0]}, {"rte_label_ids": labels}, training=True)
    assert not np.allclose(train_losses.numpy(), expected)


def test_classification_head_mean_pooling_reads_real_tokens_only(hidden):
    head = heads.ClassificationHead("sst", 2, pooling="mean")
    labels = np.array([1, 0, 1])
    mask = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]], np.int32)
    features = {"sst_label_ids": labels, "input_mask": mask}
    outputs = {"cls_output": hidden[:, 0], "sequence_output": hidden}
    losses, out = head(outputs, features, training=False)
    pooled = np.stack([hidden[b, mask[b] == 1].mean(0) for b in range(B)])
    logits = np_dense(head.dense, pooled)
    np.testing.assert_allclose(out["logits"].numpy(), logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        losses.numpy(), -log_softmax(logits)[np.arange(B), labels], rtol=1e-5
    )
    # Padding positions do not count: changing them leaves the logits alone.
    padded = hidden.copy()
    padded[mask == 0] = 100.0
    _, again = head({"cls_output": padded[:, 0], "sequence_output": padded}, features)
    np.testing.assert_allclose(again["logits"].numpy(), logits, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="pooling"):
        heads.ClassificationHead("sst", 2, pooling="max")


def test_regression_head(hidden):
    head = heads.RegressionHead("sts")
    targets = np.array([0.0, 0.5, 1.0], np.float32)
    losses, out = head({"cls_output": hidden[:, 0]}, {"sts_targets": targets}, training=False)
    pred = np_dense(head.dense, hidden[:, 0])[:, 0]
    np.testing.assert_allclose(losses.numpy(), (pred - targets) ** 2, rtol=1e-5)
    assert out["predictions"].shape == (B,)


def test_tagging_head_sums_masked_loss_per_sentence(hidden):
    head = heads.TaggingHead("chunk", 4)
    positions = np.array([[1, 2, 4, 0, 0, 0], [1, 3, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]])
    labels = np.array([[0, 1, 3, 0, 0, 0], [2, 2, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]])
    mask = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]], np.float32)
    features = {
        "chunk_labeled_positions": positions,
        "chunk_labels": labels,
        "chunk_labels_mask": mask,
    }
    losses, out = head({"sequence_output": hidden}, features, training=False)
    gathered = hidden[np.arange(B)[:, None], positions]  # [B, P, H]
    logp = log_softmax(np_dense(head.dense, gathered))
    token = -np.take_along_axis(logp, labels[..., None], -1)[..., 0]
    np.testing.assert_allclose(losses.numpy(), (token * mask).sum(-1), rtol=1e-5)
    assert out["logits"].shape == (B, L, 4)


def qa_features(name="squad"):
    input_mask = np.array([[1] * 6, [1] * 5 + [0], [1] * 4 + [0] * 2])
    segment_ids = np.array([[0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 0], [0, 0, 1, 1, 0, 0]])
    return {
        "input_mask": input_mask,
        "segment_ids": segment_ids,
        f"{name}_start_positions": np.array([2, 3, 0]),
        f"{name}_end_positions": np.array([4, 4, 0]),
        f"{name}_is_impossible": np.array([0, 0, 1]),
    }


def test_qa_head_names_and_training_loss(hidden):
    head = heads.SpanQAHead("squad", beam_size=3)
    f = qa_features()
    losses, out = head({"sequence_output": hidden}, f, training=True)
    shapes = {k: tuple(v.shape) for k, v in head.variable_map().items() if k.endswith("kernel")}
    prefix = "task_specific/squad/"
    assert shapes == {
        prefix + "dense/kernel": (H, 1),
        prefix + "qa_hidden/kernel": (2 * H, 512),
        prefix + "dense_1/kernel": (512, 1),
        prefix + "dense_2/kernel": (2 * H, 512),
        prefix + "dense_3/kernel": (512, 1),
    }
    # NumPy re-derivation of docs/faithfulness.md, section 10 (the QA head).
    answer_mask = f["input_mask"] * f["segment_ids"] + np.eye(L)[0]
    penalty = 1000.0 * (answer_mask - 1)
    start_logits = np_dense(head.start_dense, hidden)[..., 0] + penalty
    gold = f["squad_start_positions"]
    start_h = np.repeat(hidden[np.arange(B), gold][:, None], L, 1)  # [B, L, H]
    end_in = np.concatenate([start_h, hidden], -1)
    end_logits = np_dense(head.end_dense, gelu(np_dense(head.qa_hidden, end_in)))[..., 0] + penalty
    rows = np.arange(B)
    span = (
        -log_softmax(start_logits)[rows, gold]
        - log_softmax(end_logits)[rows, f["squad_end_positions"]]
    ) / 2
    p = np.exp(log_softmax(start_logits))
    answer_in = np.concatenate([hidden[:, 0], (p[..., None] * hidden).sum(1)], -1)
    logit = np_dense(head.answer_dense, gelu(np_dense(head.answer_hidden, answer_in)))[:, 0]
    y = f["squad_is_impossible"]
    bce = np.maximum(logit, 0) - logit * y + np.log1p(np.exp(-np.abs(logit)))
    np.testing.assert_allclose(losses.numpy(), span + 0.5 * bce, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["answerable_logit"].numpy(), logit, rtol=1e-4, atol=1e-5)


def test_qa_head_inference_beams(hidden):
    head = heads.SpanQAHead("squad", beam_size=3)
    f = qa_features()
    _, out = head({"sequence_output": hidden}, f, training=False)
    assert out["start_top_index"].shape == (B, 3)
    assert out["end_top_index"].shape == (B, 3, 3)
    assert out["end_top_log_probs"].shape == (B, 3, 3)
    # End beam i is conditioned on start candidate i (not on the gold start).
    penalty = 1000.0 * (f["input_mask"] * f["segment_ids"] + np.eye(L)[0] - 1)
    b, i = 1, 2
    start = int(out["start_top_index"][b, i])
    end_in = np.concatenate([np.repeat(hidden[b, start][None], L, 0), hidden[b]], -1)
    end_logits = np_dense(head.end_dense, gelu(np_dense(head.qa_hidden, end_in)))[:, 0]
    expected = np.sort(log_softmax(end_logits + penalty[b]))[::-1][:3]
    np.testing.assert_allclose(out["end_top_log_probs"][b, i].numpy(), expected, rtol=1e-4)
    # Padding / question positions are never in the start beam's top entries when context exists.
    assert set(out["start_top_index"][0].numpy()) <= {0, 2, 3, 4, 5}


def tiny_config():
    return ModelConfig(
        vocab_size=20, hidden_size=H, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=16, embedding_size=4, max_position_embeddings=L,
    )  # fmt: skip


class FakeTask:
    def __init__(self, name, head):
        self.name, self._head = name, head

    def make_head(self, dtype=None):  # its head is built already, under float32
        return self._head


def multitask_model():
    tasks = [
        FakeTask("rte", heads.ClassificationHead("rte", 2)),
        FakeTask("sts", heads.RegressionHead("sts")),
    ]
    specs = [
        FeatureSpec("input_ids", (L,)),
        FeatureSpec("input_mask", (L,)),
        FeatureSpec("segment_ids", (L,)),
        FeatureSpec("task_id", ()),
        FeatureSpec("rte_label_ids", ()),
        FeatureSpec("sts_targets", (), is_int=False),
    ]
    return FinetuningModel(tiny_config(), tasks, specs)


def test_multitask_loss_is_routed_sum_and_padding_is_free():
    model = multitask_model()
    rng = np.random.default_rng(0)
    batch = {
        "input_ids": tf.constant(rng.integers(1, 20, (3, L)), tf.int32),
        "input_mask": tf.ones((3, L), tf.int32),
        "segment_ids": tf.zeros((3, L), tf.int32),
        "task_id": tf.constant([0, 1, 2]),  # rte, sts, padding
        "rte_label_ids": tf.constant([1, 0, 0]),
        "sts_targets": tf.constant([0.0, 0.6, 0.0]),
    }
    per_example, out = model(batch, training=False)
    rte_loss, sts_loss = out["rte"]["loss"].numpy(), out["sts"]["loss"].numpy()
    np.testing.assert_allclose(per_example.numpy(), [rte_loss[0], sts_loss[1], 0.0], rtol=1e-6)
    names = model.variable_map()
    assert {"task_specific/rte/dense/kernel", "task_specific/sts/dense/kernel"} <= set(names)
    assert "electra/embeddings/word_embeddings" in names
    assert "electra/embeddings_project/kernel" in names
    assert len(names) == len(model.trainable_variables)


@pytest.mark.parametrize("fix, top_layer", [(False, 0.8**2), (True, 0.8)])
def test_layerwise_lr_for_a_finetuning_model(fix, top_layer):
    model = multitask_model()
    m = layerwise_lr_multipliers(model.variable_map(), 2, 0.8, fix_top_layer=fix)
    assert m["task_specific/rte/dense/kernel"] == 1.0
    assert m["electra/encoder/layer_1/output/dense/kernel"] == pytest.approx(top_layer)
    assert m["electra/encoder/layer_0/output/dense/kernel"] == pytest.approx(top_layer * 0.8)
    assert m["electra/embeddings/word_embeddings"] == pytest.approx(top_layer * 0.8**2)
    assert m["electra/embeddings_project/kernel"] == m["electra/embeddings/word_embeddings"]


def test_electra_classifier_compiles_and_fits():
    encoder = TransformerEncoder(tiny_config(), name="electra")
    model = ElectraClassifier(encoder, num_labels=2, task_name="sst")
    assert tuple(model.variable_map()["task_specific/sst/dense/kernel"].shape) == (H, 2)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 20, (16, L)).astype(np.int32)
    x = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}
    y = (ids[:, 1] > 10).astype(np.int32)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = model.fit(x, y, batch_size=8, epochs=8, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert model.predict(x, verbose=0).shape == (16, 2)


@pytest.mark.parametrize("training", [True, False])
def test_every_head_gives_float32_logits_and_losses_under_mixed_bfloat16(hidden, training):
    # The layers compute in bfloat16 (the encoder's output dtype), every loss and every output
    # a scorer reads is float32: the logits are cast before the softmax / cross-entropy.
    policy = "mixed_bfloat16"
    encoded = {"cls_output": tf.cast(hidden[:, 0], tf.bfloat16)}
    encoded["sequence_output"] = tf.cast(hidden, tf.bfloat16)
    mask = np.ones((B, L), np.int32)
    cases = [
        (
            heads.ClassificationHead("sst", 2, dtype=policy),
            {"sst_label_ids": np.zeros(B, np.int32)},
        ),
        (
            heads.ClassificationHead("sst", 2, pooling="mean", dtype=policy),
            {"sst_label_ids": np.zeros(B, np.int32), "input_mask": mask},
        ),
        (heads.RegressionHead("sts", dtype=policy), {"sts_targets": np.zeros(B, np.float32)}),
        (
            heads.TaggingHead("chunk", 4, dtype=policy),
            {
                "chunk_labeled_positions": np.zeros((B, L), np.int32),
                "chunk_labels": np.zeros((B, L), np.int32),
                "chunk_labels_mask": np.ones((B, L), np.float32),
            },
        ),
        (heads.SpanQAHead("squad", beam_size=3, dtype=policy), qa_features()),
    ]
    for head, features in cases:
        assert head.compute_dtype == "bfloat16", head.name
        losses, outputs = head(encoded, features, training=training)
        layers = [m for m in head.submodules if isinstance(m, keras.layers.Layer)]
        assert {m.compute_dtype for m in layers} == {"bfloat16"}, head.name
        floats = {k: v.dtype for k, v in outputs.items() if tf.is_tensor(v) and v.dtype.is_floating}
        assert losses.dtype == tf.float32 and set(floats.values()) == {tf.float32}, floats
        assert np.all(np.isfinite(losses.numpy())), head.name
