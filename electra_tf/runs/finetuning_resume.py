"""Which trials of a fine-tuning run resume, which are kept, and what a resume may change.

A trial's folder holds, from its start, its fine-tuning config and the digests of its data files
(`begin_trial`); a finished trial has a record under `results/<tasks>_trials/`
(`write_trial_record`) and is kept, not re-run, by the same command. Before any trial starts,
`check_trials` compares what every started or finished trial saved with the run's config, as
pre-training's resume check (`checkpoints.resume_check`) does: a changed task, data file, model
size, batch size, sequence length, seed (or anything else in `REFUSED_ON_RESUME`) is refused
naming the key and both values; any other change (learning rate, logging, checkpoint and
evaluation periods, the CPU layout) is accepted and printed. `overwrite` starts every trial over.
"""

from __future__ import annotations

import json
import os
from typing import Any

from electra_tf.config import ConfigError
from electra_tf.finetuning.config import (
    FINETUNING_CONFIG_FILE,
    FinetuningConfig,
    file_sha1,
    save_finetuning_config,
)
from electra_tf.finetuning.task import Task, log, save_trained_state
from electra_tf.runtime.atomic_io import write_json

DATA_FILES = "data_files.json"  # <trial>/data_files.json: sha1 of each task's train/dev file

# What a trial's training reads and the model it trains: a resume with another value would mix
# two runs in one set of weights.
REFUSED_ON_RESUME = (
    "task_names", "user_tasks", "model_size", "model_hparam_overrides", "embedding_size",
    "vocab_size", "vocab_file", "max_seq_length", "train_batch_size", "seed", "num_train_epochs",
    "max_train_examples", "double_unordered", "do_lower_case", "do_strip_accents", "debug",
    "max_query_length", "doc_stride", "classifier_pooling", "answerable_classifier",
    "answerable_uses_start_logits", "joint_prediction", "precision", "adam_bias_correction",
    "fix_layerwise_top_layer",
)  # fmt: skip
# Where things are: other paths to the same run.
_IGNORED = ("data_dir", "model_name", "init_checkpoint", "overwrite")


def data_digests(tasks: list[Task]) -> dict[str, str | None]:
    """sha1 of each task's train and dev file, by `<task>/<split>` (not by path: a moved data
    folder is the same data)."""
    return {
        f"{task.name}/{split}": file_sha1(task.split_file(split))
        for task in tasks
        for split in ("train", "dev")
    }


def records_dir(config: FinetuningConfig) -> str:
    return os.path.join(config.results_dir(), f"{config.tasks_str}_trials")


def record_path(config: FinetuningConfig, trial: int) -> str:
    return os.path.join(records_dir(config), f"trial_{trial}.json")


def finished_trial(config: FinetuningConfig, trial: int) -> dict[str, Any] | None:
    """A finished trial's record (its metrics, whether it resumed), None where not finished or
    where `overwrite` runs it again."""
    path = record_path(config, trial)
    if config.overwrite or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_trial_record(
    config: FinetuningConfig, trial: int, tasks: list[Task], info: dict[str, Any]
) -> None:
    """Marks `trial` finished: `info` (metrics, resume), the config and the data digests."""
    record = {**info, "config": config.to_dict(), "data_files": data_digests(tasks)}
    os.makedirs(records_dir(config), exist_ok=True)
    write_json(record_path(config, trial), record, indent=2, default=str)


def begin_trial(config: FinetuningConfig, tasks: list[Task], model_dir: str) -> None:
    """Saves what a resume of the trial is checked against (after `check_trials`)."""
    os.makedirs(model_dir, exist_ok=True)
    save_finetuning_config(config, os.path.join(model_dir, FINETUNING_CONFIG_FILE))
    write_json(os.path.join(model_dir, DATA_FILES), data_digests(tasks), indent=2)
    save_trained_state(tasks, model_dir)  # what the export needs of the data


def _saved(config: FinetuningConfig, trial: int) -> tuple[str, dict, dict] | None:
    """(where, saved config values, saved data digests) of a finished or started trial."""
    record = finished_trial(config, trial)
    if record is not None:
        return record_path(config, trial), record["config"], record.get("data_files", {})
    model_dir = config.model_dir(trial)
    path = os.path.join(model_dir, FINETUNING_CONFIG_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        values = json.load(f)
    digests_path = os.path.join(model_dir, DATA_FILES)
    digests = {}
    if os.path.exists(digests_path):
        with open(digests_path, encoding="utf-8") as f:
            digests = json.load(f)
    return model_dir, values, digests


def changes(
    where: str, saved: dict, digests: dict, config: FinetuningConfig, tasks: list[Task]
) -> list[str]:
    """The accepted differences ("key: old -> new"); ConfigError naming every refused one."""
    now = json.loads(json.dumps(config.to_dict(), default=str))
    changed = [
        (key, saved[key], now[key])
        for key in sorted(now)
        if key in saved and key not in _IGNORED and saved[key] != now[key]
    ]
    refused = [c for c in changed if c[0] in REFUSED_ON_RESUME]
    current = data_digests(tasks)
    refused += [
        (f"data file {name}", digests[name], current.get(name))
        for name in sorted(digests)
        if digests[name] != current.get(name)
    ]
    if refused:
        differences = "; ".join(f"{key}: saved {old!r}, now {new!r}" for key, old, new in refused)
        raise ConfigError(
            f"{where} holds a trial of a run with other settings; refusing to resume it with "
            f"{differences}. These change the trial's data or its model: use the saved values, "
            "another model_name, or --hparams '{\"overwrite\": true}' to start the trials over"
        )
    return [f"{key}: {old!r} -> {new!r}" for key, old, new in changed]


def check_trials(config: FinetuningConfig, tasks: list[Task]) -> None:
    """Before any trial starts: refuses a resume that changes a started or finished trial
    (ConfigError), and a trial folder holding files this run did not write unless `overwrite`
    (FileExistsError naming it); prints the accepted changes."""
    if config.overwrite:
        return
    for trial in range(1, config.num_trials + 1):
        saved = _saved(config, trial)
        if saved is not None:
            accepted = changes(*saved, config, tasks)
            if accepted:
                log(f"Trial {trial}: resuming with changed settings: {'; '.join(accepted)}")
            continue
        model_dir = config.model_dir(trial)
        if config.do_train and os.path.exists(model_dir) and os.listdir(model_dir):
            raise FileExistsError(
                f"{model_dir} exists and holds no trial of this run; pass --hparams "
                "'{\"overwrite\": true}' to replace it"
            )
