"""`python -m electra_tf.finetune --data-dir D --model-name M --tasks rte[,mrpc] [--task-file F]
--hparams ...`

The original's `run_finetuning.py` command line (`--data-dir`, `--model-name`, `--hparams` as a
JSON string or a .json file; `task_names` and `model_size` may be given in the hparams, as the
original), plus `--tasks`. Reads `<D>/finetuning_data/<task>/`, initialises the encoder from
`<D>/models/<M>` (its latest checkpoint: native, original TF1 or HF), and writes
`<D>/models/<M>/results/<tasks>_results.{txt,json}`.

`--task-file reviews.json` adds a task on the user's own CSV / TSV / JSONL / CoNLL files (README
"Fine-tuning on your own data"); `--tasks reviews` reads `<D>/finetuning_data/reviews/task.json`.

`--pretrained DIR` starts from a shipped model folder instead (e.g.
`pretrained/electra-tiny-gutenberg`): its weights and its `vocab.txt`, unless the hparams name
`init_checkpoint` / `vocab_file` themselves.
"""

from __future__ import annotations

import argparse
import os
import sys


def pretrained_hparams(folder: str) -> dict[str, str]:
    """init_checkpoint and vocab_file of a shipped model folder (ConfigError if it has none)."""
    from electra_tf.config import ConfigError

    vocab = os.path.join(folder, "vocab.txt")
    if not os.path.isdir(folder) or not os.path.isfile(vocab):
        raise ConfigError(f"--pretrained {folder}: not a folder with a vocab.txt")
    return {"init_checkpoint": folder, "vocab_file": vocab}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: the original's flags, plus `--tasks` and `--pretrained`."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", required=True, help="holds finetuning_data/ and models/")
    parser.add_argument(
        "--model-name", required=True, help="pre-trained model: <data-dir>/models/<name>"
    )
    parser.add_argument(
        "--tasks", default=None, help="comma-separated task names (else hparams' task_names)"
    )
    parser.add_argument(
        "--task-file",
        action="append",
        default=[],
        help="a task on your own data: a JSON task file (README 'Fine-tuning on your own "
        "data'); repeat it for a multi-task run",
    )
    parser.add_argument("--hparams", default="{}", help="JSON object or path to a .json file")
    parser.add_argument(
        "--pretrained", help="a shipped model folder (weights + vocab.txt) to start from"
    )
    return parser.parse_args(argv)


def layout_threads(hparams_text: str) -> tuple[int, int]:
    """(intra-op, inter-op) threads of the run's CPU layout (`FinetuningConfig.resolve` on this
    machine; 0 = TensorFlow's default), from `--hparams` alone; (0, 0) where they do not
    parse, which the run then reports."""
    from electra_tf.config import ConfigError, parse_hparams
    from electra_tf.finetuning.config import FinetuningConfig
    from electra_tf.runtime.device_defaults import probe_machine

    keys = ("train_batch_size", "parallel_micro_batches", "intra_op_threads", "inter_op_threads")
    try:
        hparams = parse_hparams(hparams_text)
        config = FinetuningConfig(**{k: hparams[k] for k in keys if k in hparams}).validate()
    except (ConfigError, TypeError):
        return 0, 0
    resolved = config.resolve(probe_machine())
    return resolved.intra_op_threads, resolved.inter_op_threads


def main(argv: list[str] | None = None) -> int:
    """Runs the command: 0 done, 2 a bad config or init checkpoint, 1 the run failed."""
    args = parse_args(argv)
    from electra_tf.runtime.tf_startup import start_tensorflow

    # Before anything imports TensorFlow (its CPU-only start-up noise is dropped). As the
    # program (argv from the command line), with the thread pools the config resolves to: they
    # are the process's, fixed once TensorFlow starts. A caller that hands `argv` in (a test, a
    # notebook, the bench) keeps its process's pools; `layout_threads` says what to set.
    start_tensorflow(*(layout_threads(args.hparams) if argv is None else (0, 0)))
    from electra_tf.checkpoints import CheckpointError
    from electra_tf.config import ConfigError, parse_hparams
    from electra_tf.data.tokenization import VocabError
    from electra_tf.finetuning.data_check import check_task_data
    from electra_tf.finetuning.task import DataError
    from electra_tf.finetuning.task_spec import with_task_files
    from electra_tf.runs.finetuning import prepare_finetuning, run_finetuning
    from electra_tf.runtime import run_lock

    try:
        hparams = parse_hparams(args.hparams)
        if args.pretrained:
            hparams = {**pretrained_hparams(args.pretrained), **hparams}
        # The init checkpoint, read once: the size rules (learning rate, layer-wise decay)
        # follow its encoder, and every trial starts from it.
        hparams, tasks = with_task_files(hparams, args.tasks, args.task_file, args.data_dir)
        plan = prepare_finetuning(args.model_name, args.data_dir, hparams, tasks=tasks)
        # Every file of every task read and checked before anything (the lock included) is
        # written: bad data is one line naming file:line and the fix, and exit 2.
        check_task_data(plan.config)
    except (ConfigError, CheckpointError, DataError, VocabError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failures = (DataError, FileExistsError, FileNotFoundError, CheckpointError, VocabError)
    try:
        # One writer per (model, tasks): two runs of the same tasks share model dirs and results.
        # SIGTERM as an exception, so that the lock is released on the way out, as on Ctrl-C.
        with (
            run_lock.sigterm_raises(),
            run_lock.RunLock(
                plan.config.resolved_model_dir(),
                f".finetune-{plan.config.tasks_str}.lock",
                "model dir",
            ),
        ):
            run_finetuning(plan, data_checked=True)  # checked above: not read twice
    except (run_lock.LockError, ConfigError) as e:  # a setting the data or the model refutes: input
        print(f"error: {e}", file=sys.stderr)
        return 2
    except failures as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (run_lock.Terminated, KeyboardInterrupt) as stop:
        print(file=sys.stderr)  # off the line the progress (or ^C) left
        return run_lock.report_stop(stop, STOPPED)
    return 0


# What a fine-tuning run stopped by a signal tells the user (no traceback).
STOPPED = (
    "the trial under way saved a checkpoint at the step it reached (kill -9: its last "
    "checkpoint stays); trials finished before the stop keep their results. Run the same "
    "command again to resume."
)


if __name__ == "__main__":
    sys.exit(main())
