"""The original TF1 <-> Hugging Face name map (transformers' modeling_electra.py names)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from electra_tf.checkpoints import hf, safetensors_io


def test_hf_names_follow_transformers():
    expected = {
        "electra/embeddings/word_embeddings": [
            ("discriminator", "electra.embeddings.word_embeddings.weight"),
            ("generator", "electra.embeddings.word_embeddings.weight"),
        ],
        "electra/embeddings/LayerNorm/beta": [
            ("discriminator", "electra.embeddings.LayerNorm.bias"),
            ("generator", "electra.embeddings.LayerNorm.bias"),
        ],
        "electra/embeddings_project/kernel": [
            ("discriminator", "electra.embeddings_project.weight")
        ],
        "electra/encoder/layer_10/attention/self/query/kernel": [
            ("discriminator", "electra.encoder.layer.10.attention.self.query.weight")
        ],
        "electra/encoder/layer_0/attention/output/LayerNorm/gamma": [
            ("discriminator", "electra.encoder.layer.0.attention.output.LayerNorm.weight")
        ],
        "electra/encoder/layer_1/intermediate/dense/bias": [
            ("discriminator", "electra.encoder.layer.1.intermediate.dense.bias")
        ],
        "discriminator_predictions/dense_1/kernel": [
            ("discriminator", "discriminator_predictions.dense_prediction.weight")
        ],
        "discriminator_predictions/dense/bias": [
            ("discriminator", "discriminator_predictions.dense.bias")
        ],
        "generator/embeddings_project/bias": [("generator", "electra.embeddings_project.bias")],
        "generator/encoder/layer_2/output/LayerNorm/beta": [
            ("generator", "electra.encoder.layer.2.output.LayerNorm.bias")
        ],
        "generator_predictions/dense/kernel": [("generator", "generator_predictions.dense.weight")],
        "generator_predictions/LayerNorm/gamma": [
            ("generator", "generator_predictions.LayerNorm.weight")
        ],
        "generator_predictions/output_bias": [("generator", "generator_lm_head.bias")],
    }
    for name, targets in expected.items():
        assert hf.to_hf(name) == targets, name
        for folder, hf_name in targets:
            assert hf.from_hf(folder, hf_name) == name
    assert hf.from_hf("generator", "generator_lm_head.weight") is None  # tied to the table


def test_hub_folder_with_only_a_torch_pickle_gets_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "electra"}')
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    assert hf.is_hf_dir(str(tmp_path))
    with pytest.raises(hf.HFFormatError, match="safe_serialization=True"):
        hf.read(str(tmp_path))


def test_unknown_hf_tensors_are_reported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "electra", "vocab_size": 9}))
    tensors = {
        "electra.embeddings.word_embeddings.weight": np.ones((9, 4), np.float32),
        "electra.pooler.dense.weight": np.ones((4, 4), np.float32),  # no ELECTRA counterpart
        "electra.embeddings.position_ids": np.arange(4)[None],  # a buffer, silently skipped
    }
    safetensors_io.save_file(tensors, str(tmp_path / "model.safetensors"))
    weights, configs, unused = hf.read(str(tmp_path))
    assert sorted(weights) == ["electra/embeddings/word_embeddings"]
    assert unused == ["discriminator/electra.pooler.dense.weight"]
    assert configs["discriminator"].vocab_size == 9


def test_untied_generator_embeddings_round_trip(tmp_path):
    from electra_tf.config import ModelConfig

    rng = np.random.default_rng(0)
    tables = {"word_embeddings": (7, 4), "position_embeddings": (5, 4)}
    weights = {}
    for scope in ("electra", "generator"):  # two different tables: untied
        for table, shape in tables.items():
            weights[f"{scope}/embeddings/{table}"] = rng.standard_normal(shape).astype(np.float32)
    weights["generator/encoder/layer_0/output/dense/kernel"] = np.ones((16, 4), np.float32)
    weights["generator_predictions/output_bias"] = np.zeros(7, np.float32)
    weights["electra/encoder/layer_0/output/dense/kernel"] = np.ones((16, 4), np.float32)
    config = ModelConfig(vocab_size=7, hidden_size=4, num_hidden_layers=1, num_attention_heads=1)
    hf.write(weights, str(tmp_path), {"discriminator": config, "generator": config})
    gen = safetensors_io.load_file(str(tmp_path / "generator/model.safetensors"))
    np.testing.assert_array_equal(
        gen["electra.embeddings.word_embeddings.weight"],
        weights["generator/embeddings/word_embeddings"],
    )
    back, _, unused = hf.read(str(tmp_path))
    assert unused == [] and sorted(back) == sorted(weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(back[name], value)


def test_config_fields_are_carried_or_refused(tmp_path):
    from electra_tf.config import ModelConfig

    config = ModelConfig(
        vocab_size=9, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, embedding_size=8
    )
    written = hf.config_dict(config, "ElectraForPreTraining")
    assert written["layer_norm_eps"] == 1e-12 and written["position_embedding_type"] == "absolute"
    assert written["pad_token_id"] == 0 and written["tie_word_embeddings"] is True
    assert hf.model_config_from_dict(written, "x") == config  # nothing lost on the way back
    for key, value in [
        ("layer_norm_eps", 1e-5),
        ("position_embedding_type", "relative_key"),
        ("hidden_act", "gelu_new"),  # the tanh approximation: not ELECTRA's gelu
        ("is_decoder", True),
        ("tie_word_embeddings", False),
    ]:
        with pytest.raises(hf.HFFormatError, match=key):
            hf.model_config_from_dict({**written, key: value}, "x/config.json")


@pytest.mark.parametrize("electric", [False, True])
def test_an_electric_discriminator_does_not_pass_as_electras(tmp_path, electric, caplog):
    # Same modules as ElectraForPreTraining, different meaning: the head outputs an energy.
    from electra_tf.config import PretrainingConfig

    config = PretrainingConfig(
        model_hparam_overrides={"hidden_size": 8, "num_hidden_layers": 1},
        vocab_size=9,
        embedding_size=8,
        electra_objective=not electric,
        electric_objective=electric,
    )
    weights = {
        "electra/embeddings/word_embeddings": np.ones((9, 8), np.float32),
        "electra/encoder/layer_0/output/dense/kernel": np.ones((32, 8), np.float32),
        "discriminator_predictions/dense/kernel": np.ones((8, 8), np.float32),
        "discriminator_predictions/dense_1/kernel": np.ones((8, 1), np.float32),
    }
    with caplog.at_level("WARNING"):
        hf.write_hf_files(weights, str(tmp_path), config)
    written = json.loads((tmp_path / "discriminator" / "config.json").read_text())
    assert written["architectures"] == ["ElectraForPreTraining"]
    assert written.get("electric_objective", False) is electric
    assert ("energy" in written.get("electra_tf_note", "")) is electric
    assert ("Electric discriminator" in caplog.text) is electric
    # The extra keys do not stop the folder from being read back as an ELECTRA network,
    # and the folder reads back as the objective it was written from.
    assert hf.read_model_configs(str(tmp_path))["discriminator"].hidden_size == 8
    back = hf.read_hf(str(tmp_path)).config
    assert back.electric_objective is electric and back.electra_objective is not electric
    assert hf.read_pretraining_config(str(tmp_path)) == back  # from config.json files alone


@pytest.mark.parametrize("untied", [False, True])
def test_read_pretrained_gives_the_config_read_hf_gives(tmp_path, untied):
    """The config read before any tensor (`read_pretrained`) is the one the tensors give:
    untied generator embeddings are told by their width."""
    from electra_tf.checkpoints import build_pretrainer, read_pretrained, read_weights, save_weights
    from electra_tf.config import PretrainingConfig

    shape = {"hidden_size": 16, "num_hidden_layers": 1, "intermediate_size": 32}
    config = PretrainingConfig(
        model_hparam_overrides={**shape, "num_attention_heads": 1},
        vocab_size=11,
        embedding_size=8,
        max_seq_length=16,
        untied_generator_embeddings=untied,
    ).resolve()
    save_weights(build_pretrainer(config), str(tmp_path / "m"), "hf", config)
    pretrained = read_pretrained(str(tmp_path / "m"))
    source = read_weights(str(tmp_path / "m"))
    assert source.config.untied_generator_embeddings is untied
    assert pretrained.config == source.config == pretrained.weights().config
    assert pretrained.weights().weights.keys() == source.weights.keys()
