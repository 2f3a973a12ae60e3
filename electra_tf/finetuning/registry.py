"""Task names -> task objects (the original's `task_builder.py`)."""

from __future__ import annotations

from typing import Any

from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.glue import GLUE_TASKS, make_glue_task
from electra_tf.finetuning.qa import QA_TASKS, make_qa_task
from electra_tf.finetuning.tagging import make_tagging_task
from electra_tf.finetuning.task import Task


def make_tokenizer(config: FinetuningConfig) -> Any:
    from electra_tf.data.tokenization import FullTokenizer

    return FullTokenizer(
        config.resolved_vocab_file(),
        do_lower_case=config.do_lower_case,
        strip_accents=config.do_strip_accents,
    )


def get_task(name: str, config: FinetuningConfig, tokenizer: Any) -> Task:
    if name in GLUE_TASKS:
        return make_glue_task(name, config, tokenizer)
    if name in QA_TASKS:
        return make_qa_task(name, config, tokenizer)
    if name == "chunk":
        return make_tagging_task(name, config, tokenizer)
    raise ValueError(f"unknown task {name!r}")


def get_tasks(config: FinetuningConfig, tokenizer: Any) -> list[Task]:
    return [get_task(name, config, tokenizer) for name in config.task_names]
