"""MirroredStrategy over two logical CPU devices trains like one device."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
from distribute_fixtures import (
    TINY_HPARAMS,
    child_env,
    parse_result,
    write_bert_layout_vocab,
)

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
    from electra_tf.runs import pretraining_model
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
            model = pretraining_model.build_model(config)
            if initial_weights is not None:
                model.set_weights(initial_weights)
            weights = model.get_weights()
            optimizer = pretraining_model.build_optimizer(config, model)
            model.compile(optimizer=optimizer)
        if strategy.num_replicas_in_sync == 1:
            dataset = examples.batch(batch)
        else:
            dataset = strategy.distribute_datasets_from_function(
                lambda context: examples.batch(context.get_per_replica_batch_size(batch))
            )
        train_steps = pretraining_model.make_train_function(model, strategy, False)
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
    write_bert_layout_vocab(str(tmp_path))
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
