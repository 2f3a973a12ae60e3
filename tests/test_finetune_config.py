"""FinetuningConfig: the original's defaults and per-task / per-size rules, overrides, paths."""

import pytest

from electra_tf.config import ConfigError
from electra_tf.finetuning.config import finetuning_config


def test_defaults_equal_the_original():
    c = finetuning_config("m", "d", {"task_names": ["mnli"]})
    assert (c.learning_rate, c.layerwise_lr_decay, c.weight_decay_rate) == (1e-4, 0.8, 0.01)
    assert (c.warmup_proportion, c.num_train_epochs, c.max_seq_length) == (0.1, 3.0, 128)
    assert (c.train_batch_size, c.eval_batch_size, c.predict_batch_size) == (32, 32, 32)
    assert c.embedding_size == 128  # model_size "small"
    assert (c.max_query_length, c.doc_stride, c.n_best_size, c.max_answer_length) == (
        64,
        128,
        20,
        30,
    )
    assert (c.beam_size, c.answerable_weight, c.qa_na_threshold) == (20, 0.5, -2.75)
    assert c.double_unordered and c.joint_prediction and c.answerable_classifier
    assert (c.num_trials, c.fix_layerwise_top_layer) == (1, False)
    # Ours, off by default: the original reads [CLS], has no Adam bias correction, float32.
    assert (c.classifier_pooling, c.adam_bias_correction) == ("cls", False)
    assert c.precision == "float32"


@pytest.mark.parametrize(
    "tasks, epochs, length",
    [
        (["rte"], 10.0, 128),
        (["sts"], 10.0, 128),
        (["squad"], 2.0, 512),
        (["newsqa"], 2.0, 512),
        (["chunk"], 3.0, 256),
        (["cola"], 3.0, 128),
        (["rte", "sts"], 3.0, 128),  # rules apply to single-task runs only
    ],
)
def test_per_task_rules(tasks, epochs, length):
    c = finetuning_config("m", "d", {"task_names": tasks})
    assert (c.num_train_epochs, c.max_seq_length) == (epochs, length)


def test_per_size_rules_and_user_values_win():
    large = finetuning_config("m", "d", {"model_size": "large"}, tasks="rte")
    assert (large.learning_rate, large.layerwise_lr_decay, large.embedding_size) == (
        5e-5,
        0.9,
        None,
    )
    assert large.model_config().hidden_size == 1024
    c = finetuning_config(
        "m", "d", {"model_size": "large", "learning_rate": 3e-5, "num_train_epochs": 4}, "rte"
    )
    assert (c.learning_rate, c.num_train_epochs) == (3e-5, 4)
    small = finetuning_config("m", "d", {}, tasks="sst")
    mc = small.model_config()
    assert (mc.hidden_size, mc.embedding_width, mc.num_hidden_layers) == (256, 128, 12)


def test_debug_mode_as_the_original():
    c = finetuning_config("m", "d", {"debug": True, "num_train_epochs": 1}, tasks="sst")
    assert c.resolved_init_checkpoint() is None and not c.use_tfrecords_if_existing
    assert c.num_train_epochs == 1  # explicit values beat the debug settings
    mc = c.model_config()
    assert (mc.hidden_size, mc.num_hidden_layers, mc.num_attention_heads) == (144, 3, 4)


def test_tasks_hparams_and_errors():
    c = finetuning_config("m", "d", '{"task_names": ["rte", "mrpc"]}')
    assert c.task_names == ("rte", "mrpc") and c.tasks_str == "rte,mrpc"
    assert finetuning_config("m", "d", None, tasks="rte,mrpc").task_names == ("rte", "mrpc")
    with pytest.raises(ConfigError, match="did you mean 'layerwise_lr_decay'"):
        finetuning_config("m", "d", {"layerwise_lr_decy": 0.9}, tasks="rte")
    with pytest.raises(ConfigError, match="unknown task 'wnli'"):
        finetuning_config("m", "d", None, tasks="wnli")
    with pytest.raises(ConfigError, match="classifier_pooling: 'max'"):
        finetuning_config("m", "d", {"classifier_pooling": "max"}, tasks="sst")
    mean = finetuning_config("m", "d", {"classifier_pooling": "mean"}, "sst")
    assert mean.classifier_pooling == "mean"
    valid = "auto/float32/mixed_bfloat16/mixed_float16"
    with pytest.raises(ConfigError, match=f"^precision: 'bfloat16' is not {valid}$"):
        finetuning_config("m", "d", {"precision": "bfloat16"}, tasks="sst")
    assert finetuning_config("m", "d", {"precision": "auto"}, "sst").precision == "auto"


def test_paths_as_the_original(tmp_path):
    c = finetuning_config("electra_small", str(tmp_path), None, tasks="rte,sst")
    base = tmp_path / "models" / "electra_small"
    assert c.raw_data_dir("rte") == str(tmp_path / "finetuning_data" / "rte")
    assert c.resolved_init_checkpoint() == c.resolved_model_dir() == str(base)
    with pytest.warns(DeprecationWarning, match=r"use resolved_model_dir\(\)"):
        assert c.pretrained_model_dir() == str(base)  # the old name, for one version
    assert c.model_dir(2) == str(base / "finetuning_models" / "rte,sst_model_2")
    assert c.results_path("txt") == str(base / "results" / "rte,sst_results.txt")
    assert c.resolved_vocab_file() == str(tmp_path / "vocab.txt")
    (base).mkdir(parents=True)
    (base / "vocab.txt").write_text("x")
    assert c.resolved_vocab_file() == str(base / "vocab.txt")  # the model's own vocab first
    assert (
        finetuning_config("m", "d", {"init_checkpoint": None}, "rte").resolved_init_checkpoint()
        is None
    )


def test_featurization_key_tracks_record_shaping_settings(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    a = finetuning_config("m", str(tmp_path), None, tasks="rte").featurization_key()
    b = finetuning_config(
        "m", str(tmp_path), {"max_seq_length": 64}, tasks="rte"
    ).featurization_key()
    assert a != b
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    assert finetuning_config("m", str(tmp_path), None, tasks="rte").featurization_key() != a


def _hf_config_only(folder, hidden, layers):
    """An HF discriminator folder with config.json alone: the size rules read nothing else."""
    import json

    folder.mkdir(parents=True)
    values = {"model_type": "electra", "architectures": ["ElectraForPreTraining"]}
    values.update(hidden_size=hidden, num_hidden_layers=layers, embedding_size=hidden)
    values.update(num_attention_heads=hidden // 64, intermediate_size=4 * hidden)
    (folder / "config.json").write_text(json.dumps(values))
    return str(folder)


@pytest.mark.parametrize(
    "hidden, layers, size, lr, decay",
    [(1024, 24, "large", 5e-5, 0.9), (768, 12, "base", 1e-4, 0.8), (256, 12, "small", 1e-4, 0.8)],
)
def test_size_rules_follow_the_checkpoint(tmp_path, hidden, layers, size, lr, decay):
    from electra_tf.runs.finetuning import prepare_finetuning

    path = _hf_config_only(tmp_path / "disc", hidden, layers)
    plan = prepare_finetuning("m", "d", {"init_checkpoint": path}, "sst")
    c = plan.config
    assert (c.model_size, c.learning_rate, c.layerwise_lr_decay) == (size, lr, decay)
    # The encoder is the checkpoint's; the plan still unpacks as (config, pretrained).
    assert (plan.model_config.hidden_size, plan.model_config.num_hidden_layers) == (hidden, layers)
    config, pretrained = plan
    assert config is plan.config and pretrained is plan.pretrained and pretrained.fmt == "hf"
    # The user's explicit values still win over the rules (the original's second update).
    c = prepare_finetuning("m", "d", {"init_checkpoint": path, "learning_rate": 3e-4}, "sst").config
    assert c.learning_rate == 3e-4


def test_a_model_size_contradicting_the_checkpoint_is_refused(tmp_path):
    from electra_tf.finetuning.config import size_of_encoder
    from electra_tf.runs.finetuning import check_model_size, prepare_finetuning

    path = _hf_config_only(tmp_path / "disc", 1024, 24)
    hparams = {"init_checkpoint": path, "model_size": "small"}
    with pytest.raises(ConfigError, match="holds a large encoder"):
        prepare_finetuning("m", "d", hparams, "sst")
    # Built without the checkpoint's size (the API's plain call), the run refuses to start.
    plain = finetuning_config("m", "d", {"init_checkpoint": path}, "sst")
    large = finetuning_config("m", "d", {"model_size": "large"}, "sst").model_config()
    assert size_of_encoder(large) == "large"
    with pytest.raises(ConfigError, match='"model_size": "large"'):
        check_model_size(plain, large)
    check_model_size(plain, plain.model_config())  # a small encoder: no complaint


@pytest.mark.parametrize(
    "hparams",
    [
        {"model_size": "small"},
        {"model_size": "large", "max_seq_length": 1024},
        {"model_size": "base", "model_hparam_overrides": {"hidden_size": 96}, "vocab_size": 99},
        {"debug": True, "embedding_size": 48},
    ],
)
def test_the_encoder_is_sized_without_a_pretraining_config(monkeypatch, hparams):
    """The size table's encoder, as pre-training's `discriminator_config()` sizes it, built
    without a throwaway PretrainingConfig."""
    from electra_tf.config import PretrainingConfig
    from electra_tf.finetuning.config import DEBUG_MODEL

    c = finetuning_config("m", "d", hparams, "rte")
    overrides = {**(DEBUG_MODEL if c.debug else {}), **c.model_hparam_overrides}
    expected = PretrainingConfig(
        model_size=c.model_size,
        model_hparam_overrides=overrides,
        embedding_size=c.embedding_size,
        vocab_size=c.vocab_size,
        max_seq_length=c.max_seq_length,
    ).discriminator_config()

    def refuse(*args, **kwargs):
        raise AssertionError("fine-tuning built a PretrainingConfig to size its encoder")

    monkeypatch.setattr(PretrainingConfig, "__init__", refuse)
    assert c.model_config() == expected


def test_the_cpu_layout_resolves_as_pre_trainings():
    """`parallel_micro_batches` and the thread pools: "auto" gives two micro-batches side by
    side on one intra-op and two inter-op threads on a 2-core CPU (pre-training's rule), one
    part and TensorFlow's pools elsewhere; a part count must divide the batch."""
    from electra_tf.cli.finetune import layout_threads
    from electra_tf.runtime.device_defaults import PORTABLE, Machine

    config = finetuning_config("m", "d", {}, tasks="sst")
    two_cores = config.resolve(Machine("cpu", None, 2, False))
    assert (two_cores.parallel_micro_batches, two_cores.intra_op_threads) == (2, 1)
    assert two_cores.inter_op_threads == 2 and two_cores.resolve() == two_cores  # idempotent
    assert config.resolve(Machine("cpu", None, 8, False)).intra_op_threads == 0
    assert config.resolve(Machine("gpu", (8, 0), 2, False)).parallel_micro_batches == 1
    assert config.resolve(PORTABLE).parallel_micro_batches == 1
    odd = finetuning_config("m", "d", {"train_batch_size": 7}, tasks="sst")
    assert odd.resolve(Machine("cpu", None, 2, False)).parallel_micro_batches == 1
    with pytest.raises(ConfigError, match="parallel_micro_batches: 3 must be"):
        finetuning_config("m", "d", {"parallel_micro_batches": 3}, tasks="sst")
    with pytest.raises(ConfigError, match="inter_op_threads: -1 must be"):
        finetuning_config("m", "d", {"inter_op_threads": -1}, tasks="sst")
    # The CLI sets the pools from --hparams before TensorFlow starts; bad ones are left to the run.
    assert layout_threads('{"intra_op_threads": 3, "inter_op_threads": 4}') == (3, 4)
    assert layout_threads('{"parallel_micro_batches": 3}') == (0, 0)
