"""Convert ELECTRA weights between this project's checkpoints, the original TF1 layout,
Hugging Face safetensors folders, Model Garden checkpoints and KerasHub presets.

    python -m electra_tf.convert --from original --to hf --input electra_small \\
        --output electra_small_hf [--config config.json] [--dry-run] [--overwrite]

`--from auto` (the default) detects the input format. `--dry-run` prints every
"source name [shape] -> target name [shape]" line and writes nothing. An existing output is
replaced only with `--overwrite`, and only when it holds nothing but what an export to that
format writes; an output that is (or holds, or sits in) the input, or a link, is refused, and a
second conversion to one output is refused while the first holds its lock
(`electra_tf/checkpoints/output.py`). The formats are the registered ones
(`electra_tf/checkpoints/format_registry.py`), their names spelled from `electra_tf/checkpoints/names.py`; see
docs/checkpoints.md. The tokenizer's vocabulary (`--vocab-file`, else the one found with the
input) goes with the weights: into a KerasHub preset's tokenizer, or beside them as vocab.txt;
its ids must match the embedding rows (`--vocab-padding`: or be fewer).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

import numpy as np

from electra_tf.checkpoints import format_registry
from electra_tf.checkpoints.names import GENERATOR_SCOPES
from electra_tf.config import ConfigError, PretrainingConfig

# The registered formats (`electra_tf/checkpoints/format_registry.py`, which imports no TensorFlow, so that
# --help stays quick); equal to `electra_tf.checkpoints.FORMATS`.
FORMATS = format_registry.names()


def _selected(source, float16: bool, discriminator_only: bool):
    """`source` without the generator's tensors and/or with float32 tensors as float16."""
    weights = source.weights
    if discriminator_only:
        weights = {n: v for n, v in weights.items() if not n.startswith(GENERATOR_SCOPES)}
    if float16:
        weights = {
            n: v.astype(np.float16) if v.dtype == np.float32 else v for n, v in weights.items()
        }
    return dataclasses.replace(source, weights=weights)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m electra_tf.convert", description=__doc__.split("\n\n")[0]
    )
    formats = format_registry.names()  # as registered now (a plugin may have added one)
    listed = "; ".join(f"{f}: {format_registry.description(f)}" for f in formats)
    parser.add_argument(
        "--from",
        dest="src",
        default="auto",
        choices=["auto", *formats],
        help=f"the input's format (auto: detected). {listed}",
    )
    parser.add_argument(
        "--to", dest="dst", required=True, choices=formats, help="the output's format"
    )
    parser.add_argument("--input", required=True, help="checkpoint prefix or directory")
    parser.add_argument("--output", required=True, help="directory to create")
    parser.add_argument(
        "--config",
        help="PretrainingConfig JSON (saved config or overrides); default: config.json beside "
        "a native checkpoint, the HF config.json files, or inferred from shapes",
    )
    parser.add_argument(
        "--vocab-file",
        help="the vocabulary to write with the weights (a KerasHub preset's tokenizer, vocab.txt "
        "elsewhere); default: the one with the input (vocab.txt beside it, a KerasHub preset's "
        "own, a native run's vocab_file), if any",
    )
    parser.add_argument(
        "--vocab-padding",
        action="store_true",
        help="accept a vocabulary with fewer entries than the model's embedding rows (a table "
        "padded on purpose); any other difference in size is an error",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the mapping, write nothing")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument(
        "--float16",
        action="store_true",
        help="--to hf only: store float32 tensors as float16 (half the size; loading casts back)",
    )
    parser.add_argument(
        "--discriminator-only",
        action="store_true",
        help="leave the generator out (e.g. to ship a model for fine-tuning)",
    )
    return parser.parse_args(argv)


def _dry_run(source, dst: str) -> None:
    """Prints every "source name [shape] -> target name [shape]" line; writes nothing. The same
    completeness check as a real conversion; native maps to its model."""
    from electra_tf import checkpoints
    from electra_tf.checkpoints.mapping import mapping_lines

    kind, model = checkpoints.check_complete(source)
    native_vars = None
    if dst == "native":
        if model is None:
            raise checkpoints.CheckpointError(f"a {kind} on its own has no native form")
        native_vars = model.variable_map()
    print("\n".join(mapping_lines(source, dst, native_vars)))
    step = "none" if source.global_step is None else source.global_step
    print(
        f"# {len(source.weights)} tensors, {source.fmt} -> {dst}, global_step {step}; nothing written"
    )


def _vocab_file(args: argparse.Namespace, source) -> str | None:
    """--vocab-file, else the vocabulary that came with the input (a native run's config names
    its own), else None; checked against the weights' embedding rows (and, for a KerasHub
    tokenizer, for the special tokens it needs) before anything is written."""
    import os

    from electra_tf.checkpoints.formats import plugin
    from electra_tf.checkpoints.pretrained import check_vocab_rows, embedding_rows, find_vocab
    from electra_tf.data.tokenization import SPECIAL_TOKENS

    if args.vocab_file:
        if not os.path.isfile(args.vocab_file):
            raise FileNotFoundError(f"--vocab-file {args.vocab_file}: no such file")
        found = args.vocab_file
    else:
        found = find_vocab(args.input, source.fmt)
    if found is None and source.fmt == "native":
        recorded = source.config.resolved_vocab_file()
        found = recorded if os.path.isfile(recorded) else None
    if found is not None:
        required = SPECIAL_TOKENS if plugin(args.dst).vocab_in_tokenizer else ()
        model = f"{source.path} ({source.fmt})"
        check_vocab_rows(found, embedding_rows(source), model, required, args.vocab_padding)
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.float16 and args.dst != "hf":
        print("error: --float16 is for --to hf (native and original stay float32)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    from electra_tf.runtime.tf_startup import start_tensorflow

    start_tensorflow()  # before TensorFlow's first import: its CPU-only start-up noise is dropped
    import tensorflow as tf

    from electra_tf import checkpoints
    from electra_tf.checkpoints.files import first_line
    from electra_tf.checkpoints.hf import HFFormatError
    from electra_tf.checkpoints.safetensors_io import SafetensorsError
    from electra_tf.runtime.run_lock import LockError

    try:
        config: PretrainingConfig | None = None
        if args.config:
            config = checkpoints.read_config_file(args.config)
        source = checkpoints.read_weights(args.input, args.src, config)
        source = _selected(source, args.float16, args.discriminator_only)
        if args.dry_run:
            _dry_run(source, args.dst)
            return 0
        vocab = _vocab_file(args, source)
        checkpoints.write_weights(
            source, args.output, args.dst, overwrite=args.overwrite, vocab_file=vocab
        )
    except (
        checkpoints.CheckpointError,
        ConfigError,
        HFFormatError,
        SafetensorsError,
        LockError,
        OSError,  # a read-only or full disk while writing: the message names the path
    ) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except tf.errors.OpError as e:  # what the checkpoint readers did not foresee: still one line
        print(f"error: {args.input}: {first_line(e)}", file=sys.stderr)
        return 2
    step = "" if source.global_step is None else f" (global_step {source.global_step})"
    print(f"wrote {args.output} ({args.dst}) from {source.path} ({source.fmt}){step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
