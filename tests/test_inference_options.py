"""`InferenceOptions`: the serving forms of the encoder are chosen by an explicit argument, so
they reach exactly the layers they are passed to, and building a serving model leaves every
other model of the process computing its plain form."""

from __future__ import annotations

import collections
import dataclasses
import threading

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import DEFAULT_QUERY_BLOCKS, ModelConfig
from electra_tf.modeling import PLAIN_INFERENCE, InferenceOptions, utils
from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
from electra_tf.modeling.encoder import TransformerEncoder
from electra_tf.modeling.transformer import TransformerLayer
from electra_tf.serving.kinds import serving_module

LAYERS = 2
# hidden == embedding width: no projection, so every ConcatV2 / MatMul counted is the layers'.
CONFIG = ModelConfig(
    vocab_size=30, hidden_size=16, num_hidden_layers=LAYERS, num_attention_heads=2,
    intermediate_size=32, max_position_embeddings=16,
)  # fmt: skip
IDS_SPEC = {k: tf.TensorSpec([None, None], tf.int32) for k in ("input_ids", "input_mask",
                                                              "segment_ids")}  # fmt: skip


def _ids() -> dict[str, tf.Tensor]:
    """A padded batch [2, 7] of random ids."""
    rng = np.random.default_rng(0)
    mask = np.ones([2, 7], np.int32)
    mask[1, 4:] = 0
    return {
        "input_ids": tf.constant(rng.integers(5, 30, [2, 7]), tf.int32),
        "input_mask": tf.constant(mask),
        "segment_ids": tf.constant(rng.integers(0, 2, [2, 7]), tf.int32),
    }


def _traced(model, options: InferenceOptions | None = None, training: bool = False):
    """`model` traced on ids [None, None], with `options` passed or (None) not passed at all."""
    kwargs = {} if options is None else {"inference_options": options}

    def forward(**features):
        return model(features, training=training, **kwargs)

    return tf.function(forward, autograph=False).get_concrete_function(**IDS_SPEC)


def _op_counts(function) -> collections.Counter:
    return collections.Counter(op.type for op in function.graph.get_operations())


def test_the_options_reach_every_layer_of_the_encoder():
    tf.random.set_seed(1)
    encoder = TransformerEncoder(CONFIG)
    plain = _traced(encoder)
    fused = _traced(encoder, InferenceOptions(fused_layer_norms=True))
    blocked = _traced(encoder, InferenceOptions(query_blocks=3))
    # The embedding LayerNorm and the layers' two each, in the form Grappler fuses.
    assert _op_counts(fused)["FusedBatchNormV3"] == 2 * LAYERS + 1
    assert _op_counts(plain)["FusedBatchNormV3"] == 0
    assert _op_counts(blocked)["FusedBatchNormV3"] == 0
    # Both attention products once per layer, or once per layer and query group.
    assert _op_counts(plain)["BatchMatMulV2"] == 2 * LAYERS
    assert _op_counts(blocked)["BatchMatMulV2"] == 2 * LAYERS * 3
    # Training keeps the plain forms whatever the options say.
    both = InferenceOptions(fused_layer_norms=True, query_blocks=3)
    training = _op_counts(_traced(encoder, both, training=True))
    assert training["FusedBatchNormV3"] == 0 and training["BatchMatMulV2"] == 2 * LAYERS

    ids = _ids()
    expected = plain(**ids)["sequence_output"].numpy()
    for function in (fused, blocked, _traced(encoder, both)):
        got = function(**ids)["sequence_output"].numpy()
        np.testing.assert_allclose(got, expected, atol=1e-5)
    # Eagerly there is no Grappler and no inter-op pool: the plain form, to the bit.
    eager = encoder(ids, training=False, inference_options=both)["sequence_output"].numpy()
    np.testing.assert_array_equal(eager, encoder(ids, training=False)["sequence_output"].numpy())


def test_a_transformer_layer_traces_the_form_it_is_passed():
    tf.random.set_seed(2)
    layer = TransformerLayer(CONFIG)
    layer.build(None)
    hidden = tf.TensorSpec([None, None, CONFIG.hidden_size])
    bias = tf.TensorSpec([None, 1, 1, None])

    def norms(options, training=False):
        function = tf.function(
            lambda h, b: layer(h, b, training=training, inference_options=options),
            autograph=False,
        )
        return _op_counts(function.get_concrete_function(hidden, bias))["FusedBatchNormV3"]

    assert norms(InferenceOptions(fused_layer_norms=True)) == 2
    assert norms(PLAIN_INFERENCE) == 0
    assert norms(InferenceOptions(fused_layer_norms=True), training=True) == 0


def test_building_a_serving_model_leaves_later_models_plain(tmp_path):
    """The hazard of process-wide switches: nothing of a serving export's choices may reach a
    model that is traced after it (or beside it) without being passed them."""
    tf.random.set_seed(3)
    before = ElectraDiscriminator(CONFIG)
    before(dummy_inputs())
    plain = _traced(before)
    plain_ops = _op_counts(plain)

    vocab_file = tmp_path / "vocab.txt"
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(25))]
    vocab_file.write_text("\n".join(words) + "\n", encoding="utf-8")
    module = serving_module("discriminator", before, str(vocab_file), 16)
    assert module.inference_options == InferenceOptions(True, DEFAULT_QUERY_BLOCKS)
    served = _op_counts(module.signatures()["encode_ids"])
    # The export did trace its serving forms...
    assert served["FusedBatchNormV3"] == 2 * LAYERS * DEFAULT_QUERY_BLOCKS + 1
    assert served["BatchMatMulV2"] == 2 * LAYERS * DEFAULT_QUERY_BLOCKS

    after = ElectraDiscriminator(CONFIG)
    after(dummy_inputs())
    # ...and the models traced afterwards, new or the exported one, compute the plain form.
    assert _op_counts(_traced(after)) == plain_ops
    assert _op_counts(_traced(before)) == plain_ops
    ids = _ids()
    after.set_weights(before.get_weights())
    np.testing.assert_array_equal(
        _traced(after)(**ids)["logits"].numpy(), plain(**ids)["logits"].numpy()
    )
    # No thread-local (or other module-level) switch is left to carry a choice.
    assert not [v for v in vars(utils).values() if isinstance(v, threading.local)]


def test_options_are_checked_and_frozen():
    with pytest.raises(ValueError, match="query blocks must be >= 1"):
        InferenceOptions(query_blocks=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        PLAIN_INFERENCE.query_blocks = 2
    assert PLAIN_INFERENCE == InferenceOptions(fused_layer_norms=False, query_blocks=1)
