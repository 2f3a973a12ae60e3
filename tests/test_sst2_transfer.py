"""electra_tf.evaluation.sst2_transfer: cached runs are reused only with the settings that made them, and
paths given relative to the caller's directory reach the fine-tuning processes intact."""

import json
import os
import shutil
import threading

import pytest

from electra_tf.evaluation import sst2_transfer

HPARAMS = {"learning_rate": 3e-4, "max_train_examples": 2000, "overwrite": True}


def fake_run_dir(data_dir, name, recorded, accuracy=70.0):
    """A finished run as `electra_tf.finetune` leaves it: results and the first trial's config."""
    run = os.path.join(data_dir, "models", name)
    os.makedirs(os.path.join(run, "results"))
    with open(os.path.join(run, "results", "sst_results.json"), "w", encoding="utf-8") as f:
        json.dump({"median": {"sst": {"accuracy": accuracy}}, "trials": []}, f)
    if recorded is not None:
        trial = os.path.join(run, "finetuning_models", "sst_model_1")
        os.makedirs(trial)
        with open(os.path.join(trial, "finetuning_config.json"), "w", encoding="utf-8") as f:
            json.dump(recorded, f)


def never_run(command, env):
    raise AssertionError(f"a cached run was repeated: {command}")


def test_a_cached_run_with_the_same_settings_is_reused(tmp_path):
    recorded = {**HPARAMS, "num_trials": 1, "overwrite": False, "seed": 0}
    fake_run_dir(str(tmp_path), "row_val_lr3e-4", recorded, accuracy=71.5)
    summary = sst2_transfer.finetune(str(tmp_path), "row_val_lr3e-4", HPARAMS, "python", never_run)
    assert summary["median"]["sst"]["accuracy"] == 71.5


def test_a_cached_run_made_with_other_settings_is_refused_naming_it(tmp_path):
    fake_run_dir(str(tmp_path), "row_dev_lr3e-4", {**HPARAMS, "num_trials": 1})
    asked = {**HPARAMS, "num_trials": 5, "max_train_examples": 500}
    with pytest.raises(SystemExit) as failure:
        sst2_transfer.finetune(str(tmp_path), "row_dev_lr3e-4", asked, "python", never_run)
    message = str(failure.value)
    assert os.path.join(str(tmp_path), "models", "row_dev_lr3e-4") in message
    assert "num_trials: 1 there, 5 asked" in message
    assert "max_train_examples: 2000 there, 500 asked" in message


def test_a_cached_run_without_a_config_is_reused_with_a_note(tmp_path, capsys):
    fake_run_dir(str(tmp_path), "old_val_lr3e-4", None, accuracy=60.0)
    summary = sst2_transfer.finetune(str(tmp_path), "old_val_lr3e-4", HPARAMS, "python", never_run)
    assert summary["median"]["sst"]["accuracy"] == 60.0
    assert "without a config to check" in capsys.readouterr().out


def small_glue_dir(tmp_path):
    """SST-2-shaped TSVs, a vocabulary and an (empty) checkpoint folder under `tmp_path`."""
    glue = tmp_path / "glue"
    glue.mkdir()
    rows = ["sentence\tlabel"] + [f"word{i} good\t{i % 2}" for i in range(30)]
    (glue / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (glue / "dev.tsv").write_text("\n".join(rows[:11]) + "\n", encoding="utf-8")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    (tmp_path / "ckpt").mkdir()


def write_fake_results(command, accuracy=50.0):
    """What a finished `electra_tf.finetune` command leaves: its results file."""
    data_dir = command[command.index("--data-dir") + 1]
    name = command[command.index("--model-name") + 1]
    hparams = json.loads(command[command.index("--hparams") + 1])
    run = os.path.join(data_dir, "models", name, "results")
    os.makedirs(run)
    result = {
        "median": {"sst": {"accuracy": accuracy}},
        "trials": [{"sst": {"accuracy": accuracy}}] * hparams.get("num_trials", 1),
    }
    with open(os.path.join(run, "sst_results.json"), "w", encoding="utf-8") as f:
        json.dump(result, f)


def test_relative_paths_are_made_absolute_before_the_runs(tmp_path, monkeypatch):
    small_glue_dir(tmp_path)
    seen = []

    def record(command, env):
        seen.append(command)
        write_fake_results(command)
        return 0, ""

    monkeypatch.chdir(tmp_path)
    code = sst2_transfer.main(
        [
            "--glue-dir",
            "glue",
            "--out",
            "out",
            "--vocab-file",
            "vocab.txt",
            "--row",
            "r=ckpt",
            "--lrs",
            "1e-4",
            "--val-examples",
            "10",
            "--train-examples",
            "5",
            "--seeds",
            "1",
            "--python",
            "bin/python",
        ],
        run=record,
    )
    assert code == 0 and seen
    for command in seen:
        assert os.path.isabs(command[0]) and command[0] == str(tmp_path / "bin" / "python")
        data_dir = command[command.index("--data-dir") + 1]
        assert os.path.isabs(data_dir) and data_dir.startswith(str(tmp_path / "out"))
        hparams = json.loads(command[command.index("--hparams") + 1])
        assert hparams["init_checkpoint"] == str(tmp_path / "ckpt")


@pytest.mark.skipif(not shutil.which("taskset"), reason="--jobs pins runs with taskset")
def test_jobs_fine_tune_rows_at_once_each_on_its_own_core(tmp_path, monkeypatch):
    small_glue_dir(tmp_path)
    (tmp_path / "ckpt2").mkdir()
    both_running = threading.Barrier(2, timeout=30)  # breaks unless two rows' runs overlap
    seen = []

    def record(command, env):
        seen.append((command, env))
        both_running.wait()
        name = command[command.index("--model-name") + 1]
        write_fake_results(command, accuracy=60.0 if name.startswith("b_") else 50.0)
        return 0, ""

    monkeypatch.chdir(tmp_path)
    argv = ["--glue-dir", "glue", "--out", "out", "--vocab-file", "vocab.txt", "--lrs", "1e-4"]
    argv += ["--val-examples", "10", "--train-examples", "5", "--seeds", "1"]
    argv += ["--row", "a=ckpt", "--row", "b=ckpt2", "--jobs", "2", "--cpus", "3,5"]
    assert sst2_transfer.main(argv, run=record) == 0
    cores = {}
    for command, env in seen:
        assert command[:2] == ["taskset", "-c"]
        assert all(env[key] == "1" for key in sst2_transfer.ONE_THREAD)
        cores[command[command.index("--model-name") + 1]] = command[2]
    assert sorted(cores.values()) == ["3", "5"]  # one core each
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert list(summary["rows"]) == ["a", "b"]  # the order given, whichever finished first
    assert [r["dev_accuracy_median"] for r in summary["rows"].values()] == [50.0, 60.0]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--jobs", "0"], "at least 1"),
        (["--cpus", "0"], "needs --jobs 2"),
        (["--jobs", "2", "--cpus", "0"], "only cores"),
        (["--jobs", "2", "--cpus", "a,b"], "not a comma-separated list"),
    ],
)
def test_jobs_and_cpus_are_checked_before_any_run(tmp_path, capsys, extra, message):
    argv = ["--glue-dir", "g", "--out", "o", "--vocab-file", "v", "--row", "a=random", *extra]
    with pytest.raises(SystemExit):
        sst2_transfer.main(argv, run=never_run)
    assert message in capsys.readouterr().err
