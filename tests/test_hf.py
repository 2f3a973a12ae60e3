"""The original TF1 <-> Hugging Face name map (transformers' modeling_electra.py names)."""

from __future__ import annotations

from electra_tf import hf


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
