"""Resuming fine-tuning: SIGTERM and kill -9 mid-epoch, a kill between a checkpoint's files and
its index; each resumed trial ends with the uninterrupted trial's weights and dev metrics, bit
for bit (float32, one thread). A tiny encoder on fake MRPC data, every run a real process."""

import json
import signal
import subprocess
import sys

import numpy as np
import pytest
from helpers_finetune import tiny_encoder
from helpers_pretrain_cli import ROOT, checkpoint_values, cli_env

WORDS = "the a good bad movie film great awful fun boring plot is cat dog said was".split()
# 480 pairs, doubled (MRPC's train set is read both ways round): 120 steps an epoch at batch
# 8, so that a stop sent at step 38 lands mid-epoch however late the test reads the line.
HPARAMS = {
    **tiny_encoder(),
    "vocab_size": 5 + len(WORDS),
    "max_seq_length": 16,
    "train_batch_size": 8,
    "eval_batch_size": 8,
    "learning_rate": 3e-3,
    "num_train_epochs": 2,
    "log_every_steps": 1,
    "init_checkpoint": None,
    "save_checkpoints_steps": 7,
    "keep_checkpoint_max": 2,
    "precision": "float32",
    "parallel_micro_batches": 1,
    "intra_op_threads": 1,
    "inter_op_threads": 1,
}
TOTAL_STEPS = 240


def write_data(root):
    """A vocabulary and fake MRPC train/dev files under `root`."""
    (root / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])
    )
    rng = np.random.default_rng(0)
    mrpc = root / "finetuning_data" / "mrpc"
    mrpc.mkdir(parents=True)

    def rows(n):
        lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(n):
            y = int(rng.integers(0, 2))
            a = " ".join(rng.choice(WORDS, 5))
            b = a if y else " ".join(rng.choice(WORDS, 5))
            lines.append(f"{y}\t{i}\t{i + 1000}\t{a}\t{b}")
        return "\n".join(lines) + "\n"

    (mrpc / "train.tsv").write_text(rows(480))
    (mrpc / "dev.tsv").write_text(rows(40))
    return root


def command(data_dir, **overrides):
    hparams = json.dumps({**HPARAMS, **overrides})
    return [sys.executable, "-m", "electra_tf.finetune", "--data-dir", str(data_dir),
            "--model-name", "tiny", "--tasks", "mrpc", "--hparams", hparams]  # fmt: skip


def run(data_dir, **overrides):
    proc = subprocess.run(
        command(data_dir, **overrides), env=cli_env(), cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def start(data_dir, **overrides):
    return subprocess.Popen(
        command(data_dir, **overrides),
        env=cli_env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop_at(proc, step, signum):
    """Reads the run's progress lines until `step`, then sends `signum`; (stdout, stderr)."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(f"step {step}/"):
            proc.send_signal(signum)
            break
    out, err = proc.communicate(timeout=120)
    return "".join(seen) + out, err


def trial_dir(data_dir):
    return data_dir / "models" / "tiny" / "finetuning_models" / "mrpc_model_1"


def final_weights(data_dir):
    values = checkpoint_values(str(trial_dir(data_dir) / f"ckpt-{TOTAL_STEPS}"))
    return {k: v for k, v in values.items() if k.startswith("model/")}


def results(data_dir):
    path = data_dir / "models" / "tiny" / "results" / "mrpc_results.json"
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted trial: its final weights and dev metrics."""
    data_dir = write_data(tmp_path_factory.mktemp("straight"))
    run(data_dir)
    return final_weights(data_dir), results(data_dir)["trials"]


def assert_same_trial(data_dir, straight):
    weights, trials = straight
    resumed = final_weights(data_dir)
    assert resumed.keys() == weights.keys() and any("encoder" in k for k in weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    assert results(data_dir)["trials"] == trials


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill9"])
def test_a_trial_stopped_mid_epoch_resumes_to_the_uninterrupted_weights(tmp_path, straight, signum):
    data_dir = write_data(tmp_path)
    out, err = stop_at(start(data_dir), 38, signum)  # in the first epoch (120 steps)
    if signum == signal.SIGTERM:
        assert "stopped (SIGTERM)" in err and "Run the same command again" in err, err[-2000:]
        assert "overwrite" not in err
    assert not (data_dir / "models" / "tiny" / "results" / "mrpc_results.json").exists()
    out = run(data_dir)  # the same command
    resumed_from = int(out.split("(step ")[1].split(")")[0])
    # SIGTERM saves at the step reached; kill -9 leaves the last periodic checkpoint.
    if signum == signal.SIGTERM:
        assert 38 <= resumed_from < 120, resumed_from
    else:  # a periodic checkpoint (every 7 steps; 120: the epoch's end)
        assert 35 <= resumed_from < 120 and resumed_from % 7 == 0, resumed_from
    assert f"step {resumed_from}/" not in out and f"step {TOTAL_STEPS}/" in out
    assert_same_trial(data_dir, straight)
    run_info = results(data_dir)["runs"][0]
    assert run_info["resumed_from_step"] == resumed_from
    text = (data_dir / "models" / "tiny" / "results" / "mrpc_results.txt").read_text()
    assert f"trial 1 resumed from step {resumed_from}" in text
    # The same command once more keeps the finished trial: nothing is trained again.
    out = run(data_dir)
    assert "was finished: kept" in out and "Training for" not in out


# The training checkpoints' index write, killed once the files of ckpt-21 are written but
# before the index names them: the process dies as a kill -9 during that checkpoint would.
KILL_IN_WRITE = """
import os, sys
from electra_tf.checkpoints import training_state
write = training_state.write_state_file
def dying(directory, *kept):
    if kept[-1] == "ckpt-21":
        os.kill(os.getpid(), 9)
    write(directory, *kept)
training_state.write_state_file = dying
from electra_tf.cli import finetune
sys.argv = ["finetune", *sys.argv[1:]]
sys.exit(finetune.main())
"""


def test_a_kill_during_a_checkpoint_write_still_resumes(tmp_path, straight):
    data_dir = write_data(tmp_path)
    args = command(data_dir)[3:]
    proc = subprocess.run(
        [sys.executable, "-c", KILL_IN_WRITE, *args],
        env=cli_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    model_dir = trial_dir(data_dir)
    assert (model_dir / "ckpt-21.index").exists()  # written, not yet in the index
    assert 'model_checkpoint_path: "ckpt-14"' in (model_dir / "checkpoint").read_text()
    out = run(data_dir)
    assert "(step 14)" in out
    assert_same_trial(data_dir, straight)
