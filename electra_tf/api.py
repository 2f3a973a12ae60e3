"""The public API of `electra_tf`, resolved lazily.

`import electra_tf` imports no TensorFlow: `electra_tf.<Name>` imports the module that defines
`<Name>` on first access (PEP 562), so config-only use stays cheap. `PUBLIC` is the one list of
what the package promises; every entry has a docstring (tests/test_api.py checks it).
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> (module, attribute)
PUBLIC: dict[str, tuple[str, str]] = {
    # Configuration.
    "ModelConfig": ("electra_tf.config", "ModelConfig"),
    "PretrainingConfig": ("electra_tf.config", "PretrainingConfig"),
    "pretraining_config": ("electra_tf.config", "pretraining_config"),
    "FinetuningConfig": ("electra_tf.finetuning.config", "FinetuningConfig"),
    "finetuning_config": ("electra_tf.finetuning.config", "finetuning_config"),
    # Tokenization.
    "FullTokenizer": ("electra_tf.data.tokenization", "FullTokenizer"),
    "GraphTokenizer": ("electra_tf.data.graph_tokenizer", "GraphTokenizer"),
    "load_vocab": ("electra_tf.data.tokenization", "load_vocab"),
    # Layers and models.
    "Embeddings": ("electra_tf.modeling.embeddings", "Embeddings"),
    "TransformerEncoder": ("electra_tf.modeling.encoder", "TransformerEncoder"),
    "GeneratorHead": ("electra_tf.modeling.heads", "GeneratorHead"),
    "DiscriminatorHead": ("electra_tf.modeling.heads", "DiscriminatorHead"),
    "ElectraDiscriminator": ("electra_tf.modeling.discriminator", "ElectraDiscriminator"),
    "ElectraPretrainer": ("electra_tf.pretraining.pretrainer", "ElectraPretrainer"),
    "FinetuningModel": ("electra_tf.finetuning.model", "FinetuningModel"),
    # Keras models on raw text, from any pre-trained home (`from_pretrained`).
    "ElectraPreprocessor": ("electra_tf.finetuning.keras_models", "ElectraPreprocessor"),
    "ElectraTaggingPreprocessor": (
        "electra_tf.finetuning.keras_models",
        "ElectraTaggingPreprocessor",
    ),
    "ElectraEncoder": ("electra_tf.finetuning.keras_models", "ElectraEncoder"),
    "ElectraClassifier": ("electra_tf.finetuning.keras_models", "ElectraClassifier"),
    "ElectraTagger": ("electra_tf.finetuning.keras_models", "ElectraTagger"),
    # Optimisation.
    "AdamWeightDecay": ("electra_tf.optimization", "AdamWeightDecay"),
    "create_optimizer": ("electra_tf.optimization", "create_optimizer"),
    # Weights in and out (native, original TF1 and Hugging Face formats), serving.
    "load_weights": ("electra_tf.checkpoints", "load_weights"),
    "read_weights": ("electra_tf.checkpoints", "read_weights"),
    "save_weights": ("electra_tf.checkpoints", "save_weights"),
    "save_for_serving": ("electra_tf.serving.kinds", "save_for_serving"),
}


def public_object(name: str) -> Any:
    """The object behind `electra_tf.<name>`; AttributeError for anything not public."""
    if name not in PUBLIC:
        raise AttributeError(f"module 'electra_tf' has no attribute {name!r}")
    module, attribute = PUBLIC[name]
    return getattr(importlib.import_module(module), attribute)
