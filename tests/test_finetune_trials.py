"""Fine-tuning trials across starts: a changed run is refused naming the key and both values,
learning-rate and logging changes are accepted and printed; evaluation during training keeps
the best checkpoint (used for the results and the export) and early stopping ends a trial."""

import json
import os
import re

import numpy as np
import pytest
from helpers_pretrain_cli import checkpoint_values
from test_finetune_e2e import TINY, run_cli, write_sst_data

from electra_tf.runs import finetuning_train


class _StopAfter:
    """Stands in for `StopRequest`: a SIGINT 'arrives' once `steps` steps have run."""

    steps = 3

    def __init__(self, stream):
        self.calls = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    @property
    def signum(self):
        self.calls += 1
        return 2 if self.calls > _StopAfter.steps else None


@pytest.fixture
def data_dir(tmp_path):
    return write_sst_data(tmp_path)


def _trial_dir(data_dir, trial=1):
    return data_dir / "models" / "tiny" / "finetuning_models" / f"sst_model_{trial}"


@pytest.fixture
def stopped(data_dir, monkeypatch, capsys):
    """A trial stopped (as by Ctrl-C) at step 4 of 12 (3 an epoch), its checkpoint saved."""
    hparams = {**TINY, "init_checkpoint": None, "num_train_epochs": 4}
    monkeypatch.setattr(finetuning_train, "StopRequest", _StopAfter)
    assert run_cli(data_dir, hparams) == 130
    monkeypatch.undo()
    assert "stopped (SIGINT)" in capsys.readouterr().err
    assert (_trial_dir(data_dir) / "ckpt-4.index").exists()
    return hparams


@pytest.mark.parametrize(
    "change, named",
    [
        ({"seed": 1}, "seed: saved 0, now 1"),
        ({"train_batch_size": 4}, "train_batch_size: saved 8, now 4"),
        ({"max_seq_length": 16}, "max_seq_length: saved 12, now 16"),
    ],
)
def test_a_resume_with_other_settings_is_refused_naming_them(
    stopped, data_dir, capsys, change, named
):
    assert run_cli(data_dir, {**stopped, **change}) == 2
    err = capsys.readouterr().err
    assert named in err and "refusing to resume" in err, err
    assert (_trial_dir(data_dir) / "ckpt-4.index").exists()  # nothing of the trial touched


def test_a_changed_data_file_is_refused_naming_it(stopped, data_dir, capsys):
    train = data_dir / "finetuning_data" / "sst" / "train.tsv"
    train.write_text(train.read_text() + "the fun plot .\t1\n")
    assert run_cli(data_dir, stopped) == 2
    err = capsys.readouterr().err
    assert "data file sst/train: saved '" in err and "refusing to resume" in err, err


def test_learning_rate_and_logging_changes_are_accepted_and_printed(stopped, data_dir, capsys):
    assert run_cli(data_dir, {**stopped, "learning_rate": 1e-3, "log_every_steps": 1}) == 0
    out = capsys.readouterr().out
    assert "learning_rate: 0.003 -> 0.001" in out and "log_every_steps: 2 -> 1" in out, out
    assert "(step 4)" in out and "step 5/12" in out and "step 4/12" not in out, out


def test_overwrite_starts_the_stopped_trial_over(stopped, data_dir, capsys):
    assert run_cli(data_dir, {**stopped, "seed": 1, "overwrite": True}) == 0
    out = capsys.readouterr().out
    assert "Resuming" not in out and "Training for 12 steps\n" in out


def _flipped_dev(data_dir):
    """The dev labels flipped: the better the model learns the train set, the worse its dev
    accuracy, so the dev metric peaks early, not at the end."""
    dev = data_dir / "finetuning_data" / "sst" / "dev.tsv"
    lines = dev.read_text().splitlines()
    flipped = [f"{t}\t{1 - int(y)}" for t, y in (line.rsplit("\t", 1) for line in lines[1:])]
    dev.write_text("\n".join([lines[0], *flipped]) + "\n")


def _evaluations(out):
    """(step, accuracy) of every dev evaluation on the console."""
    found = re.findall(r"step (\d+)/\d+ \| dev sst: accuracy: ([\d.]+)", out)
    return [(int(step), float(accuracy)) for step, accuracy in found]


def test_the_best_checkpoint_is_kept_used_for_results_and_export(data_dir, capsys):
    _flipped_dev(data_dir)
    hparams = {
        **TINY, "init_checkpoint": None, "num_train_epochs": 12, "learning_rate": 1e-2,
        "eval_every_steps": 3, "metric_for_best": "accuracy",
    }  # fmt: skip
    assert run_cli(data_dir, hparams) == 0
    out = capsys.readouterr().out
    evaluations = _evaluations(out)
    assert len(evaluations) == 12, out  # steps 3, 6, ..., 36
    # The first of the highest accuracies (numpy's argmax), independently of the run's choice.
    best_step, best_accuracy = evaluations[int(np.argmax([a for _, a in evaluations]))]
    assert best_step < 36 and best_accuracy > evaluations[-1][1], evaluations
    trial = _trial_dir(data_dir)
    best = json.loads((trial / "best" / "best_metrics.json").read_text())
    assert best["step"] == best_step and best["metric"] == "accuracy"
    # The results are the best weights' metrics, not the last evaluation's.
    results = json.loads(
        (data_dir / "models" / "tiny" / "results" / "sst_results.json").read_text()
    )
    assert results["trials"][0]["sst"]["accuracy"] == pytest.approx(best_accuracy, abs=0.006)
    assert results["runs"][0]["best_step"] == best_step
    final = checkpoint_values(str(trial / "ckpt-36"))
    kept = checkpoint_values(str(trial / "best" / f"ckpt-{best_step}"))
    head = "model/task_heads/0/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    assert head in kept and not np.array_equal(kept[head], final[head])
    # The export reads the best weights; naming the trial folder exports the last ones.
    from electra_tf.serving.sources import task_spec

    model_dir = str(data_dir / "models" / "tiny")
    spec = task_spec("tiny", model_dir, "sst", vocab_file=str(data_dir / "vocab.txt"))
    assert spec.info["source"].endswith(os.path.join("best", f"ckpt-{best_step}"))
    spec = task_spec(
        "tiny", model_dir, "sst", checkpoint=str(trial), vocab_file=str(data_dir / "vocab.txt")
    )
    assert spec.info["source"].endswith("ckpt-36")


def test_early_stopping_ends_the_trial_after_the_patience(data_dir, capsys):
    _flipped_dev(data_dir)
    hparams = {
        **TINY, "init_checkpoint": None, "num_train_epochs": 12, "learning_rate": 1e-2,
        "eval_every_steps": 3, "metric_for_best": "accuracy", "early_stopping_patience": 2,
    }  # fmt: skip
    assert run_cli(data_dir, hparams) == 0
    out = capsys.readouterr().out
    evaluations = _evaluations(out)
    accuracies = [a for _, a in evaluations]
    # Independently: the first evaluation that is the 2nd in a row without a new maximum.
    since, best, expected = 0, -1.0, None
    for step, accuracy in evaluations:
        since, best = (0, accuracy) if accuracy > best else (since + 1, best)
        if since == 2:
            expected = step
            break
    assert expected is not None and evaluations[-1][0] == expected < 36, evaluations
    assert f"Early stopping at step {expected}" in out
    assert (_trial_dir(data_dir) / f"ckpt-{expected}.index").exists()
    assert max(accuracies) == accuracies[int(np.argmax(accuracies))]


def test_the_default_evaluates_at_the_end_and_keeps_no_best(data_dir, capsys):
    assert run_cli(data_dir, {**TINY, "init_checkpoint": None}) == 0
    out = capsys.readouterr().out
    assert "| dev sst" not in out and not (_trial_dir(data_dir) / "best").exists()


def test_metric_for_best_needs_evaluations_during_training(data_dir, capsys):
    assert run_cli(data_dir, {**TINY, "metric_for_best": "accuracy"}) == 2
    assert "set eval_every_steps or eval_each_epoch" in capsys.readouterr().err


class _StopInTrialTwo(_StopAfter):
    """A SIGINT once 12 + 4 steps have run in all (trial 1's 12, then 4 of trial 2's)."""

    total = 0

    @property
    def signum(self):
        _StopInTrialTwo.total += 1
        return 2 if _StopInTrialTwo.total > 16 else None


def test_a_stopped_multi_trial_run_keeps_finished_trials_and_resumes_the_next(
    data_dir, monkeypatch, capsys
):
    hparams = {**TINY, "init_checkpoint": None, "num_train_epochs": 4, "num_trials": 2}
    monkeypatch.setattr(finetuning_train, "StopRequest", _StopInTrialTwo)
    assert run_cli(data_dir, hparams) == 130
    monkeypatch.undo()
    capsys.readouterr()
    trial_one = (_trial_dir(data_dir, 1) / "checkpoint").stat().st_mtime_ns
    assert run_cli(data_dir, hparams) == 0
    out = capsys.readouterr().out
    assert "Trial 1 was finished: kept" in out and "sst_model_1 from" not in out, out
    assert "sst_model_2 from ckpt-4 (step 4)" in out, out
    assert (_trial_dir(data_dir, 1) / "checkpoint").stat().st_mtime_ns == trial_one
    results = json.loads(
        (data_dir / "models" / "tiny" / "results" / "sst_results.json").read_text()
    )
    assert len(results["trials"]) == 2
    assert [r["resumed_from_step"] for r in results["runs"]] == [None, 4]
    text = (data_dir / "models" / "tiny" / "results" / "sst_results.txt").read_text()
    assert "trial 2 resumed from step 4" in text and "trial 1 resumed" not in text
