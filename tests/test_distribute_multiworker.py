"""Several workers or devices train exactly as one, consume each example once per epoch, and a
run survives a worker's death: all through the pretrain command line, as users run it.

One module-scoped set of runs over the same two TFRecord files (96 examples whose first words
encode their id, so 12 steps of batch 8 are one epoch), each recording per step the ids its
replicas consumed (`WORKER_WRAPPER`) and the chief's per-step TensorBoard losses:

- `one`: one worker, the default strategy, global batch 8: the reference;
- `pair`: two localhost workers (MultiWorkerMirroredStrategy, 4 rows each); worker 1 sends
  itself SIGKILL inside step 10, worker 0 must notice and stop; both are started again with
  the same command and finish from ckpt-6 (mid-epoch) to step 24;
- `mirrored`: MirroredStrategy over two logical CPU devices (4 rows each);
- `lone`: one worker whose TF_CONFIG names a second that never starts.

Tolerance (dropout 0, float32): the runs differ only in how the gradient's parts are summed
(per-replica sums then an all-reduce, against one pass over the batch) and in the order of the
loss metric's sums. Those differences, ~1 ulp on values of order 1 at the first step, grow
through 24 Adam steps with the update's 1/sqrt(v) factor. Measured with this module (2-core
CPU): losses within 1.6e-7 relative, weights within 1.7e-7 absolute (2 workers; 7.8e-8 and
1.2e-7 for 2 devices); the bounds below, 1e-5 and 1e-5, leave a factor of 50 and sit far
below what a wrong batch or corruption gives (a step's loss moves by ~1e-1 between batches).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers_distribute import (
    TINY_HPARAMS,
    WORKER_WRAPPER,
    child_env,
    free_ports,
    read_consumed,
    tensorboard_scalars,
    write_id_data,
)
from helpers_pretrain_cli import checkpoint_values

STEPS, SAVE_EVERY, DIE_AT, EPOCH_STEPS, EXAMPLES = 24, 6, 10, 12, 96
WORKER_TIMEOUT = 45  # seconds; the default is 300
LONE_TIMEOUT = 10  # the lone worker's: what it waits for never comes, so every second is idle
WAIT = 1200  # seconds a run may take before the test gives up on it (a loaded machine)
LOSS_RTOL, WEIGHT_ATOL = 1e-5, 1e-5
HPARAMS = dict(
    TINY_HPARAMS,
    num_train_steps=STEPS,
    iterations_per_loop=SAVE_EVERY,
    save_checkpoints_steps=SAVE_EVERY,
    log_every_steps=1,
    keep_checkpoint_max=10,
    worker_timeout_seconds=WORKER_TIMEOUT,
)


class Run:
    """One pretrain command, started on one or more workers (TF_CONFIG each)."""

    def __init__(
        self, root, data_dir, name, strategy, workers=1, cpus=1, die_at=0, ports=None, **hparams
    ):
        self.root, self.name, self.workers = root, name, workers
        hparams = dict(HPARAMS, distribution_strategy=strategy, **hparams)
        self.argv = ["--data-dir", str(data_dir), "--model-name", name]
        self.argv += ["--hparams", json.dumps(hparams)]
        self.cpus, self.die_at = cpus, die_at
        self.ports = ports
        self.model_dir = os.path.join(data_dir, "models", name)
        self.attempts: list[list[str]] = []  # ids files per start

    def start(self, die_at=None, only=None):
        """Starts the workers (`only`: these task indexes); returns their processes."""
        attempt = len(self.attempts)
        self.procs, self.logs, ids = [], [], []
        for index in range(self.workers) if only is None else only:
            tag = f"{self.name}.{attempt}.{index}"
            ids.append(str(self.root / f"{tag}.ids"))
            env = {}
            if self.ports:
                cluster = {"worker": [f"127.0.0.1:{p}" for p in self.ports]}
                task = {"type": "worker", "index": index}
                env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
            die = self.die_at if die_at is None else die_at
            command = [sys.executable, "-c", WORKER_WRAPPER, ids[-1], str(self.cpus)]
            command += [str(die if index == self.workers - 1 else 0), *self.argv]
            out, err = open(self.root / f"{tag}.out", "w"), open(self.root / f"{tag}.err", "w")
            self.logs.append((out.name, err.name))
            self.procs.append(
                subprocess.Popen(command, stdout=out, stderr=err, env=child_env(**env))
            )
        self.attempts.append(ids)
        self.exit_times = [None] * len(self.procs)
        return self

    def wait(self, timeout):
        """Waits for every process, noting when each exited; kills them all on a timeout."""
        deadline = time.monotonic() + timeout
        try:
            while any(t is None for t in self.exit_times):
                for i, proc in enumerate(self.procs):
                    if self.exit_times[i] is None and proc.poll() is not None:
                        self.exit_times[i] = time.monotonic()
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name}: still running after {timeout} s")
                time.sleep(0.2)
        finally:
            for proc in self.procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        return self

    def output(self, index):
        out, err = (open(path, encoding="utf-8").read() for path in self.logs[index])
        return out, err

    def codes(self):
        return [proc.returncode for proc in self.procs]

    def describe(self):
        return "\n".join(
            f"--- {self.name} worker {i} exit {p.returncode}\n{self.output(i)[0][-1500:]}\n"
            f"{self.output(i)[1][-2500:]}"
            for i, p in enumerate(self.procs)
        )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("workers")
    write_id_data(str(root / "data"), num_files=2, per_file=EXAMPLES // 2)
    return root / "data"


@pytest.fixture(scope="module")
def one(data_dir):
    run = Run(data_dir.parent, data_dir, "one", "default").start().wait(timeout=WAIT)
    assert run.codes() == [0], run.describe()
    return run


@pytest.fixture(scope="module")
def pair(data_dir):
    """Two workers; worker 1 dies inside step DIE_AT; then both start again."""
    run = Run(data_dir.parent, data_dir, "pair", "multi_worker_mirrored", 2, die_at=DIE_AT)
    run.ports = free_ports(2)
    run.start().wait(timeout=WAIT)
    run.first = (run.codes(), list(run.exit_times), [run.output(i) for i in range(2)])
    run.first_index = kept_files(run.model_dir)
    run.start(die_at=0).wait(timeout=WAIT)  # the same command, the same TF_CONFIG
    assert run.codes() == [0, 0], run.describe()
    return run


@pytest.fixture(scope="module")
def mirrored(data_dir):
    run = Run(data_dir.parent, data_dir, "mirrored", "mirrored", cpus=2).start()
    run.wait(timeout=WAIT)
    assert run.codes() == [0], run.describe()
    return run


@pytest.fixture(scope="module")
def lone(data_dir):
    run = Run(
        data_dir.parent, data_dir, "lone", "multi_worker_mirrored", 2, ports=free_ports(2),
        worker_timeout_seconds=LONE_TIMEOUT,
    )  # fmt: skip
    started = time.monotonic()
    run.start(only=[0]).wait(timeout=WAIT)
    run.seconds = run.exit_times[0] - started
    return run


def kept_files(model_dir):
    """The prefixes the chief's `checkpoint` index names, and whether each reads in full."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(model_dir)
    names = list(state.all_model_checkpoint_paths) if state else []
    return {os.path.basename(p): _readable(p) for p in names}


def _readable(prefix):
    try:
        checkpoint_values(prefix)
        return True
    except Exception:  # noqa: BLE001 - a missing or truncated file, whatever TF raises
        return False


def final_weights(run):
    return checkpoint_values(os.path.join(run.model_dir, f"ckpt-{STEPS}"))


def compare_with_one(one_run, run):
    """(max relative loss difference over the steps, max absolute weight difference)."""
    one = tensorboard_scalars(one_run.model_dir, "loss")
    other = tensorboard_scalars(run.model_dir, "loss")
    assert sorted(one) == list(range(1, STEPS + 1)), sorted(one)
    assert sorted(other) == sorted(one), sorted(other)
    losses = np.array([[one[s], other[s]] for s in sorted(one)])
    loss_diff = float(np.max(np.abs(losses[:, 1] - losses[:, 0]) / np.abs(losses[:, 0])))
    reference, weights = final_weights(one_run), final_weights(run)
    assert sorted(weights) == sorted(reference)
    weight_diff = max(float(np.max(np.abs(weights[k] - reference[k]))) for k in reference)
    print(f"{run.name} vs one: loss rel diff {loss_diff:.2e}, weight abs diff {weight_diff:.2e}")
    # Training moved the weights and the loss, so equality is not that of two idle runs.
    moved = max(
        float(np.max(np.abs(reference[k] - values)))
        for k, values in checkpoint_values(os.path.join(one_run.model_dir, "ckpt-6")).items()
        if k in reference and "iterations" not in k and "step" not in k
    )
    assert moved > 100 * WEIGHT_ATOL
    return loss_diff, weight_diff


def test_pair_of_workers_trains_as_one_and_survives_a_death(one, pair):
    """The 2-worker run (killed and resumed on the way) has the one-worker run's loss at every
    step and its weights after 24 steps; the chief kept one checkpoint set."""
    loss_diff, weight_diff = compare_with_one(one, pair)
    assert loss_diff < LOSS_RTOL
    assert weight_diff < WEIGHT_ATOL
    files = os.listdir(pair.model_dir)
    assert not [f for f in files if f.startswith(".worker")], files  # no scratch copy left


def test_pair_a_dead_worker_stops_the_other_and_a_restart_resumes(pair):
    codes, exit_times, outputs = pair.first
    assert codes[1] == -9, pair.describe()  # worker 1 died of SIGKILL inside step 10
    assert codes[0] == 1, outputs[0][1][-3000:]
    # Worker 0 noticed within the configured timeout, and said what to do.
    assert exit_times[0] - exit_times[1] < WORKER_TIMEOUT + 60, exit_times
    err = outputs[0][1]
    assert "lost contact with another worker" in err, err[-3000:]
    assert "ckpt-6" in err and "same command" in err, err[-3000:]
    # The chief's index names only complete checkpoints, the last one before the death.
    assert pair.first_index == {"ckpt-6": True}, pair.first_index
    out = pair.output(0)[0]
    assert "Resuming from" in out and "ckpt-6 (step 6)" in out, out[-2000:]
    assert "Input resumed at step 6: record 48 of the stream" in out, out[-2000:]


def test_mirrored_two_devices_train_as_one(one, mirrored):
    loss_diff, weight_diff = compare_with_one(one, mirrored)
    assert loss_diff < LOSS_RTOL
    assert weight_diff < WEIGHT_ATOL


def check_consumed(one, run):
    """Per epoch (12 steps) the 96 ids come once each; every step the replicas' rows, in
    replica order, are the one-worker batch (across a resume too)."""
    consumed = {name: read_consumed(r.attempts) for name, r in (("one", one), ("run", run))}
    for name, steps in consumed.items():
        assert sorted(steps) == list(range(1, STEPS + 1)), (name, sorted(steps))
        for epoch in range(STEPS // EPOCH_STEPS):
            ids = [
                i
                for step in range(epoch * EPOCH_STEPS + 1, (epoch + 1) * EPOCH_STEPS + 1)
                for batch in steps[step]
                for i in batch
            ]
            assert sorted(ids) == list(range(EXAMPLES)), (name, epoch, sorted(ids))
    for step, (batch,) in consumed["one"].items():
        parts = consumed["run"][step]
        assert len(parts) == 2 and all(len(p) == 4 for p in parts), (step, parts)
        # Replica 0 holds the batch's first 4 rows (the ids of both may share one file).
        parts = sorted(parts, key=lambda part: part[0] not in batch[:4])
        assert parts == [batch[:4], batch[4:]], (step, batch, parts)


def test_pair_consumes_every_example_once_per_epoch(one, pair):
    check_consumed(one, pair)


def test_mirrored_consumes_every_example_once_per_epoch(one, mirrored):
    check_consumed(one, mirrored)


def test_a_worker_alone_gives_up_with_a_message(lone):
    assert lone.codes() == [-9], lone.describe()  # ended by its watchdog
    err = lone.output(0)[0]  # stdout: stderr is captured during TensorFlow's start-up
    assert "could not reach every other worker" in err, err[-2000:]
    assert f"127.0.0.1:{lone.ports[1]}" in err and "worker_timeout_seconds" in err, err[-2000:]
    # TensorFlow's start-up comes first (up to minutes on a loaded machine): a bound, not a hang.
    assert lone.seconds < LONE_TIMEOUT + 240, lone.seconds
    assert f"within {LONE_TIMEOUT} s" in err, err[-2000:]
