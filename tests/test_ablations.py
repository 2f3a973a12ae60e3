"""The paper's ablations (Section 3.2, Table 5; `objective_variant`) against NumPy
re-derivations, their config rules, tiny runs, and the generator-size / weight-sharing studies."""

import json
import os

import helpers_reference_ablations as abl
import helpers_reference_numpy as ref
import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from helpers_pretrainer import MASK, SPECIAL_IDS, tiny_batch, tiny_config

from electra_tf.config import CONFIGS_DIR, MASKED_LM_VARIANTS, ConfigError, pretraining_config
from electra_tf.pretraining import ablations
from electra_tf.pretraining.pretrainer import ElectraPretrainer

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _numpy(outputs):
    return {key: value.numpy() for key, value in outputs.items()}


def _weights(model):
    return {name: v.numpy().astype(np.float64) for name, v in model.variable_map().items()}


def _perturbed(config, seed=0):
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    ref.perturb(model.variable_map().values(), seed=seed)
    return model


# ---------------------------------------------------------------------- config
def test_unknown_variant_is_an_error_naming_the_key_and_the_closest_value():
    with pytest.raises(ConfigError, match=r"objective_variant: 'electra15'.*'electra_15'"):
        tiny_config(objective_variant="electra15")
    with pytest.raises(ConfigError, match="objective_variant"):
        tiny_config(objective_variant=15)


@pytest.mark.parametrize("variant", ["electra_15", "replace_mlm", "all_tokens_mlm"])
def test_a_variant_needs_the_electra_pipeline(variant):
    with pytest.raises(ConfigError, match=f"objective_variant: '{variant}' needs electra_obj"):
        tiny_config(objective_variant=variant, electra_objective=False)


@pytest.mark.parametrize("variant", ["replace_mlm", "all_tokens_mlm"])
def test_masked_lm_variants_need_a_separate_generator(variant):
    with pytest.raises(ConfigError, match="untied_generator: must be true"):
        tiny_config(objective_variant=variant, untied_generator=False)
    # The detector variants share all weights if asked (the paper's weight-tying study).
    tiny_config(objective_variant="electra_15", untied_generator=False)


def test_electra_15_accumulation_needs_positions_without_replacement():
    settings = {"objective_variant": "electra_15", "train_batch_size": 8}
    with pytest.raises(ConfigError, match="gradient_accumulation_steps.*electra_15"):
        tiny_config(gradient_accumulation_steps=2, **settings)
    config = tiny_config(
        gradient_accumulation_steps=2, mask_positions_with_replacement=False, **settings
    )
    assert config.objective_variant == "electra_15"


def test_the_default_is_the_original_objective():
    assert pretraining_config().objective_variant == "electra"
    assert tiny_config(electra_objective=False).objective_variant == "electra"  # BERT


# ---------------------------------------------------------------------- ELECTRA 15%
def test_generator_positions_count_each_position_once_and_skip_inactive_slots():
    positions = tf.constant([[3, 3, 5, 0], [1, 2, 0, 0]])
    mask = ablations.generator_positions_mask(positions, 6).numpy()
    np.testing.assert_array_equal(mask, abl.generator_positions(positions.numpy(), 6))
    np.testing.assert_array_equal(mask, [[0, 0, 0, 1, 0, 1], [0, 1, 1, 0, 0, 0]])


def test_electra_15_is_electras_detector_loss_restricted_to_the_generators_positions():
    # Same weights and seed: the same masking, samples and discriminator pass; only the
    # weighting of the per-token losses differs.
    batch = tiny_batch()
    electra = _perturbed(tiny_config())
    variant = ElectraPretrainer(tiny_config(objective_variant="electra_15"), **SPECIAL_IDS)
    for name, var in variant.variable_map().items():
        var.assign(electra.variable_map()[name])
    full = _numpy(electra(batch))
    raw = variant(batch)
    restricted = _numpy(raw)
    for key in ("masked_lm_positions", "sampled_ids", "disc_labels", "disc_logits"):
        np.testing.assert_array_equal(restricted[key], full[key], err_msg=key)

    w = _weights(variant)
    disc_seq = abl.main_network(
        w, variant.config, full["fake_input_ids"], batch["input_mask"], batch["segment_ids"]
    )
    disc_logits = ref.discriminator_logits(w, disc_seq)
    np.testing.assert_allclose(restricted["disc_logits"], disc_logits, **TOL)
    labels = full["disc_labels"]
    full_mean = ref.disc_loss(disc_logits, labels, batch["input_mask"])
    np.testing.assert_allclose(full["disc_loss"], full_mean, **TOL)
    positions = abl.generator_positions(full["masked_lm_positions"], batch["input_ids"].shape[1])
    expected = abl.weighted_mean(ref.sigmoid_xent(disc_logits, labels), positions)
    np.testing.assert_allclose(restricted["disc_loss"], expected, **TOL)
    assert abs(expected - full_mean) > 1e-3, "the restriction changed nothing"
    config = variant.config
    total = config.gen_weight * full["masked_lm_loss"] + config.disc_weight * expected
    np.testing.assert_allclose(restricted["loss"], total, **TOL)

    # The metrics are weighted the same way: accuracy over the generator's positions only.
    variant._trackers.update(raw, tf.constant(batch["input_mask"]), num_parts=1)
    correct = (disc_logits > 0) == (labels == 1)
    np.testing.assert_allclose(
        float(variant._trackers.trackers["disc_accuracy"].result()),
        (correct * positions).sum() / positions.sum(),
        rtol=1e-6,
    )


# ---------------------------------------------------------------------- Replace MLM
def test_replace_mlm_input_holds_the_generators_samples_not_mask():
    # An output bias of +1000 on token 7 makes every sample 7 whatever the Gumbel noise: the
    # full-size network's input is predictable without reading the model's own samples.
    config = tiny_config(objective_variant="replace_mlm", mask_positions_with_replacement=False)
    model = _perturbed(config)
    bias = np.zeros(config.vocab_size, np.float32)
    bias[7] = 1000.0
    model.variable_map()["generator_predictions/output_bias"].assign(bias)
    batch = tiny_batch()
    out = _numpy(model(batch))
    active = out["masked_lm_weights"] == 1
    assert (out["masked_input_ids"] == MASK).sum() > 0  # the generator did see [MASK]
    rows = np.nonzero(active)[0]
    expected = batch["input_ids"].copy()
    expected[rows, out["masked_lm_positions"][active]] = 7
    np.testing.assert_array_equal(out["fake_input_ids"], expected)
    assert not (out["fake_input_ids"] == MASK).any()

    # ... and it is what the masked LM read: its logits re-derived from that input.
    w = _weights(model)
    seq = abl.main_network(w, config, expected, batch["input_mask"], batch["segment_ids"])
    logits = abl.mlm_head_logits(w, seq, out["masked_lm_positions"])
    np.testing.assert_allclose(out["corrupted_mlm_logits"], logits, **TOL)


@pytest.mark.parametrize("with_replacement", [True, False])
def test_replace_mlm_loss_matches_numpy(with_replacement):
    config = tiny_config(
        objective_variant="replace_mlm", mask_positions_with_replacement=with_replacement
    )
    model = _perturbed(config)
    batch = tiny_batch()
    out = _numpy(model(batch))
    assert "disc_logits" not in out and "discriminator_predictions/dense/kernel" not in (
        model.variable_map()
    )
    w = _weights(model)
    positions = out["masked_lm_positions"]
    # The generator as ELECTRA's: on the [MASK]ed input, shared embeddings.
    gen_seq = ref.encoder(
        w,
        out["masked_input_ids"],
        batch["input_mask"],
        batch["segment_ids"],
        **ref.structure(config.generator_config()),
        scope="generator",
    )
    gen_logits = ref.generator_logits(w, gen_seq, positions)
    np.testing.assert_allclose(out["mlm_logits"], gen_logits, **TOL)
    fake, _ = ref.scatter_update(batch["input_ids"], out["sampled_ids"], positions)
    np.testing.assert_array_equal(out["fake_input_ids"], fake)

    seq = abl.main_network(w, config, fake, batch["input_mask"], batch["segment_ids"])
    logits = abl.mlm_head_logits(w, seq, positions)
    np.testing.assert_allclose(out["corrupted_mlm_logits"], logits, **TOL)
    rows, cols = np.arange(4)[:, None], np.arange(positions.shape[1])[None, :]
    per_slot = -ref.log_softmax(logits)[rows, cols, out["masked_lm_ids"]]
    expected = abl.weighted_mean(per_slot, out["masked_lm_weights"])
    np.testing.assert_allclose(out["corrupted_mlm_loss"], expected, **TOL)
    gen_loss = ref.mlm_loss(gen_logits, out["masked_lm_ids"], out["masked_lm_weights"])
    total = config.gen_weight * gen_loss + config.disc_weight * expected
    np.testing.assert_allclose(out["loss"], total, **TOL)


# ---------------------------------------------------------------------- All-Tokens MLM
def test_copy_mechanism_is_a_distribution_and_matches_numpy():
    rng = np.random.default_rng(0)
    vocab = 11
    generation = rng.normal(0, 3, [3, 5, vocab]).astype(np.float32)
    copy = np.array([[-30, -2, 0, 2, 30]] * 3, np.float32) + rng.normal(0, 0.1, [3, 5])
    copy = copy.astype(np.float32)
    inputs = rng.integers(0, vocab, [3, 5])
    # Targets equal to the input (the copy path) at some positions, other tokens elsewhere.
    targets = np.where(rng.random([3, 5]) < 0.5, inputs, rng.integers(0, vocab, [3, 5]))
    assert (targets == inputs).any() and (targets != inputs).any()
    log_probs = ablations.copy_mechanism_log_probs(generation, copy, inputs).numpy()
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, atol=1e-5)
    expected = abl.copy_distribution(generation, copy, inputs)
    np.testing.assert_allclose(np.exp(log_probs), expected, atol=1e-6)
    nll = ablations.copy_mechanism_nll(generation, copy, inputs, targets).numpy()
    np.testing.assert_allclose(nll, abl.nll(expected, targets), rtol=1e-5, atol=1e-5)
    predicted = ablations.copy_mechanism_predictions(generation, copy, inputs).numpy()
    np.testing.assert_array_equal(predicted, expected.argmax(-1))
    # Both branches of the argmax happen: the copied input token and a generated one.
    assert (predicted == inputs).any() and (predicted != inputs).any()


def test_copy_mechanism_gradients_are_finite_at_saturated_gates():
    generation = tf.constant(np.random.default_rng(1).normal(0, 5, [1, 4, 7]), tf.float32)
    copy = tf.constant([[-80.0, 80.0, -80.0, 80.0]])
    inputs, targets = tf.constant([[1, 1, 2, 2]]), tf.constant([[1, 3, 2, 4]])
    with tf.GradientTape() as tape:
        tape.watch([generation, copy])
        loss = tf.reduce_sum(ablations.copy_mechanism_nll(generation, copy, inputs, targets))
    grads = tape.gradient(loss, [generation, copy])
    assert np.isfinite(float(loss)) and all(np.isfinite(g.numpy()).all() for g in grads)


def test_all_tokens_mlm_matches_numpy_with_perturbed_weights():
    config = tiny_config(objective_variant="all_tokens_mlm")
    model = _perturbed(config, seed=3)
    batch = tiny_batch()
    out = _numpy(model(batch))
    w = _weights(model)
    fake, _ = ref.scatter_update(batch["input_ids"], out["sampled_ids"], out["masked_lm_positions"])
    np.testing.assert_array_equal(out["fake_input_ids"], fake)
    seq = abl.main_network(w, config, fake, batch["input_mask"], batch["segment_ids"])
    every = np.broadcast_to(np.arange(fake.shape[1]), fake.shape)
    generation = abl.mlm_head_logits(w, seq, every)  # [batch, seq_len, vocab]
    copy = abl.copy_head_logits(w, seq)  # [batch, seq_len]
    np.testing.assert_allclose(out["corrupted_mlm_logits"], generation, **TOL)
    np.testing.assert_allclose(out["copy_logits"], copy, **TOL)
    # The gate is away from 1/2 (weights perturbed), so the copy term matters.
    assert np.abs(copy).max() > 0.5

    probs = abl.copy_distribution(generation, copy, fake)
    model_probs = ablations.copy_mechanism_log_probs(
        out["corrupted_mlm_logits"], out["copy_logits"], out["fake_input_ids"]
    ).numpy()
    np.testing.assert_allclose(np.exp(model_probs).sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.exp(model_probs), probs, atol=1e-5)
    # Every real position is predicted, its ORIGINAL token the target; padding is not.
    per_token = abl.nll(probs, batch["input_ids"])
    expected = abl.weighted_mean(per_token, batch["input_mask"])
    np.testing.assert_allclose(out["corrupted_mlm_losses"], per_token, **TOL)
    np.testing.assert_allclose(out["corrupted_mlm_loss"], expected, **TOL)
    gen_loss = ref.mlm_loss(out["mlm_logits"], out["masked_lm_ids"], out["masked_lm_weights"])
    total = config.gen_weight * gen_loss + config.disc_weight * expected
    np.testing.assert_allclose(out["loss"], total, **TOL)


# ---------------------------------------------------------------------- metrics
@pytest.mark.parametrize("variant", ["replace_mlm", "all_tokens_mlm"])
def test_masked_lm_variant_metrics(variant):
    model = _perturbed(tiny_config(objective_variant=variant))
    batch = tiny_batch()
    raw = model(batch)
    out = _numpy(raw)
    model._trackers.update(raw, tf.constant(batch["input_mask"]), num_parts=1)
    results = {m.name: float(m.result()) for m in model.metrics}
    assert set(results) == {
        "loss",
        "masked_lm_loss",
        "masked_lm_accuracy",
        "sampled_masked_lm_accuracy",
        f"{variant}_loss",
        f"{variant}_accuracy",
    }
    weights = out["corrupted_mlm_weights"]
    np.testing.assert_allclose(
        results[f"{variant}_loss"],
        (out["corrupted_mlm_losses"] * weights).sum() / weights.sum(),
        rtol=1e-5,
    )
    if variant == "all_tokens_mlm":
        probs = abl.copy_distribution(
            out["corrupted_mlm_logits"], out["copy_logits"], out["fake_input_ids"]
        )
        predicted = probs.argmax(-1)
    else:
        predicted = out["corrupted_mlm_logits"].argmax(-1)
    correct = predicted == out["corrupted_mlm_ids"]
    np.testing.assert_allclose(
        results[f"{variant}_accuracy"], (correct * weights).sum() / weights.sum(), rtol=1e-6
    )


# ---------------------------------------------------------------------- variables
@pytest.mark.parametrize(
    "variant, heads",
    [
        ("electra", {"generator_predictions", "discriminator_predictions"}),
        ("electra_15", {"generator_predictions", "discriminator_predictions"}),
        ("replace_mlm", {"generator_predictions", "mlm_predictions"}),
        ("all_tokens_mlm", {"generator_predictions", "mlm_predictions", "copy_predictions"}),
    ],
)
def test_variable_map_covers_every_variable_once(variant, heads):
    model = ElectraPretrainer(tiny_config(objective_variant=variant), **SPECIAL_IDS)
    names = model.variable_map()
    assert {n.split("/")[0] for n in names} == {"electra", "generator"} | heads
    ids = [id(v) for v in names.values()]
    assert len(set(ids)) == len(ids) == len(model.trainable_variables)
    assert set(ids) == {id(v) for v in model.trainable_variables}
    if variant in ("replace_mlm", "all_tokens_mlm"):
        # The full-size network's masked-LM head: discriminator width in, tied to its table.
        assert names["mlm_predictions/dense/kernel"].shape == [32, 16]
        assert model.corrupted_mlm_head.mlm_head.embeddings is model.discriminator.embeddings


# ---------------------------------------------------------------------- resuming
def test_resuming_refuses_a_variant_with_other_variables(tmp_path):
    from electra_tf.checkpoints.training_state import check_resumable, write_run_config

    saved = write_run_config(tiny_config(objective_variant="electra"), str(tmp_path))
    # Same variables: another objective is refused only unless allowed (it changes what the
    # run learns); other variables are refused even when allowed.
    allowed = ("objective_variant",)
    assert check_resumable(saved, tiny_config(objective_variant="electra_15"), allowed)
    with pytest.raises(ConfigError, match="--allow-config-change objective_variant"):
        check_resumable(saved, tiny_config(objective_variant="electra_15"))
    with pytest.raises(ConfigError, match="objective_variant: saved 'electra', now 'replace"):
        check_resumable(saved, tiny_config(objective_variant="replace_mlm"), allowed)


# ---------------------------------------------------------------------- training
def _run_config(variant, **overrides):
    """A one-layer tiny config, dropout off, with the objective of configs/ablations/."""
    overrides.setdefault(
        "model_hparam_overrides",
        {
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 16,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
        },
    )
    return tiny_config(**{**_preset(variant), **overrides})


def _preset(name):
    path = os.path.join(CONFIGS_DIR, "ablations", f"{name}.json")
    with open(path, encoding="utf-8") as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


def _train(config, batches, initial_weights=None):
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    if initial_weights is not None:
        model.set_weights(initial_weights)
    weights = model.get_weights()
    model.compile(optimizer=keras.optimizers.Adam(config.learning_rate))
    step = tf.function(model.train_step)
    logs = []
    for batch in batches:
        values = step({key: tf.constant(value) for key, value in batch.items()})
        logs.append({name: float(value) for name, value in values.items()})
        for metric in model.metrics:
            metric.reset_state()
    return model, weights, logs


@pytest.mark.parametrize(
    "variant", ["electra", "electra_15", "replace_mlm", "all_tokens_mlm", "bert_mlm"]
)
def test_a_tiny_run_of_each_objective_lowers_its_loss(variant):
    config = _run_config(variant, learning_rate=1e-2)
    _, _, logs = _train(config, [tiny_batch(batch=8)] * 20)
    # Each step masks and samples afresh (the loss is noisy): compare five-step means.
    names = ["loss"] + ([f"{variant}_loss"] if variant in MASKED_LM_VARIANTS else [])
    for name in names:
        values = [log[name] for log in logs]
        assert np.isfinite(values).all(), (name, values)
        assert np.mean(values[-5:]) < 0.9 * np.mean(values[:5]), (name, values)


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param("electra_15", marks=pytest.mark.slow),
        "replace_mlm",
        pytest.param("all_tokens_mlm", marks=pytest.mark.slow),
    ],
)
def test_accumulated_micro_batches_give_the_full_batch_update(variant):
    # Each variant's loss divides by the WHOLE batch's denominator in every micro-batch.
    from helpers_pretrainer import batch_split_invariant_objective

    batches = [tiny_batch(batch=8, seed=seed) for seed in (0, 1)]

    def config(steps):
        return _run_config(
            variant,
            learning_rate=1e-3,
            train_batch_size=8,
            gradient_accumulation_steps=steps,
            mask_positions_with_replacement=False,
        )

    with batch_split_invariant_objective():
        whole_model, weights, whole = _train(config(1), batches)
        parts_model, _, parts = _train(config(4), batches, weights)
    name = {"electra_15": "disc_loss"}.get(variant, f"{variant}_loss")
    for key in ("loss", name):
        np.testing.assert_allclose(
            [log[key] for log in parts], [log[key] for log in whole], rtol=1e-5, err_msg=key
        )
    for a, b in zip(whole_model.get_weights(), parts_model.get_weights(), strict=True):
        np.testing.assert_allclose(b, a, atol=2e-6)


@pytest.mark.slow
def test_all_tokens_mlm_train_step_under_xla_and_bfloat16():
    model = ElectraPretrainer(
        _run_config("all_tokens_mlm", precision="mixed_bfloat16"), **SPECIAL_IDS
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    step = tf.function(model.train_step, jit_compile=True)
    logs = step({key: tf.constant(value) for key, value in tiny_batch().items()})
    assert np.isfinite(float(logs["loss"])) and np.isfinite(float(logs["all_tokens_mlm_loss"]))
    assert int(model.optimizer.iterations) == 1


# ---------------------------------------------------------------------- presets
# name -> (electra_objective, electric_objective, objective_variant) once resolved
ABLATION_PRESETS = {
    "electra": (True, False, "electra"),
    "electra_15": (True, False, "electra_15"),
    "replace_mlm": (True, False, "replace_mlm"),
    "all_tokens_mlm": (True, False, "all_tokens_mlm"),
    "bert_mlm": (False, False, "electra"),
    "electric": (False, True, "electra"),
}
OBJECTIVE_KEYS = {
    "electra_objective",
    "electric_objective",
    "objective_variant",
    "gen_weight",
    "disc_weight",
}


@pytest.mark.parametrize("name", sorted(ABLATION_PRESETS))
def test_ablation_presets_hold_only_the_objective(name):
    values = _preset(name)
    assert set(values) <= OBJECTIVE_KEYS, set(values) - OBJECTIVE_KEYS
    # Shape and budget come from another preset; the file decides the objective alone.
    path = os.path.join(CONFIGS_DIR, "ablations", f"{name}.json")
    config = pretraining_config(preset="small", hparams=path)
    resolved = (config.electra_objective, config.electric_objective, config.objective_variant)
    assert resolved == ABLATION_PRESETS[name]
    assert config.discriminator_config().hidden_size == 256


def test_ablation_presets_are_all_tested():
    files = os.listdir(os.path.join(CONFIGS_DIR, "ablations"))
    assert sorted(f[: -len(".json")] for f in files if f.endswith(".json")) == sorted(
        ABLATION_PRESETS
    )


# ---------------------------------------------------------------------- generator size, weight sharing
@pytest.mark.parametrize("fraction, width", [(0.25, 8), (0.5, 16), (1.0, 32)])
def test_generator_size_sweep_builds_and_runs(fraction, width):
    # The paper's Figure 3 study: generator width as a fraction of the discriminator's (H 32,
    # E 16 here). The generator projects the shared 16-wide embeddings only when Hg != 16.
    config = tiny_config(generator_hidden_size=fraction)
    assert config.generator_config().hidden_size == width
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    shapes = {k: v.shape.as_list() for k, v in model.variable_map().items()}
    assert shapes["generator/encoder/layer_0/attention/self/query/kernel"] == [width, width]
    assert shapes["generator/encoder/layer_1/intermediate/dense/kernel"] == [width, 4 * width]
    assert shapes["generator_predictions/dense/kernel"] == [width, 16]
    assert ("generator/embeddings_project/kernel" in shapes) == (width != 16)
    assert shapes["electra/encoder/layer_0/attention/self/query/kernel"] == [32, 32]
    assert np.isfinite(float(model(tiny_batch())["loss"]))
    # The same fractions of the paper's ELECTRA-Small (256 wide): 64, 128, 256.
    small = pretraining_config(preset="small", hparams={"generator_hidden_size": fraction})
    assert small.generator_config().hidden_size == int(256 * fraction)


EMBEDDING_NAMES = {
    "word_embeddings",
    "position_embeddings",
    "token_type_embeddings",
    "LayerNorm/gamma",
    "LayerNorm/beta",
}


@pytest.mark.parametrize("tying", ["none", "token_embeddings", "all"])
def test_weight_sharing_settings_build_the_papers_variable_sets(tying):
    # The paper's weight-sharing study, generator and discriminator the same size: no tying
    # (untied_generator_embeddings), the embeddings only (the default) or all weights
    # (untied_generator false, one network).
    overrides = {
        "none": {"untied_generator_embeddings": True},
        "token_embeddings": {},
        "all": {"untied_generator": False},
    }[tying]
    model = ElectraPretrainer(tiny_config(generator_hidden_size=1.0, **overrides), **SPECIAL_IDS)
    generator = {id(v): v for v in model.generator.trainable_variables}
    discriminator = {id(v): v for v in model.discriminator.trainable_variables}
    names = {id(v): n for n, v in model.variable_map().items()}
    shared = {names[i] for i in set(generator) & set(discriminator)}
    if tying == "none":
        assert shared == set()
        assert {names[i] for i in generator} >= {
            f"generator/embeddings/{n}" for n in EMBEDDING_NAMES
        }
    elif tying == "token_embeddings":
        assert shared == {f"electra/embeddings/{n}" for n in EMBEDDING_NAMES}
        # Each tower projects the 16-wide embeddings to its own 32 with its own layer.
        assert "generator/embeddings_project/kernel" in set(names.values())
    else:
        assert model.generator is model.discriminator and set(generator) == set(discriminator)
        assert not any(n.startswith("generator/") for n in names.values())
    # The generator's output layer is tied to the word table its own input reads.
    assert model.generator_head.embeddings is model.generator.embeddings
    assert np.isfinite(float(model(tiny_batch())["loss"]))


# ---------------------------------------------------------------------- the command
def test_the_pretraining_command_runs_a_variant_and_refuses_to_resume_it_as_another(
    tmp_path, capsys
):
    # The real loop (optimizer, checkpoints, console line), the ablation file as the user
    # passes it (`--hparams` over a size preset), then a resume with another variant.
    from helpers_pretrain_cli import hparams, write_corpus

    from electra_tf.cli import pretrain

    data = write_corpus(tmp_path / "data")
    argv = ["--data-dir", str(data), "--model-name", "m", "--preset", "tiny", "--hparams"]
    code = pretrain.main([*argv, hparams(num_train_steps=4, **_preset("all_tokens_mlm"))])
    out = capsys.readouterr().out
    assert code == 0, out
    line = [x for x in out.splitlines() if x.startswith("step 4/4")][0]
    assert "all_tokens_mlm_accuracy " in line and "disc_auc" not in line, line
    saved = json.loads((data / "models" / "m" / "config.json").read_text())
    assert (saved["objective_variant"], saved["disc_weight"]) == ("all_tokens_mlm", 1.0)
    assert tf.train.latest_checkpoint(str(data / "models" / "m")).endswith("ckpt-4")

    code = pretrain.main([*argv, hparams(num_train_steps=6, **_preset("replace_mlm"))])
    captured = capsys.readouterr()
    assert code == 2
    assert "objective_variant: saved 'all_tokens_mlm', now 'replace_mlm'" in (
        captured.out + captured.err
    )
