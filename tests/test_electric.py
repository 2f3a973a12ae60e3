"""Electric (energy-based cloze pre-training, run_pretraining.py with electric_objective): the
two-tower cloze model, the cloze loss, the energy-based discriminator loss against NumPy
re-derivations (helpers_reference_numpy), the config rules, a tiny training run, and the original's
checkpoint names, and scoring text."""

import os

import helpers_reference_numpy as ref
import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from helpers_pretrainer import CLS, MASK, SEP, SPECIAL_IDS, VOCAB, tiny_batch, tiny_config
from test_checkpoints import original_shapes, write_tf1_checkpoint

from electra_tf import checkpoints
from electra_tf.cli import convert
from electra_tf.config import ConfigError, PretrainingConfig, pretraining_config
from electra_tf.data.tokenization import FullTokenizer
from electra_tf.modeling import ElectraDiscriminator, Embeddings, TwoTowerClozeTransformer
from electra_tf.modeling.discriminator import dummy_inputs
from electra_tf.pretraining.electric import pseudo_log_likelihoods
from electra_tf.pretraining.electric_scoring import score_text
from electra_tf.pretraining.losses import electra_loss
from electra_tf.pretraining.masking import candidates_mask
from electra_tf.pretraining.pretrainer import ElectraPretrainer

MASK_PROB = 0.25  # tiny_config's


def electric_config(**overrides):
    """tiny_config with Electric: towers of 2 x 16 (E = 16), discriminator 2 x 32."""
    return tiny_config(electric_objective=True, **overrides)


def run(model, batch, training=False):
    return {k: v.numpy() for k, v in model(batch, training=training).items()}


def numpy_weights(model):
    return {name: v.numpy().astype(np.float64) for name, v in model.variable_map().items()}


# ------------------------------------------------------------------------------ cloze model
# [CLS] a b c [SEP] d [SEP], and a shorter row with padding.
HAND_IDS = np.array([[CLS, 11, 12, 13, SEP, 14, SEP], [CLS, 21, 22, SEP, 0, 0, 0]], np.int32)
HAND_MASK = np.array([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]], np.int32)
HAND_SEGMENTS = np.array([[0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0]], np.int32)


def float32_exact(input_mask):
    """bool [batch, seq_len]: positions whose rtl half is computed to float32 precision.

    Position i's rtl half is rtl(i + 1). Where i + 1 is padding, that query's keys are all
    masked (padding, or outside the triangle), so every score is s - 10000; float32 rounds
    those to ~1e-3 (in TF1 as here) and the float64 reference differs by up to ~3e-4 there:
    [SEP] and padding in rows with padding. The last position's rtl half is rtl(0): exact.
    """
    exact = np.ones(input_mask.shape, bool)
    exact[:, :-1] = input_mask[:, 1:] == 1
    return exact


def assert_close_by_position(actual, expected, input_mask):
    """atol/rtol 1e-5 where `float32_exact`, 1e-3 elsewhere."""
    exact = float32_exact(input_mask)
    np.testing.assert_allclose(actual[exact], expected[exact], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(actual, expected, atol=1e-3, rtol=1e-3)


def _two_tower(config):
    """A TwoTowerClozeTransformer on a shared embedding block, all weights perturbed."""
    embeddings = Embeddings(config)
    embeddings.build(None)
    model = TwoTowerClozeTransformer(config, embeddings)
    variables = {**model.variable_map(), **embeddings.variable_map("electra")}
    ref.perturb(variables.values())
    return model, {name: v.numpy().astype(np.float64) for name, v in variables.items()}


@pytest.mark.parametrize("generator_hidden_size", [0.5, 1.0], ids=["E=Hg", "E!=Hg"])
def test_two_tower_features_match_numpy(generator_hidden_size):
    config = electric_config(generator_hidden_size=generator_hidden_size).generator_config()
    model, w = _two_tower(config)
    batch = {"input_ids": HAND_IDS, "input_mask": HAND_MASK, "segment_ids": HAND_SEGMENTS}
    features = model(batch).numpy()
    assert features.shape == (2, 7, 2 * config.hidden_size)
    assert ("generator_ltr/embeddings_project/kernel" in w) == (generator_hidden_size == 1.0)
    expected = ref.two_tower_features(
        w, HAND_IDS, HAND_MASK, HAND_SEGMENTS, **ref.structure(config)
    )
    assert_close_by_position(features, expected, HAND_MASK)


def test_each_half_sees_only_its_side_of_the_position():
    # Perturb one token j at a time (row 0, no padding): position i's ltr half must change
    # exactly when j < i and its rtl half exactly when j > i; its own token never reaches it.
    # The exceptions are the original's wrap-around: roll(ltr, -1) gives position 0 the ltr
    # output of the LAST position, and roll(rtl, 1) gives the last position rtl(0), both of
    # which saw every token.
    config = electric_config().generator_config()
    model, _ = _two_tower(config)
    length, hidden = HAND_IDS.shape[1], config.hidden_size
    ids = np.repeat(HAND_IDS[:1], length + 1, axis=0)  # row j < length: token j changed
    ids[np.arange(length), np.arange(length)] += 30  # still < VOCAB, never a special id
    assert ids.max() < VOCAB
    batch = {
        "input_ids": ids,
        "input_mask": np.ones_like(ids),
        "segment_ids": np.repeat(HAND_SEGMENTS[:1], length + 1, axis=0),
    }
    features = model(batch).numpy()
    change = np.abs(features[:length] - features[length:])  # [j, i, 2 * hidden]
    ltr_change = change[..., :hidden].max(-1)  # [j, i]
    rtl_change = change[..., hidden:].max(-1)  # [j, i]
    j, i = np.meshgrid(np.arange(length), np.arange(length), indexing="ij")
    ltr_sees = (j < i) | (i == 0)
    rtl_sees = (j > i) | (i == length - 1)
    assert np.all(ltr_change[~ltr_sees] < 1e-6), ltr_change
    assert np.all(ltr_change[ltr_sees] > 1e-4), ltr_change
    assert np.all(rtl_change[~rtl_sees] < 1e-6), rtl_change
    assert np.all(rtl_change[rtl_sees] > 1e-4), rtl_change


def test_last_real_position_of_a_padded_row_sees_itself():
    # The original's masks multiply: a padded rtl query (i + 1 after the last real token) has
    # every key masked (padding, or before it), so it attends to ALL keys alike, real tokens
    # before it included. So in a row with padding, the last real position's ([SEP]'s) rtl
    # half depends on its own token. Not a candidate for the cloze loss, but Electric adds
    # log q there.
    config = electric_config().generator_config()
    model, _ = _two_tower(config)
    ids = np.repeat(HAND_IDS[1:], 2, axis=0)
    ids[1, 3] = 40  # row 1's last real token ([SEP] at 3) changed
    batch = {
        "input_ids": ids,
        "input_mask": np.repeat(HAND_MASK[1:], 2, axis=0),
        "segment_ids": np.repeat(HAND_SEGMENTS[1:], 2, axis=0),
    }
    features = model(batch).numpy()
    hidden = config.hidden_size
    assert np.abs(features[1, 3, hidden:] - features[0, 3, hidden:]).max() > 1e-4
    # Its ltr half (ltr(2)) does not see it, as everywhere.
    assert np.abs(features[1, 3, :hidden] - features[0, 3, :hidden]).max() < 1e-6


def test_causal_attention_weights():
    # The towers' attention itself: ltr query i puts no weight on keys j > i, rtl none on
    # j < i, and padded keys get none (the -10000 bias underflows to exactly 0).
    config = electric_config().generator_config()
    model, _ = _two_tower(config)
    batch = {"input_ids": HAND_IDS, "input_mask": HAND_MASK, "segment_ids": HAND_SEGMENTS}
    query, key = np.arange(7)[:, None], np.arange(7)[None, :]
    for tower, allowed in ((model.ltr, key <= query), (model.rtl, key >= query)):
        for probs in tower.attention_probs(batch):
            probs = probs.numpy()  # [batch, heads, seq_q, seq_k]
            np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
            assert np.all(probs[0][:, ~allowed] == 0.0), tower.name
            real = allowed[:4, :4]  # row 1's real queries and keys
            assert np.all(probs[1, :, :4, :4][:, ~real] == 0.0), tower.name
            assert np.all(probs[1, :, :4, 4:] == 0.0), tower.name  # padded keys
            if tower is model.rtl:
                # Padded rtl queries: every key masked, so all keys get weight (see the test
                # above); ltr padded queries still see the real keys before them only.
                assert np.all(probs[1, :, 4:, :4] > 0.0)


# ------------------------------------------------------------------------------ losses
def test_cloze_loss_on_a_hand_built_batch():
    ids = np.array([[CLS, 4, 5, SEP, 0], [CLS, MASK, 6, 7, SEP]], np.int32)
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], np.int32)
    # The cloze loss covers the masking candidates: real tokens other than [CLS] [SEP] [MASK].
    weights = candidates_mask(ids, mask, **SPECIAL_IDS).numpy().astype(np.float32)
    np.testing.assert_array_equal(weights, [[0, 1, 1, 0, 0], [0, 0, 1, 1, 0]])

    def loss(logits, gen_weight=1.0):
        return electra_loss(
            mlm_logits=np.zeros([2, 1, 8], np.float32),
            masked_lm_ids=np.zeros([2, 1], np.int32),
            masked_lm_weights=np.ones([2, 1], np.float32),
            disc_logits=np.zeros([2, 5], np.float32),
            disc_labels=np.zeros([2, 5], np.int32),
            input_mask=mask,
            gen_weight=gen_weight,
            disc_weight=50.0,
            cloze=(logits, ids, weights),
        )

    # Uniform cloze logits over 8 tokens: every candidate costs log 8.
    out = loss(np.zeros([2, 5, 8], np.float32), gen_weight=2.0)
    np.testing.assert_allclose(out["cloze_loss"], np.log(8.0) * 4 / (4 + 1e-6), rtol=1e-6)
    # The cloze loss, not the masked-LM loss (a metric here), is the generator's term.
    np.testing.assert_allclose(
        out["loss"], 2.0 * out["cloze_loss"] + 50.0 * np.log(2.0) * 9 / (9 + 1e-6), rtol=1e-6
    )
    # Random logits: -log softmax at the target, summed over the candidates by hand.
    logits = np.random.default_rng(0).normal(0.0, 3.0, [2, 5, 8]).astype(np.float32)
    total = 0.0
    for b, t in [(0, 1), (0, 2), (1, 2), (1, 3)]:
        row = logits[b, t].astype(np.float64)
        total += np.log(np.exp(row).sum()) - row[ids[b, t]]
    np.testing.assert_allclose(loss(logits)["cloze_loss"], total / (4 + 1e-6), rtol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"generator_hidden_size": 1.0}, {"untied_generator_embeddings": True}],
    ids=["shared-embeddings", "towers-project", "untied-embeddings"],
)
def test_electric_pretrainer_matches_numpy(overrides):
    # The whole Electric forward pass, re-derived from the paper's equations with perturbed
    # weights: cloze model q on the clean input, samples scattered in, every scattered
    # position labelled noise, and the NCE loss with P(data) = (n-k) e^-E / ((n-k) e^-E + k q).
    config = electric_config(**overrides)
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    ref.perturb(model.variable_map().values())
    batch = tiny_batch()
    out = run(model, batch)
    w = numpy_weights(model)
    gen = config.generator_config()
    untied = config.untied_generator_embeddings
    table = "generator_ltr" if untied else "electra"
    assert w["cloze_predictions/dense/kernel"].shape == (2 * gen.hidden_size, gen.embedding_width)
    assert w[f"{table}/embeddings/word_embeddings"].shape == (VOCAB, gen.embedding_width)
    ids, mask, segments = batch["input_ids"], batch["input_mask"], batch["segment_ids"]

    # The cloze model on the UNMASKED input, and its loss over the candidates.
    features = ref.two_tower_features(w, ids, mask, segments, untied, **ref.structure(gen))
    cloze = ref.cloze_logits(w, features, table)
    assert_close_by_position(out["cloze_logits"], cloze, mask)
    candidates = (mask == 1) & ~np.isin(ids, [CLS, SEP, MASK])
    np.testing.assert_array_equal(out["cloze_weights"], candidates)
    log_q_clean = ref.token_log_probs(cloze, ids)
    cloze_loss = -(log_q_clean * candidates).sum() / (candidates.sum() + 1e-6)
    np.testing.assert_allclose(out["cloze_loss"], cloze_loss, rtol=1e-5)

    # Samples come from the cloze distributions at the masked slots.
    positions = out["masked_lm_positions"]
    rows = np.arange(ids.shape[0])[:, None]
    # Candidates are never a padded row's last real token ([SEP]): float32-exact positions.
    np.testing.assert_allclose(out["mlm_logits"], cloze[rows, positions], atol=1e-5, rtol=1e-5)
    mlm_loss = ref.mlm_loss(cloze[rows, positions], out["masked_lm_ids"], out["masked_lm_weights"])
    np.testing.assert_allclose(out["masked_lm_loss"], mlm_loss, rtol=1e-5)

    fake, scattered = ref.scatter_update(ids, out["sampled_ids"], positions)
    np.testing.assert_array_equal(out["fake_input_ids"], fake)
    np.testing.assert_array_equal(out["disc_labels"], scattered)
    disc_seq = ref.encoder(w, fake, mask, segments, **ref.structure(config.discriminator_config()))
    energies = ref.discriminator_logits(w, disc_seq)
    np.testing.assert_allclose(out["energies"], energies, atol=1e-5, rtol=1e-5)
    log_q = ref.token_log_probs(cloze, fake)
    assert_close_by_position(out["log_q"], log_q, mask)

    disc_loss = ref.nce_loss(energies, log_q, scattered, mask, MASK_PROB)
    np.testing.assert_allclose(out["disc_loss"], disc_loss, rtol=1e-5)
    total = config.gen_weight * cloze_loss + config.disc_weight * disc_loss
    np.testing.assert_allclose(out["loss"], total, rtol=1e-5)


def test_a_sample_equal_to_the_original_is_still_noise():
    # The cloze head predicts token 7 with near certainty and every word IS 7: each sample
    # equals the original. ELECTRA would label nothing as replaced; Electric labels every
    # position it wrote a sample to (NCE: which distribution it came from), and adds log q,
    # here ~0 at the words and ~-1000 at [CLS]/[SEP], where the sample-less token is not 7.
    model = ElectraPretrainer(electric_config(), **SPECIAL_IDS)
    bias = np.zeros([VOCAB], np.float32)
    bias[7] = 1000.0
    model.variable_map()["cloze_predictions/output_bias"].assign(bias)
    batch = tiny_batch()
    words = ~np.isin(batch["input_ids"], [0, CLS, SEP])
    batch["input_ids"] = np.where(words, 7, batch["input_ids"])
    out = run(model, batch)
    active = out["masked_lm_weights"] == 1
    np.testing.assert_array_equal(out["sampled_ids"][active], 7)
    np.testing.assert_array_equal(out["fake_input_ids"], batch["input_ids"])
    expected_labels = np.zeros_like(batch["input_ids"])
    rows = np.nonzero(active)[0]
    expected_labels[rows, out["masked_lm_positions"][active]] = 1
    np.testing.assert_array_equal(out["disc_labels"], expected_labels)
    assert expected_labels.sum() > 0
    assert np.all(np.abs(out["log_q"][words]) < 1e-3)
    assert np.all(out["log_q"][np.isin(batch["input_ids"], [CLS, SEP])] < -900)
    prior = np.log(MASK_PROB / (1 - MASK_PROB))
    np.testing.assert_allclose(
        out["disc_logits"], out["energies"] + out["log_q"] + prior, rtol=1e-6, atol=1e-3
    )


def test_gradient_paths():
    # The cloze loss trains the towers, the cloze head and the shared embeddings; the
    # discriminator loss trains the discriminator and the shared embeddings, never q (log q is
    # a stop_gradient, sampling is outside the graph).
    model = ElectraPretrainer(electric_config(), **SPECIAL_IDS)
    names = model.variable_map()
    q_side = [
        "generator_ltr/encoder/layer_0/attention/self/query/kernel",
        "generator_rtl/encoder/layer_1/output/dense/kernel",
        "cloze_predictions/dense/kernel",
        "cloze_predictions/output_bias",
    ]
    with tf.GradientTape(persistent=True) as tape:
        out = model(tiny_batch(), training=True)
    for name in q_side:
        assert tape.gradient(out["disc_loss"], names[name]) is None, name
        assert float(tf.norm(tape.gradient(out["cloze_loss"], names[name]))) > 0, name
    table = names["electra/embeddings/word_embeddings"]
    for loss in ("cloze_loss", "disc_loss"):
        assert float(tf.norm(tf.convert_to_tensor(tape.gradient(out[loss], table)))) > 0, loss
    disc_kernel = names["discriminator_predictions/dense/kernel"]
    assert tape.gradient(out["cloze_loss"], disc_kernel) is None


# ------------------------------------------------------------------------------ config
def test_electric_forces_the_two_tower_generator():
    config = pretraining_config(hparams={"electric_objective": True})
    assert config.two_tower_generator and config.has_discriminator
    assert PretrainingConfig(electric_objective=True).resolve().two_tower_generator
    # electra_objective does not matter once Electric is on (the original tests `or`).
    both_off = pretraining_config(hparams={"electric_objective": True, "electra_objective": False})
    assert both_off.has_discriminator and both_off.two_tower_generator
    # Resolving again changes nothing, and the defaults keep ELECTRA.
    assert config.resolve() == config
    default = pretraining_config()
    assert not default.electric_objective and not default.two_tower_generator


@pytest.mark.parametrize(
    "hparams, key",
    [
        ({"electric_objective": True, "two_tower_generator": False}, "two_tower_generator"),
        ({"electric_objective": True, "uniform_generator": True}, "uniform_generator"),
        ({"electric_objective": True, "untied_generator": False}, "untied_generator"),
        ({"two_tower_generator": True, "untied_generator": False}, "untied_generator"),
        ({"two_tower_generator": True, "electra_objective": False}, "two_tower_generator"),
        ({"electric_objective": "yes"}, "electric_objective"),
    ],
)
def test_combinations_the_original_cannot_build_are_config_errors(hparams, key):
    with pytest.raises(ConfigError, match=f"^{key}:"):
        pretraining_config(hparams=hparams)


def test_two_tower_generator_with_the_electra_objective():
    # A two-tower generator without Electric is the original's ELECTRA ablation: cloze
    # generator, ELECTRA's labels (a correct sample is real) and no log q in the logits.
    config = tiny_config(two_tower_generator=True)
    assert not config.electric_objective
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    out = run(model, tiny_batch())
    assert "log_q" not in out and "cloze_loss" in out
    changed = out["fake_input_ids"] != tiny_batch()["input_ids"]
    np.testing.assert_array_equal(out["disc_labels"], changed)
    np.testing.assert_allclose(out["loss"], out["cloze_loss"] + 50.0 * out["disc_loss"], rtol=1e-6)


# ------------------------------------------------------------------------------ training
def test_tiny_electric_training_runs_and_learns():
    overrides = dict(
        tiny_config().model_hparam_overrides,
        num_hidden_layers=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = ElectraPretrainer(electric_config(model_hparam_overrides=overrides), **SPECIAL_IDS)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    step = tf.function(model.train_step)
    batch = {k: tf.constant(v) for k, v in tiny_batch().items()}
    logs = []
    for _ in range(15):
        values = step(batch)
        logs.append({name: float(value) for name, value in values.items()})
        for metric in model.metrics:
            metric.reset_state()
    assert {"cloze_loss", "disc_loss", "disc_auc", "masked_lm_accuracy"} <= set(logs[0])
    assert all(np.isfinite(v) for log in logs for v in log.values())
    assert int(model.optimizer.iterations) == 15
    # The same batch again and again: the cloze loss (no randomness in it) falls steadily and
    # the total loss falls on average despite the fresh masking each step.
    cloze = [log["cloze_loss"] for log in logs]
    assert all(b < a for a, b in zip(cloze, cloze[1:], strict=False)), cloze
    assert cloze[-1] < 0.95 * cloze[0], cloze
    loss = [log["loss"] for log in logs]
    assert np.mean(loss[-3:]) < 0.8 * np.mean(loss[:3]), loss


@pytest.mark.slow
def test_train_step_under_mixed_precision_and_xla():
    # float16 compute with loss scaling (the causal bias and the cloze softmax in float16 /
    # float32), and the float32 step compiled by XLA.
    model = ElectraPretrainer(electric_config(precision="mixed_float16"), **SPECIAL_IDS)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    assert isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)
    logs = model.train_step(tiny_batch())
    assert np.isfinite(float(logs["loss"])) and np.isfinite(float(logs["cloze_loss"]))
    model = ElectraPretrainer(electric_config(), **SPECIAL_IDS)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    step = tf.function(model.train_step, jit_compile=True)
    batch = {k: tf.constant(v) for k, v in tiny_batch().items()}
    first, second = float(step(batch)["loss"]), float(step(batch)["loss"])
    assert np.isfinite(first) and np.isfinite(second) and first != second


# ------------------------------------------------------------------------------ checkpoints
def electric_original_shapes(vocab=50, emb=128, hidden=256, gen_hidden=64):
    """An original Electric checkpoint's variables, written out from run_pretraining.py: the
    ELECTRA layout's `generator/` encoder as `generator_ltr/` and `generator_rtl/` (tied
    embeddings: each its own embeddings_project) and `cloze_predictions/` (get_token_logits
    on the 2 x Hg concatenation) instead of `generator_predictions/`."""
    base = original_shapes(
        vocab=vocab, emb=emb, hidden=hidden, layers=1, gen_hidden=gen_hidden, gen_layers=1
    )
    shapes = {}
    for name, shape in base.items():
        if name.startswith("generator/"):
            shapes[name.replace("generator/", "generator_ltr/", 1)] = shape
            shapes[name.replace("generator/", "generator_rtl/", 1)] = shape
        elif not name.startswith("generator_predictions/"):
            shapes[name] = shape
    shapes["cloze_predictions/dense/kernel"] = [2 * gen_hidden, emb]
    shapes["cloze_predictions/dense/bias"] = [emb]
    shapes["cloze_predictions/LayerNorm/gamma"] = [emb]
    shapes["cloze_predictions/LayerNorm/beta"] = [emb]
    shapes["cloze_predictions/output_bias"] = [vocab]
    return shapes


def test_original_electric_checkpoint_imports(tmp_path):
    shapes = electric_original_shapes()
    assert "generator_rtl/embeddings_project/kernel" in shapes  # E 128 != Hg 64
    values = write_tf1_checkpoint(str(tmp_path), shapes, step=5, adam_slots=True)
    source = checkpoints.read_weights(str(tmp_path))
    assert source.fmt == "original" and source.global_step == 5 and source.unused == []
    assert sorted(source.weights) == sorted(shapes) and source.has_generator
    config = source.config
    assert config.electric_objective and config.two_tower_generator
    assert not config.untied_generator_embeddings
    gen = config.generator_config()
    assert (gen.hidden_size, gen.num_hidden_layers, gen.embedding_width) == (64, 1, 128)
    # The pretrainer of that config has exactly the original's names and shapes.
    model = checkpoints.build_pretrainer(config)
    names = model.variable_map()
    assert {n: v.shape.as_list() for n, v in names.items()} == shapes
    result = checkpoints.load_weights(model, str(tmp_path))
    assert sorted(result.loaded) == sorted(shapes) and result.unused == []
    for name, var in names.items():
        np.testing.assert_array_equal(var.numpy(), values[name], err_msg=name)


def test_electric_names_round_trip_through_every_format(tmp_path):
    config = electric_config(untied_generator_embeddings=True)
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    ref.perturb(model.variable_map().values())
    expected = numpy_weights(model)
    # Untied: each tower has its own Hg-wide tables, no projection; the head reads ltr's.
    gen = config.generator_config()
    for tower in ("generator_ltr", "generator_rtl"):
        assert expected[f"{tower}/embeddings/word_embeddings"].shape == (VOCAB, gen.hidden_size)
        assert f"{tower}/embeddings_project/kernel" not in expected
    assert not any(n.startswith(("generator/", "generator_predictions/")) for n in expected)

    original = tmp_path / "original"
    checkpoints.save_weights(model, str(original), "original", global_step=3)
    reader = tf.train.load_checkpoint(str(original))
    stored = set(reader.get_variable_to_shape_map()) - {"global_step"}
    assert stored == set(expected)
    inferred = checkpoints.read_config(str(original))
    assert inferred.electric_objective and inferred.untied_generator_embeddings
    inferred_gen = inferred.generator_config()
    assert (inferred_gen.hidden_size, inferred_gen.num_hidden_layers) == (16, 2)
    assert inferred_gen.embedding_width == 16

    # original -> native (a whole pretrainer) -> back into a fresh model.
    native = tmp_path / "native"
    assert convert.main(
        ["--from", "original", "--to", "native", "--input", str(original),
         "--output", str(native)]
    ) == 0  # fmt: skip
    fresh = ElectraPretrainer(
        electric_config(untied_generator_embeddings=True, seed=9), **SPECIAL_IDS
    )
    checkpoints.load_weights(fresh, str(native))
    for name, value in numpy_weights(fresh).items():
        np.testing.assert_array_equal(value, expected[name], err_msg=name)

    # HF has no two-tower generator: an HF export is the discriminator folder alone.
    hf_dir = tmp_path / "hf"
    assert convert.main(
        ["--from", "original", "--to", "hf", "--input", str(original), "--output", str(hf_dir)]
    ) == 0  # fmt: skip
    assert sorted(os.listdir(hf_dir)) == ["discriminator"]
    from_hf = checkpoints.read_weights(str(hf_dir))
    assert set(from_hf.weights) == {
        n for n in expected if n.startswith(("electra/", "discriminator_predictions/"))
    }
    for name, value in from_hf.weights.items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-6, err_msg=name)

    # --discriminator-only leaves the two towers and the cloze head out.
    disc_only = tmp_path / "disc"
    assert convert.main(
        ["--from", "original", "--to", "original", "--input", str(original),
         "--output", str(disc_only), "--discriminator-only"]
    ) == 0  # fmt: skip
    kept = set(tf.train.load_checkpoint(str(disc_only)).get_variable_to_shape_map())
    assert kept - {"global_step"} == {
        n for n in expected if n.startswith(("electra/", "discriminator_predictions/"))
    }


# ------------------------------------------------------------------------------ scoring
def test_pseudo_log_likelihoods_on_hand_made_energies():
    energies = np.array([[0.5, -1.0, 2.0, 0.25], [3.0, 1.5, -0.5, 9.0]], np.float32)
    scored = np.array([[0, 1, 1, 0], [0, 1, 0, 0]], bool)
    out = {k: v.numpy() for k, v in pseudo_log_likelihoods(energies, scored).items()}
    np.testing.assert_array_equal(out["token_scores"], [[0, 1.0, -2.0, 0], [0, -1.5, 0, 0]])
    np.testing.assert_array_equal(out["sentence_scores"], [-1.0, -1.5])
    np.testing.assert_array_equal(out["num_scored"], [2, 1])


def test_score_text_is_minus_the_energy_of_each_token(tmp_path):
    # Vocabulary: [PAD] [CLS] [SEP] [MASK] [UNK], then wN at id N (the fixtures' special ids).
    words = [f"w{i}" for i in range(5, VOCAB)]
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"] + words) + "\n"
    )
    tokenizer = FullTokenizer(str(tmp_path / "vocab.txt"))
    config = electric_config()
    model = ElectraPretrainer(config, **SPECIAL_IDS)
    ref.perturb(model.variable_map().values())
    w = numpy_weights(model)
    texts = ["w5 w6 w7", "w10 w11 w12 w13 w14 w15 w16", "w20", ""]
    scores = score_text(model, tokenizer, texts, max_seq_length=16, batch_size=3)
    for text, result in zip(texts, scores, strict=True):
        ids = np.array([[CLS, *[int(word[1:]) for word in text.split()], SEP]])
        disc = ref.encoder(
            w, ids, np.ones_like(ids), np.zeros_like(ids),
            **ref.structure(config.discriminator_config()),
        )  # fmt: skip
        expected = -ref.discriminator_logits(w, disc)[0, 1:-1]  # -E at the words only
        assert result.text == text and result.tokens == text.split()
        np.testing.assert_allclose(result.token_scores, expected, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(result.score, expected.sum(), atol=1e-5, rtol=1e-5)
        assert not result.truncated
    # One pass over a padded batch gives each text's own scores.
    for text, batched in zip(texts, scores, strict=True):
        (alone,) = score_text(model, tokenizer, [text])
        np.testing.assert_allclose(alone.token_scores, batched.token_scores, atol=1e-5)
    (cut,) = score_text(model, tokenizer, [texts[1]], max_seq_length=5)
    assert cut.truncated and cut.tokens == ["w10", "w11", "w12"]
    # The discriminator alone, loaded from the Electric model, scores the same.
    discriminator = ElectraDiscriminator(config.discriminator_config())
    discriminator(dummy_inputs())
    for name, var in discriminator.variable_map().items():
        var.assign(model.variable_map()[name])
    for result, again in zip(scores, score_text(discriminator, tokenizer, texts), strict=True):
        np.testing.assert_allclose(again.token_scores, result.token_scores, atol=1e-6)
