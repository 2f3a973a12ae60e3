"""Keras layers of the ELECTRA networks: embeddings, transformer blocks, encoder, heads."""

from electra_tf.modeling.embeddings import Embeddings
from electra_tf.modeling.encoder import TransformerEncoder
from electra_tf.modeling.heads import DiscriminatorHead, GeneratorHead
from electra_tf.modeling.transformer import TransformerLayer

__all__ = [
    "DiscriminatorHead",
    "Embeddings",
    "GeneratorHead",
    "TransformerEncoder",
    "TransformerLayer",
]
