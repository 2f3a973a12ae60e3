"""What every trial of a fine-tuning run starts from, worked out once: `FinetuningPlan`.

`prepare_finetuning` reads the init checkpoint once (its format detected, its config read; its
tensors on first use), sizes the fine-tuning config by its encoder (the one model-size check),
checks the sequence length against its position table and builds the encoder config, so that no
trial locates, reads or validates the checkpoint again.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from typing import Any

from electra_tf import checkpoints
from electra_tf.checkpoints import PretrainedModel, SourceWeights
from electra_tf.config import ConfigError, ModelConfig, parse_hparams
from electra_tf.data.tokenization import VocabError, id_count, load_vocab
from electra_tf.finetuning.config import (
    FinetuningConfig,
    finetuning_config,
    size_of_encoder,
    user_config,
)
from electra_tf.finetuning.task import Task, log

# Encoder settings that do not change the weights' meaning: the fine-tuning config's win.
FINETUNING_MODEL_FIELDS = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "initializer_range",
)


@dataclasses.dataclass(frozen=True)
class FinetuningPlan:
    """A fine-tuning run's inputs, read and checked once (`prepare_finetuning`).

    `config`: the fine-tuning config, its size rules following the init checkpoint's encoder.
    `model_config`: the encoder's config: the checkpoint's own (sizes, vocabulary, activation)
    with the fine-tuning config's dropout and initializer range, or, for a random start, the
    size table's (`FinetuningConfig.model_config()`); None while the init checkpoint named is
    not there yet (the run reports that at its first trial, as a missing checkpoint).
    `pretrained`: the init checkpoint, its tensors read on first use and kept for every trial;
    None for a random start.
    """

    config: FinetuningConfig
    model_config: ModelConfig | None
    pretrained: PretrainedModel | None = None

    def weights(self) -> SourceWeights | None:
        """The init checkpoint's weights (read once, on the first call); None: random init."""
        return self.pretrained.weights() if self.pretrained else None

    def __iter__(self) -> Iterator[Any]:
        """`config, pretrained = prepare_finetuning(...)`, its shape before the plan."""
        return iter((self.config, self.pretrained))


def read_init_checkpoint(config: FinetuningConfig) -> PretrainedModel | None:
    """The config's init checkpoint, its format detected and its config read (the tensors on
    first use), or None: random initialisation, or nothing there yet (the run reports that)."""
    path = config.resolved_init_checkpoint()
    if not path or not os.path.exists(path if os.path.isdir(path) else path + ".index"):
        return None
    return checkpoints.read_pretrained(path, config.init_checkpoint_format)


def prepare_finetuning(
    model_name: str,
    data_dir: str,
    hparams: str | Mapping[str, Any] | None = None,
    tasks: str | None = None,
) -> FinetuningPlan:
    """The run's plan, its init checkpoint read once; `run_finetuning(plan)`.

    The init checkpoint is the one the user's values name (`--pretrained`, `init_checkpoint`
    or `<data_dir>/models/<model_name>`); the size rules (learning rate, layer-wise decay)
    follow its encoder, as `finetuning_config(..., checkpoint_encoder=...)` describes.
    """
    overrides = parse_hparams(hparams) if isinstance(hparams, str) or hparams is None else hparams
    pretrained = read_init_checkpoint(user_config(model_name, data_dir, overrides, tasks))
    encoder = pretrained.config.discriminator_config() if pretrained else None
    config = finetuning_config(model_name, data_dir, overrides, tasks, checkpoint_encoder=encoder)
    if pretrained is None and config.resolved_init_checkpoint():
        return FinetuningPlan(config, None)  # nothing there yet: the run says so
    # The checks run before anything is written: the command's usage error (exit 2).
    return make_plan(config, pretrained, encoder)


def plan_finetuning(
    config: FinetuningConfig, pretrained: PretrainedModel | None = None
) -> FinetuningPlan:
    """The plan of a config built without its checkpoint (`finetuning_config(...)` alone):
    `pretrained` (already read), else the config's init checkpoint read now (a missing one is a
    CheckpointError); its `model_size` checked against the checkpoint's encoder."""
    pretrained = init_checkpoint(config, pretrained)
    encoder = pretrained.config.discriminator_config() if pretrained else None
    if encoder is not None:
        check_model_size(config, encoder)
    return make_plan(config, pretrained, encoder)


def as_plan(
    config: FinetuningConfig | FinetuningPlan, pretrained: PretrainedModel | None = None
) -> FinetuningPlan:
    """`config` as a plan: a plan as it is, unless its init checkpoint was not there when it
    was made; a config alone, with `pretrained` (its init checkpoint, read) or without
    (`plan_finetuning`: read now; a missing one is a CheckpointError)."""
    if isinstance(config, FinetuningPlan):
        if config.model_config is not None:
            return config
        config, pretrained = config.config, config.pretrained
    return plan_finetuning(config, pretrained)


def make_plan(
    config: FinetuningConfig, pretrained: PretrainedModel | None, encoder: ModelConfig | None
) -> FinetuningPlan:
    """The plan over `encoder`, the checkpoint's discriminator config (None: random init).

    A checkpoint's own config (saved beside it, or inferred from its shapes) wins over
    `model_size` for what defines the weights (sizes, vocabulary, activation); dropout and the
    initializer range come from the fine-tuning config, as in the original, where fine-tuning
    built its encoder from its own hparams. A model pre-trained without dropout still
    fine-tunes with the fine-tuning config's dropout.
    """
    finetuning = config.model_config()
    if pretrained is None or encoder is None:
        return FinetuningPlan(config, finetuning)
    model_config = dataclasses.replace(
        encoder, **{name: getattr(finetuning, name) for name in FINETUNING_MODEL_FIELDS}
    )
    check_positions(config, model_config)
    return FinetuningPlan(config, model_config, pretrained)


def resolve_encoder(
    config: FinetuningConfig, pretrained: PretrainedModel | None = None
) -> tuple[ModelConfig, SourceWeights | None]:
    """The encoder config and, unless initialising randomly, the source weights: the plan's
    (`plan_finetuning(config, pretrained)`)."""
    plan = plan_finetuning(config, pretrained)
    return plan.model_config, plan.weights()


def check_model_size(config: FinetuningConfig, model_config: ModelConfig) -> None:
    """`model_size` picks the learning rate and layer-wise decay; it must be the encoder's."""
    size = size_of_encoder(model_config)
    if size is not None and size != config.model_size:
        raise ConfigError(
            f"model_size is {config.model_size!r} but {config.resolved_init_checkpoint()} holds "
            f"a {size} encoder, so the learning-rate rules would be the wrong size's: build the "
            f"config with prepare_finetuning(...) (the finetune command does) "
            f'or set "model_size": "{size}"'
        )


def init_checkpoint(
    config: FinetuningConfig, pretrained: PretrainedModel | None = None
) -> PretrainedModel | None:
    """`pretrained` (already read), else the config's init checkpoint read now (a missing one
    is a CheckpointError); None when the encoder starts from random values."""
    path = config.resolved_init_checkpoint()
    if not path:
        return None
    return pretrained or checkpoints.read_pretrained(path, config.init_checkpoint_format)


def check_positions(config: FinetuningConfig, model_config: ModelConfig) -> None:
    """`max_seq_length` must fit the init checkpoint's position table: a ConfigError naming
    both (it was a raw ValueError traceback from inside the run)."""
    if config.max_seq_length > model_config.max_position_embeddings:
        raise ConfigError(
            f"max_seq_length {config.max_seq_length} exceeds the max_position_embeddings "
            f"{model_config.max_position_embeddings} of {config.resolved_init_checkpoint()}: "
            f"set max_seq_length to at most {model_config.max_position_embeddings}"
        )


def check_vocab_size(
    config: FinetuningConfig, model_config: ModelConfig, source: SourceWeights | None,
    tasks: list[Task],
) -> None:  # fmt: skip
    """The vocabulary's ids against the encoder's embedding rows, up front (a VocabError: the
    command prints it as one line).

    More ids than rows: the usual cause is a checkpoint pre-trained with its own (smaller)
    vocabulary fine-tuned with `<data_dir>/vocab.txt`, the original's default. Unchecked, that
    fails mid-training in an out-of-range gather on CPU and reads zeros for the extra ids on GPU.

    Fewer ids than a pre-trained encoder's rows: another model's vocabulary (a converted home
    beside the wrong vocab.txt), whose ids mean other tokens to these embeddings. The one
    exception is a table padded on purpose: a native checkpoint whose own run recorded this
    very vocabulary (pre-training with `vocab_size` set above the vocabulary's size), or one the
    config declares padded (`vocab_padding`, as `convert --vocab-padding`).
    """
    vocab = id_count(tasks[0].tokenizer.vocab)  # not len(): a duplicated line leaves a gap
    used, rows = config.resolved_vocab_file(), model_config.vocab_size
    if vocab > rows:
        model = config.resolved_init_checkpoint() or "the random-init model (vocab_size)"
    elif vocab < rows and source is not None:
        recorded = source.config.resolved_vocab_file() if source.fmt == "native" else ""
        if recorded and os.path.isfile(recorded) and os.path.samefile(recorded, used):
            return
        if config.vocab_padding:
            return  # declared, as `convert --vocab-padding` declares it
        model = source.path
    else:
        return
    padded = (
        '; or, for a table padded on purpose (convert --vocab-padding), set "vocab_padding": true'
        if vocab < rows
        else ""
    )
    raise VocabError(
        f"vocabulary {used} has {vocab} entries but {model} has {rows} embedding rows: "
        f'set "vocab_file" to the vocabulary the checkpoint was pre-trained with{padded}'
    )


def check_vocab_matches(
    config: FinetuningConfig, source: SourceWeights | None, tasks: list[Task]
) -> None:
    """Warns when a native checkpoint was pre-trained with a different vocabulary file.

    The run's config.json records the vocabulary it used; when that file still exists and its
    token -> id map differs from the one fine-tuning tokenizes with, the encoder's embedding
    rows mean other tokens. A warning, not an error: editing a copy (BERT's [unusedN] slots
    given domain words) is deliberate.
    """
    if source is None or source.fmt != "native":
        return
    recorded, used = source.config.resolved_vocab_file(), config.resolved_vocab_file()
    if not os.path.isfile(recorded) or os.path.samefile(recorded, used):
        return
    theirs, ours = load_vocab(recorded, required=()), tasks[0].tokenizer.vocab
    moved = sum(ours.get(token) != i for token, i in theirs.items())
    if moved:
        log(
            f"WARNING: {used} is not the vocabulary {source.path} was pre-trained with "
            f"({recorded}): {moved} of its {len(theirs)} tokens have another id or none. "
            'Set "vocab_file" to the pre-training vocabulary unless the change is deliberate.'
        )
