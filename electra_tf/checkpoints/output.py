"""The output folder of a conversion (`write_weights`, `save_weights`): checked, locked, written
under a temporary name and renamed into place.

`--overwrite` replaces an output only when everything in it, at any depth, is a file that this
format's export writes (`WRITES`), or that one other format's export writes (a conversion into
the same folder in another format before): a user's own file anywhere below it (notes in
`generator/`, images in `assets/`) is named and the folder is kept. An empty folder is written
into without `--overwrite`. An output that is the input's folder,
inside it, or around it is refused (replacing it would delete the input), and so is an output
that is a symbolic link (see `check_output`). Two conversions to one output are serialised by
the lock of `electra_tf.runtime.run_lock`, held in the output's parent folder because the output itself
is renamed away when it is replaced.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from electra_tf.checkpoints import hf, kerashub, modelgarden
from electra_tf.checkpoints.files import CONFIG_FILE, STATE_FILE, CheckpointError
from electra_tf.checkpoints.original import ORIGINAL_PREFIX
from electra_tf.runtime.atomic_io import describe_files, replace_dir, unexpected_files
from electra_tf.runtime.run_lock import RunLock

VOCAB_FILE = "vocab.txt"  # the tokenizer's vocabulary, copied beside every export but KerasHub's


def _kerashub_preset(folder: str = "") -> tuple[str, ...]:
    names = (
        kerashub.PRESET_CONFIG_FILE,
        kerashub.WEIGHTS_FILE,
        kerashub.TOKENIZER_FILE,
        kerashub.METADATA_FILE,
        kerashub.VOCAB_PATH.replace(os.sep, "/"),
    )
    return tuple(f"{folder}{name}" for name in names)


def _tf_checkpoint(prefix: str, folder: str = "") -> tuple[str, ...]:
    return tuple(
        f"{folder}{name}" for name in (STATE_FILE, f"{prefix}-*.index", f"{prefix}-*.data-*")
    )


# What each format's export writes, as `atomic_io.unexpected_files` patterns: any other file
# below an existing output makes `--overwrite` refuse to replace it.
WRITES = {
    "native": (*_tf_checkpoint("ckpt"), CONFIG_FILE, VOCAB_FILE),
    "original": (*_tf_checkpoint(ORIGINAL_PREFIX), VOCAB_FILE),
    "hf": tuple(
        f"{part}/{name}"
        for part in (hf.DISCRIMINATOR, hf.GENERATOR)
        for name in (CONFIG_FILE, hf.WEIGHTS_FILE)
    )
    + (VOCAB_FILE,),
    "modelgarden": (
        *_tf_checkpoint("ckpt"),
        *_tf_checkpoint("ckpt", f"{modelgarden.GENERATOR}/"),
        modelgarden.ENCODER_CONFIG_FILE,
        f"{modelgarden.GENERATOR}/{modelgarden.ENCODER_CONFIG_FILE}",
        VOCAB_FILE,
    ),
    "kerashub": (
        *_kerashub_preset(),
        *_kerashub_preset(f"{kerashub.GENERATOR}/"),
        kerashub.HEADS_FILE,
    ),
}


def check_apart(input_path: str, output: str) -> None:
    """Raises CheckpointError when `output` is the input's folder, inside it, or holds it: a
    replaced output would take the input (and a resumable run's optimizer state) with it."""
    folder = input_path if os.path.isdir(input_path) else os.path.dirname(input_path) or "."
    src, out = os.path.realpath(folder), os.path.realpath(output)
    if out == src:
        problem = "is the input's own folder"
    elif out.startswith(src + os.sep):
        problem = f"is inside the input's folder {src}"
    elif src.startswith(out + os.sep):
        problem = f"holds the input ({src})"
    else:
        return
    raise CheckpointError(
        f"--output {output} {problem}: a conversion never writes over or into its input; "
        "choose another --output"
    )


def check_output(path: str, fmt: str, overwrite: bool) -> None:
    """The checks made before anything is written (and again under the lock): a link, a path
    under a regular file, an existing output without `overwrite` or holding others' files."""
    if os.path.islink(path):
        # Refused, not replaced: replacing would swap the user's link for a folder and leave
        # the data where it points, and writing through it would put the output on whatever
        # disk the link leads to under a name the user never gave.
        raise CheckpointError(
            f"{path} is a symbolic link (to {os.readlink(path)}); not replacing it: give the "
            "folder it points to as --output, or remove the link"
        )
    ancestor = os.path.dirname(path)
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise CheckpointError(
            f"{path}: {ancestor} is a file, not a folder; choose another --output"
        )
    if not os.path.exists(path):
        return
    if os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path):
        return  # an empty folder (made for the output): nothing in it to lose
    if not overwrite:
        raise CheckpointError(f"{path} exists; pass --overwrite to replace it")
    if not os.path.isdir(path):
        raise CheckpointError(f"{path} exists and is not a directory; not replacing it")
    foreign = unexpected_files(path, WRITES[fmt])
    if foreign and any(not unexpected_files(path, WRITES[other]) for other in WRITES):
        return  # wholly another format's export (an earlier conversion of this command's)
    if foreign:
        raise CheckpointError(
            f"{path}: not replacing it: it holds {len(foreign)} file(s) that --to {fmt} "
            f"does not write: {describe_files(foreign)}; move them out or choose another --output"
        )


@contextmanager
def output_dir(path: str, fmt: str, overwrite: bool) -> Iterator[str]:
    """A temporary sibling directory that replaces `path` only once fully written, under the
    output's lock (a second writer is refused, naming the first)."""
    path = os.path.abspath(path)
    check_output(path, fmt, overwrite)
    name, parent = os.path.basename(path), os.path.dirname(path)
    with RunLock(parent, f".{name}.lock", f"output {name} in"):
        check_output(path, fmt, overwrite)  # what a writer that held the lock left
        tmp = f"{path}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        replace_dir(tmp, path)
