"""Keras layers of the ELECTRA networks: embeddings, transformer blocks, encoder, heads, and
the discriminator on its own."""

from electra_tf.modeling.discriminator import ElectraDiscriminator
from electra_tf.modeling.embeddings import Embeddings
from electra_tf.modeling.encoder import TransformerEncoder
from electra_tf.modeling.heads import DiscriminatorHead, GeneratorHead
from electra_tf.modeling.transformer import TransformerLayer

__all__ = [
    "DiscriminatorHead",
    "ElectraDiscriminator",
    "Embeddings",
    "GeneratorHead",
    "TransformerEncoder",
    "TransformerLayer",
]
