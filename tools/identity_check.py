"""Same seed, same bytes: digests of what 12 pre-training configurations write, to compare two
versions of the code (a refactor must not change a single weight).

    python -m tools.identity_check --out NEW.json [--compare OLD.json] [--work DIR]

Each configuration pre-trains the tests' tiny model (tests/helpers_pretrain_cli.py: one 32-wide
layer, batch 4, sequences of 16) for 4 steps on the same synthetic corpus, in its own process
(`python -m electra_tf.pretrain`), and three of them are exported (`python -m
electra_tf.export`, float32, `--precision bfloat16`, and Electric's scorer). The digests are the
SHA-256 of every file the run and the export write, except the files that carry wall-clock
time or process-specific ids (listed in `VOLATILE`, each with why); for those files this tool
compares nothing, and the weights they would repeat are in the checkpoint's data file anyway.

Run it at the old commit (a `git worktree` of it, with that tree on `PYTHONPATH`) and at the
new one, then `--compare`: it prints each differing file and exits 1 when any differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.helpers_pretrain_cli import cli_command, cli_env, write_corpus  # noqa: E402

DROPOUT = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
TINY_MODEL = {
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
}
# name -> hparams over the harness's TINY; each exercises another branch of the step.
CONFIGS: dict[str, dict] = {
    "default": {},
    "dropout": {"model_hparam_overrides": {**TINY_MODEL, **DROPOUT}},
    "bf16": {"precision": "mixed_bfloat16", "model_hparam_overrides": {**TINY_MODEL, **DROPOUT}},
    "xla": {"jit_compile": True, "model_hparam_overrides": {**TINY_MODEL, **DROPOUT}},
    "electric": {"electra_objective": False, "electric_objective": True},
    "mlm_baseline": {"electra_objective": False},
    "untied_embeddings": {"untied_generator_embeddings": True},
    "shared_generator": {"untied_generator": False, "generator_hidden_size": 1.0},
    "accumulation": {"gradient_accumulation_steps": 2},
    "all_tokens_mlm": {"objective_variant": "all_tokens_mlm"},
    "disallow_correct": {"disallow_correct": True, "temperature": 0.8},
    "micro_batches": {"parallel_micro_batches": 2, "intra_op_threads": 1, "inter_op_threads": 2},
}
# name -> export arguments (the model is the run of that name).
EXPORTS: dict[str, list[str]] = {
    "default": [],
    "bf16": ["--precision", "bfloat16"],
    "electric": [],
}
# Files whose bytes carry time or ids, not the computation (compared by nothing here):
VOLATILE = (
    "events.out.tfevents",  # TensorBoard: wall-clock time stamps in every event
    "saved_model.pb",  # the graph: traced function names carry process-wide counters
    "fingerprint.pb",  # a hash of saved_model.pb
    "checkpoint",  # the checkpoint state file: timestamps of each checkpoint
    "run.lock",  # the running process's pid
    "serving_flags.txt",  # this machine's core count
)


def volatile(path: str) -> bool:
    name = os.path.basename(path)
    return any(name == v or name.startswith(v) for v in VOLATILE)


def digests(folder: str, work: str) -> dict[str, str]:
    """relative path -> sha256 of every file under `folder` but the volatile ones; in a JSON
    file, the run's folder `work` (a temporary name) reads as `WORK`."""
    found = {}
    for directory, _, files in os.walk(folder):
        for file in sorted(files):
            path = os.path.join(directory, file)
            if volatile(path):
                continue
            with open(path, "rb") as f:
                content = f.read()
            if file.endswith(".json"):
                content = content.replace(work.encode(), b"WORK")
            found[os.path.relpath(path, folder)] = hashlib.sha256(content).hexdigest()
    return found


def run(command: list[str], log: str) -> None:
    with open(log, "w", encoding="utf-8") as out:
        done = subprocess.run(command, env=cli_env(), stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        with open(log, encoding="utf-8") as f:
            tail = f.read()[-2000:]
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({done.returncode}):\n{tail}")


def measure(work: str) -> dict[str, dict[str, str]]:
    data = write_corpus(os.path.join(work, "data"))
    result = {}
    for name, hparams in CONFIGS.items():
        print(f"pretrain {name}", flush=True)
        command = cli_command(data, name, num_train_steps=4, **hparams)
        run(command, os.path.join(work, f"{name}.log"))
        model_dir = os.path.join(data, "models", name)
        if name in EXPORTS:
            print(f"export {name}", flush=True)
            export = [sys.executable, "-m", "electra_tf.export", "--data-dir", data]
            export += ["--model-name", name, "--output-dir", os.path.join(work, "exports", name)]
            run(export + EXPORTS[name], os.path.join(work, f"{name}.export.log"))
            result[f"export/{name}"] = digests(os.path.join(work, "exports", name), work)
        result[f"run/{name}"] = digests(model_dir, work)
    return result


def compare(new: dict, old: dict) -> int:
    differ = 0
    for group in sorted(set(new) | set(old)):
        a, b = old.get(group, {}), new.get(group, {})
        for path in sorted(set(a) | set(b)):
            if a.get(path) != b.get(path):
                differ += 1
                print(f"DIFFERS {group}/{path}: {a.get(path, 'absent')[:12]} -> "
                      f"{b.get(path, 'absent')[:12]}")  # fmt: skip
    files = sum(len(v) for v in new.values())
    print(f"{len(new)} groups, {files} files: {'IDENTICAL' if not differ else f'{differ} differ'}")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.identity_check", description=__doc__)
    parser.add_argument("--out", required=True, help="write the digests here (JSON)")
    parser.add_argument("--compare", help="digests of the other version (JSON) to compare with")
    parser.add_argument("--work", help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.work:
        os.makedirs(args.work, exist_ok=False)
        new = measure(args.work)
    else:
        with tempfile.TemporaryDirectory() as work:
            new = measure(work)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(new, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare, encoding="utf-8") as f:
            return compare(new, json.load(f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
