"""The parity tools' shared runtime: the tiny shape both sides run, the original's code from a
git copy, TensorFlow's set-up, and the small helpers every tool uses.

check.py, trajectory.py and curves.py are commands over this module, `original_side` (the
original's graph under tf.compat.v1: shims, import, the project's draws) and `project_side`
(the project's training step).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import tarfile
import warnings

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MIRROR = os.environ.get(
    "ELECTRA_ORIGINAL_MIRROR", ""
)  # bare git dir of google-research/electra

# Synthetic vocabulary in BERT's layout.
VOCAB_SIZE = 200
PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103
BATCH, SEQ = 4, 32
OPT_STEP = 4  # global step of the compared update: lr = 5e-4 * (1 - 4/100) * min(1, 4/10)
NUM_TRAIN_STEPS, WARMUP = 100, 10

BASE_HPARAMS = {
    "vocab_size": VOCAB_SIZE,
    "embedding_size": 32,
    "max_seq_length": SEQ,
    "mask_prob": 0.15,
    "gen_weight": 1.0,
    "disc_weight": 50.0,
    "temperature": 1.0,
    "generator_layers": 0.5,
    "learning_rate": 5e-4,
    "lr_decay_power": 1.0,
    "weight_decay_rate": 0.01,
    "num_train_steps": NUM_TRAIN_STEPS,
    "num_warmup_steps": WARMUP,
    "train_batch_size": BATCH,
    "model_size": "small",
    "model_hparam_overrides": {
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
}


def log(msg: str = "") -> None:
    print(msg, flush=True)


def write_vocab(path: str) -> None:
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [f"w{i}" for i in range(len(tokens), VOCAB_SIZE)]
    assert len(tokens) == VOCAB_SIZE and tokens[MASK] == "[MASK]"
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")


MIRROR_HELP = (
    "the original's code comes from a git copy of google-research/electra: get one with\n"
    "    git clone --mirror https://github.com/google-research/electra electra.git\n"
    "(or use any local clone) and pass --mirror electra.git or set ELECTRA_ORIGINAL_MIRROR"
)


def resolve_mirror(mirror: str) -> str:
    """The git directory of a bare mirror or of a clone's work tree; SystemExit (naming how to
    get one) when `mirror` is empty or not a git copy."""
    if not mirror:
        raise SystemExit(
            f"ERROR: no --mirror given and ELECTRA_ORIGINAL_MIRROR is not set;\n{MIRROR_HELP}"
        )
    if os.path.isdir(os.path.join(mirror, ".git")):
        mirror = os.path.join(mirror, ".git")
    if not (os.path.isdir(mirror) and os.path.exists(os.path.join(mirror, "HEAD"))):
        raise SystemExit(
            f"ERROR: no git copy of google-research/electra at {mirror!r};\n{MIRROR_HELP}"
        )
    return mirror


def extract_original(mirror: str, rev: str, dest: str) -> str:
    mirror = resolve_mirror(mirror)
    git = ["git", "--git-dir", mirror]
    commit = subprocess.run(
        [*git, "rev-parse", rev], check=True, capture_output=True, text=True
    ).stdout.strip()
    tar = subprocess.run([*git, "archive", "--format=tar", commit], check=True, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        if hasattr(tarfile, "data_filter"):
            t.extractall(dest, filter="data")
        else:
            t.extractall(dest)
    return commit


def setup_tf(threads: int, gpu: bool = False):
    """numpy and tensorflow, CPU float32 unless `gpu` (TF32 off either way), `threads` intra-op
    threads and one inter-op thread."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    warnings.filterwarnings("ignore", message=r".*tf\.layers\.dense.* is deprecated")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    return np, tf


def session_config(threads: int):
    """The TF1 session options every tool runs the original's graph with."""
    import tensorflow.compat.v1 as v1

    cfg = v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=1)
    # Grappler's TF1-graph passes only log errors on the original's graph (and fall back).
    cfg.graph_options.rewrite_options.disable_meta_optimizer = True
    return cfg


def child_env() -> dict:
    """The environment of a tool's child process: this checkout first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO_ROOT] + [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x]
    )
    return env


def git_head(path):
    try:
        return (
            subprocess.run(
                ["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
            or "?"
        )
    except OSError:
        return "?"


class Proxy:
    """Delegates every attribute to `real` except the overridden ones."""

    def __init__(self, real, **overrides):
        self._real = real
        self._overrides = overrides

    def __getattr__(self, name):
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._real, name)


@contextlib.contextmanager
def patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)
