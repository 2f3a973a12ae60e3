"""Issue #40's cases on workers that disagree, TF_CONFIG, resumes that change the run and
fine-tuning settings that give no run. Each test records its row for `make reliability`
(tests/helpers_reliability.py) before it asserts.

One real pair of worker processes (two learning rates: both must stop before the first step);
the comparison itself is tested with fake workers' settings and a fake strategy that plays the
other workers' side of the all-gather. Everything else runs the CLIs in this process.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from helpers_distribute import TINY_HPARAMS, child_env, free_ports, write_id_data
from helpers_pretrain_cli import run_pretrain, write_corpus
from helpers_reliability import last_line, record
from test_reliability import FINETUNE_TINY, _finetune, _finetune_data

from electra_tf.cli import finetune
from electra_tf.config import pretraining_config
from electra_tf.runs import worker_agreement
from electra_tf.runs.strategy import WorkerLostError
from electra_tf.runs.worker_agreement import (
    check_workers_agree,
    disagreements,
    worker_settings,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRETRAINED = os.path.join(ROOT, "pretrained", "electra-tiny-gutenberg")


# ------------------------------------------------------------------ 3. workers agree or refuse
class PeerStrategy:
    """What `_all_gather_bytes` uses of a MultiWorkerMirroredStrategy, with the other workers'
    payloads given: each gather returns this worker's row followed by theirs."""

    def __init__(self, peers):
        self.peers = peers  # [{"worker": ..., "settings": ...}, ...]

    def experimental_distribute_values_from_function(self, fn):
        return fn(None)

    def gather(self, value, axis):
        raw = [json.dumps(p, sort_keys=True).encode() for p in self.peers]
        mine = value.numpy()
        if mine.shape == (1, 1):  # the lengths
            return tf.constant([[mine[0, 0]]] + [[len(r)] for r in raw])
        rows = [mine[0]] + [
            np.pad(np.frombuffer(r, np.uint8), (0, mine.shape[1] - len(r))) for r in raw
        ]
        return tf.constant(np.stack(rows).astype(np.int32))


def _settings(data_dir, **overrides):
    config = pretraining_config(
        "m", str(data_dir), hparams={"vocab_size": 64, "train_batch_size": 4, **overrides}
    )
    pattern = os.path.join(str(data_dir), "pretrain_tfrecords", "*")
    files = sorted(tf.io.gfile.glob(pattern))
    return worker_settings(config, files, None, ())


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    return write_corpus(root / "a", num_records=8), write_corpus(root / "b", num_records=12)


def test_workers_with_other_data_or_batch_sizes_refuse_naming_both(corpora):
    a, b = corpora
    mine = _settings(a)
    cases = [
        ("other --data-dir", _settings(b), "training data"),
        ("other train_batch_size", _settings(a, train_batch_size=8), "train_batch_size"),
    ]
    for case, theirs, key in cases:
        strategy = PeerStrategy([{"worker": "worker 1", "settings": theirs}])
        with pytest.raises(Exception) as raised:
            check_workers_agree(strategy, "worker 0", mine)
        got = str(raised.value)
        record("3", f"2 workers, {case}", f"refused naming {key} and workers 0, 1", got)
        assert type(raised.value).__name__ == "ConfigError", got
        assert f"{key}: " in got and "on worker 0" in got and "on worker 1" in got, got
        assert len(got.splitlines()) == 1, got
    # The same settings on another host's paths agree (data_dir is per host; content counts).
    copy = shutil.copytree(a, a.parent / "a_copy")
    strategy = PeerStrategy([{"worker": "worker 1", "settings": _settings(copy)}])
    check_workers_agree(strategy, "worker 0", mine)


def test_disagreements_group_workers_by_value():
    same = {"learning_rate": "0.0005", "seed": "0"}
    workers = {
        "chief 0": same,
        "worker 0": {**same, "learning_rate": "0.05"},
        "worker 1": {**same, "learning_rate": "0.05"},
        "worker 2": {"learning_rate": "0.0005"},
    }
    assert disagreements(workers) == [
        "learning_rate: 0.0005 on chief 0, worker 2; 0.05 on workers 0, 1",
        "seed: 0 on chief 0, workers 0, 1; (not set) on worker 2",
    ]
    assert disagreements({"worker 0": same, "worker 1": dict(same)}) == []


def test_a_worker_that_dies_before_the_first_step_gets_the_right_advice(monkeypatch):
    def unavailable(*_):
        raise tf.errors.UnavailableError(None, None, "Socket closed")

    monkeypatch.setattr(worker_agreement, "_all_gather_bytes", unavailable)
    with pytest.raises(WorkerLostError) as raised:
        check_workers_agree(None, "worker 0", {"seed": "0"})
    got = str(raised.value)
    record("3", "a peer dies before the first step", "says to read its output", got)
    assert "stopped before the first step" in got and "its own output says why" in got


def test_two_real_workers_with_other_learning_rates_both_stop(tmp_path):
    data = tmp_path / "data"
    write_id_data(str(data), num_files=2, per_file=8)
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index, rate in enumerate((5e-4, 0.05)):
        hparams = dict(
            TINY_HPARAMS, num_train_steps=2, learning_rate=rate, worker_timeout_seconds=120,
            distribution_strategy="multi_worker_mirrored",
        )  # fmt: skip
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        argv = ["--data-dir", str(data), "--model-name", "m", "--hparams", json.dumps(hparams)]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "electra_tf.pretrain", *argv],
                env=child_env(TF_CONFIG=tf_config),
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    model_dir = data / "models" / "m"
    record(
        "3",
        "2 real workers, learning_rate 5e-4 and 0.05",
        "both exit 2 naming the key, values and workers; nothing written",
        f"exits {[code for code, _ in results]}: {last_line(results[0][1])}",
    )
    for code, err in results:
        assert code == 2, err[-3000:]
        line = last_line(err)
        assert "learning_rate: 0.0005 on worker 0; 0.05 on worker 1" in line, err[-3000:]
    assert not (model_dir / "config.json").exists() and not (model_dir / "checkpoint").exists()


# ------------------------------------------------------------------ 3. TF_CONFIG
WORKERS = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}


@pytest.mark.parametrize(
    "value, message",
    [
        ("{'cluster': 1}", "TF_CONFIG: not valid JSON"),
        (json.dumps({"cluster": WORKERS}), 'TF_CONFIG: "task" must be an object'),
        (
            json.dumps({"cluster": WORKERS, "task": {"type": "worker", "index": 2}}),
            "task index 2 is outside the cluster's 2 'worker' addresses (0..1)",
        ),
        (
            json.dumps({"cluster": WORKERS, "task": {"type": "evaluator", "index": 0}}),
            "task type 'evaluator' is not supported",
        ),
    ],
)
def test_a_bad_tf_config_is_one_line(corpora, monkeypatch, capsys, value, message):
    monkeypatch.setenv("TF_CONFIG", value)
    hparams = {"distribution_strategy": "multi_worker_mirrored", "num_train_steps": 1}
    code = run_pretrain(corpora[0], "w", **hparams)
    err = capsys.readouterr().err
    record("3", f"TF_CONFIG={value}", "exit 2, one line naming TF_CONFIG", f"exit {code}: {err}")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert message in err and f"(TF_CONFIG={value})" in err, err


# ------------------------------------------------------------------ 4. resumes that change the run
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 4-step run (batch 4, sequences of 16) to resume with other settings."""
    data = write_corpus(tmp_path_factory.mktemp("resume") / "data", num_records=24)
    assert run_pretrain(data, "m", num_train_steps=4) == 0
    return data


@pytest.mark.parametrize(
    "overrides, key, old, new",
    [
        ({"train_batch_size": 8}, "train_batch_size", 4, 8),
        ({"max_seq_length": 12}, "max_seq_length", 16, 12),
        ({"mask_prob": 0.25}, "mask_prob", 0.15, 0.25),
        ({"seed": 7}, "seed", 0, 7),
    ],
)
def test_a_resume_that_changes_the_data_is_refused(trained, capsys, overrides, key, old, new):
    model_dir = trained / "models" / "m"
    saved = (model_dir / "config.json").read_bytes()
    capsys.readouterr()
    code = run_pretrain(trained, "m", num_train_steps=6, **overrides)
    err = capsys.readouterr().err
    record("4", f"resume with {key} {new} (run used {old})", "exit 2 naming key, old, new", err)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{key}: saved {old!r}, now {new!r}" in err and "--allow-config-change" in err, err
    assert (model_dir / "config.json").read_bytes() == saved  # not rewritten
    assert not (model_dir / "ckpt-6.index").exists()


def test_a_shape_change_is_refused_even_when_allowed(trained, capsys):
    overrides = {"embedding_size": 8}
    capsys.readouterr()
    code = run_pretrain(trained, "m", num_train_steps=6, **overrides)
    err = capsys.readouterr().err
    record("4", "resume with embedding_size 8 (run used 16)", "exit 2, differently shaped", err)
    assert code == 2 and "embedding_size: saved 16, now 8" in err, err
    from electra_tf.cli import pretrain

    argv = ["--data-dir", str(trained), "--model-name", "m", "--preset", "tiny"]
    code = pretrain.main([*argv, "--allow-config-change", "train_batch_sise", "--hparams", "{}"])
    err = capsys.readouterr().err
    record("4", "--allow-config-change train_batch_sise", "exit 2 naming the closest key", err)
    assert code == 2 and "did you mean 'train_batch_size'?" in err, err


def test_a_resume_prints_what_changed_and_allowed_keys_go_through(trained, capsys):
    from helpers_pretrain_cli import hparams

    from electra_tf.cli import pretrain

    shutil.copytree(trained / "models" / "m", trained / "models" / "copy")
    model_dir = trained / "models" / "copy"
    values = hparams(num_train_steps=6, log_every_steps=1, train_batch_size=8)
    argv = ["--data-dir", str(trained), "--model-name", "copy", "--preset", "tiny"]
    capsys.readouterr()
    code = pretrain.main([*argv, "--hparams", values, "--allow-config-change", "train_batch_size"])
    out = capsys.readouterr().out
    changed = next((line for line in out.splitlines() if "changed settings" in line), out)
    record(
        "4", "resume: steps, logging, allowed batch size", "exit 0, each change printed", changed
    )
    assert code == 0, out[-2000:]
    for change in (
        "log_every_steps: 0 -> 1",
        "num_train_steps: 4 -> 6",
        "train_batch_size: 4 -> 8",
    ):
        assert change in changed, changed
    saved = json.loads((model_dir / "config.json").read_text())
    assert saved["train_batch_size"] == 8 and saved["num_train_steps"] == 6
    assert (model_dir / "ckpt-6.index").exists()


# ------------------------------------------------------------------ 5. fine-tuning with no run
def test_finetuning_epochs_that_give_no_step_are_one_line(tmp_path, capsys):
    data = _finetune_data(tmp_path)
    code = _finetune(data, num_train_epochs=0.01)
    err = capsys.readouterr().err
    record("5", "finetune num_train_epochs 0.01 (0 steps)", "exit 2 naming key, batches", err)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "num_train_epochs 0.01 gives 0 training steps" in err, err
    assert "3 batch(es) of train_batch_size 8" in err and "at least 0.34" in err, err


def test_finetuning_longer_than_the_checkpoints_positions_is_one_line(tmp_path, capsys):
    data = _finetune_data(tmp_path)
    values = {**FINETUNE_TINY, "max_seq_length": 1024}
    for key in ("model_hparam_overrides", "embedding_size", "vocab_size", "init_checkpoint"):
        values.pop(key)
    argv = ["--data-dir", str(data), "--model-name", "p", "--tasks", "sst"]
    code = finetune.main([*argv, "--pretrained", PRETRAINED, "--hparams", json.dumps(values)])
    err = capsys.readouterr().err
    record("5", "finetune max_seq_length 1024 on a 512-position model", "exit 2 naming both", err)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "max_seq_length 1024 exceeds the max_position_embeddings 512" in err, err


# ------------------------------------------------------------------ 6. fine-tuning stopped
class _SigtermNotHandled(Exception):
    """Raised by the test's own SIGTERM handler: the CLI did not install its own."""


def _stop_in_training(signum):
    def train(self):
        if signum == signal.SIGINT:
            raise KeyboardInterrupt  # what Python's SIGINT handler raises in a step
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # the handler raises in this thread before the sleep ends

    return train


def _finetune_stopped(data):
    """`_finetune`, a KeyboardInterrupt escaping the CLI failing the test (not aborting pytest)."""
    try:
        return _finetune(data)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped the fine-tuning CLI: the user sees a traceback")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_finetuning_says_what_is_kept_without_a_traceback(
    tmp_path, capsys, monkeypatch, signum
):
    """Ctrl-C (SIGINT) or SIGTERM during fine-tuning: exit 128 + signal, one message saying
    what is kept and how to run again, the model dir's lock released, no traceback."""
    from electra_tf.runs.finetuning import ModelRunner

    data = _finetune_data(tmp_path)
    monkeypatch.setattr(ModelRunner, "train", _stop_in_training(signum))

    def not_handled(*_):
        raise _SigtermNotHandled

    previous = signal.signal(signal.SIGTERM, not_handled)
    try:
        code = _finetune_stopped(data)
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    name = signal.Signals(signum).name
    record("6", f"fine-tuning stopped by {name}", "exit 128 + signal, what is kept", last_line(err))
    assert code == 128 + signum, err
    assert f"stopped ({name}): the trial under way saved a checkpoint" in err, err
    assert "Run the same command again to resume" in err, err
    assert "overwrite" not in err and "Traceback" not in err, err
    assert not list((data / "models" / "tiny").glob(".finetune-*.lock"))


def test_a_stopped_tfrecord_write_leaves_no_partial_file(tmp_path, capsys, monkeypatch):
    """A fine-tuning TFRecord being written when the run stops is removed, not left beside
    the complete ones."""
    from electra_tf.finetuning import preprocessing

    data = _finetune_data(tmp_path)
    original = preprocessing.Preprocessor.make_example
    calls = []

    def stop_at_the_second(self, features):
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return original(self, features)

    monkeypatch.setattr(preprocessing.Preprocessor, "make_example", stop_at_the_second)
    assert _finetune_stopped(data) == 128 + signal.SIGINT
    assert "stopped (SIGINT)" in capsys.readouterr().err
    records = data / "models" / "tiny" / "finetuning_tfrecords"
    assert len(calls) == 2 and records.exists()
    assert not [p.name for p in records.rglob("*.tmp-*")]
