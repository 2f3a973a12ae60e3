"""The export, `serving.load` and data-builder cases of the third reliability pass: bounds on
`--query-blocks`, `--version` and `--max-seq-length` (export, fine-tuning and the TFRecord
builder), an `export.json` that would start thousands of threads or holds no integer, a stopped
export's lock, the builder reading its own outputs back as text, and corpus entries that are not
files. Each case records its row for `make reliability` (tests/helpers_reliability.py) before it
asserts. Everything runs in-process on a 2-layer, 32-wide model; no model is traced."""

import json
import os
import signal
import time

import pytest
from helpers_pretrain_cli import export_config
from helpers_reliability import last_line, record

from electra_tf import checkpoints, serving
from electra_tf.cli import build_tfrecords, export, finetune
from electra_tf.config import save_config
from electra_tf.data.tfrecord_builder import SUMMARY_FILE
from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
from electra_tf.serving import sources
from electra_tf.serving.saved_model import ExportError

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"the quick brown fox a b c".split()]
POSITIONS = 64  # export_config's max_position_embeddings


@pytest.fixture(scope="module")
def model_data(tmp_path_factory):
    """<data>/models/tiny: an original-format checkpoint of a random 2-layer discriminator
    with 64 positions, its config.json (max_seq_length 32) and vocab.txt."""
    data = tmp_path_factory.mktemp("rel_export") / "data"
    model_dir = data / "models" / "tiny"
    model_dir.mkdir(parents=True)
    (model_dir / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    config = export_config(len(VOCAB), max_seq_length=32)
    model = ElectraDiscriminator(config.discriminator_config())
    model(dummy_inputs())
    weights = {name: var.numpy() for name, var in model.variable_map().items()}
    checkpoints.write_original_files(weights, str(model_dir), global_step=3)
    save_config(config, str(model_dir / "config.json"))
    return data


def _usage_error(capsys, argv) -> tuple[int, str]:
    """(exit code, last stderr line) of `export.main(argv)` refused by its argument checks."""
    with pytest.raises(SystemExit) as caught:
        export.main(argv)
    return caught.value.code, last_line(capsys.readouterr().err)


# ------------------------------------------------------------------ export's bounds
@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--query-blocks", "100000", "--query-blocks: 100000 is outside [1, 64]"),
        ("--query-blocks", "0", "--query-blocks: 0 is outside [1, 64]"),
        ("--version", str(2**66), f"--version {2**66}: TF Serving versions are integers in"),
        ("--version", "-1", "--version -1: TF Serving versions are integers in [0, "),
        ("--max-seq-length", "0", "--max-seq-length 0: must be at least 3"),
        ("--max-seq-length", "-5", "--max-seq-length -5: must be at least 3"),
    ],
)
def test_export_bounds_are_usage_errors_before_anything_is_written(
    tmp_path, capsys, flag, value, message
):
    out = tmp_path / "serving"
    argv = ["--data-dir", str(tmp_path), "--model-name", "m", "--output-dir", str(out)]
    code, err = _usage_error(capsys, [*argv, flag, value])
    record("5", f"export {flag} {value}", f"exit 2: {message}", f"exit {code}: {err}")
    assert code == 2 and message in err
    assert not out.exists()  # no lock, no version


def test_export_max_seq_length_past_the_positions_names_both(model_data, tmp_path, capsys):
    argv = ["--data-dir", str(model_data), "--model-name", "tiny", "--kind", "encoder"]
    code = export.main([*argv, "--output-dir", str(tmp_path / "s"), "--max-seq-length", "100"])
    err = last_line(capsys.readouterr().err)
    expected = f"--max-seq-length 100: must be in [3, {POSITIONS}]"
    record("5", "export --max-seq-length 100 (64 positions)", expected, f"exit {code}: {err}")
    assert code == 1 and expected in err and "position embeddings" in err
    # The library call: 0 is a length to refuse, not "the config's".
    with pytest.raises(ExportError, match=rf"--max-seq-length 0: must be in \[3, {POSITIONS}\]"):
        sources.pretrained_specs("tiny", str(model_data / "models" / "tiny"), ("encoder",), None,
                                 None, 0)  # fmt: skip


def test_export_of_a_model_that_is_not_there_names_the_ones_that_are(model_data, capsys):
    """A --model-name with no folder: one line naming the folder and the models beside it, and
    nothing created (the lock had made <model_dir>/serving before the error)."""
    code = export.main(["--data-dir", str(model_data), "--model-name", "nosuch"])
    err = last_line(capsys.readouterr().err)
    record("5", "export --model-name of no folder", "exit 1 naming the models there", err)
    assert code == 1, err
    assert f"{model_data / 'models' / 'nosuch'}: no such model folder" in err, err
    assert f"{model_data / 'models'} holds tiny" in err, err
    assert not (model_data / "models" / "nosuch").exists()


def test_a_stopped_export_releases_its_lock(model_data, tmp_path, capsys, monkeypatch):
    """SIGTERM (what `timeout` and `kill` send) mid-export: exit 143, one line, and the lock
    file is gone (the default SIGTERM ended the process inside the lock)."""
    out = tmp_path / "serving"

    def stopped(*args, **kwargs):
        assert (out / ".export.lock").exists()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal arrives first
        return 0

    def unhandled(signum, frame):  # the test's own: export left SIGTERM to the default
        raise AssertionError("export does not handle SIGTERM: the process would end in the lock")

    monkeypatch.setattr(export, "_export", stopped)
    argv = ["--data-dir", str(model_data), "--model-name", "tiny", "--output-dir", str(out)]
    previous = signal.signal(signal.SIGTERM, unhandled)
    try:
        code = export.main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = last_line(capsys.readouterr().err)
    left = sorted(os.listdir(out))
    record("5", "SIGTERM during export", "exit 143, lock released", f"exit {code}: {err} {left}")
    assert code == 143 and err.startswith("stopped (SIGTERM)") and left == []


# ------------------------------------------------------------------ serving.load's export.json
def _version_dir(tmp_path, **info):
    """A version directory as `serving.load` first reads it: saved_model.pb and export.json."""
    path = tmp_path / "m" / "1"
    (path / "assets").mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(b"")
    (path / "assets" / "export.json").write_text(json.dumps(info), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    "value, message",
    [
        (3000, "query_blocks 3000 is outside [1, 64]"),
        ("two", "query_blocks 'two' is not an integer"),
        (2.5, "query_blocks 2.5 is not an integer"),
        (True, "query_blocks True is not an integer"),
    ],
)
def test_load_refuses_an_export_json_query_blocks_naming_the_file(tmp_path, value, message):
    """Before any thread pool is set: 3000 started about 3,000 inter-op threads; "two" was a
    raw int() error naming no file."""
    path = _version_dir(tmp_path, query_blocks=value, jit_compile=False)
    with pytest.raises(ExportError) as caught:
        serving.load(path)
    got = str(caught.value)
    record("5", f"serving.load, export.json query_blocks {value!r}", message, got)
    assert got.startswith(f"{os.path.join(path, 'assets', 'export.json')}: {message}")


def test_load_reads_a_good_export_json_and_names_a_damaged_one(tmp_path):
    from electra_tf.serving.loading import export_info, recommended_threads

    path = _version_dir(tmp_path, query_blocks=2, jit_compile=False)
    assert recommended_threads(export_info(path), cpu_count=8) == (4, 2)
    info_file = os.path.join(path, "assets", "export.json")
    with open(info_file, "w", encoding="utf-8") as f:
        f.write('{"query_blocks": 2,')
    with pytest.raises(ExportError, match=f"{info_file}: not readable as JSON"):
        export_info(path)


# ------------------------------------------------------------------ fine-tuning's length
def test_finetune_max_seq_length_past_the_positions_names_both(model_data, capsys):
    argv = ["--data-dir", str(model_data), "--model-name", "tiny", "--tasks", "sst"]
    code = finetune.main([*argv, "--hparams", '{"max_seq_length": 100}'])
    err = last_line(capsys.readouterr().err)
    expected = f"max_seq_length 100 exceeds the max_position_embeddings {POSITIONS}"
    expected_row = f"exit 2: {expected}"
    record("5", "finetune max_seq_length 100 (64 positions)", expected_row, f"exit {code}: {err}")
    assert code == 2 and expected in err
    assert not (model_data / "models" / "tiny" / "finetuning_models").exists()


# ------------------------------------------------------------------ the TFRecord builder
def _corpus(directory):
    directory.mkdir(parents=True, exist_ok=True)
    words = VOCAB[5:]
    lines = [" ".join(words[(i + j) % len(words)] for j in range(9)) for i in range(60)]
    (directory / "a.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    vocab = directory.parent / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return directory, vocab


def _build(corpus, vocab, output, *flags):
    argv = ["--corpus-dir", str(corpus), "--vocab-file", str(vocab), "--output-dir", str(output)]
    return build_tfrecords.main([*argv, "--num-out-files", "1", "--no-progress", *flags])


def test_build_max_seq_length_is_bounded(tmp_path, capsys):
    corpus, vocab = _corpus(tmp_path / "corpus")
    code = _build(corpus, vocab, tmp_path / "out", "--max-seq-length", "100000")
    err = last_line(capsys.readouterr().err)
    expected = "max_seq_length 100000: must be in [5, 4096]"
    expected_row = f"exit 2: {expected}"
    record("5", "build_tfrecords --max-seq-length 100000", expected_row, f"exit {code}: {err}")
    assert code == 2 and expected in err and "padded" in err
    assert not (tmp_path / "out").exists()


def test_a_rebuild_into_the_corpus_folder_never_reads_its_own_outputs(tmp_path, capsys):
    corpus, vocab = _corpus(tmp_path / "corpus")
    shard = corpus / "pretrain_data.tfrecord-0-of-1"
    assert _build(corpus, vocab, corpus, "--overwrite") == 0
    first = shard.read_bytes()
    assert _build(corpus, vocab, corpus, "--overwrite") == 0
    capsys.readouterr()
    stats = json.loads((corpus / SUMMARY_FILE).read_text())["stats"]
    skipped = stats["skipped"]
    record("5", "rebuild with output = corpus folder", "same records; own files listed", skipped)
    assert shard.read_bytes() == first  # the summary was not packed in as text
    assert stats["text_files"] == 1
    assert skipped == [
        f"{SUMMARY_FILE}: a TFRecord build's own output, not text",
        "pretrain_data.tfrecord-0-of-1: a TFRecord build's own output, not text",
    ]
    # An output folder inside the corpus, and an earlier build's files anywhere in it.
    assert _build(corpus, vocab, corpus / "records") == 0
    assert _build(corpus, vocab, corpus / "records", "--overwrite") == 0
    assert (corpus / "records" / "pretrain_data.tfrecord-0-of-1").read_bytes() == first
    stats = json.loads((corpus / "records" / SUMMARY_FILE).read_text())["stats"]
    assert "records/: the build's output folder" in stats["skipped"]


def test_fifos_devices_and_broken_links_in_a_corpus_are_listed(tmp_path, capsys):
    corpus, vocab = _corpus(tmp_path / "corpus")
    os.mkfifo(corpus / "pipe")
    os.symlink("/dev/zero", corpus / "zero")
    os.symlink(tmp_path / "nowhere", corpus / "dangling")

    def hung(signum, frame):
        raise TimeoutError("the build blocked on the corpus's FIFO")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)  # a build that opens the FIFO would wait for a writer forever
    try:
        code = _build(corpus, vocab, tmp_path / "out")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out = capsys.readouterr().out
    skipped = json.loads((tmp_path / "out" / SUMMARY_FILE).read_text())["stats"]["skipped"]
    record("5", "FIFO, /dev/zero link, broken link in a corpus", "skipped, listed", skipped)
    assert code == 0 and "skipped 3 file(s)" in out
    assert skipped == [
        "dangling: a broken link (No such file or directory)",
        "pipe: not a regular file (a FIFO)",
        "zero: not a regular file (a character device)",
    ]
