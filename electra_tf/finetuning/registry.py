"""Task names -> task objects (the original's `task_builder.py`), from the one task table.

A name is looked up in `config.user_tasks` first (tasks described by data files, built by
`user_tasks.make_user_task`), then in the table (`task_table`: built-in and registered tasks).
"""

from __future__ import annotations

from typing import Any

from electra_tf.config import ConfigError
from electra_tf.finetuning import task_table
from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.task import Task

# Re-exported: registering a task is done from here or from `task_table`.
TaskType = task_table.TaskType
register_task = task_table.register_task
unregister_task = task_table.unregister_task


def make_tokenizer(config: FinetuningConfig) -> Any:
    from electra_tf.data.tokenization import FullTokenizer

    return FullTokenizer(
        config.resolved_vocab_file(),
        do_lower_case=config.do_lower_case,
        strip_accents=config.do_strip_accents,
    )


def get_task(name: str, config: FinetuningConfig, tokenizer: Any) -> Task:
    """The task `name` of `config` (its `user_tasks` or the task table)."""
    if name in config.user_tasks:
        from electra_tf.finetuning.user_tasks import make_user_task

        return make_user_task(name, config, tokenizer)
    found = task_table.find_task_type(name)
    if found is None:
        known = ", ".join(task_table.task_names())
        raise ConfigError(f"unknown task {name!r}; known: {known}")
    task = found.builder()(config, name, tokenizer)
    if not isinstance(task, Task):
        raise TypeError(f"task {name!r}: {found.build!r} built a {type(task).__name__}, not a Task")
    if task.kind != found.kind:  # the export would serve it as the wrong kind
        raise TypeError(
            f"task {name!r}: {found.build!r} built a {type(task).__name__} of kind "
            f"{task.kind!r}, but the task table says {found.kind!r}; set the class' `kind`"
        )
    return task


def get_tasks(config: FinetuningConfig, tokenizer: Any) -> list[Task]:
    return [get_task(name, config, tokenizer) for name in config.task_names]
