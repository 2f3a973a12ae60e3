"""Typed configuration: the schema, the presets and the one place derived values are computed.

Defaults equal the original's `configure_pretraining.py` (google-research/electra). Loading order,
as the STYLE guide asks: dataclass defaults -> preset (configs/<name>.json) -> user overrides
(`--hparams` JSON string or .json file) -> derived values, computed once after every override.
The original computed `max_predictions_per_seq` *before* its size defaults changed
`max_seq_length`/`mask_prob`; here derived values always see the final settings.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from electra_tf import device_defaults  # pure "auto" answers; no TensorFlow import
from electra_tf.atomic_io import write_json

CONFIGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")

# Hidden size and depth per model size, as the original's `training_utils.get_bert_config`.
MODEL_SIZES = {"small": (256, 12), "base": (768, 12), "large": (1024, 24)}

# `PretrainingConfig.objective_variant`: ELECTRA and the paper's Table 5 ablations (Clark et al.
# 2020, Section 3.2), each on ELECTRA's pipeline (mask -> generator -> sample -> full-size
# network on the corrupted input). The last two train the full-size network as a masked LM
# instead of a replaced-token detector.
# Serving exports: groups of positions the encoder runs side by side (`ServingModule`). Two
# fills this 2-core machine's cores with single-threaded kernels (docs/serving.md, thread
# settings); `--query-blocks` changes it.
DEFAULT_QUERY_BLOCKS = 2
# Each group is its own ops in every layer, run by its own inter-op thread: more groups than
# a server has cores cannot run side by side, and the graph (trace time, memory, the
# SavedModel) grows with every group. 64 covers a 64-core server; `--query-blocks 100000`
# traced for minutes past 11 GB before this bound.
MAX_QUERY_BLOCKS = 64
OBJECTIVE_VARIANTS = ("electra", "electra_15", "replace_mlm", "all_tokens_mlm")
MASKED_LM_VARIANTS = ("replace_mlm", "all_tokens_mlm")
# The formats `init_checkpoint_format` may name (electra_tf.checkpoints.FORMATS, plus auto).
INIT_CHECKPOINT_FORMATS = ("auto", "native", "original", "hf", "modelgarden", "kerashub")
# The `precision` values of pre-training and fine-tuning ("auto": `device_defaults.auto_precision`).
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


class ConfigError(ValueError):
    """A bad configuration key or value; the message names the key."""


def query_blocks_problem(value: Any) -> str | None:
    """Why `value` cannot be a serving export's `query_blocks` (None when it can): an integer
    in [1, MAX_QUERY_BLOCKS]. The export command, `ServingModule` and `serving.load` (reading
    `export.json`) each name where the value came from."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{value!r} is not an integer"
    if not 1 <= value <= MAX_QUERY_BLOCKS:
        return (
            f"{value} is outside [1, {MAX_QUERY_BLOCKS}] (one group per inter-op thread; "
            "more groups than cores only grow the graph)"
        )
    return None


_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
    "dict": (dict,),
}
_TYPE_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def check_precision(precision: Any) -> None:
    """`precision` is one of PRECISIONS; else a ConfigError naming the key and the values."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision: {precision!r} is not {'/'.join(PRECISIONS)}")


def check_types(config: Any) -> None:
    """Every field whose annotation is int / float / bool / str / dict (optionally `| None`)
    holds a value of that type; JSON's `"eight"` for an int is an error naming the key, the
    value and the type expected (bool is not accepted as a number)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        kinds = [k.strip() for k in str(f.type).split("|")]
        if value is None and "None" in kinds:
            continue
        known = [k for k in kinds if k in _TYPES]
        if not known or len(known) != len([k for k in kinds if k != "None"]):
            continue  # a type this check does not describe (tuple[...], bool | str)
        ok = any(
            isinstance(value, _TYPES[k]) and not (k in ("int", "float") and isinstance(value, bool))
            for k in known
        )
        if not ok:
            expected = " or ".join(_TYPE_NAMES.get(k, k) for k in known)
            expected += " or null" if "None" in kinds else ""
            raise ConfigError(
                f"{f.name}: {value!r} is a {type(value).__name__}, expected {expected}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            # JSON's Infinity / NaN and 1e999 parse as floats: a learning rate of inf trains
            # NaN weights and saves them.
            raise ConfigError(f"{f.name}: {value!r} is not a finite number")


def check_ranges(
    config: Any,
    positive: tuple[str, ...] = (),
    at_least_one: tuple[str, ...] = (),
    non_negative: tuple[str, ...] = (),
    probabilities: tuple[str, ...] = (),
) -> None:
    """Range checks by field name (None values are skipped); NaN fails every check."""
    rules = (
        (positive, lambda v: v > 0, "must be > 0"),
        (at_least_one, lambda v: v >= 1, "must be >= 1"),
        (non_negative, lambda v: v >= 0, "must be >= 0"),
        (probabilities, lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    )
    for names, ok, rule in rules:
        for name in names:
            value = getattr(config, name)
            if value is not None and not ok(value):
                raise ConfigError(f"{name}: {value!r} {rule}")


def check_model_overrides(overrides: Mapping[str, Any], where: str) -> None:
    """`model_hparam_overrides`: known keys, their types, dropout probabilities in [0, 1]."""
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"{where}: {overrides!r} is not a JSON object")
    model = replace_checked(ModelConfig(), overrides, where=where)
    check_types(model)
    check_ranges(
        model,
        at_least_one=(
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ),
        positive=("initializer_range",),
        probabilities=("hidden_dropout_prob", "attention_probs_dropout_prob"),
    )


def check_model_name(name: str, key: str = "model_name") -> None:
    """A model name is one folder name under `<data-dir>/models`: `../x` or an absolute path
    would write outside it without a word (`model_dir` names any other folder)."""
    if (
        not name
        or name in (".", "..")
        or os.path.isabs(name)
        or any(sep in name for sep in ("/", "\\", os.sep))
    ):
        raise ConfigError(
            f"{key}: {name!r} is not a folder name; a model lives in <data-dir>/models/<name>. "
            "To put it elsewhere, set model_dir to the folder instead"
        )


def check_head_split(config: PretrainingConfig) -> None:
    """Each encoder's hidden width splits evenly over its attention heads (the original's
    `BertModel` raises on the same condition, from deep inside graph construction)."""
    networks = [("", config.discriminator_config())]
    if config.untied_generator:
        networks.append(("generator ", config.generator_config()))
    for which, model in networks:
        hidden, heads = model.hidden_size, model.num_attention_heads
        if hidden % heads:
            raise ConfigError(
                f"num_attention_heads: the {which}hidden_size {hidden} is not a multiple of "
                f"num_attention_heads {heads} (each head takes hidden_size / "
                "num_attention_heads dimensions); set both in model_hparam_overrides"
            )


def check_objective_variant(config: PretrainingConfig) -> None:
    """`objective_variant`: a known name, and only in combinations that mean something."""
    variant = config.objective_variant
    if variant not in OBJECTIVE_VARIANTS:
        hint = closest_key(variant, list(OBJECTIVE_VARIANTS))
        suggestion = f"; did you mean {hint!r}?" if hint else ""
        raise ConfigError(
            f"objective_variant: {variant!r} is not one of {', '.join(OBJECTIVE_VARIANTS)}"
            f"{suggestion}"
        )
    if variant == "electra":
        return
    if config.electric_objective:
        raise ConfigError(
            f"objective_variant: {variant!r} is an ELECTRA ablation; with electric_objective "
            'true it must be "electra"'
        )
    if not config.electra_objective:
        raise ConfigError(
            f"objective_variant: {variant!r} needs electra_objective true (every variant "
            "corrupts the input with generator samples); the BERT masked-LM baseline is "
            'electra_objective false with objective_variant "electra"'
        )
    if variant in MASKED_LM_VARIANTS and not config.untied_generator:
        raise ConfigError(
            f"untied_generator: must be true with objective_variant {variant!r}: its samples "
            "come from a separate generator network, not from the masked LM being trained"
        )
    for field in ("gradient_accumulation_steps", "parallel_micro_batches"):
        value = getattr(config, field)  # "auto" parallel micro-batches resolve to 1 here
        if (
            variant == "electra_15"
            and value != "auto"
            and value > 1
            and config.mask_positions_with_replacement
        ):
            # Positions drawn with replacement repeat at random, so how many distinct
            # positions the loss averages over is known only after every micro-batch is masked.
            raise ConfigError(
                f"{field}: > 1 with objective_variant 'electra_15' needs "
                "mask_positions_with_replacement false (the loss denominator, the number of "
                "distinct masked positions, must be known before the micro-batches run)"
            )


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """One transformer encoder (the original's `BertConfig`).

    `embedding_size` is the width of the shared embedding tables; when it differs from
    `hidden_size` the encoder owns an `embeddings_project` dense layer (E -> H).
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    embedding_size: int | None = None  # None -> hidden_size

    @property
    def embedding_width(self) -> int:
        return self.embedding_size or self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ModelConfig:
        return replace_checked(cls(), values, where="model config")


@dataclasses.dataclass(frozen=True)
class PretrainingConfig:
    """Pre-training hyperparameters. Field names and defaults are the original's.

    Fields marked "ours" are additions; their defaults keep the original's behaviour.
    Derived fields (`max_predictions_per_seq`, and the model configs returned by
    `discriminator_config()` / `generator_config()`) are computed by `resolve()`.
    """

    model_name: str = "electra"
    data_dir: str = "data"

    # Objective.
    electra_objective: bool = True  # False -> the BERT masked-LM baseline (no discriminator)
    # Electric (Clark et al. 2020, energy-based cloze model): the discriminator's output is an
    # energy scored against a two-tower cloze generator. Wins over electra_objective (the
    # original tests it first wherever the two differ) and forces two_tower_generator.
    electric_objective: bool = False
    gen_weight: float = 1.0
    disc_weight: float = 50.0
    mask_prob: float = 0.15

    # Optimisation.
    learning_rate: float = 5e-4
    lr_decay_power: float = 1.0  # linear decay to 0
    weight_decay_rate: float = 0.01
    num_warmup_steps: int = 10000

    # Training loop.
    iterations_per_loop: int = 200  # steps per compiled loop / console log line
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    num_train_steps: int = 1000000
    num_eval_steps: int = 100

    # Model.
    model_size: str = "small"  # one of small, base, large
    model_hparam_overrides: dict = dataclasses.field(default_factory=dict)
    embedding_size: int | None = None  # None -> hidden size ("small" preset sets 128)
    vocab_size: int = 30522
    do_lower_case: bool = True
    do_strip_accents: bool = True

    # Generator.
    uniform_generator: bool = False  # generator outputs a uniform distribution (ablation)
    # The generator is a two-tower cloze model (left-to-right + right-to-left transformers on the
    # unmasked input): Electric's generator; with the ELECTRA objective, an ablation.
    two_tower_generator: bool = False
    untied_generator_embeddings: bool = False  # True: the generator has its own embeddings
    untied_generator: bool = True  # False: generator and discriminator share all weights
    generator_layers: float = 1.0  # fraction of discriminator layers
    generator_hidden_size: float = 0.25  # fraction of discriminator hidden size
    # The generator's own weights (not the shared embeddings) start from a truncated normal of
    # this stddev (ours; None: the encoder's initializer_range, as the original). A larger range
    # lets a tiny generator find word order sooner while the discriminator keeps the 0.02 it
    # fine-tunes from (docs/pretraining-at-small-scale.md).
    generator_initializer_range: float | None = None
    disallow_correct: bool = False  # never sample the original token
    temperature: float = 1.0

    # Batch sizes and sequence length.
    max_seq_length: int = 128
    train_batch_size: int = 128
    eval_batch_size: int = 128

    debug: bool = False  # the original's debug sizes: 3 layers x 144, batch 8, 20 steps
    do_train: bool = True  # the original requires exactly one of do_train / do_eval
    do_eval: bool = False

    # --- ours ---
    # Masking: the original draws positions with replacement (duplicates get a floor-averaged
    # token id, original issue #41). False draws them without replacement (the suggested fix).
    mask_positions_with_replacement: bool = True
    # What the full-size network learns from the generator-corrupted input (one of
    # OBJECTIVE_VARIANTS; the paper's Table 5 ablations, which the original never released):
    #   "electra": replaced-token detection over every real token (the original);
    #   "electra_15": the same detector, its loss and metrics only over the positions that went
    #     through the generator (the masked-out ~15%);
    #   "replace_mlm": no detector; the network is a masked LM whose masked-out positions hold
    #     generator samples instead of [MASK], predicting the original tokens there;
    #   "all_tokens_mlm": like replace_mlm, predicting the original token at EVERY real
    #     position through a copy mechanism (see pretraining/ablations.py).
    # Non-default values need electra_objective true (the BERT baseline stays "electra"); the
    # masked-LM variants need untied_generator true. disc_weight weighs the full-size network's
    # loss whatever it is: configs/ablations/ sets it to 1.0 for the masked-LM variants, whose
    # loss is a cross-entropy on the generator's scale.
    objective_variant: str = "electra"
    seed: int = 0
    # "auto" is resolved by resolve(machine) (electra_tf/device_defaults.py): on CPU,
    # mixed_bfloat16 where it has native bf16 (AVX512_BF16/AMX) else float32, and no XLA.
    precision: str = "float32"  # auto | float32 | mixed_bfloat16 | mixed_float16
    jit_compile: bool | str = "auto"  # auto | true | false
    gradient_accumulation_steps: int = 1
    # k > 1: each step cuts the batch into k micro-batches that run side by side, as
    # independent ops (the accumulation's arithmetic: whole-batch denominators, summed
    # gradients, one update; the masking and sampling drawn once for the whole batch, so the
    # update is the one-pass step's), so that k inter-op threads with single-threaded kernels
    # each run one on its own core. Ours (a CPU speed option). "auto" (the default): 2 on a
    # CPU-only machine with 2 or more cores, single-device training, an even batch and no
    # gradient accumulation; else 1. Not together with gradient_accumulation_steps > 1.
    parallel_micro_batches: int | str = "auto"
    # TensorFlow's thread pools for `python -m electra_tf.pretrain` (0 = TensorFlow's default).
    # "auto" (the default): intra-op 1 and inter-op k where the CPU-only machine has exactly
    # k = parallel_micro_batches cores (the setting measured, on 2 cores); else 0.
    intra_op_threads: int | str = "auto"
    inter_op_threads: int | str = "auto"
    # The generator's own variables (scopes generator/ and generator_predictions/; Electric's
    # generator_ltr/, generator_rtl/ and cloze_predictions/) step with learning_rate x this.
    # 1.0 is the original (one lr for both networks); the shared embeddings always take the
    # discriminator's lr.
    generator_lr_multiplier: float = 1.0
    # Adam's bias correction of its moments; the original's AdamW has none.
    adam_bias_correction: bool = False
    init_checkpoint: str | None = None  # continue pre-training from these weights
    init_checkpoint_format: str = "auto"  # auto | native | original | hf | modelgarden | kerashub
    init_step: int | None = None  # step the LR schedule starts from with init_checkpoint
    pretrain_tfrecords: str | None = (
        None  # None -> <data_dir>/pretrain_tfrecords/pretrain_data.tfrecord*
    )
    eval_tfrecords: str | None = None  # None -> the training files
    vocab_file: str | None = None  # None -> <data_dir>/vocab.txt
    model_dir: str | None = None  # None -> <data_dir>/models/<model_name>
    log_every_steps: int = 0  # console line period; 0 -> iterations_per_loop
    distribution_strategy: str = "default"  # default | mirrored | multi_worker_mirrored | tpu
    tpu: str | None = None
    # multi_worker_mirrored: seconds to wait for every worker at start, and to notice a worker
    # that stopped answering mid-run, before failing with a message (docs/distributed.md).
    worker_timeout_seconds: float = 300.0

    # Derived (set by resolve()).
    max_predictions_per_seq: int | None = None

    # ------------------------------------------------------------------ derived values
    def resolve(self, machine: device_defaults.Machine | None = None) -> PretrainingConfig:
        """Validates and fills the derived values. Idempotent, and pure: it never asks the
        hardware.

        "auto" settings (precision, jit_compile, parallel_micro_batches, the thread counts)
        are chosen for `machine` (`device_defaults.probe_machine()`, which a run calls once).
        Without one they resolve for `device_defaults.PORTABLE`, an unknown CPU: float32, no
        XLA, one micro-batch and TensorFlow's default thread pools (0 / 0); the right answer
        for reading a saved config, whose values are concrete already."""
        machine = device_defaults.PORTABLE if machine is None else machine
        self._validate()
        changes: dict[str, Any] = self._objective_changes()
        parts = self.parallel_micro_batches
        if parts == "auto":
            parts = device_defaults.auto_parallel_micro_batches(
                machine,
                self.train_batch_size,
                self.gradient_accumulation_steps,
                self.distribution_strategy,
            )
            if self.objective_variant == "electra_15" and self.mask_positions_with_replacement:
                parts = 1  # its loss denominator is known only after the whole batch is masked
            changes["parallel_micro_batches"] = parts
        self._check_micro_batches(parts)
        changes.update(self._thread_changes(machine, parts))
        changes["max_predictions_per_seq"] = int((self.mask_prob + 0.005) * self.max_seq_length)
        if self.precision == "auto":
            changes["precision"] = device_defaults.auto_precision(machine)
        if self.jit_compile == "auto":
            changes["jit_compile"] = device_defaults.auto_jit_compile(machine)
        return dataclasses.replace(self, **changes)

    def _validate(self) -> None:
        """Types, ranges and the combinations of settings that cannot run, naming the key."""
        check_types(self)
        check_ranges(
            self,
            # 0 is allowed: it freezes the weights (tests score checkpoints that way).
            positive=(
                "generator_layers",
                "generator_hidden_size",
                "generator_initializer_range",
                "worker_timeout_seconds",
            ),
            at_least_one=(
                "num_train_steps",
                "train_batch_size",
                "eval_batch_size",
                "iterations_per_loop",
                "save_checkpoints_steps",
                "max_seq_length",
                "num_eval_steps",
            ),
            non_negative=(
                "learning_rate",
                "keep_checkpoint_max",
                "num_warmup_steps",
                "log_every_steps",
                "weight_decay_rate",
                "lr_decay_power",
                "gen_weight",
                "disc_weight",
                "init_step",
                "generator_lr_multiplier",
            ),
        )
        check_model_overrides(self.model_hparam_overrides, "model_hparam_overrides")
        if self.model_size not in MODEL_SIZES:
            raise ConfigError(
                f"model_size: {self.model_size!r} is not one of {sorted(MODEL_SIZES)}"
            )
        check_precision(self.precision)
        if self.init_checkpoint_format not in INIT_CHECKPOINT_FORMATS:
            raise ConfigError(
                f"init_checkpoint_format: {self.init_checkpoint_format!r} is not one of "
                + "/".join(INIT_CHECKPOINT_FORMATS)
            )
        if not isinstance(self.jit_compile, bool) and self.jit_compile != "auto":
            raise ConfigError(f'jit_compile: {self.jit_compile!r} is not true, false or "auto"')
        if not 0.0 < self.mask_prob < 1.0:
            raise ConfigError(f"mask_prob: {self.mask_prob} must be in (0, 1)")
        check_objective_variant(self)
        check_head_split(self)
        if not self.model_dir:
            check_model_name(self.model_name)
        if self.do_train == self.do_eval:
            raise ConfigError("do_train / do_eval: exactly one must be true (as the original)")
        if self.temperature <= 0:
            raise ConfigError(f"temperature: {self.temperature} must be > 0")

    def _check_micro_batches(self, parts: Any) -> None:
        """Accumulation steps and parallel micro-batches divide the batch; not both > 1."""
        for field, k in (
            ("gradient_accumulation_steps", self.gradient_accumulation_steps),
            ("parallel_micro_batches", parts),
        ):
            if not isinstance(k, int) or isinstance(k, bool) or k < 1 or self.train_batch_size % k:
                raise ConfigError(
                    f"{field}: {k!r} must be a positive integer that divides "
                    f"train_batch_size {self.train_batch_size}"
                )
        if self.gradient_accumulation_steps > 1 and parts > 1:
            raise ConfigError(
                "parallel_micro_batches: > 1 with gradient_accumulation_steps > 1 is not "
                "supported; set one of them to 1"
            )

    def _thread_changes(self, machine: device_defaults.Machine, parts: int) -> dict[str, int]:
        """The thread counts that were "auto", resolved together; the others checked."""
        threads = (self.intra_op_threads, self.inter_op_threads)
        auto = device_defaults.auto_threads(machine, parts) if "auto" in threads else (0, 0)
        changes = {}
        for field, value, resolved in zip(
            ("intra_op_threads", "inter_op_threads"), threads, auto, strict=True
        ):
            if value == "auto":
                changes[field] = resolved
            elif not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f'{field}: {value!r} must be an integer >= 0 or "auto"')
        return changes

    def _objective_changes(self) -> dict[str, Any]:
        """Electric forces the two-tower generator (configure_pretraining.py); combinations
        that the original's run_pretraining.py cannot build are errors naming the key."""
        two_tower = self.two_tower_generator or self.electric_objective
        if not two_tower:
            return {}
        why = "electric_objective" if self.electric_objective else "two_tower_generator"
        if self.uniform_generator:
            raise ConfigError(
                f"uniform_generator: cannot be true with {why}, which needs the two-tower cloze "
                "generator"
            )
        if not self.untied_generator:
            raise ConfigError(
                f"untied_generator: must be true with {why}: the two-tower cloze generator is "
                "its own network, it cannot share the discriminator's weights"
            )
        if not self.has_discriminator:
            raise ConfigError(
                "two_tower_generator: needs electra_objective or electric_objective; the BERT "
                "masked-LM baseline has no place for a cloze generator"
            )
        return {"two_tower_generator": True}

    @property
    def has_discriminator(self) -> bool:
        """Whether there is a discriminator: ELECTRA or Electric (not the BERT baseline)."""
        return self.electra_objective or self.electric_objective

    def discriminator_config(self) -> ModelConfig:
        """The discriminator's encoder config (the original's `get_bert_config`)."""
        hidden, layers = MODEL_SIZES[self.model_size]
        args: dict[str, Any] = {
            "vocab_size": self.vocab_size,
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "max_position_embeddings": max(512, self.max_seq_length),
        }
        args.update(self.model_hparam_overrides)
        hidden = args["hidden_size"]
        args.setdefault("num_attention_heads", max(1, hidden // 64))
        args.setdefault("intermediate_size", 4 * hidden)
        args["embedding_size"] = self.embedding_size or args.get("embedding_size") or hidden
        return ModelConfig.from_dict(args)

    def generator_config(self) -> ModelConfig:
        """The generator's encoder config (the original's `get_generator_config`).

        Hidden = round(H * generator_hidden_size), layers = round(L * generator_layers),
        heads = max(1, hidden // 64), FFN = 4 * hidden; embeddings are the discriminator's width,
        except with `untied_generator_embeddings`: the generator's own tables are then its
        hidden width, with no projection (run_pretraining.py passes `embedding_size=None`).
        """
        disc = self.discriminator_config()
        if not self.untied_generator:
            return disc
        hidden = int(round(disc.hidden_size * self.generator_hidden_size))
        return dataclasses.replace(
            disc,
            initializer_range=self.generator_initializer_range or disc.initializer_range,
            hidden_size=hidden,
            num_hidden_layers=int(round(disc.num_hidden_layers * self.generator_layers)),
            num_attention_heads=max(1, hidden // 64),
            intermediate_size=4 * hidden,
            embedding_size=None if self.untied_generator_embeddings else disc.embedding_size,
        )

    # ------------------------------------------------------------------ paths
    def resolved_model_dir(self) -> str:
        return self.model_dir or os.path.join(self.data_dir, "models", self.model_name)

    def resolved_vocab_file(self) -> str:
        return self.vocab_file or os.path.join(self.data_dir, "vocab.txt")

    def resolved_pretrain_tfrecords(self) -> str:
        return self.pretrain_tfrecords or os.path.join(
            self.data_dir, "pretrain_tfrecords", "pretrain_data.tfrecord*"
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


# ---------------------------------------------------------------------- loading helpers
def closest_key(key: str, valid: list[str]) -> str | None:
    matches = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return matches[0] if matches else None


def check_known_keys(
    keys: Iterable[str], valid: Sequence[str], unknown: Callable[[str], str]
) -> None:
    """A ConfigError for the first of `keys` not in `valid`: `unknown(key)`, then the closest
    valid key."""
    for key in keys:
        if key not in valid:
            hint = closest_key(key, valid)
            suggestion = f"; did you mean {hint!r}?" if hint else ""
            raise ConfigError(unknown(key) + suggestion)


def replace_checked(config: Any, values: Mapping[str, Any], where: str = "config") -> Any:
    """`dataclasses.replace` that rejects unknown keys, naming the closest valid one."""
    valid = [f.name for f in dataclasses.fields(config)]
    check_known_keys(values, valid, lambda key: f"Unknown hparam {key!r} in {where}")
    return dataclasses.replace(config, **dict(values))


def parse_hparams(hparams: str | None) -> dict[str, Any]:
    """`--hparams`: a JSON object string, or a path to a .json file (as the original)."""
    if hparams is None or not hparams.strip():
        return {}
    text = hparams.strip()
    where = "--hparams"
    if text.endswith(".json"):
        where = text
        try:
            with open(text, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"--hparams: cannot read {hparams}: {e}") from e
    try:
        values = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: invalid JSON ({e})") from e
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(values).__name__}")
    # Keys starting with "_" are comments (JSON has none).
    return {k: v for k, v in values.items() if not k.startswith("_")}


def preset_path(preset: str) -> str:
    if preset.endswith(".json") or os.sep in preset:
        return preset
    return os.path.join(CONFIGS_DIR, f"{preset}.json")


def load_preset(preset: str | None) -> dict[str, Any]:
    if not preset:
        return {}
    path = preset_path(preset)
    if not os.path.exists(path):
        available = sorted(p[:-5] for p in os.listdir(CONFIGS_DIR) if p.endswith(".json"))
        raise ConfigError(f"preset {preset!r}: no file {path}; available: {', '.join(available)}")
    return parse_hparams(path)


# The original's debug settings; like the original, explicit user values win over them.
DEBUG_SETTINGS: dict[str, Any] = {
    "model_hparam_overrides": {
        "hidden_size": 144,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "intermediate_size": 576,
    },
    "train_batch_size": 8,
    "num_train_steps": 20,
    "eval_batch_size": 4,
    "iterations_per_loop": 1,
    "num_eval_steps": 2,
}


def pretraining_config(
    model_name: str = "electra",
    data_dir: str = "data",
    preset: str | None = None,
    hparams: str | Mapping[str, Any] | None = None,
    machine: device_defaults.Machine | None = None,
) -> PretrainingConfig:
    """Defaults -> preset -> hparams -> derived values ("auto" ones for `machine`, see
    `PretrainingConfig.resolve`)."""
    config = PretrainingConfig(model_name=model_name, data_dir=data_dir)
    preset_values = load_preset(preset)
    config = replace_checked(config, preset_values, where=f"preset {preset}")
    overrides = parse_hparams(hparams) if isinstance(hparams, str) or hparams is None else hparams
    config = replace_checked(config, overrides, where="hparams")
    if config.debug:
        config = dataclasses.replace(config, **DEBUG_SETTINGS)
        config = replace_checked(config, {**preset_values, **overrides}, where="hparams")
    explicit = {**preset_values, **overrides}
    if config.electric_objective and explicit.get("two_tower_generator") is False:
        # The original applies explicit values after forcing the two-tower generator, and then
        # fails building the graph (Electric's energy needs the cloze model's log q).
        raise ConfigError(
            "two_tower_generator: false is set explicitly, but electric_objective needs the "
            "two-tower cloze generator"
        )
    return config.resolve(machine)


def save_config(config: Any, path: str) -> None:
    """Writes a config as JSON atomically (write to a temporary file, then rename)."""
    write_json(path, dataclasses.asdict(config), indent=2, sort_keys=True)
