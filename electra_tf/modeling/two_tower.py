"""Electric's generator: a two-tower cloze model (the original's `TwoTowerClozeTransformer`)."""

from __future__ import annotations

import tensorflow as tf

from electra_tf.checkpoints.names import TWO_TOWER
from electra_tf.config import ModelConfig
from electra_tf.modeling.embeddings import Embeddings
from electra_tf.modeling.encoder import TransformerEncoder
from electra_tf.modeling.utils import ConfiguredLayer, require_built

LTR_SCOPE, RTL_SCOPE = TWO_TOWER


def shift_features(features: tf.Tensor, direction: int) -> tf.Tensor:
    """The original's `roll(arr, direction)`: concat(arr[:, direction:], arr[:, :direction]).

    Its sign is the opposite of `tf.roll`'s shift: direction -1 moves every vector one step to
    the RIGHT (position i gets i - 1's vector, and position 0 wraps around to get the last
    position's), direction +1 one step to the LEFT (i gets i + 1's; the last gets position 0's).

    Args:
        features: [batch, seq_len, depth].
        direction: -1 or 1.

    Returns:
        [batch, seq_len, depth].
    """
    return tf.concat([features[:, direction:], features[:, :direction]], axis=1)


class TwoTowerClozeTransformer(ConfiguredLayer):
    """A left-to-right and a right-to-left transformer whose features, shifted by one position
    and concatenated, describe every position from its context alone (Electric's q(x_t | x_\\t)).

    As run_pretraining.py: both towers run on the UNMASKED input; the ltr tower's output is
    shifted right (position i gets ltr(i - 1), which saw tokens < i) and the rtl tower's left
    (position i gets rtl(i + 1), which saw tokens > i). The shift wraps around, exactly as the
    original's `roll`: position 0's ltr half is the ltr output at the LAST position and the last
    position's rtl half is rtl(0), and both of those saw the whole sequence, position 0 / the
    last position included. And because the original multiplies the padding mask and the
    triangle, a padded rtl query (every key masked) attends to ALL keys alike: in a row with
    padding, the last real token's rtl half (from the first padded position) sees every token,
    itself included. Those positions are [CLS], [SEP] and padding, outside the cloze loss's
    candidates, but Electric's energy adds log q at every real position, [CLS] and [SEP] too.

    Embeddings: with `embeddings` given (ELECTRA's tied setting) both towers read that block
    (`electra/embeddings`) and each projects it with its own `embeddings_project` when E != H;
    without it (`untied_generator_embeddings`) each tower owns a block of its hidden width
    (`generator_ltr/embeddings`, `generator_rtl/embeddings`). The cloze head is tied to the
    ltr tower's word table (`ltr.embedding_table` in the original).

    Args:
        config: each tower's encoder config (the generator config).
        embeddings: the shared `Embeddings`, or None for untied embeddings.

    Call args:
        inputs: dict with int `input_ids`, `input_mask`, `segment_ids`, each [batch, seq_len].
        training: enables dropout.

    Returns:
        float [batch, seq_len, 2 * hidden]: [ltr features | rtl features].
    """

    def __init__(self, config: ModelConfig, embeddings: Embeddings | None = None, **kwargs):
        kwargs.setdefault("name", "two_tower_cloze")
        super().__init__(**kwargs)
        self.config = config
        self.ltr = TransformerEncoder(
            config, embeddings, name=LTR_SCOPE, attention_direction="ltr", dtype=self.dtype_policy
        )
        self.rtl = TransformerEncoder(
            config, embeddings, name=RTL_SCOPE, attention_direction="rtl", dtype=self.dtype_policy
        )
        self.build()

    @property
    def embeddings(self) -> Embeddings:
        """The block whose word table the cloze head is tied to (the ltr tower's)."""
        return self.ltr.embeddings

    @property
    def output_width(self) -> int:
        return 2 * self.config.hidden_size

    def build(self, input_shape=None):
        if self.built:
            return
        self.ltr.build(None)
        self.rtl.build(None)
        super().build(input_shape)

    def call(self, inputs, training=False):
        ltr = self.ltr(inputs, training=training)["sequence_output"]  # [batch, seq_len, hidden]
        rtl = self.rtl(inputs, training=training)["sequence_output"]  # [batch, seq_len, hidden]
        # [batch, seq_len, 2 * hidden]
        return tf.concat([shift_features(ltr, -1), shift_features(rtl, 1)], axis=-1)

    def variable_map(self) -> dict[str, tf.Variable]:
        """Original names of both towers; a shared embedding block is left to its owner (the
        discriminator lists `electra/embeddings/*`)."""
        require_built(self)
        untied = self.ltr.owns_embeddings
        return {
            **self.ltr.variable_map(LTR_SCOPE, include_embeddings=untied),
            **self.rtl.variable_map(RTL_SCOPE, include_embeddings=untied),
        }
