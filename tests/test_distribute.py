"""tf.distribute: several replicas train like one device; multi-worker runs keep one checkpoint.

Every scenario runs in a subprocess with a timeout: logical-device splits and
MultiWorkerMirroredStrategy must be set up before TensorFlow's runtime starts, which in the
pytest process it already has.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# BERT's special ids (the pretrainer's defaults): [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102,
# [MASK] 103.
VOCAB = [f"w{i}" for i in range(128)]
VOCAB[0], VOCAB[100], VOCAB[101], VOCAB[102], VOCAB[103] = (
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
)
WORD_IDS = np.array([i for i in range(1, 128) if not 100 <= i <= 103])
SEQ_LEN = 32
RESULT_TAG = "DISTRIBUTE_RESULT "

# A tiny model (D 2 x 32, G 2 x 8, E 16), dropout off so replicas and one device must agree.
TINY_HPARAMS = {
    "model_size": "small",
    "model_hparam_overrides": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
    "embedding_size": 16,
    "vocab_size": len(VOCAB),
    "max_seq_length": SEQ_LEN,
    "train_batch_size": 8,
    "learning_rate": 1e-3,
    "num_warmup_steps": 0,
    "precision": "float32",
    "jit_compile": False,
}


def write_vocab(data_dir: str) -> None:
    with open(os.path.join(data_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")


def write_tiny_data(data_dir: str, num_examples: int = 64) -> str:
    """A vocab and one TFRecord file of packed [CLS] a [SEP] b [SEP] examples (some padded)."""
    import tensorflow as tf

    os.makedirs(os.path.join(data_dir, "pretrain_tfrecords"), exist_ok=True)
    write_vocab(data_dir)
    rng = np.random.default_rng(1)
    path = os.path.join(data_dir, "pretrain_tfrecords", "pretrain_data.tfrecord-0")
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(num_examples):
            length = int(rng.integers(SEQ_LEN // 2, SEQ_LEN + 1))
            split = length // 2
            ids = rng.choice(WORD_IDS, size=SEQ_LEN)
            ids[0], ids[split - 1], ids[length - 1] = 101, 102, 102  # [CLS] a [SEP] b [SEP]
            ids[length:] = 0
            mask = (np.arange(SEQ_LEN) < length).astype(np.int64)
            segments = ((np.arange(SEQ_LEN) >= split) & (mask == 1)).astype(np.int64)

            def ints(values):
                return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

            features = {
                "input_ids": ints(ids * mask),
                "input_mask": ints(mask),
                "segment_ids": ints(segments),
            }
            example = tf.train.Example(features=tf.train.Features(feature=features))
            writer.write(example.SerializeToString())
    return path


def free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def child_env(**extra: str) -> dict[str, str]:
    # The repository (electra_tf) and tests/ (pretrainer_fixtures) are importable.
    pythonpath = os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])
    env = dict(os.environ, PYTHONPATH=pythonpath, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def parse_result(stdout: str, stderr: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    raise AssertionError(f"no result from the subprocess:\n{stdout[-2000:]}\n{stderr[-4000:]}")


# ------------------------------------------------------------------ multi-worker
MULTI_WORKER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from electra_tf.config import pretraining_config
    from electra_tf.training import loop

    data_dir, model_dir, hparams = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    hparams.update(model_dir=model_dir, distribution_strategy="multi_worker_mirrored")
    config = pretraining_config("mw", data_dir, hparams=hparams)
    result = loop.train(config)
    print("DISTRIBUTE_RESULT " + json.dumps({"step": result.step,
                                               "checkpoint": result.checkpoint,
                                               "loss": result.metrics.get("loss")}), flush=True)
    """
)


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
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), data_dir, model_dir, json.dumps(hparams)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(TF_CONFIG=tf_config),
            )
        )
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=420))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
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


# ------------------------------------------------------------------ mirrored
MIRRORED_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorflow as tf

    # Two logical CPU devices, before anything starts the runtime.
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

    import tf_keras as keras
    from electra_tf.config import pretraining_config
    from electra_tf.training import loop
    from pretrainer_fixtures import batch_split_invariant_objective

    hparams, steps, data_dir = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    config = pretraining_config("mirrored", data_dir, hparams=hparams)
    seq_len, batch = config.max_seq_length, config.train_batch_size

    rng = np.random.default_rng(3)
    num = batch * steps
    ids = rng.integers(1, 100, size=(num, seq_len)).astype(np.int32)
    lengths = rng.integers(seq_len // 2, seq_len + 1, size=num)
    mask = (np.arange(seq_len)[None] < lengths[:, None]).astype(np.int32)
    ids[:, 0] = 101
    ids[np.arange(num), lengths - 1] = 102
    ids *= mask
    features = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    examples = tf.data.Dataset.from_tensor_slices(features)

    def run(strategy, initial_weights=None):
        with strategy.scope():
            tf.random.set_seed(0)
            model = loop.build_model(config)
            if initial_weights is not None:
                model.set_weights(initial_weights)
            weights = model.get_weights()
            optimizer = loop.build_optimizer(config, model)
            model.compile(optimizer=optimizer)
        if strategy.num_replicas_in_sync == 1:
            dataset = examples.batch(batch)
        else:
            dataset = strategy.distribute_datasets_from_function(
                lambda context: examples.batch(context.get_per_replica_batch_size(batch))
            )
        train_steps = loop.make_train_function(model, strategy, False)
        iterator = iter(dataset)
        losses = []
        for _ in range(steps):
            train_steps(iterator, tf.constant(1))
            values = {m.name: float(m.result()) for m in model.metrics}
            losses.append([values["loss"], values["masked_lm_loss"], values["disc_loss"]])
            for metric in model.metrics:
                metric.reset_state()
        final = [v.numpy() for v in model.trainable_variables]
        return weights, losses, final

    # Corruption independent of the split, so only the distribution plumbing differs.
    with batch_split_invariant_objective():
        weights, single, single_final = run(tf.distribute.get_strategy())
        mirrored_strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        _, mirrored, mirrored_final = run(mirrored_strategy, weights)
    max_weight_diff = max(float(np.max(np.abs(a - b))) for a, b in zip(single_final, mirrored_final))
    print("DISTRIBUTE_RESULT " + json.dumps({
        "replicas": mirrored_strategy.num_replicas_in_sync,
        "single": single, "mirrored": mirrored, "max_weight_diff": max_weight_diff,
    }), flush=True)
    """
)


def test_mirrored_two_devices_matches_one_device(tmp_path):
    steps = 3
    write_vocab(str(tmp_path))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            MIRRORED_SCRIPT,
            json.dumps(TINY_HPARAMS),
            str(steps),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=420,
        env=child_env(),
    )
    result = parse_result(proc.stdout, proc.stderr)
    assert result["replicas"] == 2
    single, mirrored = np.array(result["single"]), np.array(result["mirrored"])
    assert single.shape == (steps, 3)
    assert np.all(np.isfinite(single))
    # The runs differ in the optimizer's updates too: losses after step 1 depend on them.
    np.testing.assert_allclose(mirrored, single, atol=1e-5, rtol=1e-5)
    assert not np.allclose(single[0], single[-1]), "training did not change the loss"
    assert result["max_weight_diff"] < 1e-4
