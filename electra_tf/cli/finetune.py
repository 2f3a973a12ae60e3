"""`python -m electra_tf.finetune --data-dir D --model-name M --tasks rte[,mrpc] --hparams ...`

The original's `run_finetuning.py` command line (`--data-dir`, `--model-name`, `--hparams` as a
JSON string or a .json file; `task_names` and `model_size` may be given in the hparams, as the
original), plus `--tasks`. Reads `<D>/finetuning_data/<task>/`, initialises the encoder from
`<D>/models/<M>` (its latest checkpoint: native, original TF1 or HF), and writes
`<D>/models/<M>/results/<tasks>_results.{txt,json}`.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
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
    parser.add_argument("--hparams", default="{}", help="JSON object or path to a .json file")
    args = parser.parse_args(argv)

    from electra_tf.config import ConfigError
    from electra_tf.finetuning.config import finetuning_config
    from electra_tf.finetuning.task import DataError

    try:
        config = finetuning_config(args.model_name, args.data_dir, args.hparams, tasks=args.tasks)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from electra_tf.tf_startup import start_tensorflow

    start_tensorflow()
    from electra_tf.finetuning.runner import run_finetuning
    from electra_tf.run_lock import LockError, RunLock

    try:
        # One writer per (model, tasks): two runs of the same tasks share model dirs and results.
        with RunLock(
            config.pretrained_model_dir(), f".finetune-{config.tasks_str}.lock", "model dir"
        ):
            run_finetuning(config)
    except LockError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (DataError, FileExistsError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
