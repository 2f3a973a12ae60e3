"""`read_pretrained(path)`: a pre-trained model read once, for everything that starts from one.

A fine-tuning run, the config built for it and `export --pretrained` all take the one
`PretrainedModel` this returns: the format is detected once and the checkpoint's config read
once. The tensors are read on first use (`PretrainedModel.weights()`) and kept, so that sizing
a config from the checkpoint reads no tensors and a run of several trials reads them once.
"""

from __future__ import annotations

import dataclasses
import json
import os

from electra_tf.checkpoints import formats
from electra_tf.checkpoints.config_inference import read_config_file
from electra_tf.checkpoints.files import CONFIG_FILE, CheckpointError
from electra_tf.checkpoints.names import own_generator_embeddings
from electra_tf.checkpoints.weights import SourceWeights
from electra_tf.config import PretrainingConfig
from electra_tf.data.tokenization import VocabError, id_count, load_vocab

VOCAB_FILE = "vocab.txt"  # beside a shipped model's weights (`pretrained/<name>/vocab.txt`)


@dataclasses.dataclass(frozen=True)
class PretrainedModel:
    """A checkpoint of any format, its format detected and its config read, once.

    `path`: the folder or checkpoint prefix as given. `fmt`: a registered format (`format_registry`).
    `config`: the PretrainingConfig given to `read_pretrained`, else the checkpoint's own (a
    native checkpoint's config.json, an original or Model Garden one's shapes, the HF or
    KerasHub config.json files). `vocab_file`: the `vocab.txt` beside the weights (a KerasHub
    preset's tokenizer vocabulary), None when there is none.
    """

    path: str
    fmt: str
    config: PretrainingConfig
    vocab_file: str | None = None
    config_given: bool = False  # `config` came from the caller, not from the checkpoint
    _weights: list[SourceWeights] = dataclasses.field(
        default_factory=list, init=False, repr=False, compare=False
    )  # the weights once read: a frozen instance keeps them in a list of at most one

    def weights(self) -> SourceWeights:
        """The weights by original name, read on the first call and kept for the next ones."""
        if not self._weights:
            self._weights.append(_read_weights(self))
        return self._weights[0]


def _read_weights(model: PretrainedModel) -> SourceWeights:
    """The tensors of `model`, read with its config (no second detection, no second read)."""
    source = formats.read_weights(model.path, model.fmt, model.config)
    untied = own_generator_embeddings(source.weights)
    if formats.plugin(model.fmt).untied_by_values and not model.config_given and untied:
        # HF and KerasHub generator embedding tables as wide as the discriminator's are told
        # apart from the shared ones by their values only: what the reader concludes from them.
        config = dataclasses.replace(model.config, untied_generator_embeddings=True)
        source.config = config
    return source


def read_pretrained(
    path: str, fmt: str = "auto", config: PretrainingConfig | None = None
) -> PretrainedModel:
    """Detects the format of `path` (unless `fmt` names it) and reads its config (unless
    `config` is given); the weights wait for `PretrainedModel.weights()`.

    `path`: a native checkpoint (folder or prefix, config.json beside it), an original TF1
    checkpoint, a Hugging Face folder (one model, or `discriminator/` + `generator/`), a Model
    Garden checkpoint or a KerasHub preset folder.
    """
    if fmt == "auto":
        fmt = formats.detect_format(path)
    formats.plugin(fmt)  # an unknown name: a CheckpointError naming the choices
    given = config is not None
    if config is None:
        config = formats.read_config(path, fmt)
    return PretrainedModel(path, fmt, config, find_vocab(path, fmt), given)


def find_vocab(path: str, fmt: str) -> str | None:
    """The vocabulary that came with a checkpoint: a KerasHub preset's tokenizer vocabulary,
    else `vocab.txt` in the checkpoint's folder; None when there is none."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    own = formats.plugin(fmt).vocab_file
    if own is not None and own(folder):
        return own(folder)
    vocab = os.path.join(folder, VOCAB_FILE)
    return vocab if os.path.isfile(vocab) else None


def embedding_rows(source: SourceWeights) -> int:
    """The rows of the (discriminator's, else the generator's) word embedding table: the ids a
    vocabulary for these weights must span."""
    for name in ("electra/embeddings/word_embeddings", "generator/embeddings/word_embeddings"):
        if name in source.weights:
            return int(source.weights[name].shape[0])
    return source.config.vocab_size


def check_vocab_rows(
    vocab_file: str, rows: int, model: str, required: tuple[str, ...] = (), padded: bool = False
) -> None:
    """Raises CheckpointError when `vocab_file` is not a vocabulary (binary, empty, a token
    repeated, one of `required` missing) or spans another number of ids than `model`'s
    `rows` embedding rows: ids past the table fail in a gather, and a table with rows no token
    reaches is a vocabulary of another model. `padded` accepts fewer ids than rows (a table
    padded on purpose, `vocab_size` set above the vocabulary's size)."""
    try:
        size = id_count(load_vocab(vocab_file, required))
    except VocabError as e:
        raise CheckpointError(str(e)) from None
    if size == rows or (padded and size < rows):
        return
    hint = (
        "; pass --vocab-padding if the extra rows are deliberate padding"
        if size < rows and not padded
        else ""
    )
    raise CheckpointError(
        f"vocabulary {vocab_file} has {size} entries but {model} has {rows} embedding rows: "
        f"give the vocabulary these weights were trained with (--vocab-file){hint}"
    )


def saved_config(*places: str) -> PretrainingConfig | None:
    """The PretrainingConfig saved (as config.json) in the first of `places` that holds one:
    a folder, or a checkpoint prefix's folder. A Hugging Face or KerasHub config.json is not one."""
    for place in places:
        folder = place if os.path.isdir(place) else os.path.dirname(place)
        path = os.path.join(folder, CONFIG_FILE)
        if os.path.isfile(path) and not _is_foreign_config(path):
            return read_config_file(path)
    return None


def _is_foreign_config(path: str) -> bool:
    """Only an HF config.json has `model_type` (see `hf.is_hf_dir`), only a KerasHub one
    `registered_name` (see `kerashub.preset_class`)."""
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(values, dict) and ("model_type" in values or "registered_name" in values)
