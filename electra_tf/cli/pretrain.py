"""`python -m electra_tf.pretrain`: the original's `run_pretraining.py` command line.

    python -m electra_tf.pretrain --data-dir DATA --model-name NAME [--preset small]
        [--hparams '{"num_train_steps": 1000}' | --hparams my_hparams.json]
        [--allow-config-change KEY[,KEY]]

Config: dataclass defaults -> `configs/<preset>.json` -> `--hparams` -> derived values.
`do_train` (default) trains and resumes from the model dir's latest checkpoint; `do_eval`
evaluates the latest checkpoint (`--all-checkpoints`: every kept one, oldest first). A resume
refuses settings that change the model, its data or its objective (`--allow-config-change`
lets named ones through; docs/configuration.md).

Exit codes: 0 done; 2 bad configuration or input (hparams, vocabulary, TFRecords, TF_CONFIG,
workers that disagree, a refused resume), a model dir in use by another run or not writable;
1 the disk filled up (the partial checkpoint is removed, the previous one kept); 128 + signal
when stopped by SIGINT (130) or SIGTERM (143) after saving a checkpoint at the step reached.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence

from electra_tf.config import (
    ConfigError,
    ResolvedPretrainingConfig,
    load_preset,
    parse_hparams,
    pretraining_config,
)
from electra_tf.runtime.device_defaults import Machine, probe_machine


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m electra_tf.pretrain", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data-dir", required=True, help="location of data files and models")
    parser.add_argument("--model-name", required=True, help="name of the model (its directory)")
    parser.add_argument(
        "--preset", default=None, help="configs/<preset>.json: tiny, small, base, large, ..."
    )
    parser.add_argument(
        "--hparams", default="{}", help="JSON object, or a path to a .json file, of overrides"
    )
    parser.add_argument(
        "--allow-config-change",
        default="",
        metavar="KEY[,KEY]",
        help="resume with new values of these settings although they change the run's data "
        "or objective (e.g. train_batch_size,max_seq_length); see docs/configuration.md",
    )
    parser.add_argument(
        "--all-checkpoints",
        action="store_true",
        help="with do_eval: evaluate every kept checkpoint, not only the latest",
    )
    return parser.parse_args(argv)


def resolve_vocab(
    config: ResolvedPretrainingConfig, explicit: set[str]
) -> ResolvedPretrainingConfig:
    """Reads the vocab, and sizes the embedding table from it unless vocab_size was given."""
    from electra_tf.data.tokenization import id_count, load_vocab

    path = config.resolved_vocab_file()
    try:
        vocab = load_vocab(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"vocab_file: {e}") from e
    size = id_count(vocab)
    if size == config.vocab_size:
        return config
    if "vocab_size" in explicit:
        if size > config.vocab_size:
            raise ConfigError(
                f"vocab_size: {config.vocab_size} is smaller than the {size} entries of {path}"
            )
        return config
    print(
        f"vocab_size: using {size}, the size of {path} (the default was {config.vocab_size})",
        flush=True,
    )
    return dataclasses.replace(config, vocab_size=size)


def build_config(
    args: argparse.Namespace, machine: Machine | None = None
) -> ResolvedPretrainingConfig:
    """The run's config; "auto" settings are chosen for `machine` (see `resolve`)."""
    config = pretraining_config(
        args.model_name, args.data_dir, args.preset, args.hparams, machine=machine
    )
    explicit = set(load_preset(args.preset)) | set(parse_hparams(args.hparams))
    return resolve_vocab(config, explicit)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # The one question to the hardware: the "auto" settings and the run both use its answer.
    machine = probe_machine()
    try:
        config = build_config(args, machine)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stop_with_parent()
    from electra_tf.data.pretraining_input import InputDataError
    from electra_tf.runs.pretraining_model import TrainingDiverged
    from electra_tf.runtime.run_lock import LockError

    try:
        allowed = [key.strip() for key in args.allow_config_change.split(",") if key.strip()]
        return _run(config, machine, args.all_checkpoints, allowed)
    except (ConfigError, FileNotFoundError, InputDataError, LockError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (OSError, TrainingDiverged) as e:  # disk full, permissions, NaN: the message says
        print(f"error: {e}", file=sys.stderr)
        return 1


def _run(
    config: ResolvedPretrainingConfig, machine: Machine, all_checkpoints: bool, allowed: list[str]
) -> int:
    """Starts TensorFlow (thread pools, then the strategy, then its context) and trains or
    evaluates; the exit code."""
    from electra_tf.runs.pretraining import evaluate, train
    from electra_tf.runs.strategy import build_strategy
    from electra_tf.runtime.tf_startup import start_tensorflow

    strategy = start_tensorflow(
        config.intra_op_threads, config.inter_op_threads, lambda: build_strategy(config)
    )
    if config.do_train:
        result = train(config, machine=machine, strategy=strategy, allow_changes=allowed)
        return 128 + result.interrupted_by if result.interrupted_by else 0
    prefixes = [None]
    if all_checkpoints:
        from electra_tf.checkpoints.training_state import kept_checkpoints

        prefixes = kept_checkpoints(config.resolved_model_dir()) or [None]
    for prefix in prefixes:
        evaluate(config, prefix, strategy=strategy)
    return 0


def stop_with_parent() -> None:
    """Under `make pretrain` (ELECTRA_STOP_WITH_PARENT=1): SIGTERM when make dies, so a
    `timeout` or kill of make saves and stops the run instead of orphaning it (Linux only)."""
    if os.environ.get("ELECTRA_STOP_WITH_PARENT") != "1" or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
