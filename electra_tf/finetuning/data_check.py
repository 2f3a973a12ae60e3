"""Every input file a fine-tuning run will read, read and checked before its first step.

A run reads its train split when it trains, its dev split after training, its test splits after
evaluating: a bad dev file (empty, a header only, a label the model was not trained on) was
reported only once training had finished, and the half-made model folder then blocked the rerun.
`check_task_data` reads every split the run will read, through each task's own
`get_examples` (built-in and user tasks alike), so that such a file is one DataError naming
`file:line` and the fix before anything is written. The command calls it before it takes its
lock, then starts the run with `run_finetuning(..., data_checked=True)` so the files are not
read twice; a caller of the Python API leaves `data_checked` False and the run checks them.
"""

from __future__ import annotations

import os

from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.task import DataError, Task


def splits_read(config: FinetuningConfig, task: Task) -> list[str]:
    """The splits of `task` a run of `config` reads: train (`do_train`), dev (`do_eval`), and
    the test splits whose predictions it writes (`write_test_outputs`, after the evaluation) -
    those with a file: a task that writes no test predictions reads none."""
    splits = ["train"] if config.do_train else []
    if config.do_eval:
        splits.append("dev")
        if config.write_test_outputs:
            splits += [s for s in task.get_test_splits() if os.path.exists(task.split_file(s))]
    return splits


def check_task_data(config: FinetuningConfig, tasks: list[Task] | None = None) -> None:
    """Reads every split of every task the run of `config` will read (`splits_read`): a
    DataError (naming file:line and the fix) for the first problem, an empty split included.

    Args:
        config: the run's config.
        tasks: its tasks (`registry.get_tasks`); None: built here. A task that keeps what it
            read (the user tasks do) then reads each file once for both the check and the run.
    """
    if tasks is None:
        from electra_tf.finetuning.registry import get_tasks, make_tokenizer

        tasks = get_tasks(config, make_tokenizer(config))
    plan = [(task, split) for task in tasks for split in splits_read(config, task)]
    for task, split in plan:
        if not task.get_examples(split):
            raise DataError(
                f"{task.split_file(split)}: no examples; task {task.name} needs at least one in "
                f"its {split} split"
            )
