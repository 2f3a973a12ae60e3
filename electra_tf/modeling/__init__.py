"""Keras layers of the ELECTRA networks: embeddings, transformer blocks, encoder, heads, the
discriminator on its own, and Electric's two-tower cloze generator; and `InferenceOptions`, the
encoder's serving forms, which the serving signatures pass as a call argument."""

from electra_tf.modeling.discriminator import ElectraDiscriminator
from electra_tf.modeling.embeddings import Embeddings
from electra_tf.modeling.encoder import TransformerEncoder
from electra_tf.modeling.heads import DiscriminatorHead, GeneratorHead
from electra_tf.modeling.transformer import TransformerLayer
from electra_tf.modeling.two_tower import TwoTowerClozeTransformer
from electra_tf.modeling.utils import PLAIN_INFERENCE, InferenceOptions

__all__ = [
    "PLAIN_INFERENCE",
    "DiscriminatorHead",
    "ElectraDiscriminator",
    "Embeddings",
    "GeneratorHead",
    "InferenceOptions",
    "TransformerEncoder",
    "TransformerLayer",
    "TwoTowerClozeTransformer",
]
