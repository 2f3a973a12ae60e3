"""What `from_pretrained` builds from a pre-trained model in any of the five weight homes: the
encoder with its weights, and the text settings its preprocessor needs.

A home is read as the fine-tuning command reads `--pretrained` (`checkpoints.read_pretrained`:
the format detected, the config read, the tensors once): a native run folder, an original TF1
checkpoint or release, a Hugging Face folder, a Model Garden checkpoint or a KerasHub preset.
The encoder is the checkpoint's discriminator with fine-tuning's dropout (0.1, the original's
fine-tuning config, as the command's `FinetuningPlan`), whatever the pre-training used.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from electra_tf import checkpoints
from electra_tf.checkpoints import CheckpointError, PretrainedModel
from electra_tf.checkpoints.pretrained import embedding_rows
from electra_tf.data.tokenization import id_count, load_vocab
from electra_tf.modeling import TransformerEncoder

FINETUNING_DROPOUT = 0.1  # the original's fine-tuning hidden and attention dropout


@dataclasses.dataclass(frozen=True)
class TextSettings:
    """How a pre-trained model's text is tokenized: its vocabulary and casing."""

    vocab_file: str
    do_lower_case: bool
    strip_accents: bool

    def preprocessor_kwargs(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_home(path: str, fmt: str = "auto") -> PretrainedModel:
    """The pre-trained model at `path` (`fmt` "auto" detects the format), tensors unread."""
    return checkpoints.read_pretrained(path, fmt)


def text_settings(
    home: PretrainedModel,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    strip_accents: bool | None = None,
) -> TextSettings:
    """The vocabulary (given, else the one beside the weights) and the casing (given, else
    the pre-training config's) of `home`. The vocabulary must span the embedding table's
    rows: another model's vocabulary would give its ids other tokens' embeddings."""
    vocab = vocab_file or home.vocab_file
    if vocab is None:
        raise CheckpointError(
            f"{home.path}: no vocab.txt beside the weights; pass vocab_file=, the vocabulary "
            "the model was pre-trained with"
        )
    config = home.config
    lower = config.do_lower_case if do_lower_case is None else do_lower_case
    strip = config.do_strip_accents if strip_accents is None else strip_accents
    return TextSettings(vocab, bool(lower), bool(strip))


def check_vocab(settings: TextSettings, home: PretrainedModel) -> None:
    """Raises CheckpointError when the vocabulary's ids and the embedding rows differ."""
    size = id_count(load_vocab(settings.vocab_file))
    rows = embedding_rows(home.weights())
    if size != rows:
        raise CheckpointError(
            f"vocabulary {settings.vocab_file} has {size} entries but {home.path} has {rows} "
            "embedding rows: pass vocab_file=, the vocabulary these weights were trained with"
        )


def pretrained_encoder(
    home: PretrainedModel,
    max_seq_length: int,
    dropout: float | None = FINETUNING_DROPOUT,
    dtype: Any = None,
) -> TransformerEncoder:
    """The discriminator's encoder of `home` (scope `electra`), its weights loaded; `dropout`
    its hidden and attention dropout (None: the pre-training's); `dtype` its policy."""
    config = home.config.discriminator_config()
    if dropout is not None:
        config = dataclasses.replace(
            config, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout
        )
    if not 3 <= max_seq_length <= config.max_position_embeddings:
        raise CheckpointError(
            f"max_seq_length {max_seq_length}: must be in [3, {config.max_position_embeddings}] "
            f"(the position embeddings of {home.path})"
        )
    encoder = TransformerEncoder(config, name="electra", dtype=dtype)
    checkpoints.assign(encoder.variable_map("electra"), home.weights(), where="the encoder")
    return encoder
