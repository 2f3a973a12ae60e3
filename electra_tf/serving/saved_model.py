"""The SavedModel writer: TF Serving's versioned layout, written atomically, with assets.

Each export lands in `<output_dir>/<name>/<version>/` with `vocab.txt`, the resolved
`config.json` and `export.json` (kind, precision, signatures, labels, the recommended thread
counts) as assets, and `serving_flags.txt` beside `saved_model.pb`: the model server's flags
for this export (`serving_flags`). A version directory is written under a temporary name and
renamed into place, so TF Serving, which watches the numbered directories, never loads a
half-written model. An existing version is replaced only with `overwrite`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from typing import Any

from electra_tf.runtime.atomic_io import describe_files, replace_dir, unexpected_files

EXPORT_INFO_FILE = "export.json"
SERVING_FLAGS_FILE = "serving_flags.txt"


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
    extra_files: dict[str, str] | None = None,
) -> str:
    """Saves `module` as `<base_dir>/<version>/` and returns that path.

    `version` None -> one past the highest existing version (1 for a new model), so a plain
    re-export adds a version instead of replacing one. `extra_assets` ({file name: content})
    are written into the SavedModel's `assets/` directory beside the tracked assets,
    `extra_files` into the version directory itself (a SavedModel loader ignores them).
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
        for folder, files in ((assets, extra_assets), (tmp, extra_files)):
            for name, content in (files or {}).items():
                with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
                    f.write(content)
        replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


# What a version directory holds after `save_versioned` (`atomic_io.unexpected_files`
# patterns): a version holding anything else is not replaced, even with --overwrite.
VERSION_FILES = (
    "saved_model.pb",
    "fingerprint.pb",
    "variables/variables.index",
    "variables/variables.data-*",
    "assets/*",
    SERVING_FLAGS_FILE,
)


def check_writable(version_dir: str, overwrite: bool) -> None:
    """Refuses to replace a version without `overwrite`, a link, anything that is not a
    SavedModel, or a SavedModel beside files that an export does not write."""
    if os.path.islink(version_dir):
        raise ExportError(
            f"{version_dir} is a symbolic link (to {os.readlink(version_dir)}); not replacing it"
        )
    if not os.path.exists(version_dir):
        return
    if not overwrite:
        raise ExportError(f"{version_dir} exists; pass --overwrite to replace it")
    if not os.path.isfile(os.path.join(version_dir, "saved_model.pb")):
        raise ExportError(f"{version_dir} exists and is not a SavedModel; not replacing it")
    foreign = unexpected_files(version_dir, VERSION_FILES)
    if foreign:
        raise ExportError(
            f"{version_dir}: not replacing it: it holds {len(foreign)} file(s) that an export "
            f"does not write: {describe_files(foreign)}; move them out first"
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


def serving_flags(
    threads: tuple[int, int], jit_compile: bool, precision: str, cpu_count: int, native_bf16: bool
) -> str:
    """`serving_flags.txt`: the model server's flags for an export, for the machine that
    exported it (`device_defaults.serving_threads`), and the same for Python."""
    intra, inter = threads
    lines = [
        f"# TF Serving flags for this export, chosen for a machine with {cpu_count} core(s),",
        "# the one that exported it (other machines: intra-op = cores / inter-op, inter-op =",
        '# the export\'s query blocks; docs/serving.md, "Threads"). Without them TensorFlow',
        "# runs intra-op = inter-op = cores: 1.7-1.9x slower at batch 1 on 2-core machines.",
        f"--tensorflow_intra_op_parallelism={intra}",
        f"--tensorflow_inter_op_parallelism={inter}",
    ]
    if jit_compile:
        lines += [
            "# the forward pass is compiled by XLA: the model server must allow it",
            "--xla_cpu_compilation_enabled=true",
        ]
    lines += [
        "# Python: electra_tf.serving.load(path) sets these before TensorFlow starts; any other",
        "# loader (tf.saved_model.load): start the process with",
        f"# TF_NUM_INTRAOP_THREADS={intra} TF_NUM_INTEROP_THREADS={inter}",
    ]
    if precision == "bfloat16" and not native_bf16:
        lines += [
            "# bfloat16 export, exported on a CPU without bfloat16 matrix instructions: there",
            "# TensorFlow emulates bfloat16, and the float32 export is the faster one.",
        ]
    return "\n".join(lines) + "\n"


def weight_dtypes(variables: list[Any]) -> dict[str, int]:
    """{dtype name: number of weights} of `variables` (what `export.json` records)."""
    counts: dict[str, int] = {}
    for variable in variables:
        key = variable.dtype.name
        counts[key] = counts.get(key, 0) + int(variable.shape.num_elements())
    return dict(sorted(counts.items()))


def write_export(spec: ExportSpec, output_dir: str, version: int | None, overwrite: bool) -> str:
    import tensorflow as tf

    from electra_tf.runtime import device_defaults

    signatures = spec.module.signatures()
    jit_compile = bool(getattr(spec.module, "jit_compile", False))
    query_blocks = int(getattr(spec.module, "query_blocks", 1))
    cores = device_defaults.cpu_count()
    threads = device_defaults.serving_threads(cores, query_blocks, jit_compile)
    precision = spec.info.get("precision", "float32")
    info = {
        **spec.info,
        "kind": spec.kind,
        "precision": precision,
        "weight_dtypes": spec.module.weight_counts,
        "constant_kernels": spec.module.inference_options.constant_kernels,
        "jit_compile": jit_compile,
        "query_blocks": query_blocks,
        "serving_threads": {"intra_op": threads[0], "inter_op": threads[1], "cpu_count": cores},
        "signatures": {
            key: {
                # Positional specs (the text signatures) are in [0], keyword ones in [1].
                "inputs": sorted(
                    spec.name for spec in tf.nest.flatten(fn.structured_input_signature)
                ),
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
    flags = serving_flags(
        threads, jit_compile, precision, cores, device_defaults.cpu_has_native_bf16()
    )
    return save_versioned(
        spec.module, signatures, os.path.join(output_dir, spec.name), version, overwrite, assets,
        {SERVING_FLAGS_FILE: flags},
    )  # fmt: skip
