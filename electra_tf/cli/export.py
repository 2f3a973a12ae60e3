"""SavedModels for TF Serving: `python -m electra_tf.export` (behind `make export`).

    python -m electra_tf.export --data-dir D --model-name M [--task T] [--kind K]
        [--output-dir DIR] [--version N] [--overwrite] [--jit-compile] [--precision P]

Without `--task` it exports the pre-trained discriminator (replaced-token probabilities and a
sentence score; for an Electric model, Electric's log-likelihood estimates per token and per
sentence, also under the signature `score_text`) and the bare encoder (sequence output and
[CLS] vector) from the latest checkpoint in `<data_dir>/models/<model_name>/`; with `--task`
the fine-tuned task model from `<model_dir>/finetuning_models/<task>_model_<trial>/`. Each
lands in TF Serving's versioned layout, `<output_dir>/<model_name>_<kind or task>/<version>/`,
with `vocab.txt`, the resolved `config.json` and `export.json` (kind, signatures, labels) as
assets. The signatures are described in `electra_tf/serving/module.py`.

A version directory is written under a temporary name and renamed into place, so TF Serving,
which watches the numbered directories, never loads a half-written model. An existing version
is replaced only with `--overwrite` (`electra_tf/serving/saved_model.py`).

Each version also gets `serving_flags.txt`: the model server's thread flags for this export
on this machine, which the command prints too (`electra_tf.serving.load` applies them in
Python). `--precision bfloat16` stores the weights in bfloat16 and computes the products in
bfloat16, with the same signatures (`electra_tf/serving/precision.py`); int8 is refused, with
the reason.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from electra_tf.config import DEFAULT_QUERY_BLOCKS, MAX_QUERY_BLOCKS, query_blocks_problem

if TYPE_CHECKING:
    from electra_tf.checkpoints import SourceWeights


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m electra_tf.export", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data-dir", required=True, help="the data dir of pretrain/finetune")
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--task", help="export this fine-tuned task (e.g. sst, sts, squad, chunk)")
    parser.add_argument(
        "--kind",
        choices=("all", "discriminator", "encoder"),
        default="all",
        help="without --task: which pre-trained model(s) to export (default both)",
    )
    parser.add_argument("--checkpoint", help="a checkpoint (dir or prefix) instead of the latest")
    parser.add_argument("--trial", type=int, default=1, help="fine-tuning trial to export")
    parser.add_argument("--vocab-file", help="default: <model dir>/vocab.txt or the config's")
    parser.add_argument("--output-dir", help="default: <data_dir>/models/<model_name>/serving")
    parser.add_argument("--version", type=int, help="default: one past the highest existing")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing version")
    parser.add_argument("--max-seq-length", type=int, help="default: the config's max_seq_length")
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile the model's forward pass with XLA (TF Serving then needs "
        "--xla_cpu_compilation_enabled=true; XLA compiles once per input shape)",
    )
    parser.add_argument(
        "--query-blocks",
        type=int,
        default=DEFAULT_QUERY_BLOCKS,
        help="groups of positions the encoder runs side by side, as independent ops (default "
        f"{DEFAULT_QUERY_BLOCKS}; 1 = one group, at most {MAX_QUERY_BLOCKS}; best with "
        "inter-op threads >= this and intra-op threads 1; ignored with --jit-compile)",
    )
    parser.add_argument(
        "--precision",
        choices=("float32", "bfloat16", "int8"),
        default="float32",
        help="float32 (default), or bfloat16: bfloat16 weights and matrix products, float32 "
        "LayerNorms, softmax and outputs; faster only on CPUs with AVX512_BF16 or AMX-BF16. "
        "int8 is refused: TensorFlow has no int8 path for a standard CPU SavedModel",
    )
    parser.add_argument(
        "--pretrained",
        help="without --task: a shipped model folder (weights + vocab.txt), as --checkpoint "
        "DIR --vocab-file DIR/vocab.txt",
    )
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    return args


# TF Serving reads a version directory's name as an int64.
MAX_VERSION = 2**63 - 1
# [CLS], one token, [SEP]; the upper bound is the model's position table (`kinds.check_length`).
MIN_SEQ_LENGTH = 3


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Bounds that need no model: each a one-line usage error (exit 2) naming the flag."""
    problem = query_blocks_problem(args.query_blocks)
    if problem:
        parser.error(f"--query-blocks: {problem}")
    if args.version is not None and not 0 <= args.version <= MAX_VERSION:
        parser.error(
            f"--version {args.version}: TF Serving versions are integers in [0, {MAX_VERSION}] "
            "(int64)"
        )
    if args.max_seq_length is not None and args.max_seq_length < MIN_SEQ_LENGTH:
        parser.error(
            f"--max-seq-length {args.max_seq_length}: must be at least {MIN_SEQ_LENGTH} "
            "([CLS], a token, [SEP]) and at most the model's max_position_embeddings"
        )
    if args.pretrained and args.task:
        parser.error("--pretrained exports a pre-trained model; --task a fine-tuned one")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from electra_tf.runtime.tf_startup import start_tensorflow

    start_tensorflow()
    from electra_tf.runtime.run_lock import (
        LockError,
        RunLock,
        Terminated,
        report_stop,
        sigterm_raises,
    )
    from electra_tf.serving.precision import check_precision
    from electra_tf.serving.saved_model import ExportError

    try:
        check_precision(args.precision)  # before anything is read or written
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    model_dir = os.path.join(args.data_dir, "models", args.model_name)
    output_dir = args.output_dir or os.path.join(model_dir, "serving")
    kinds = ("discriminator", "encoder") if args.kind == "all" else (args.kind,)
    names = [f"{args.model_name}_{k}" for k in ((args.task,) if args.task else kinds)]
    if not (os.path.isdir(model_dir) or args.checkpoint or args.pretrained):
        # Before the lock, which would create <model_dir>/serving for a model that is not there.
        print(f"error: {missing_model(args.data_dir, model_dir)}", file=sys.stderr)
        return 1
    try:
        # SIGTERM as an exception: the lock and a half-written version are cleaned up on the
        # way out (the default SIGTERM left the lock file behind).
        with sigterm_raises(), RunLock(output_dir, ".export.lock", "export output directory"):
            return _export(args, model_dir, output_dir, names, kinds)
    except (ExportError, ValueError, OSError, LockError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (Terminated, KeyboardInterrupt) as stop:
        return report_stop(
            stop,
            "versions written before the stop are whole, the one under way was removed; "
            f"{output_dir} is unlocked",
        )


def missing_model(data_dir: str, model_dir: str) -> str:
    """The error for a --model-name with no folder: the models `data_dir` holds."""
    models_dir = os.path.join(data_dir, "models")
    models = sorted(os.listdir(models_dir)) if os.path.isdir(models_dir) else []
    held = f"{models_dir} holds {', '.join(models)}" if models else f"{models_dir} holds no model"
    return f"{model_dir}: no such model folder ({held}); or name weights with --checkpoint"


def _export(
    args: argparse.Namespace,
    model_dir: str,
    output_dir: str,
    names: list[str],
    kinds: tuple[str, ...],
) -> int:
    from electra_tf.serving import sources
    from electra_tf.serving.saved_model import check_writable, write_export

    if args.version is not None:
        # Fail before loading and tracing anything when a target version is taken.
        for name in names:
            check_writable(os.path.join(output_dir, name, str(args.version)), args.overwrite)
    if args.task:
        spec = sources.task_spec(
            args.model_name, model_dir, args.task, args.trial, args.checkpoint,
            args.vocab_file, args.max_seq_length, args.jit_compile, args.query_blocks,
            args.precision,
        )  # fmt: skip
        specs = [spec]
    else:
        checkpoint, vocab_file, source = _pretrained_source(args, model_dir)
        specs = sources.pretrained_specs(
            args.model_name, model_dir, kinds, checkpoint, vocab_file,
            args.max_seq_length, args.jit_compile, args.query_blocks, source, args.precision,
        )  # fmt: skip
    for spec in specs:
        path = write_export(spec, output_dir, args.version, args.overwrite)
        print(f"exported {spec.kind} ({args.precision}) -> {path}")
        print(_flags_summary(path))
    return 0


def _flags_summary(path: str) -> str:
    """The flags of the export's `serving_flags.txt`, as one line to paste into a model
    server's command."""
    from electra_tf.serving.saved_model import SERVING_FLAGS_FILE

    flags_file = os.path.join(path, SERVING_FLAGS_FILE)
    with open(flags_file, encoding="utf-8") as f:
        flags = [line.strip() for line in f if line.startswith("--")]
    return f"  serve it with: {' '.join(flags)}  (written to {flags_file})"


def _pretrained_source(
    args: argparse.Namespace, model_dir: str
) -> tuple[str | None, str | None, SourceWeights | None]:
    """(checkpoint, vocab_file, weights or None) for a pre-trained export. `--pretrained DIR`
    is `--checkpoint DIR --vocab-file DIR/vocab.txt`, each unless given: DIR is read once
    (`checkpoints.read_pretrained`, with the config saved beside it or in the model dir)."""
    if not args.pretrained:
        return args.checkpoint, args.vocab_file, None
    vocab_file = args.vocab_file or os.path.join(args.pretrained, "vocab.txt")
    if args.checkpoint:
        return args.checkpoint, vocab_file, None
    from electra_tf import checkpoints

    saved = checkpoints.saved_config(args.pretrained, model_dir)
    pretrained = checkpoints.read_pretrained(args.pretrained, config=saved)
    return pretrained.path, args.vocab_file or pretrained.vocab_file, pretrained.weights()


if __name__ == "__main__":
    sys.exit(main())
