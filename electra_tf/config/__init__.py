"""Typed configuration: the schema, and the one place a config is resolved.

Defaults equal the original's `configure_pretraining.py` (google-research/electra). Loading order,
as the STYLE guide asks: dataclass defaults -> preset (configs/<name>.json) -> user overrides
(`--hparams` JSON string or .json file) -> derived values, computed once after every override.
The original computed `max_predictions_per_seq` *before* its size defaults changed
`max_seq_length`/`mask_prob`; here derived values always see the final settings.

Resolved once. A `PretrainingConfig` is what a user writes: it may say "auto" (precision,
jit_compile, parallel_micro_batches, the thread counts) and holds no derived value. `resolve()`
returns a `ResolvedPretrainingConfig`: validated, every "auto" answered for the machine, the
derived values (the encoders' `ModelConfig`s among them) computed once. Everything below a run
takes that type and never resolves again. Only two kinds of caller resolve:

- a run or a command (`runs/`, `cli/pretrain.py` through `pretraining_config`), which know
  the machine;
- `config_from_values(values, where)`, the one constructor of a config from values the program
  READ: a saved config.json, or a checkpoint's metadata (HF config.json files, Model Garden's
  encoder_config.json, KerasHub's config, variable shapes). One rule for keys there: an unknown
  key is an error naming it and the closest valid key (as `--hparams`); `RETIRED_KEYS` are
  ignored. It resolves for `device_defaults.PORTABLE`: saved values are concrete already.

`dataclasses.replace` on a resolved config validates and derives again (how a checkpoint reader
corrects one setting). tests/test_config_resolution.py keeps the list of `resolve(` callers.
Checks live in `config_checks`, encoder configs in `model_config`, presets and `--hparams` in
`presets`; every name stays importable from here.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from electra_tf.config.checks import (  # noqa: F401 (re-exported)
    DEFAULT_QUERY_BLOCKS,
    INIT_CHECKPOINT_FORMATS,
    MASKED_LM_VARIANTS,
    MAX_QUERY_BLOCKS,
    OBJECTIVE_VARIANTS,
    PRECISIONS,
    ConfigError,
    check_known_keys,
    check_micro_batches,
    check_model_name,
    check_no_auto,
    check_objective_variant,
    check_precision,
    check_ranges,
    check_types,
    closest_key,
    objective_changes,
    query_blocks_problem,
    replace_checked,
    thread_changes,
)
from electra_tf.config.model import (  # noqa: F401 (re-exported)
    MODEL_SIZES,
    ModelConfig,
    check_head_split,
    check_model_overrides,
    derive_discriminator_config,
    derive_generator_config,
    derive_max_predictions,
)
from electra_tf.config.presets import (  # noqa: F401 (re-exported)
    CONFIGS_DIR,
    DEBUG_SETTINGS,
    load_preset,
    parse_hparams,
    preset_path,
)
from electra_tf.runtime import device_defaults  # pure "auto" answers; no TensorFlow import
from electra_tf.runtime.atomic_io import write_json

# Keys that config.json files this project once wrote hold and no field reads any more: ignored
# on reading (key -> what became of it). None yet: no field was ever removed or renamed (this
# module's history); one that is moves here.
RETIRED_KEYS: dict[str, str] = {}


@dataclasses.dataclass(frozen=True)
class PretrainingConfig:
    """Pre-training hyperparameters. Field names and defaults are the original's.

    Fields marked "ours" are additions; their defaults keep the original's behaviour.
    Derived values (`max_predictions_per_seq`, the two encoders' model configs) are computed
    by `resolve()`, which returns a `ResolvedPretrainingConfig`.
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
    # "auto" is resolved by resolve(machine) (electra_tf/runtime/device_defaults.py): on CPU,
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

    def resolve(self, machine: device_defaults.Machine | None = None) -> ResolvedPretrainingConfig:
        """Validates and fills the derived values. Idempotent, and pure: it never asks the
        hardware.

        "auto" settings (precision, jit_compile, parallel_micro_batches, the thread counts)
        are chosen for `machine` (`device_defaults.probe_machine()`, which a run calls once).
        Without one they resolve for `device_defaults.PORTABLE`, an unknown CPU: float32, no
        XLA, one micro-batch and TensorFlow's default thread pools (0 / 0); the right answer
        for reading a saved config, whose values are concrete already."""
        machine = device_defaults.PORTABLE if machine is None else machine
        self._validate()
        changes: dict[str, Any] = objective_changes(self)
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
        check_micro_batches(self, parts)
        changes.update(thread_changes(self, machine, parts))
        changes["max_predictions_per_seq"] = derive_max_predictions(self)
        if self.precision == "auto":
            changes["precision"] = device_defaults.auto_precision(machine)
        if self.jit_compile == "auto":
            changes["jit_compile"] = device_defaults.auto_jit_compile(machine)
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(PretrainingConfig)}
        return ResolvedPretrainingConfig(**{**values, **changes})

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

    @property
    def has_discriminator(self) -> bool:
        """Whether there is a discriminator: ELECTRA or Electric (not the BERT baseline)."""
        return self.electra_objective or self.electric_objective

    def discriminator_config(self) -> ModelConfig:
        """The discriminator's encoder config (the original's `get_bert_config`); a resolved
        config returns the one it derived once."""
        return derive_discriminator_config(self)

    def generator_config(self) -> ModelConfig:
        """The generator's encoder config (the original's `get_generator_config`, see
        `model_config.derive_generator_config`); a resolved config returns the one it derived
        once."""
        return derive_generator_config(self)

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


@dataclasses.dataclass(frozen=True)
class ResolvedPretrainingConfig(PretrainingConfig):
    """A `PretrainingConfig` after `resolve()` (or `config_from_values`): validated, no "auto"
    left, and its derived values computed once: `max_predictions_per_seq`, Electric's
    `two_tower_generator`, the encoders' configs `discriminator` and `generator` (which
    `discriminator_config()` / `generator_config()` return). `dataclasses.replace` builds
    another one, validated and derived again: a derived value never goes stale."""

    precision: str = "float32"
    jit_compile: bool = False
    parallel_micro_batches: int = 1
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    max_predictions_per_seq: int = 19  # derived, whatever is passed

    def __post_init__(self) -> None:
        check_no_auto(self)
        self._validate()
        derived = objective_changes(self)  # also refuses the combinations it cannot build
        check_micro_batches(self, self.parallel_micro_batches)
        thread_changes(self, device_defaults.PORTABLE, self.parallel_micro_batches)
        derived["max_predictions_per_seq"] = derive_max_predictions(self)
        for key, value in derived.items():
            object.__setattr__(self, key, value)  # frozen: set once, here
        models = (derive_discriminator_config(self), derive_generator_config(self))
        object.__setattr__(self, "_models", models)

    @property
    def discriminator(self) -> ModelConfig:
        """The discriminator's encoder config, derived once."""
        return self._models[0]

    @property
    def generator(self) -> ModelConfig:
        """The generator's encoder config (the discriminator's with `untied_generator`
        false), derived once."""
        return self._models[1]

    def discriminator_config(self) -> ModelConfig:
        return self.discriminator

    def generator_config(self) -> ModelConfig:
        return self.generator


def check_resolved(config: Any, who: str) -> ResolvedPretrainingConfig:
    """`config` itself when it is resolved; else a TypeError naming `who` and the fix (a
    PretrainingConfig that was never resolved still holds "auto" and no derived values)."""
    if not isinstance(config, ResolvedPretrainingConfig):
        raise TypeError(
            f"{who}: config must be resolved (pretraining_config(...), or "
            f"PretrainingConfig(...).resolve()), not a {type(config).__name__}"
        )
    return config


def config_from_values(values: Mapping[str, Any], where: str) -> ResolvedPretrainingConfig:
    """THE constructor of a config from values the program read (a saved config.json, a
    checkpoint's metadata): defaults <- `values`, resolved for `device_defaults.PORTABLE`.
    An unknown key is a ConfigError naming `where`, the key and the closest valid key; keys
    in `RETIRED_KEYS` and keys starting with "_" (comments) are ignored."""
    kept = {k: v for k, v in values.items() if k not in RETIRED_KEYS and not k.startswith("_")}
    return replace_checked(PretrainingConfig(), kept, where=where).resolve()


def read_config_file(path: str) -> ResolvedPretrainingConfig:
    """A config from a JSON file: a saved resolved config (a run's config.json) or an object
    of overrides, read by `config_from_values`. Errors name the file."""
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: cannot read a config ({e})") from e
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: a config is a JSON object, not {type(values).__name__}")
    return config_from_values(values, path)


def pretraining_config(
    model_name: str = "electra",
    data_dir: str = "data",
    preset: str | None = None,
    hparams: str | Mapping[str, Any] | None = None,
    machine: device_defaults.Machine | None = None,
) -> ResolvedPretrainingConfig:
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
