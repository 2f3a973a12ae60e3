"""Convert ELECTRA weights between this project's checkpoints, the original TF1 layout and
Hugging Face safetensors folders.

    python -m electra_tf.convert --from original --to hf --input electra_small \\
        --output electra_small_hf [--config config.json] [--dry-run] [--overwrite]

`--from auto` (the default) detects the input format. `--dry-run` prints every
"source name [shape] -> target name [shape]" line and writes nothing. An existing output is
replaced only with `--overwrite`. The name maps live in `electra_tf/checkpoints/hf.py` (HF) and
in each model's `variable_map()` (native); see the README's checkpoints section.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

import numpy as np

from electra_tf.config import ConfigError, PretrainingConfig

# The formats `electra_tf.checkpoints` reads and writes (its FORMATS; kept here so that --help
# imports no TensorFlow, and checked equal by tests/test_reliability.py).
FORMATS = ("native", "original", "hf")
# Variable scopes that belong to the generator alone (the embeddings are the discriminator's).
GENERATOR_SCOPES = (
    "generator/",
    "generator_predictions/",
    "generator_ltr/",
    "generator_rtl/",
    "cloze_predictions/",
)


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
    parser.add_argument("--from", dest="src", default="auto", choices=["auto", *FORMATS])
    parser.add_argument("--to", dest="dst", required=True, choices=FORMATS)
    parser.add_argument("--input", required=True, help="checkpoint prefix or directory")
    parser.add_argument("--output", required=True, help="directory to create")
    parser.add_argument(
        "--config",
        help="PretrainingConfig JSON (saved config or overrides); default: config.json beside "
        "a native checkpoint, the HF config.json files, or inferred from shapes",
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.float16 and args.dst != "hf":
        print("error: --float16 is for --to hf (native and original stay float32)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    from electra_tf.tf_startup import start_tensorflow

    start_tensorflow()  # before TensorFlow's first import: its CPU-only start-up noise is dropped
    import tensorflow as tf

    from electra_tf import checkpoints
    from electra_tf.checkpoints.files import first_line
    from electra_tf.checkpoints.hf import HFFormatError
    from electra_tf.checkpoints.safetensors_io import SafetensorsError

    try:
        config: PretrainingConfig | None = None
        if args.config:
            config = checkpoints.read_config_file(args.config)
        source = checkpoints.read_weights(args.input, args.src, config)
        source = _selected(source, args.float16, args.discriminator_only)
        if args.dry_run:
            _dry_run(source, args.dst)
            return 0
        checkpoints.write_weights(source, args.output, args.dst, overwrite=args.overwrite)
    except (checkpoints.CheckpointError, ConfigError, HFFormatError, SafetensorsError) as e:
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
