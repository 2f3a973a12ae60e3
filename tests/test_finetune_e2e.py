"""Tiny end-to-end fine-tuning through the CLI (random init), checkpoint init, and the
TFRecord cache keyed on the featurization settings."""

import json
import os

import numpy as np
import pytest
from helpers_pretrain_cli import count_format_reads

from electra_tf.cli import finetune
from electra_tf.finetuning.config import finetuning_config

WORDS = "the a good bad movie film great awful fun boring plot is cat dog .".split()
TINY = {
    "model_hparam_overrides": {
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "intermediate_size": 64,
    },
    "embedding_size": 8,
    "vocab_size": 5 + len(WORDS),
    "max_seq_length": 12,
    "train_batch_size": 8,
    "eval_batch_size": 8,
    "learning_rate": 3e-3,
    "num_train_epochs": 1,
    "log_every_steps": 2,
}


@pytest.fixture
def data_dir(tmp_path):
    return write_sst_data(tmp_path)


def write_sst_data(tmp_path):
    """A tiny vocabulary and SST-like train (20), dev (11) and test (2) files."""
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])
    )
    rng = np.random.default_rng(0)
    sst = tmp_path / "finetuning_data" / "sst"
    sst.mkdir(parents=True)

    def rows(n):
        lines = ["sentence\tlabel"]
        for _ in range(n):
            y = int(rng.integers(0, 2))
            word = rng.choice(["good", "great", "fun"] if y else ["bad", "awful", "boring"])
            lines.append(f"the {word} movie .\t{y}")
        return "\n".join(lines) + "\n"

    (sst / "train.tsv").write_text(rows(20))
    (sst / "dev.tsv").write_text(rows(11))
    (sst / "test.tsv").write_text("index\tsentence\n0\tthe good film\n1\tthe bad plot\n")
    return tmp_path


def run_cli(data_dir, hparams, tasks="sst"):
    return finetune.main(
        [
            "--data-dir",
            str(data_dir),
            "--model-name",
            "tiny",
            "--tasks",
            tasks,
            "--hparams",
            json.dumps(hparams),
        ]
    )


def test_cli_finetunes_and_writes_results(data_dir, capsys):
    hparams = {**TINY, "init_checkpoint": None, "write_test_outputs": True, "num_trials": 2}
    assert run_cli(data_dir, hparams) == 0
    out = capsys.readouterr().out
    assert "steps/s" in out and "ETA" in out
    model_dir = data_dir / "models" / "tiny"
    results = json.loads((model_dir / "results" / "sst_results.json").read_text())
    assert len(results["trials"]) == 2
    accuracies = [t["sst"]["accuracy"] for t in results["trials"]]
    # 11 dev examples, each scored once: accuracy is a multiple of 100/11.
    assert all(abs(a * 11 / 100 - round(a * 11 / 100)) < 1e-6 for a in accuracies)
    assert results["median"]["sst"]["accuracy"] == pytest.approx(float(np.median(accuracies)))
    text = (model_dir / "results" / "sst_results.txt").read_text()
    assert "trial 2 sst: accuracy:" in text and "median of 2 sst" in text
    for trial in (1, 2):
        trial_dir = model_dir / "finetuning_models" / f"sst_model_{trial}"
        assert (trial_dir / "checkpoint").exists()
        assert list((trial_dir / "train").glob("events.out.tfevents*"))  # TensorBoard scalars
    submission = (model_dir / "test_predictions" / "sst_test_1.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == 3
    assert all(line.split("\t")[1] in ("0", "1") for line in submission[1:])
    # The same command again keeps the finished trials (nothing is trained or replaced).
    stamps = [
        (model_dir / "finetuning_models" / f"sst_model_{t}" / "checkpoint").stat().st_mtime_ns
        for t in (1, 2)
    ]
    assert run_cli(data_dir, hparams) == 0
    out = capsys.readouterr().out
    assert out.count("was finished: kept") == 2 and "Training for" not in out
    assert stamps == [
        (model_dir / "finetuning_models" / f"sst_model_{t}" / "checkpoint").stat().st_mtime_ns
        for t in (1, 2)
    ]
    assert (
        json.loads((model_dir / "results" / "sst_results.json").read_text())["trials"]
        == (results["trials"])
    )
    # A folder this run did not write is still not replaced without `overwrite`.
    foreign = model_dir / "finetuning_models" / "sst_model_3"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert run_cli(data_dir, {**hparams, "num_trials": 3}) == 1
    assert "overwrite" in capsys.readouterr().err
    assert (foreign / "notes.txt").read_text() == "mine"


def test_cli_rejects_unknown_hparam(data_dir, capsys):
    assert run_cli(data_dir, {"learning_rat": 1e-4}) == 2
    assert "did you mean 'learning_rate'" in capsys.readouterr().err


def test_init_from_original_checkpoint(data_dir):
    from electra_tf.checkpoints import write_original_files
    from electra_tf.finetuning.registry import get_tasks, make_tokenizer
    from electra_tf.modeling import TransformerEncoder
    from electra_tf.runs.finetuning import ModelRunner

    config = finetuning_config("tiny", str(data_dir), {**TINY, "task_names": ["sst"]})
    encoder = TransformerEncoder(config.model_config(), name="electra")
    weights = {k: v.numpy() for k, v in encoder.variable_map("electra").items()}
    pretrained = data_dir / "models" / "tiny"
    pretrained.mkdir(parents=True)
    write_original_files(weights, str(pretrained), 7)
    tasks = get_tasks(config, make_tokenizer(config))
    runner = ModelRunner(config, tasks, str(data_dir / "run"))
    loaded = runner.model.variable_map()
    for name, value in weights.items():
        np.testing.assert_array_equal(loaded[name].numpy(), value, err_msg=name)
    assert "task_specific/sst/dense/kernel" in loaded


def _runner_over_original_checkpoint(data_dir, vocab_size):
    """A ModelRunner for sst over an original-format checkpoint with `vocab_size` rows."""
    from electra_tf.checkpoints import write_original_files
    from electra_tf.finetuning.registry import get_tasks, make_tokenizer
    from electra_tf.modeling import TransformerEncoder
    from electra_tf.runs.finetuning import ModelRunner

    small = {**TINY, "vocab_size": vocab_size, "task_names": ["sst"]}
    encoder = TransformerEncoder(
        finetuning_config("tiny", str(data_dir), small).model_config(), name="electra"
    )
    pretrained = data_dir / "models" / "tiny"
    pretrained.mkdir(parents=True)
    write_original_files(
        {k: v.numpy() for k, v in encoder.variable_map("electra").items()}, str(pretrained), 1
    )
    config = finetuning_config("tiny", str(data_dir), {**TINY, "task_names": ["sst"]})
    tasks = get_tasks(config, make_tokenizer(config))
    return ModelRunner(config, tasks, str(data_dir / "run"))


def test_vocabulary_larger_than_the_checkpoint_is_an_error(data_dir):
    # Pre-trained with 4 fewer ids than data_dir/vocab.txt has: a vocabulary mix-up.
    with pytest.raises(ValueError, match=r"vocab\.txt has 20 entries but .* has 16 embedding rows"):
        _runner_over_original_checkpoint(data_dir, TINY["vocab_size"] - 4)


def test_a_duplicated_vocabulary_line_is_refused_before_ids_shift(data_dir):
    # 20 distinct tokens on 21 lines: the original gave "the" its later id, 20, one past 20
    # embedding rows. The vocabulary is refused first, naming both lines.
    vocab = data_dir / "vocab.txt"
    lines = vocab.read_text().split("\n")
    first = lines.index("the") + 1
    vocab.write_text("\n".join([*lines[:-1], "the", lines[-1]]))
    with pytest.raises(
        ValueError, match=rf"vocab\.txt:{len(lines)}: the token 'the' repeats line {first}"
    ):
        _runner_over_original_checkpoint(data_dir, TINY["vocab_size"])


def test_a_checkpoint_pretrained_with_another_vocabulary_is_warned_about(data_dir, capsys):
    import dataclasses

    from electra_tf.checkpoints import build_pretrainer, write_native_files
    from electra_tf.config import PretrainingConfig
    from electra_tf.finetuning.registry import get_tasks, make_tokenizer
    from electra_tf.runs.finetuning import ModelRunner

    # Pre-trained with "good" and "bad" at each other's ids: the same size, other meanings.
    swapped = (data_dir / "vocab.txt").read_text().replace("good", "TMP")
    swapped = swapped.replace("bad", "good").replace("TMP", "bad")
    (data_dir / "pretraining_vocab.txt").write_text(swapped)
    overrides = {k: TINY[k] for k in ("model_hparam_overrides", "embedding_size", "vocab_size")}
    pretraining = dataclasses.replace(
        PretrainingConfig(),
        model_size="small",
        vocab_file=str(data_dir / "pretraining_vocab.txt"),
        max_seq_length=TINY["max_seq_length"],
        **overrides,
    ).resolve()
    pretrained = data_dir / "models" / "tiny"
    write_native_files(build_pretrainer(pretraining), str(pretrained), pretraining, 3)

    config = finetuning_config("tiny", str(data_dir), {**TINY, "task_names": ["sst"]})
    tasks = get_tasks(config, make_tokenizer(config))
    ModelRunner(config, tasks, str(data_dir / "run"))
    out = capsys.readouterr().out
    assert "Loaded" in out and "(native)" in out
    assert "pretraining_vocab.txt" in out and "2 of its 20 tokens have another id" in out

    # The vocabulary it was pre-trained with: no warning.
    matching = {
        **TINY,
        "task_names": ["sst"],
        "vocab_file": str(data_dir / "pretraining_vocab.txt"),
    }
    config = finetuning_config("tiny", str(data_dir), matching)
    ModelRunner(config, get_tasks(config, make_tokenizer(config)), str(data_dir / "run2"))
    assert "WARNING" not in capsys.readouterr().out


def test_tfrecord_cache_follows_max_seq_length(data_dir):
    from electra_tf.finetuning.preprocessing import Preprocessor
    from electra_tf.finetuning.registry import get_tasks, make_tokenizer

    def records(max_seq_length):
        config = finetuning_config(
            "tiny", str(data_dir), {**TINY, "task_names": ["sst"], "max_seq_length": max_seq_length}
        )
        pre = Preprocessor(config, get_tasks(config, make_tokenizer(config)))
        path, n = pre.serialize(pre.tasks, "dev", False)
        return pre, path, n

    pre_a, path_a, n_a = records(12)
    mtime = os.stat(path_a).st_mtime_ns
    pre_b, path_b, _ = records(16)
    assert path_a != path_b  # the original reused the 12-long records here
    assert next(iter(pre_b.dataset(path_b, False)))["input_ids"].shape == (8, 16)
    _, path_again, _ = records(12)
    assert path_again == path_a and os.stat(path_a).st_mtime_ns == mtime  # reused as is
    # 11 examples padded to a multiple of the batch size with task_id == n_tasks (1).
    assert n_a == 16
    task_ids = np.concatenate([b["task_id"].numpy() for b in pre_a.dataset(path_a, False)])
    assert list(task_ids) == [0] * 11 + [1] * 5


@pytest.mark.parametrize(
    "finetuning_overrides,expected", [({}, 0.1), ({"hidden_dropout_prob": 0.3}, 0.3)]
)
def test_dropout_comes_from_the_finetuning_config(data_dir, finetuning_overrides, expected):
    """A model pre-trained without dropout fine-tunes with the fine-tuning config's dropout;
    the sizes still come from the checkpoint."""
    from electra_tf.checkpoints import build_pretrainer, write_native_files
    from electra_tf.config import pretraining_config
    from electra_tf.runs.finetuning import resolve_encoder

    shape = dict(TINY["model_hparam_overrides"])
    no_dropout = {**shape, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    pre = pretraining_config(
        "tiny",
        str(data_dir),
        hparams={
            "model_hparam_overrides": no_dropout,
            "embedding_size": 8,
            "vocab_size": TINY["vocab_size"],
            "max_seq_length": 12,
        },
    )
    pretrained = data_dir / "models" / "tiny"
    pretrained.mkdir(parents=True)
    write_native_files(build_pretrainer(pre), str(pretrained), pre, 3)
    # The fine-tuning config asks for another shape: the checkpoint's wins for the sizes.
    other_shape = {"hidden_size": 32, "num_hidden_layers": 2, **finetuning_overrides}
    config = finetuning_config(
        "tiny",
        str(data_dir),
        {**TINY, "model_hparam_overrides": other_shape, "task_names": ["sst"]},
    )
    model_config, source = resolve_encoder(config)
    assert source is not None and source.fmt == "native"
    assert (model_config.hidden_size, model_config.num_hidden_layers) == (16, 1)
    assert model_config.hidden_dropout_prob == expected
    assert model_config.attention_probs_dropout_prob == 0.1


def test_a_rerun_with_the_same_seed_gives_the_same_model(data_dir):
    """Fine-tuning is reproducible: the same config and seed (dropout on, data shuffled) give
    the same dev score and the same weights, run after run in one process."""
    import tensorflow as tf

    hparams = {**TINY, "init_checkpoint": None, "num_trials": 1, "seed": 3}
    weights, scores = [], []
    for name in ("run_a", "run_b"):
        assert finetune.main(
            ["--data-dir", str(data_dir), "--model-name", name, "--tasks", "sst",
             "--hparams", json.dumps(hparams)]
        ) == 0  # fmt: skip
        model_dir = data_dir / "models" / name
        results = json.loads((model_dir / "results" / "sst_results.json").read_text())
        scores.append(results["trials"][0]["sst"])
        prefix = tf.train.latest_checkpoint(str(model_dir / "finetuning_models" / "sst_model_1"))
        reader = tf.train.load_checkpoint(prefix)
        names = sorted(n for n in reader.get_variable_to_shape_map() if "/.ATTRIBUTES/" in n)
        weights.append({n: reader.get_tensor(n) for n in names if "model/" in n})
    assert scores[0] == scores[1]
    assert weights[0].keys() == weights[1].keys() and len(weights[0]) > 4
    for name, value in weights[0].items():
        np.testing.assert_array_equal(weights[1][name], value, err_msg=name)
    # And a different seed gives another model (the check above can fail).
    hparams["seed"] = 4
    assert run_cli(data_dir, {**hparams}) == 0
    other = tf.train.latest_checkpoint(
        str(data_dir / "models" / "tiny" / "finetuning_models" / "sst_model_1")
    )
    reader = tf.train.load_checkpoint(other)
    assert any(not np.array_equal(reader.get_tensor(n), v) for n, v in weights[0].items())


def _pretrained_folder(data_dir, fmt):
    """A tiny pre-trained model saved in `fmt`, with its vocab.txt: a `--pretrained` folder."""
    import shutil

    from electra_tf.checkpoints import build_pretrainer, save_weights
    from electra_tf.config import PretrainingConfig

    overrides = {k: TINY[k] for k in ("model_hparam_overrides", "embedding_size", "vocab_size")}
    config = PretrainingConfig(
        model_size="small", max_seq_length=TINY["max_seq_length"], **overrides
    ).resolve()
    folder = data_dir / f"shipped_{fmt}"
    save_weights(build_pretrainer(config), str(folder), fmt, config, global_step=5)
    shutil.copy(data_dir / "vocab.txt", folder / "vocab.txt")
    return str(folder)


def _count_calls(monkeypatch, counts, key, module, *names):
    """Counts under `key` every call of `module.<name>` (each name patched where it is used)."""
    for name in names:
        original = getattr(module, name)

        def counted(*args, _original=original, **kwargs):
            counts[key] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)


def count_checkpoint_reads(monkeypatch):
    """{"detect", "config", "tensors"}: how often a run detects a checkpoint's format, reads
    its config and reads its tensors (through the format registry, every reader's way in)."""
    from electra_tf.checkpoints import formats

    counts = {"detect": 0, "config": 0, "tensors": 0}
    _count_calls(monkeypatch, counts, "detect", formats, "detect_format")
    count_format_reads(monkeypatch, counts)
    return counts


@pytest.mark.parametrize("fmt", ["native", "original", "hf"])
def test_pretrained_is_read_once_per_run(data_dir, monkeypatch, capsys, fmt):
    """`--pretrained DIR`: the format detected once, the config read once, the tensors read
    once and the model size checked once, for the config's size rules and for both trials."""
    from electra_tf.finetuning import config as finetuning_config_module
    from electra_tf.runs import finetuning_plan

    folder = _pretrained_folder(data_dir, fmt)
    counts = count_checkpoint_reads(monkeypatch)
    counts["size"] = 0  # the model size checked against the checkpoint's encoder: once
    _count_calls(monkeypatch, counts, "size", finetuning_config_module, "size_of_encoder")
    _count_calls(monkeypatch, counts, "size", finetuning_plan, "size_of_encoder")
    hparams = {**TINY, "num_trials": 2}
    argv = ["--data-dir", str(data_dir), "--model-name", "tiny", "--tasks", "sst"]
    assert finetune.main([*argv, "--hparams", json.dumps(hparams), "--pretrained", folder]) == 0
    assert counts == {"detect": 1, "config": 1, "tensors": 1, "size": 1}
    out = capsys.readouterr().out
    assert out.count(f"({fmt})") == 2 and "Loaded" in out  # both trials start from it


def test_read_pretrained_holds_what_it_read(data_dir, monkeypatch):
    from electra_tf.checkpoints import read_pretrained

    folder = _pretrained_folder(data_dir, "hf")
    counts = count_checkpoint_reads(monkeypatch)
    pretrained = read_pretrained(folder)
    assert (pretrained.path, pretrained.fmt) == (folder, "hf")
    assert pretrained.vocab_file == os.path.join(folder, "vocab.txt")
    assert pretrained.config.discriminator_config().hidden_size == 16
    assert counts == {"detect": 1, "config": 1, "tensors": 0}  # tensors wait for weights()
    source = pretrained.weights()
    assert pretrained.weights() is source and source.fmt == "hf"
    assert source.config == pretrained.config
    assert counts == {"detect": 1, "config": 1, "tensors": 1}
    # Reading the same folder the old way gives the same config and weights.
    from electra_tf.checkpoints import read_weights

    again = read_weights(folder)
    assert again.config == source.config and again.weights.keys() == source.weights.keys()
