"""The second adversarial pass over inputs: hyperparameters that cannot train, data built
with another vocabulary, vocabularies that cannot work, unreadable files, malformed
safetensors headers, and links planted where the project writes. Each case records its row
for `make reliability` (tests/helpers_reliability.py) before it asserts."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from helpers_pretrain_cli import ROOT, hparams, run_pretrain, write_corpus
from helpers_reliability import last_line, record, wait_for

from electra_tf.checkpoints.safetensors_io import SafetensorsError, load_file
from electra_tf.cli import learn_vocab, pretrain
from electra_tf.config import ConfigError, parse_hparams, pretraining_config
from electra_tf.data import corpus
from electra_tf.data.pretraining_input import InputDataError, check_input_files
from electra_tf.data.tokenization import VocabError, load_vocab
from electra_tf.finetuning.config import finetuning_config
from electra_tf.runtime.atomic_io import write_text
from electra_tf.runtime.run_lock import LockError, RunLock


# ------------------------------------------------------------------ hyperparameters
@pytest.mark.parametrize("text", ['{"learning_rate": Infinity}', '{"learning_rate": 1e999}'])
def test_an_infinite_learning_rate_is_refused_before_training(tmp_path, capsys, text):
    data = write_corpus(tmp_path / "data", num_records=8)
    code = pretrain.main(
        ["--data-dir", str(data), "--model-name", "m", "--preset", "tiny", "--hparams", text]
    )
    err = capsys.readouterr().err
    record("3", f"pretrain {text}", "exit 2: learning_rate: inf is not finite", last_line(err))
    assert code == 2 and "learning_rate: inf is not a finite number" in err
    assert not (data / "models" / "m").exists() or not any(
        name.startswith("ckpt-") for name in os.listdir(data / "models" / "m")
    )


@pytest.mark.parametrize("field", ["learning_rate", "weight_decay_rate", "gen_weight"])
def test_every_float_hyperparameter_is_checked_finite(field):
    for value in ("Infinity", "-Infinity", "NaN"):
        with pytest.raises(ConfigError, match=f"{field}: .* is not a finite number"):
            pretraining_config("tiny", hparams=parse_hparams(f'{{"{field}": {value}}}'))
    with pytest.raises(ConfigError, match="learning_rate: inf is not a finite number"):
        finetuning_config(hparams={"learning_rate": float("inf")}, tasks="sst")
    with pytest.raises(ConfigError, match="hidden_dropout_prob: nan is not a finite"):
        pretraining_config(
            "tiny", hparams={"model_hparam_overrides": {"hidden_dropout_prob": np.nan}}
        )


def test_a_hidden_size_the_heads_cannot_split_is_named():
    overrides = {"hidden_size": 100, "num_attention_heads": 3}
    with pytest.raises(ConfigError) as caught:
        pretraining_config("tiny", hparams={"model_hparam_overrides": overrides})
    record("7", "hidden_size 100, 3 heads", "ConfigError naming both keys", str(caught.value))
    assert "hidden_size 100 is not a multiple of num_attention_heads 3" in str(caught.value)


# ------------------------------------------------------------------ data against the model
def test_token_ids_outside_the_vocabulary_are_named_with_the_file(tmp_path, capsys):
    data = write_corpus(tmp_path / "data", num_records=8)  # ids up to 63
    files = sorted(str(p) for p in (data / "pretrain_tfrecords").iterdir())
    check_input_files(files, 16, vocab_size=64)
    with pytest.raises(
        InputDataError, match=r"pretrain_data.tfrecord-0: record \d+ holds token id"
    ):
        check_input_files(files, 16, vocab_size=40)
    # Through the command: a vocab_file smaller than the data's vocabulary.
    small = tmp_path / "small_vocab.txt"
    small.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]) + "\n")
    code = run_pretrain(data, num_train_steps=2, vocab_file=str(small))
    err = capsys.readouterr().err
    record(
        "5", "token ids >= vocab_size", "exit 2 naming the file", f"exit {code}: {last_line(err)}"
    )
    assert code == 2 and "outside the model's vocabulary" in err and "tfrecord-0" in err


def test_the_builders_summary_names_a_larger_vocabulary(tmp_path):
    data = write_corpus(tmp_path / "data", num_records=8)
    summary = data / "pretrain_tfrecords" / "build_summary.json"
    summary.write_text(json.dumps({"stats": {"vocab_size": 30522}}))
    files = sorted(str(p) for p in (data / "pretrain_tfrecords").glob("*.tfrecord-*"))
    with pytest.raises(InputDataError, match="built with a 30522-entry vocabulary"):
        check_input_files(files, 16, vocab_size=64)


# ------------------------------------------------------------------ vocabularies
@pytest.mark.parametrize("size", ["3", "0", "-5", "5"])
def test_vocabulary_sizes_that_cannot_hold_a_word_are_refused(tmp_path, capsys, size):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("some words here\n" * 5)
    out = tmp_path / "vocab.txt"
    argv = ["--corpus-dir", str(tmp_path / "corpus"), "--vocab-file", str(out)]
    code = learn_vocab.main([*argv, "--method", "frequency", "--vocab-size", size])
    err = capsys.readouterr().err
    record("6", f"learn_vocab --vocab-size {size}", "exit 2, nothing written", last_line(err))
    assert code == 2 and "cannot hold the special tokens" in err and not out.exists()


def test_a_vocabulary_with_a_repeated_token_names_the_lines(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "a"]) + "\n")
    with pytest.raises(VocabError) as caught:
        load_vocab(str(path))
    record("6", "vocabulary repeating a token", "error naming both lines", str(caught.value))
    assert f"{path}:8: the token 'a' repeats line 6" in str(caught.value)


def test_a_vocab_file_that_is_a_folder_is_named(tmp_path, capsys):
    with pytest.raises(VocabError, match="is a folder"):
        load_vocab(str(tmp_path))
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("words\n")
    code = learn_vocab.main(
        ["--corpus-dir", str(tmp_path / "corpus"), "--vocab-file", str(tmp_path)]
    )
    err = capsys.readouterr().err
    record("7", "--vocab-file pointing at a folder", "exit 2 naming it", last_line(err))
    assert code == 2 and "is a folder" in err


def test_an_unreadable_corpus_file_is_skipped_with_its_reason(tmp_path, monkeypatch):
    (tmp_path / "good.txt").write_text("kept words\n")
    (tmp_path / "locked.txt").write_text("unreadable words\n")
    real_open = open

    def deny(path, *args, **kwargs):
        if str(path).endswith("locked.txt"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(corpus, "open", deny, raising=False)
    files = [f for item in corpus.list_inputs(str(tmp_path)) for f in corpus.iter_text_files(item)]
    reasons = {f.name: f.skip_reason for f in files}
    record("7", "unreadable corpus file", "skipped, reason named", repr(reasons))
    assert reasons == {"good.txt": None, "locked.txt": "unreadable (Permission denied)"}


# ------------------------------------------------------------------ safetensors headers
def _safetensors(path, header, data=b"\x00" * 8):
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)
    return str(path)


@pytest.mark.parametrize(
    "info, message",
    [
        ({"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}, "is not a list of integers"),
        ({"dtype": "F32", "shape": [2], "data_offsets": ["0", 8]}, "are not two integers"),
        ({"dtype": "F32", "shape": [True, 2], "data_offsets": [0, 8]}, "is not a list"),
        ({"dtype": 7, "shape": [2], "data_offsets": [0, 8]}, "is not a string"),
    ],
)
def test_a_malformed_safetensors_header_is_one_line(tmp_path, info, message):
    path = _safetensors(tmp_path / "model.safetensors", {"w": info})
    with pytest.raises(SafetensorsError, match=message) as caught:
        load_file(path)
    record(
        "7", f"safetensors header {info}", "SafetensorsError naming the tensor", str(caught.value)
    )
    assert "tensor 'w'" in str(caught.value)


# ------------------------------------------------------------------ links planted in the way
def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("user data\n")
    os.symlink(target, tmp_path / ".build.lock")
    with pytest.raises(LockError, match="is a symbolic link") as caught:
        RunLock(str(tmp_path), ".build.lock").acquire()
    record("8", "lock file planted as a link", "refused, target unchanged", str(caught.value))
    assert target.read_text() == "user data\n"


def test_an_atomic_write_never_writes_through_a_planted_link(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("user data\n")
    out = tmp_path / "config.json"
    os.symlink(target, f"{out}.tmp-{os.getpid()}")
    with pytest.raises(OSError, match="symbolic link"):
        write_text(str(out), "{}")
    assert target.read_text() == "user data\n" and not out.exists()
    os.remove(f"{out}.tmp-{os.getpid()}")
    (tmp_path / f"config.json.tmp-{os.getpid()}").write_text("stale")  # a killed run's leftover
    write_text(str(out), "{}")
    assert out.read_text() == "{}" and not os.path.exists(f"{out}.tmp-{os.getpid()}")


# ------------------------------------------------------------------ corpus builds
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[chr(c) for c in range(97, 123)]]


def _build_args(tmp_path, corpus_dir, output, *extra):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    return [
        "--corpus-dir", str(corpus_dir), "--vocab-file", str(vocab), "--output-dir", str(output),
        "--max-seq-length", "32", "--num-out-files", "2", "--no-progress", *extra,
    ]  # fmt: skip


def test_a_giant_line_is_reported_with_its_length(tmp_path, capsys):
    from electra_tf.cli import build_tfrecords

    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    (corpus_dir / "a.txt").write_text("a b c d\n" * 40 + " ".join("x" * 2000) + "\n")
    assert build_tfrecords.main(_build_args(tmp_path, corpus_dir, tmp_path / "out")) == 0
    out = capsys.readouterr().out
    record("handled", "one giant line", "warning naming file:line and length", last_line(out))
    assert "a.txt:41 (3,999 characters, 2,000 tokens)" in out and "warning:" in out


def test_an_output_folder_inside_the_corpus_is_not_read_back(tmp_path, capsys):
    from electra_tf.cli import build_tfrecords

    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    (corpus_dir / "a.txt").write_text("a b c d e f\n" * 60)
    args = _build_args(tmp_path, corpus_dir, corpus_dir / "records")
    assert build_tfrecords.main(args) == 0
    first = json.loads((corpus_dir / "records" / "build_summary.json").read_text())["stats"]
    assert build_tfrecords.main([*args, "--overwrite"]) == 0
    second = json.loads((corpus_dir / "records" / "build_summary.json").read_text())["stats"]
    record(
        "handled",
        "output folder inside the corpus, rebuilt",
        "same inputs both times",
        f"inputs {first['input_files']} then {second['input_files']}",
    )
    assert first["input_files"] == second["input_files"] == 1


def test_sigterm_during_a_two_process_build_leaves_nothing_behind(tmp_path):
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    rng = np.random.default_rng(0)
    for k in range(160):  # about 15 MB: seconds of work even on an idle machine
        words = rng.integers(97, 123, size=(4000, 6))
        text = "\n".join(" ".join(chr(c) * 3 for c in row) for row in words)
        (corpus_dir / f"{k:02d}.txt").write_text(text + "\n")
    output = tmp_path / "out"
    command = [sys.executable, "-m", "electra_tf.cli.build_tfrecords"]
    args = _build_args(tmp_path, corpus_dir, output, "--num-processes", "2")
    command += [a for a in args if a != "--no-progress"]  # progress lines: workers running
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    wait_for(lambda: _spooled(output), 120, proc)  # workers are writing their examples
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    record("handled", "SIGTERM during a 2-process build", "exit 143, nothing left", last_line(err))
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert _listing(output) == [], _listing(output)


def _spooled(output):
    """Whether a worker has started writing examples into the build's staging folder."""
    for staging in (n for n in _listing(output) if n.startswith(".staging-")):
        for _, _, files in os.walk(os.path.join(output, staging)):
            if any(f.endswith(".bin") for f in files):
                return True
    return False


def _listing(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


# ------------------------------------------------------------------ fine-tuning TSVs
def test_a_tsv_that_is_not_utf8_or_has_a_huge_field_is_named_by_line(tmp_path):
    from electra_tf.finetuning.glue import read_tsv
    from electra_tf.finetuning.task import DataError

    bad = tmp_path / "train.tsv"
    bad.write_bytes(b"sentence\tlabel\ngood\t1\nbad \xff byte\t0\n")
    with pytest.raises(DataError, match=r"train.tsv:3: not UTF-8 text") as caught:
        read_tsv(str(bad))
    record("7", "train.tsv with a non-UTF-8 byte", "DataError naming file:line", str(caught.value))
    huge = tmp_path / "dev.tsv"
    huge.write_text("sentence\tlabel\n" + "w" * 200_000 + "\t1\n")
    with pytest.raises(DataError, match=r"dev.tsv:2: unreadable row \(field larger") as caught:
        read_tsv(str(huge))
    record("7", "a 200,000-character field", "DataError naming file:line", str(caught.value))


def test_rows_with_extra_columns_are_read_and_reported(capsys, tmp_path):
    from electra_tf.finetuning.glue import warn_ragged_rows

    rows = [(1, ["sentence", "label"]), (2, ["a", "1"]), (3, ["b", "0", "extra"])]
    warn_ragged_rows(str(tmp_path / "train.tsv"), rows)
    err = capsys.readouterr().err
    record("handled", "TSV row with an extra column", "a warning naming the line", err.strip())
    assert "1 row(s) have a column count other than the header's 2 (first at line 3)" in err


# ------------------------------------------------------------------ where things are written
@pytest.mark.parametrize("name", ["../../x", "/abs/x", "a/b", ".."])
def test_a_model_name_that_leaves_the_models_folder_is_refused(tmp_path, capsys, name):
    data = write_corpus(tmp_path / "data", num_records=8)
    argv = ["--data-dir", str(data), "--model-name", name, "--preset", "tiny"]
    code = pretrain.main([*argv, "--hparams", hparams(num_train_steps=2)])
    err = capsys.readouterr().err
    record("8", f"--model-name {name}", "exit 2 naming the key", last_line(err))
    assert code == 2 and f"model_name: {name!r} is not a folder name" in err
    assert sorted(os.listdir(tmp_path)) == ["data"] and not (data / "models").exists()


def test_an_input_mask_other_than_0_or_1_is_named(tmp_path):
    import tensorflow as tf

    path = tmp_path / "pretrain_data.tfrecord-0-of-1"
    ints = lambda values: tf.train.Feature(int64_list=tf.train.Int64List(value=values))  # noqa: E731
    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                "input_ids": ints([2, 7, 3, 0]),
                "input_mask": ints([1, 7, 1, 0]),
                "segment_ids": ints([0, 0, 0, 0]),
            }
        )
    )
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(example.SerializeToString())
    with pytest.raises(InputDataError, match=r"record 0 holds input_mask value\(s\) \[7\]") as e:
        check_input_files([str(path)], 4, vocab_size=10)
    record("handled", "input_mask value 7", "refused naming file and record", str(e.value))


# ------------------------------------------------------------------ conversions
def test_hf_weights_that_the_config_does_not_account_for_are_refused(tmp_path, capsys):
    from test_checkpoints import original_shapes, write_tf1_checkpoint

    from electra_tf.cli import convert

    write_tf1_checkpoint(str(tmp_path / "orig"), original_shapes(layers=2, gen_layers=1), step=1)
    args = ["--input", str(tmp_path / "orig"), "--output", str(tmp_path / "hf")]
    assert convert.main(["--to", "hf", *args]) == 0
    config_path = tmp_path / "hf" / "discriminator" / "config.json"
    values = json.loads(config_path.read_text())
    values["num_hidden_layers"] = 1  # the weights hold 2 layers
    config_path.write_text(json.dumps(values))
    capsys.readouterr()
    out = tmp_path / "native"
    code = convert.main(["--from", "hf", "--to", "native", "--input", str(tmp_path / "hf"),
                         "--output", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    record("4", "convert --from hf, 2 layers of weights, config says 1", "exit 2, nothing written",
           f"exit {code}: {err.strip()[:160]}")  # fmt: skip
    assert code == 2 and "has no place for" in err and "layer_1" in err
    assert not out.exists()


@pytest.mark.parametrize("part", ["data-00000-of-00001", "index"])
def test_converting_a_damaged_native_checkpoint_names_it_and_the_older_one(tmp_path, capsys, part):
    from helpers_pretrain_cli import export_config

    from electra_tf.checkpoints import build_pretrainer, write_native_files
    from electra_tf.cli import convert

    config = export_config(64)
    model = build_pretrainer(config)
    for step in (2, 4):
        write_native_files(model, str(tmp_path / "m"), config, step)
    damaged = tmp_path / "m" / f"ckpt-4.{part}"
    raw = damaged.read_bytes()
    damaged.write_bytes(raw[: len(raw) // 2])
    capsys.readouterr()
    code = convert.main(
        ["--to", "hf", "--input", str(tmp_path / "m"), "--output", str(tmp_path / "hf")]
    )
    err = capsys.readouterr().err.strip()
    record("2", f"convert a native checkpoint, {part} truncated", "exit 2 naming ckpt-2", err)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "ckpt-4: cannot be used" in err and f"--input {tmp_path / 'm' / 'ckpt-2'}" in err
    assert not (tmp_path / "hf").exists()


# ------------------------------------------------------------------ fine-tuning tasks
PRETRAINED = os.path.join(ROOT, "pretrained", "electra-tiny-gutenberg")


def test_an_empty_task_list_and_a_task_without_data_are_one_line(tmp_path, capsys):
    from electra_tf.cli import finetune

    (tmp_path / "finetuning_data" / "chunk").mkdir(parents=True)
    base = ["--data-dir", str(tmp_path), "--model-name", "m", "--hparams", '{"debug": true}']
    code = finetune.main([*base, "--tasks", ""])
    err = capsys.readouterr().err
    record("7", 'finetune --tasks ""', "exit 2: names no task", f"exit {code}: {last_line(err)}")
    assert code == 2 and "--tasks: '' names no task" in err
    code = finetune.main([*base, "--tasks", "chunk", "--pretrained", PRETRAINED])
    err = capsys.readouterr().err
    record("7", "finetune chunk with no data", "one line naming train.txt", last_line(err))
    assert code != 0 and "Traceback" not in err
    assert last_line(err).endswith("chunk/train.txt: file not found")  # before any write
