"""electra_tf.evaluation.compare_objectives (and its plan / report / launcher): the step plan, the checks on its inputs, the report and the
Table 5 statement on hand-made numbers, and one `--quick` run end to end on tiny data."""

import json
import os

import numpy as np
import pytest

from electra_tf.config import ConfigError
from electra_tf.evaluation import compare_objectives as co
from electra_tf.evaluation import launcher as compare_launcher
from electra_tf.evaluation import plan as cp
from electra_tf.evaluation import report

PILOT = {"seconds_per_step": 0.5, "startup_seconds": 40.0, "pilot_seconds": 60.0, "timed_steps": 30}


# ---------------------------------------------------------------------- the plan
def test_steps_fill_the_budget_after_the_start_up():
    plan = cp.plan_steps(600, PILOT, warmup=None, preset_warmup=100)
    assert plan.steps == (600 - 40) / 0.5 == 1120
    assert plan.warmup_steps == 100 and not plan.capped
    assert plan.planned_seconds == pytest.approx(600)
    # A budget that is not a whole number of steps rounds down: the schedule must end in time.
    assert cp.plan_steps(600.4, PILOT, None, 100).steps == 1120


def test_equal_budgets_give_steps_in_inverse_proportion_and_scaled_warmup():
    slow = cp.plan_steps(3600, {**PILOT, "seconds_per_step": 0.8}, 0.125, 400)
    fast = cp.plan_steps(3600, {**PILOT, "seconds_per_step": 0.4}, 0.125, 400)
    assert (slow.steps, fast.steps) == (4450, 8900)  # 3560 s / 0.8, / 0.4 (not 4449)
    assert (slow.warmup_steps, fast.warmup_steps) == (556, 1112)  # round(0.125 x steps)
    # A step count given as an integer is the same for every objective.
    assert cp.plan_steps(3600, PILOT, 300.0, 400).warmup_steps == 300


def test_a_budget_not_longer_than_the_pilot_is_refused():
    with pytest.raises(cp.PlanError, match=r"electra: the budget \(60 s\) is not longer than"):
        cp.plan_steps(60, PILOT, None, 0, objective="electra")
    cp.plan_steps(61, PILOT, None, 0)  # one second more: 42 steps


def test_a_warmup_as_long_as_the_run_is_refused_and_a_cap_is_marked():
    with pytest.raises(cp.PlanError, match="400 warm-up steps but the budget allows 240"):
        cp.plan_steps(160, PILOT, None, 400)
    capped = cp.plan_steps(600, PILOT, 0.1, 400, max_steps=50)
    assert (capped.steps, capped.warmup_steps, capped.capped) == (50, 5, True)


@pytest.mark.parametrize("text, value", [(None, None), ("0", 0.0), ("0.1", 0.1), ("400", 400.0)])
def test_warmup_is_a_fraction_or_a_step_count(text, value):
    assert cp.parse_warmup(text) == value


@pytest.mark.parametrize("text", ["1.5", "-0.1", "ten"])
def test_other_warmups_are_refused(text):
    with pytest.raises(ConfigError, match="--warmup"):
        cp.parse_warmup(text)


# ---------------------------------------------------------------------- inputs
def test_objectives_are_the_ablation_files_and_errors_name_the_unknown_one():
    objectives = cp.load_objectives("electra, bert_mlm,electric")
    assert list(objectives) == ["electra", "bert_mlm", "electric"]
    assert objectives["electric"]["electric_objective"] is True
    assert "_comment" not in objectives["electra"]
    with pytest.raises(ConfigError, match=r"unknown objective 'electra15' .*'electra_15'\?"):
        cp.load_objectives("electra,electra15")
    with pytest.raises(ConfigError, match="listed twice"):
        cp.load_objectives("electra,electra")
    with pytest.raises(ConfigError, match="random-init row"):
        cp.load_objectives("random")


def test_shared_hparams_may_not_decide_the_objective_or_the_steps():
    objectives = cp.load_objectives("electra,replace_mlm")
    cp.check_shared_hparams({"max_seq_length": 64, "learning_rate": 1e-3}, objectives)
    with pytest.raises(ConfigError, match=r"'disc_weight'.*configs/ablations/electra\.json"):
        cp.check_shared_hparams({"disc_weight": 1.0}, objectives)
    with pytest.raises(ConfigError, match="'num_train_steps' is set by the comparison"):
        cp.check_shared_hparams({"num_train_steps": 10}, objectives)


def test_latest_step_reads_the_checkpoint_index(tmp_path):
    assert cp.latest_step(str(tmp_path)) == 0
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-1200"\nall_model_checkpoint_paths: "ckpt-500"\n'
        'all_model_checkpoint_paths: "ckpt-1200"\n'
    )
    assert cp.latest_step(str(tmp_path)) == 1200


def test_a_plan_made_with_other_settings_is_not_resumed(tmp_path):
    path = str(tmp_path / "plan.json")
    settings = {"minutes": 30.0, "preset": "gutenberg"}
    assert cp.check_plan_settings(path, settings)["objectives"] == {}
    cp.write_json(path, {"settings": settings, "objectives": {"electra": {"steps": 9}}})
    assert cp.check_plan_settings(path, settings)["objectives"] == {"electra": {"steps": 9}}
    with pytest.raises(ConfigError, match="minutes: planned with 30.0, now 45.0"):
        cp.check_plan_settings(path, {**settings, "minutes": 45.0})


def test_the_finetuning_eta_counts_only_runs_not_cached(tmp_path):
    results = tmp_path / "val" / "models" / "electra_val_lr0.0003" / "results"
    results.mkdir(parents=True)
    (results / "sst_results.json").write_text("{}")
    dev = tmp_path / "dev" / "models" / "random_dev_lr0.0001" / "results"
    dev.mkdir(parents=True)
    (dev / "sst_results.json").write_text("{}")
    # 2 rows x (2 lrs + 1 dev run), less the cached sweep run and the cached dev run.
    counter = compare_launcher.FinetuneCounter(
        False, str(tmp_path), ["electra", "random"], ["1e-4", "3e-4"]
    )
    assert counter.total == 4
    # One lr: no sweep (sst2_transfer has nothing to choose), one dev run per row.
    assert (
        compare_launcher.FinetuneCounter(
            False, str(tmp_path), ["electra", "random"], ["1e-4"]
        ).total
        == 1
    )


def test_finetune_counter_eta_divides_by_the_runs_going_at_once(tmp_path, monkeypatch, capsys):
    calls = []  # the run's start reads 0 s, every later read 100 s: one run of 100 s

    def clock_reading():
        calls.append(None)
        return 0.0 if len(calls) == 1 else 100.0

    monkeypatch.setattr(compare_launcher.time, "monotonic", clock_reading)
    monkeypatch.setattr(compare_launcher.sst2_transfer, "run_command", lambda c, e: (0, ""))
    # 3 rows x (2 lrs + 1 dev run) = 9 runs; after one, 8 are left at 100 s each, 2 at once.
    counter = compare_launcher.FinetuneCounter(
        False, str(tmp_path), ["a", "b", "c"], ["1e-4", "3e-4"], jobs=2
    )
    assert counter(["python"], {}) == (0, "")
    assert "run 1 of <= 9 done; SST-2 ETA <= 0:06:40" in capsys.readouterr().out


# ---------------------------------------------------------------------- report
def _row(objective, trials):
    return {
        "objective": objective,
        "dev_accuracy_trials": trials,
        "dev_accuracy_median": float(np.median(trials)),
    }


def test_an_ordering_like_the_papers_is_said_to_agree():
    medians = {"bert_mlm": 60, "electra_15": 61, "replace_mlm": 62, "all_tokens_mlm": 63}
    rows = [_row(name, [m, m]) for name, m in medians.items()] + [_row("electra", [64, 64])]
    result = report.table5_comparison(rows)
    assert result["measured_order"] == list(report.TABLE5_ORDER)
    assert result["disagreements"] == []
    assert "agrees with the paper's for every pair run" in result["statement"]


def test_each_pair_out_of_the_papers_order_is_stated():
    rows = [
        _row("electra", [60.0, 61.0, 59.0]),
        _row("bert_mlm", [70.0, 70.5, 69.5]),  # beats ELECTRA by 10, seeds spread 2
        _row("all_tokens_mlm", [61.0, 64.0, 58.0]),  # 1 over ELECTRA, seeds spread 6
        _row("replace_mlm", [61.0, 61.0, 61.0]),  # ties All-Tokens MLM's median
        _row("electric", [80.0, 80.0, 80.0]),
        _row("random", [75.0, 75.0, 75.0]),
    ]
    result = report.table5_comparison(rows)
    assert result["measured_order"] == ["electra", "replace_mlm", "all_tokens_mlm", "bert_mlm"]
    pairs = {(d["paper_lower"], d["paper_higher"]): d for d in result["disagreements"]}
    assert set(pairs) == {
        ("bert_mlm", "replace_mlm"),
        ("bert_mlm", "all_tokens_mlm"),
        ("bert_mlm", "electra"),
        ("replace_mlm", "all_tokens_mlm"),
        ("replace_mlm", "electra"),
        ("all_tokens_mlm", "electra"),
    }
    assert not pairs[("bert_mlm", "electra")]["within_seed_spread"]
    assert pairs[("all_tokens_mlm", "electra")]["within_seed_spread"]
    text = result["statement"]
    assert "- BERT (70.00) beats ELECTRA (60.00), which the paper ranks above it." in text
    assert "- Replace MLM (61.00) ties with All-Tokens MLM (61.00)" in text
    assert "Not in Table 5, so not compared: Electric, random init." in text


def test_a_tie_of_single_seeds_is_stated_without_a_seed_spread():
    result = report.table5_comparison([_row("electra", [50.0]), _row("bert_mlm", [50.0])])
    assert "BERT 50.00 = ELECTRA 50.00" in result["statement"]
    [tie] = result["disagreements"]
    assert tie["within_seed_spread"] is None
    assert "- BERT (50.00) ties with ELECTRA (50.00), which the paper ranks above it.\n" in (
        result["statement"] + "\n"
    )


def test_one_table5_objective_is_nothing_to_compare():
    result = report.table5_comparison([_row("electra", [60.0]), _row("random", [70.0])])
    assert result["disagreements"] == [] and "nothing to compare" in result["statement"]


def test_the_report_files_hold_every_row_and_the_command(tmp_path):
    trained = {
        "steps": 1120,
        "warmup_steps": 140,
        "capped": False,
        "real_tokens": 2_240_000,
        "planned_seconds": 600.0,
        "wall_seconds": 612.0,
        "segments": 2,
        "heldout": {"masked_lm_accuracy": 0.1234, "disc_auc": 0.6, "loss": 9.0},
        "lr": 1e-4,
    }
    rows = [
        {**_row("electra", [63.88, 63.76, 65.37]), **trained},
        {**_row("random", [70.41, 66.06, 71.1]), "lr": 3e-4},
    ]
    results = {
        "command": "python -m electra_tf.evaluation.compare_objectives --objectives electra --minutes 10",
        "quick": False,
        "settings": {
            "minutes": 10.0,
            "preset": "gutenberg",
            "shared_hparams": {},
            "parallel": 2,
            "warmup_rule": "0.125 of each run's steps",
        },  # fmt: skip
        "heldout_data": "`held/*`",
        "protocol_text": "the protocol",
        "rows": rows,
        "table5": report.table5_comparison(rows),
    }
    md_path, json_path = report.write_report(results, str(tmp_path))
    assert json.loads(open(json_path).read()) == results
    md = open(md_path).read()
    assert results["command"] in md and "each pinned to its own core" in md
    assert (
        "| ELECTRA | 1,120 | 2.24M | 10.0 | 10.2 (2 segments) | masked_lm_accuracy 0.123, "
        "disc_auc 0.600 | 0.0001 | 63.88 / 63.76 / 65.37 | **63.88** |" in md
    )
    assert "| random init |  |  |  |  |  | 0.0003 | 70.41 / 66.06 / 71.10 | **70.41** |" in md
    assert "nothing to compare" in md and "Off their plan" not in md  # 612 s of 600: 2%


def test_runs_off_their_plan_are_named():
    rows = [
        {"objective": "electra", "planned_seconds": 600.0, "wall_seconds": 1128.0, "segments": 2},
        {"objective": "bert_mlm", "planned_seconds": 600.0, "wall_seconds": 530.0, "segments": 1},
        {"objective": "replace_mlm", "planned_seconds": 600.0, "wall_seconds": 659.0},
        {"objective": "random"},
    ]
    assert report.timing_notes(rows) == [
        "ELECTRA ran 18.8 min against 10.0 planned (+88%, over 2 segments).",
        "BERT ran 8.8 min against 10.0 planned (-12%).",
    ]


def test_glue_dir_defaults_inside_the_data_dir_and_its_absence_is_explained(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    argv = ["--data-dir", str(data), "--objectives", "electra", "--minutes", "5"]
    argv += ["--preset", "tiny", "--out", str(tmp_path / "out")]
    assert co.parse_args(argv).glue_dir == os.path.join(str(data), "glue", "SST-2")
    assert co.main(argv) == 2
    err = capsys.readouterr().err
    assert f"no train.tsv in {os.path.join(str(data), 'glue', 'SST-2')}" in err
    assert "GLUE_DIR=" in err and "--no-finetune" in err


# ---------------------------------------------------------------------- end to end
def _write_sst2(glue_dir, rng):
    glue_dir.mkdir()
    for name, n in (("train.tsv", 48), ("dev.tsv", 10)):
        lines = ["sentence\tlabel"]
        for _ in range(n):
            words = " ".join(f"w{i}" for i in rng.integers(0, 59, 5))
            lines.append(f"{words}\t{int(rng.integers(0, 2))}")
        (glue_dir / name).write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_quick_run_end_to_end_then_resumed(tmp_path, capsys):
    # Two objectives that build different networks (a masked LM alone; Electric's two-tower
    # generator), each planned, trained, evaluated and fine-tuned with a random-init row. In
    # this process (--in-process): one interpreter and TensorFlow start-up for all of it.
    from helpers_pretrain_cli import TINY, write_corpus

    data = write_corpus(tmp_path / "data")
    _write_sst2(tmp_path / "glue", np.random.default_rng(0))
    hparams = {**TINY, "save_checkpoints_steps": 6}
    argv = [
        "--data-dir", str(data), "--objectives", "bert_mlm,electric", "--minutes", "20",
        "--max-steps", "6", "--preset", "tiny", "--hparams", json.dumps(hparams),
        "--out", str(tmp_path / "out"), "--glue-dir", str(tmp_path / "glue"),
        "--ft-max-seq-length", "16", "--quick", "--in-process", "--progress-seconds", "0",
    ]  # fmt: skip
    assert co.main(argv) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = {r["objective"]: r for r in results["rows"]}
    assert list(rows) == ["bert_mlm", "electric", "random"]
    for name in ("bert_mlm", "electric"):
        row = rows[name]
        assert row["steps"] == 6 and row["capped"] and row["segments"] == 1
        assert row["wall_seconds"] > 0 and row["seconds_per_step"] > 0
        assert row["real_tokens"] > 0 and row["token_positions"] == 6 * 4 * 16
        assert row["checkpoint"].endswith("ckpt-6")
        assert os.path.exists(row["checkpoint"] + ".index")
        assert 0 <= row["heldout"]["masked_lm_accuracy"] <= 1
    assert (
        "disc_auc" in rows["electric"]["heldout"] and "disc_auc" not in rows["bert_mlm"]["heldout"]
    )
    for row in rows.values():
        assert row["lr"] == 1e-3 and len(row["dev_accuracy_trials"]) == 1
        assert all(0 <= a <= 100 for a in [*row["dev_accuracy_trials"], row["dev_accuracy_median"]])
    # The random row has the pre-trained rows' encoder (the tiny preset, shrunk by TINY).
    shape = json.loads((tmp_path / "out" / "random_shape.json").read_text())
    assert shape["model_hparam_overrides"] == {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 64,
    }
    assert shape["embedding_size"] == 16
    # Each run's hparams file holds its objective and the planned steps.
    saved = json.loads((tmp_path / "out" / "hparams" / "electric.train.json").read_text())
    assert saved["electric_objective"] and saved["num_train_steps"] == 6
    # 3 rows x one dev run (a single lr needs no validation sweep).
    assert "fine-tuning run 3 of <= 3 done" in out and "_val_lr" not in out
    assert results["command"] in (tmp_path / "out" / "results.md").read_text()
    assert "--quick smoke run" in (tmp_path / "out" / "results.md").read_text()

    # The same command again: nothing is re-run, the report is the same.
    assert co.main(argv) == 0
    out = capsys.readouterr().out
    assert "bert_mlm: already trained to 6 steps, skipped" in out and "pilot of" not in out
    assert "fine-tuning run 1" not in out and "at most 0 fine-tuning runs to go" in out
    again = json.loads((tmp_path / "out" / "results.json").read_text())
    assert again["rows"] == results["rows"]

    # Another budget in the same folder is refused, naming the setting.
    assert co.main([*argv[:5], "30", *argv[6:]]) == 2
    assert "minutes: planned with 20.0, now 30.0" in capsys.readouterr().err


def test_missing_pretraining_data_stops_at_the_pilot_naming_the_files(tmp_path):
    from helpers_pretrain_cli import TINY

    data = tmp_path / "data"
    data.mkdir()
    (data / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nw0\n")
    argv = [
        "--data-dir", str(data), "--objectives", "electra", "--minutes", "5", "--preset", "tiny",
        "--hparams", json.dumps(TINY), "--out", str(tmp_path / "out"), "--no-finetune",
        "--quick", "--in-process",
    ]  # fmt: skip
    with pytest.raises(SystemExit, match=r"the pilot of electra failed \(exit 2\)") as stopped:
        co.main(argv)
    assert "pretrain_tfrecords/pretrain_data.tfrecord*" in str(stopped.value)
