"""Who reads a fine-tuning run's files for `check_task_data`: the command once, before its
lock (the run it starts is told so and does not read them again), and `run_finetuning` itself
for a caller of the Python API, before anything is written."""

from __future__ import annotations

import collections
import json

import pytest
from helpers_user_data import TINY, VOCAB, listing

from electra_tf.cli import finetune
from electra_tf.finetuning import glue
from electra_tf.finetuning.config import finetuning_config
from electra_tf.finetuning.task import DataError
from electra_tf.runs import finetuning


class StopBeforeTrials(Exception):
    """Raised where the run checks its trials: the data check is behind it, no trial begun."""


def sst_data(root, dev_rows: int = 4):
    """`root` as a data dir with a vocabulary and an sst task (a header-only dev.tsv at 0)."""
    (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    sst = root / "finetuning_data" / "sst"
    sst.mkdir(parents=True)
    rows = [f"the good movie .\t{i % 2}\n" for i in range(8)]
    (sst / "train.tsv").write_text("sentence\tlabel\n" + "".join(rows))
    (sst / "dev.tsv").write_text("sentence\tlabel\n" + "".join(rows[:dev_rows]))
    return root


@pytest.fixture
def reads(monkeypatch):
    """{split: times read} of every sst file; the run stopped where it checks its trials."""
    counts: collections.Counter[str] = collections.Counter()
    get_examples = glue.SentenceTask.get_examples

    def counted(task, split):
        counts[split] += 1
        return get_examples(task, split)

    def stop(config, tasks):
        raise StopBeforeTrials

    monkeypatch.setattr(glue.SentenceTask, "get_examples", counted)
    monkeypatch.setattr(finetuning, "check_trials", stop)
    return counts


def test_the_command_reads_each_file_once_for_its_check(tmp_path, reads):
    data = sst_data(tmp_path)
    argv = ["--data-dir", str(data), "--model-name", "tiny", "--tasks", "sst"]
    with pytest.raises(StopBeforeTrials):
        finetune.main([*argv, "--hparams", json.dumps(TINY)])
    # The command's check read train and dev; the run it started did not read them again.
    assert reads == {"train": 1, "dev": 1}


def test_the_python_api_checks_before_anything_is_written(tmp_path, reads):
    data = sst_data(tmp_path, dev_rows=0)
    config = finetuning_config("tiny", str(data), {**TINY, "task_names": ["sst"]})
    before = listing(data)
    with pytest.raises(DataError, match=r"sst/dev\.tsv: no examples \(only a header row"):
        finetuning.run_finetuning(config)
    assert listing(data) == before
    # `data_checked`: the caller checked already, so the run goes on without reading them.
    reads.clear()
    with pytest.raises(StopBeforeTrials):
        finetuning.run_finetuning(config, data_checked=True)
    assert reads == {}
