"""SavedModels for TF Serving: `python -m electra_tf.export` (behind `make export`).

    python -m electra_tf.export --data-dir D --model-name M [--task T] [--kind K]
        [--output-dir DIR] [--version N] [--overwrite]

Without `--task` it exports the pre-trained discriminator (replaced-token probabilities and a
sentence score) and the bare encoder (sequence output and [CLS] vector) from the latest
checkpoint in `<data_dir>/models/<model_name>/`; with `--task` the fine-tuned task model from
`<model_dir>/finetuning_models/<task>_model_<trial>/`. Each lands in TF Serving's versioned
layout, `<output_dir>/<model_name>_<kind or task>/<version>/`, with `vocab.txt`, the resolved
`config.json` and `export.json` (kind, signatures, labels) as assets. The signatures are
described in `electra_tf/serving.py`.

A version directory is written under a temporary name and renamed into place, so TF Serving,
which watches the numbered directories, never loads a half-written model. An existing version
is replaced only with `--overwrite`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

EXPORT_INFO_FILE = "export.json"


class ExportError(ValueError):
    """Bad export arguments or an output that cannot be written; the message names the path."""


# ------------------------------------------------------------------------------ layout
def existing_versions(base_dir: str) -> list[int]:
    """Numbered version directories under a TF Serving model base path, ascending."""
    if not os.path.isdir(base_dir):
        return []
    return sorted(int(e) for e in os.listdir(base_dir) if e.isdigit())


def save_versioned(
    module: Any,
    signatures: dict[str, Any],
    base_dir: str,
    version: int | None = None,
    overwrite: bool = False,
    extra_assets: dict[str, str] | None = None,
) -> str:
    """Saves `module` as `<base_dir>/<version>/` and returns that path.

    `version` None -> one past the highest existing version (1 for a new model), so a plain
    re-export adds a version instead of replacing one. `extra_assets` ({file name: content})
    are written into the SavedModel's `assets/` directory beside the tracked assets.
    """
    import tensorflow as tf

    if version is None:
        versions = existing_versions(base_dir)
        version = versions[-1] + 1 if versions else 1
    if version < 0:
        raise ExportError(f"--version {version}: TF Serving versions are non-negative integers")
    final = os.path.join(base_dir, str(version))
    check_writable(final, overwrite)
    os.makedirs(base_dir, exist_ok=True)
    # A non-numeric name: TF Serving ignores it while it is being written.
    tmp = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=base_dir)
    try:
        tf.saved_model.save(module, tmp, signatures=signatures)
        assets = os.path.join(tmp, "assets")
        os.makedirs(assets, exist_ok=True)
        for name, content in (extra_assets or {}).items():
            with open(os.path.join(assets, name), "w", encoding="utf-8") as f:
                f.write(content)
        if os.path.exists(final):
            old = f"{final}.old-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def check_writable(version_dir: str, overwrite: bool) -> None:
    """Refuses to replace a version without `overwrite`, or anything that is not a SavedModel."""
    if not os.path.exists(version_dir):
        return
    if not overwrite:
        raise ExportError(f"{version_dir} exists; pass --overwrite to replace it")
    if not os.path.isfile(os.path.join(version_dir, "saved_model.pb")):
        raise ExportError(f"{version_dir} exists and is not a SavedModel; not replacing it")


# ------------------------------------------------------------------------------ sources
def find_vocab(model_dir: str, fallback: str, override: str | None) -> str:
    """`--vocab-file`, else the model dir's vocab.txt, else the config's vocabulary."""
    for path in (override, os.path.join(model_dir, "vocab.txt"), fallback):
        if path and os.path.isfile(path):
            return path
    raise ExportError(
        f"no vocabulary: looked for {override or '(no --vocab-file)'}, "
        f"{os.path.join(model_dir, 'vocab.txt')} and {fallback}; pass --vocab-file"
    )


def config_json(config: Any) -> str:
    return json.dumps(dataclasses.asdict(config), indent=2, sort_keys=True, default=list)


@dataclasses.dataclass
class ExportSpec:
    """One SavedModel to write: what `build_module` needs and what `export.json` records."""

    kind: str
    name: str
    module: Any  # a ServingModule
    config_text: str
    vocab_file: str
    info: dict[str, Any]


def write_export(spec: ExportSpec, output_dir: str, version: int | None, overwrite: bool) -> str:
    signatures = spec.module.signatures()
    info = {
        **spec.info,
        "kind": spec.kind,
        "signatures": {
            key: {
                "inputs": sorted(fn.structured_input_signature[1]),
                "outputs": sorted(fn.structured_outputs),
            }
            for key, fn in signatures.items()
        },
    }
    with open(spec.vocab_file, encoding="utf-8") as f:
        vocab_text = f.read()
    assets = {
        "vocab.txt": vocab_text,
        "config.json": spec.config_text,
        EXPORT_INFO_FILE: json.dumps(info, indent=2, sort_keys=True),
    }
    return save_versioned(
        spec.module, signatures, os.path.join(output_dir, spec.name), version, overwrite, assets
    )


# ------------------------------------------------------------------------------ CLI
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
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from electra_tf import export_models

    model_dir = os.path.join(args.data_dir, "models", args.model_name)
    output_dir = args.output_dir or os.path.join(model_dir, "serving")
    kinds = ("discriminator", "encoder") if args.kind == "all" else (args.kind,)
    names = [f"{args.model_name}_{k}" for k in ((args.task,) if args.task else kinds)]
    try:
        if args.version is not None:
            # Fail before loading and tracing anything when a target version is taken.
            for name in names:
                check_writable(os.path.join(output_dir, name, str(args.version)), args.overwrite)
        if args.task:
            specs = [export_models.task_spec(args, model_dir)]
        else:
            specs = export_models.pretrained_specs(args, model_dir, kinds)
        for spec in specs:
            path = write_export(spec, output_dir, args.version, args.overwrite)
            print(f"exported {spec.kind} -> {path}")
    except (ExportError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
