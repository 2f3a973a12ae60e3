"""Fine-tuning in mixed precision (`FinetuningConfig.precision`): one bf16 / fp16 step against
float32 on the same tiny model, weights and batch (dropout off); fp16's loss scaling; a model
fine-tuned in mixed_bfloat16 exported in float32 and bfloat16; "auto" and its CPU note.

The bounds, derived from the formats (not fitted to a run). A 16-bit float with p significant
bits rounds to nearest with a relative error uniform in [-u, u], u = 2^-p: bfloat16 u = 2^-8,
float16 u = 2^-11. Under a mixed policy every matrix product rounds its two operands to 16 bits
and accumulates in float32 (oneDNN's AVX512_BF16 / AMX kernels, as Eigen's emulation), then
rounds its output: three roundings of standard deviation u / sqrt(3) each, so a product over the
hidden size H, y = sum_i a_i b_i (1 + d_i), is off by sum_i a_i b_i d_i, a sum of H independent
errors whose standard deviation is about u times y's own scale (the worst case, every d_i at u
with one sign, is 2u sqrt(H) times it; rounding errors have no such alignment). The logits go
through K such rounding stages in series: the embedding table and its projection (2), per layer
the query/key/value, score, context and attention-output products, the two feed-forward
products and GELU, two residual sums and the two LayerNorm outputs rounded back (11; LayerNorm
and softmax themselves compute in float32), and the head (1): K = 3 + 11 L. Independent stages
add in quadrature, so a logit's error has standard deviation sigma = u sqrt(K) s, with s the
logits' RMS. The checks allow six sigma:

- logits: max |z16 - z32| <= 6 sigma;
- the step's loss, L = sum_b CE(z_b), to first order dL = sum_bc (p_bc - y_bc) dz_bc (p the
  softmax, y the one-hot label), of standard deviation sigma ||p - y||_2: |dL| <= 6 sigma
  ||p - y||_2 (the softmax and cross-entropy are float32: the heads cast their logits first);
- the gradient (all weights as one vector): the backward pass rounds as many products again
  (2K stages), relative to its norm: ||g16 - g32|| / ||g32|| <= 6 u sqrt(2K).

Measured on a 2-core AMD EPYC with AVX512_BF16 (bf16 products run natively there), on the
shipped 4-layer encoder (K = 47): bfloat16 at 0.14 (logits), 0.06 (loss) and 0.04 (gradient)
of its bounds, float16 at 0.14, 0.03 and 0.03 of its. An AMX Xeon rounds the same operands to
the same format and accumulates in float32 too, so the bounds hold there as here. What breaks
them: a weight matrix of the 16-bit model that is not the float32 one's (the last layer's
feed-forward output kernel shuffled: logits at 2.9 times their bound), or gradients left
loss-scaled. Logits or losses computed in 16 bits fail the dtype checks instead, and a policy
that never reaches the layers (float32's numbers exactly) fails the check that the products ran
in 16 bits.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from electra_tf import checkpoints
from electra_tf.cli import export, finetune
from electra_tf.data.tokenization import FullTokenizer
from electra_tf.finetuning.config import finetuning_config
from electra_tf.finetuning.glue import featurize_pair
from electra_tf.finetuning.registry import get_tasks, make_tokenizer
from electra_tf.runs.finetuning import ModelRunner, resolve_precision
from electra_tf.runtime import device_defaults

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Real trained weights (4 layers of 256), so that every layer shapes the logits and the bf16
# errors are those of a trained network's activations; a random head on its [CLS] vector.
PRETRAINED = os.path.join(REPO, "pretrained", "electra-tiny-gutenberg")
LAYERS, SEQ, BATCH = 4, 48, 8
STAGES = 3 + 11 * LAYERS  # K of the docstring
UNIT = {"mixed_bfloat16": 2.0**-8, "mixed_float16": 2.0**-11}
HPARAMS = {
    "init_checkpoint": PRETRAINED,
    "vocab_file": os.path.join(PRETRAINED, "vocab.txt"),
    # Dropout off (the head's too, in `build`): float16 draws Keras's own masks, not
    # float32's (modeling/dropout.py), and the comparisons are of the arithmetic.
    "model_hparam_overrides": {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
    "max_seq_length": SEQ,
    "train_batch_size": BATCH,
}


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("ft_precision"))


@pytest.fixture(scope="module")
def pretrained():
    """The checkpoint, read once for every model the tests build."""
    return checkpoints.read_pretrained(PRETRAINED)


def make_batch() -> dict[str, tf.Tensor]:
    """The first BATCH held-out book sentences, random labels."""
    with open(os.path.join(REPO, "tests", "data", "heldout_sentences.txt"), encoding="utf-8") as f:
        texts = [line.strip() for line in f if line.strip()][:BATCH]
    tokenizer = FullTokenizer(HPARAMS["vocab_file"])
    rows = [featurize_pair(tokenizer, text, None, SEQ) for text in texts]
    labels = np.random.default_rng(0).integers(0, 2, BATCH).astype(np.int32)
    return {
        **{k: tf.constant([r[k] for r in rows], tf.int32) for k in rows[0]},  # [B, SEQ]
        "task_id": tf.zeros([BATCH], tf.int32),
        "sst_eid": tf.range(BATCH),
        "sst_label_ids": tf.constant(labels),
    }


def build(
    work_dir: str,
    pretrained,
    precision: str,
    weights=None,
    initial_scale: float | None = None,
    **hparams,
):
    """The run's model and optimizer (`ModelRunner`), with `weights` when given; `hparams`
    over HPARAMS."""
    values = {**HPARAMS, "precision": precision, **hparams}
    config = finetuning_config("t", work_dir, values, tasks="sst")
    keras.utils.set_random_seed(0)
    tasks = get_tasks(config, make_tokenizer(config))
    runner = ModelRunner(config, tasks, work_dir, pretrained)
    if weights is not None:
        runner.model.set_weights(weights)
    runner.model.task_heads[0].dropout.rate = 0.0
    optimizer = runner.build_optimizer(10, initial_scale)
    runner.model.compile(optimizer=optimizer)
    return runner.model, optimizer


def record_gradients(optimizer) -> list:
    """The gradients each applied step hands the inner optimizer (none for a skipped step)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    seen, apply = [], inner.apply_gradients

    def recording(grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        dense = [tf.convert_to_tensor(g).numpy().ravel() for g, _ in grads_and_vars]
        seen.append(np.concatenate(dense).astype(np.float64))
        return apply(grads_and_vars, *args, **kwargs)

    inner.apply_gradients = recording
    return seen


def one_step(model, batch, rel: float = 1e-6) -> tuple[float, np.ndarray, np.ndarray]:
    """One step: the loss, logits and labels of its forward pass (`train_step`'s, without
    dropout the same as `model(batch, training=True)`), then `train_step` itself, whose
    gradients `record_gradients` keeps. `rel`: how far the two forward passes' losses may
    differ (eager and graph execution may fuse, and so round, differently)."""
    per_example, outputs = model(batch, training=True)
    loss = float(model.train_step(batch)["loss"])
    assert loss == pytest.approx(float(tf.reduce_sum(per_example)), rel=rel)
    return loss, outputs["sst"]["logits"].numpy(), outputs["sst"]["label_ids"].numpy()


@pytest.fixture(scope="module")
def float32_step(work_dir, pretrained):
    model, optimizer = build(work_dir, pretrained, "float32")
    weights = model.get_weights()
    gradients = record_gradients(optimizer)
    loss, logits, labels = one_step(model, make_batch())
    return {"weights": weights, "loss": loss, "logits": logits, "labels": labels, "grad": gradients}


def check_against_float32(reference, loss, logits, gradient, unit) -> None:
    """The docstring's three bounds for a 16-bit step against the float32 one."""
    z = reference["logits"].astype(np.float64)  # [B, 2]
    sigma = unit * math.sqrt(STAGES) * np.sqrt(np.mean(z**2))
    assert np.abs(logits - z).max() <= 6 * sigma
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = np.eye(2)[reference["labels"]]
    print(
        "MEASURE loss",
        abs(loss - reference["loss"]) / (6 * sigma * np.linalg.norm(p - y)),
        loss,
        reference["loss"],
    )
    assert abs(loss - reference["loss"]) <= 6 * sigma * np.linalg.norm(p - y)
    g32 = reference["grad"][0]
    assert np.all(np.isfinite(gradient))
    error = np.linalg.norm(gradient - g32) / np.linalg.norm(g32)
    assert error <= 6 * unit * math.sqrt(2 * STAGES)


def test_bfloat16_step_agrees_with_float32(work_dir, pretrained, float32_step):
    model, optimizer = build(work_dir, pretrained, "mixed_bfloat16", float32_step["weights"])
    assert model.encoder.transformer_layers[0].query.compute_dtype == "bfloat16"
    gradients = record_gradients(optimizer)
    loss, logits, _ = one_step(model, make_batch())
    # Logits and losses float32 (cast before the softmax), variables float32 (saved so).
    per_example, outputs = model(make_batch(), training=False)
    assert per_example.dtype == outputs["sst"]["logits"].dtype == tf.float32
    assert {v.dtype for v in model.variables} == {tf.float32}
    check_against_float32(float32_step, loss, logits, gradients[0], UNIT["mixed_bfloat16"])
    # Not the same numbers: the products did run in bfloat16.
    assert np.abs(logits - float32_step["logits"]).max() > 1e-4


@pytest.mark.parametrize("precision", ["float32", "mixed_float16"])
def test_micro_batches_side_by_side_apply_the_whole_batch_gradient(
    work_dir, pretrained, float32_step, precision
):
    """`parallel_micro_batches` 2: two halves' gradients, summed, are the one-pass step's (the
    loss is a sum over examples). In float32 up to the order of the sums (a relative 1e-5:
    float32's epsilon, 1.2e-7, times the few additions that change order); under float16 the
    scaled halves' gradients are unscaled once, within the 16-bit bound."""
    # float16 starts at 2^10, as the test below (tf_keras's 2^15 can overflow a first step).
    scale = None if precision == "float32" else 2.0**10
    weights = float32_step["weights"]
    model, optimizer = build(
        work_dir, pretrained, precision, weights, scale, parallel_micro_batches=2
    )
    assert model.parallel_micro_batches == 2
    gradients = record_gradients(optimizer)
    loss, logits, _ = one_step(model, make_batch(), rel=1e-3 if precision != "float32" else 1e-6)
    if precision == "float32":
        assert loss == pytest.approx(float32_step["loss"], rel=1e-6)
        g32 = float32_step["grad"][0]
        assert np.linalg.norm(gradients[0] - g32) / np.linalg.norm(g32) <= 1e-5
    else:
        check_against_float32(float32_step, loss, logits, gradients[0], UNIT[precision])


def test_float16_scales_the_loss_and_its_gradients_agree(work_dir, pretrained, float32_step):
    weights = float32_step["weights"]
    # 2^40 overflows float16 gradients: the step is skipped and the scale halved, which only
    # happens if the step multiplies the loss by the scale.
    model, optimizer = build(work_dir, pretrained, "mixed_float16", weights, initial_scale=2.0**40)
    before = [v.numpy() for v in model.trainable_variables]
    model.train_step(make_batch())
    assert float(optimizer.loss_scale) == 2.0**39
    for variable, value in zip(model.trainable_variables, before, strict=True):
        np.testing.assert_array_equal(variable.numpy(), value)
    # Started at 2^10 (tf_keras's default, 2^15, can overflow the first gradients of the
    # original's summed loss, and is then halved as above), the step applies: loss, logits and the gradients the inner optimizer
    # gets (the scale divided out again) finite and within float16's bounds of float32's.
    model, optimizer = build(work_dir, pretrained, "mixed_float16", weights, initial_scale=2.0**10)
    assert isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)
    gradients = record_gradients(optimizer)
    # In float16 the eager and the graph forward differ in the last bits (1.8e-6 relative
    # here, against a float16 unit of 4.9e-4): one unit is the bound.
    loss, logits, _ = one_step(model, make_batch(), rel=UNIT["mixed_float16"])
    assert float(optimizer.loss_scale) == 2.0**10 and len(gradients) == 1
    check_against_float32(float32_step, loss, logits, gradients[0], UNIT["mixed_float16"])


def test_auto_and_the_emulated_bf16_note(work_dir):
    config = finetuning_config("t", work_dir, {**HPARAMS, "precision": "auto"}, tasks="sst")
    native = device_defaults.Machine(native_bf16=True)
    assert resolve_precision(config, native).precision == "mixed_bfloat16"
    assert resolve_precision(config, device_defaults.Machine()).precision == "float32"
    assert config.resolve().precision == "float32"  # no machine: PORTABLE
    gpu = device_defaults.Machine(accelerator="gpu", compute_capability=(7, 5))
    assert config.resolve(gpu).precision == "mixed_float16"
    asked = finetuning_config("t", work_dir, {"precision": "mixed_bfloat16"}, tasks="sst")
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        resolve_precision(asked, native)
        assert stream.getvalue() == ""
        resolve_precision(asked, device_defaults.Machine())
    assert "note: precision mixed_bfloat16 on a CPU without bfloat16" in stream.getvalue()


SENTENCES = ["the good movie .", "the awful film .", "a great fun plot .", "the boring dog ."]
WORDS = "the a good bad movie film great awful fun boring plot is cat dog .".split()
TINY = {
    "model_hparam_overrides": {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 64,
    },
    "embedding_size": 16,
    "vocab_size": 5 + len(WORDS),
    "max_seq_length": 12,
    "train_batch_size": 8,
    "learning_rate": 3e-3,
    "num_train_epochs": 2,
    "log_every_steps": 2,
    "init_checkpoint": None,
    "do_eval": False,  # the export answers instead
    "precision": "mixed_bfloat16",
}


def write_sst(data_dir) -> None:
    """A vocabulary and a 20-example SST-like train set (the word decides the label)."""
    (data_dir / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])
    )
    sst = data_dir / "finetuning_data" / "sst"
    sst.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 20), ("dev", 8)):
        lines = ["sentence\tlabel"]
        for _ in range(n):
            label = int(rng.integers(0, 2))
            word = rng.choice(["good", "great", "fun"] if label else ["bad", "awful", "boring"])
            lines.append(f"the {word} movie .\t{label}")
        (sst / f"{split}.tsv").write_text("\n".join(lines) + "\n")


def test_mixed_bfloat16_finetuning_exports_in_both_precisions(tmp_path, capsys):
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, as a serving binary links them)

    write_sst(tmp_path)
    common = ["--data-dir", str(tmp_path), "--model-name", "tiny"]
    assert finetune.main([*common, "--tasks", "sst", "--hparams", json.dumps(TINY)]) == 0
    out = capsys.readouterr().out
    # Pre-training's progress line, with examples/s: batch 8 per step.
    line = re.search(r"step 6/6 \| loss \S+ \| lr \S+ \| ([\d.]+) steps/s \| ([\d.,]+) ex/s", out)
    assert line and "tok/s" in out and "ETA" in out, out
    steps, examples = (float(v.replace(",", "")) for v in line.groups())
    assert examples == pytest.approx(8 * steps, rel=0.05, abs=0.1)
    run_dir = tmp_path / "models" / "tiny" / "finetuning_models" / "sst_model_1"
    saved = json.loads((run_dir / "finetuning_config.json").read_text())
    assert saved["precision"] == "mixed_bfloat16"
    # The checkpoint holds float32 variables, as Keras' mixed precision keeps them.
    reader = tf.train.load_checkpoint(str(run_dir))
    dtypes = {d for k, d in reader.get_variable_to_dtype_map().items() if "/.ATTRIBUTES/" in k}
    assert tf.float32 in dtypes and not dtypes & {tf.bfloat16, tf.float16}

    answers = {}
    for version, precision in (("1", "float32"), ("2", "bfloat16")):
        args = [*common, "--task", "sst", "--precision", precision, "--version", version]
        assert export.main(args) == 0
        path = tmp_path / "models" / "tiny" / "serving" / "tiny_sst" / version
        serve = tf.saved_model.load(str(path)).signatures["serving_default"]
        outputs = serve(text=tf.constant(SENTENCES))
        answers[precision] = {k: v.numpy() for k, v in outputs.items() if v.dtype != tf.string}
    for precision, got in answers.items():
        assert got["probabilities"].shape == (len(SENTENCES), 2), precision
        np.testing.assert_allclose(got["probabilities"].sum(-1), 1.0, rtol=1e-5)
    # The two exports are the one model: logits within bfloat16's error (the docstring's
    # six sigma, K = 3 + 11 of this one-layer model).
    z32, z16 = answers["float32"]["logits"], answers["bfloat16"]["logits"]
    sigma = (
        UNIT["mixed_bfloat16"] * math.sqrt(3 + 11) * np.sqrt(np.mean(z32.astype(np.float64) ** 2))
    )
    assert np.abs(z16 - z32).max() <= 6 * sigma
