import json

import pytest

from electra_tf import config as cfg


def test_defaults_equal_original():
    c = cfg.pretraining_config()
    assert (c.learning_rate, c.weight_decay_rate, c.num_warmup_steps) == (5e-4, 0.01, 10000)
    assert (c.gen_weight, c.disc_weight, c.mask_prob, c.temperature) == (1.0, 50.0, 0.15, 1.0)
    assert c.max_predictions_per_seq == 19  # int((0.15 + 0.005) * 128)


@pytest.mark.parametrize(
    "preset, n_pred, gen_hidden, disc_hidden, layers",
    [
        ("small", 19, 64, 256, 12),
        ("small++", 79, 256, 256, 12),
        ("base", 79, 256, 768, 12),
        ("large", 130, 256, 1024, 24),
        ("tiny", 19, 36, 144, 3),
    ],
)
def test_presets_and_derived_values(preset, n_pred, gen_hidden, disc_hidden, layers):
    c = cfg.pretraining_config(preset=preset)
    assert c.max_predictions_per_seq == n_pred
    d, g = c.discriminator_config(), c.generator_config()
    assert (d.hidden_size, d.num_hidden_layers, g.hidden_size, g.num_hidden_layers) == (
        disc_hidden,
        layers,
        gen_hidden,
        layers,
    )
    assert g.num_attention_heads == max(1, gen_hidden // 64)
    assert g.intermediate_size == 4 * gen_hidden


def test_derived_values_follow_overrides():
    # The original computed max_predictions_per_seq before its size defaults; we do it last.
    c = cfg.pretraining_config(hparams={"max_seq_length": 512, "mask_prob": 0.25})
    assert c.max_predictions_per_seq == 130


def test_unknown_key_names_closest():
    with pytest.raises(cfg.ConfigError, match="did you mean 'learning_rate'"):
        cfg.pretraining_config(hparams={"learning_rat": 1e-3})


def test_hparams_json_file_and_string(tmp_path):
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"train_batch_size": 7}))
    assert cfg.pretraining_config(hparams=str(path)).train_batch_size == 7
    assert cfg.pretraining_config(hparams='{"train_batch_size": 9}').train_batch_size == 9
    with pytest.raises(cfg.ConfigError, match="invalid JSON"):
        cfg.pretraining_config(hparams="{bad")


def test_debug_defaults_lose_to_explicit_values():
    c = cfg.pretraining_config(hparams={"debug": True, "train_batch_size": 4})
    assert c.train_batch_size == 4 and c.num_train_steps == 20
    assert c.discriminator_config().hidden_size == 144
    # configure_pretraining.py's debug block, word for word; then the user's values win.
    c = cfg.pretraining_config(hparams={"debug": True})
    assert (c.train_batch_size, c.num_train_steps, c.iterations_per_loop) == (8, 20, 1)
    assert (c.eval_batch_size, c.num_eval_steps) == (4, 2)
    c = cfg.pretraining_config(hparams={"debug": True, "eval_batch_size": 16, "num_eval_steps": 5})
    assert (c.eval_batch_size, c.num_eval_steps) == (16, 5)


def test_save_config_roundtrip(tmp_path):
    c = cfg.pretraining_config(preset="small")
    cfg.save_config(c, str(tmp_path / "config.json"))
    loaded = json.loads((tmp_path / "config.json").read_text())
    assert loaded["embedding_size"] == 128


def test_init_checkpoint_formats_are_the_readable_ones():
    from electra_tf import checkpoints
    from electra_tf.finetuning.config import finetuning_config

    # The configs accept exactly the formats the checkpoint readers know, plus auto.
    assert set(cfg.INIT_CHECKPOINT_FORMATS) == {"auto", *checkpoints.FORMATS}
    for fmt in ("modelgarden", "kerashub"):
        assert cfg.pretraining_config(hparams={"init_checkpoint_format": fmt})
        assert finetuning_config("m", "d", {"init_checkpoint_format": fmt}, tasks="sst")
    for build in (
        lambda h: cfg.pretraining_config(hparams=h),
        lambda h: finetuning_config("m", "d", h, tasks="sst"),
    ):
        with pytest.raises(cfg.ConfigError, match="init_checkpoint_format: 'tf2'"):
            build({"init_checkpoint_format": "tf2"})
