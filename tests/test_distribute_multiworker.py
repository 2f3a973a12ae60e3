"""MultiWorkerMirroredStrategy: two localhost worker processes train and keep one checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from distribute_fixtures import (
    TINY_HPARAMS,
    child_env,
    free_ports,
    parse_result,
    write_tiny_data,
)

MULTI_WORKER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from electra_tf.config import pretraining_config
    from electra_tf.runs.pretraining import train

    data_dir, model_dir, hparams = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    hparams.update(model_dir=model_dir, distribution_strategy="multi_worker_mirrored")
    config = pretraining_config("mw", data_dir, hparams=hparams)
    result = train(config)
    print("DISTRIBUTE_RESULT " + json.dumps({"step": result.step,
                                               "checkpoint": result.checkpoint,
                                               "loss": result.metrics.get("loss")}), flush=True)
    """
)


def run_two_workers(command: list[str], timeout: float):
    """Runs `command` as workers 0 and 1 of a localhost cluster (TF_CONFIG); returns the
    processes and their (stdout, stderr), killing any still running on the way out."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(
            subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(TF_CONFIG=tf_config),
            )
        )
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return procs, outputs


def test_multi_worker_two_processes_write_one_checkpoint(tmp_path):
    data_dir = str(tmp_path / "data")
    write_tiny_data(data_dir)
    model_dir = str(tmp_path / "model")
    script = tmp_path / "worker.py"
    script.write_text(MULTI_WORKER_SCRIPT)
    hparams = dict(
        TINY_HPARAMS,
        num_train_steps=4,
        iterations_per_loop=2,
        save_checkpoints_steps=4,
        keep_checkpoint_max=3,
    )
    command = [sys.executable, str(script), data_dir, model_dir, json.dumps(hparams)]
    _, outputs = run_two_workers(command, timeout=420)
    results = [parse_result(out, err) for out, err in outputs]
    assert [r["step"] for r in results] == [4, 4]
    assert all(np.isfinite(r["loss"]) for r in results)
    # Only the chief (worker 0) keeps a checkpoint; worker 1's scratch copy is gone.
    files = sorted(os.listdir(model_dir))
    assert [f for f in files if f.endswith(".index")] == ["ckpt-4.index"], files
    assert not [f for f in files if f.startswith(".worker")], files
    assert results[0]["checkpoint"].endswith("ckpt-4")
    # Both workers applied the same all-reduced updates.
    assert results[0]["loss"] == pytest.approx(results[1]["loss"], rel=1e-6)


def test_multi_worker_through_the_command_line(tmp_path):
    """`python -m electra_tf.pretrain` with TF_CONFIG: the strategy is built before TensorFlow's
    context starts (collective ops are configured at start-up only), both workers exit 0 and
    the chief keeps the checkpoint."""
    data_dir = str(tmp_path / "data")
    write_tiny_data(data_dir)
    hparams = dict(
        TINY_HPARAMS,
        distribution_strategy="multi_worker_mirrored",
        num_train_steps=2,
        iterations_per_loop=2,
        save_checkpoints_steps=2,
    )
    command = [sys.executable, "-m", "electra_tf.pretrain", "--data-dir", data_dir]
    command += ["--model-name", "mw", "--hparams", json.dumps(hparams)]
    procs, outputs = run_two_workers(command, timeout=300)
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, (out[-2000:], err[-3000:])
    chief_out = outputs[0][0]
    assert "step 2/2" in chief_out, chief_out[-2000:]
    model_dir = os.path.join(data_dir, "models", "mw")
    assert "ckpt-2.index" in os.listdir(model_dir), os.listdir(model_dir)
