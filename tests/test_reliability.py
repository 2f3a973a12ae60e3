"""Issue #13: every case of the reliability report, reproduced (items 1-8 and 10-12; item 9 is
#14's). Each test records its row for `make reliability` (tests/helpers_reliability.py) before
it asserts. Real processes where the case is about processes (locks, signals, kill -9); a real
tmpfs for the full and the read-only disk, where this machine lets a test mount one."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers_pretrain_cli import ROOT, cli_command, cli_env, run_pretrain, write_corpus
from helpers_reliability import last_line, lock_held_by_another_process, record, wait_for

from electra_tf.cli import build_tfrecords, export, finetune
from electra_tf.runtime.run_lock import LockError, RunLock


def _shards(data):
    directory = data / "pretrain_tfrecords"
    return sorted(directory / name for name in os.listdir(directory))


# ------------------------------------------------------------------ 1. one writer per output
def _reader(proc, lines):
    for line in proc.stdout:
        lines.append(line)


def test_second_pretrain_is_refused_and_sigterm_stops_within_a_step(tmp_path):
    data = write_corpus(tmp_path / "data")
    # One compiled loop of a million steps before: a signal waited for all of them.
    endless = {
        "num_train_steps": 10_000_000,
        "iterations_per_loop": 1_000_000,
        "save_checkpoints_steps": 1_000_000,
    }
    first = subprocess.Popen(
        cli_command(data, "m", **endless),
        env=cli_env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    threading.Thread(target=_reader, args=(first, lines), daemon=True).start()
    try:
        wait_for(lambda: any("Training steps" in line for line in lines), 180, first)
        second = subprocess.run(
            cli_command(data, "m", **endless),
            env=cli_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
        record(
            "1",
            "second pretrain on the same model dir",
            f"exit 2, names pid {first.pid}",
            f"exit {second.returncode}: {last_line(second.stderr)}",
        )
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"pid {first.pid}" in second.stderr and "in use" in second.stderr

        time.sleep(3)  # well inside the first loop
        sent = time.monotonic()
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)
        seconds = time.monotonic() - sent
        out = "".join(lines)
        stopped = re.search(r"Stopped at step (\d+)", out)
        record(
            "10",
            "SIGTERM inside a 1,000,000-step iterations_per_loop on CPU",
            "exit 143 within 60 s (a step, a save), saved",
            f"exit {first.returncode} after {seconds:.1f} s, "
            f"{stopped.group(0) if stopped else 'no stop line'}",
        )
        # The bound leaves room for a loaded machine; the old loop needed minutes at best.
        assert first.returncode == 143 and seconds < 60, out[-2000:]
        assert stopped and 0 < int(stopped.group(1)) < 1_000_000
        assert not os.path.exists(data / "models" / "m" / ".electra.lock")  # released
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path, capsys):
    code = (
        "import os, signal, sys\nfrom electra_tf.runtime.run_lock import RunLock\n"
        "RunLock(sys.argv[1]).acquire()\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )
    dead = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], env=dict(os.environ, PYTHONPATH=ROOT)
    )
    assert dead.returncode == -signal.SIGKILL
    holder = json.loads((tmp_path / ".electra.lock").read_text())
    with RunLock(str(tmp_path)):
        err = capsys.readouterr().err
    record(
        "1",
        "lock file of a kill -9'd process",
        "taken over, naming the dead pid",
        last_line(err),
    )
    assert f"pid {holder['pid']}" in err and "Taking over" in err
    assert not (tmp_path / ".electra.lock").exists()


def test_lock_refusal_names_the_holder(tmp_path):
    with lock_held_by_another_process(tmp_path, ".electra.lock") as pid:
        with pytest.raises(LockError, match=rf"in use by pid {pid} on \S+"):
            RunLock(str(tmp_path)).acquire()


def _finetune_data(tmp_path, train_rows=20, dev_rows=11):
    words = "the a good bad movie film great awful fun boring plot is cat dog .".split()
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words)
    )
    sst = tmp_path / "finetuning_data" / "sst"
    sst.mkdir(parents=True)

    def rows(n):
        return "sentence\tlabel\n" + "".join(f"the good movie .\t{i % 2}\n" for i in range(n))

    (sst / "train.tsv").write_text(rows(train_rows))
    (sst / "dev.tsv").write_text(rows(dev_rows))
    return tmp_path


FINETUNE_TINY = {
    "model_hparam_overrides": {
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "intermediate_size": 32,
    },
    "embedding_size": 8,
    "vocab_size": 20,
    "max_seq_length": 12,
    "train_batch_size": 8,
    "eval_batch_size": 8,
    "num_train_epochs": 1,
    "init_checkpoint": None,
}


def _finetune(data, **overrides):
    argv = ["--data-dir", str(data), "--model-name", "tiny", "--tasks", "sst"]
    return finetune.main([*argv, "--hparams", json.dumps({**FINETUNE_TINY, **overrides})])


def test_finetune_and_export_into_a_locked_output_are_refused(tmp_path, capsys):
    data = _finetune_data(tmp_path)
    model_dir = data / "models" / "tiny"
    with lock_held_by_another_process(model_dir, ".finetune-sst.lock") as pid:
        code = _finetune(data)
    err = capsys.readouterr().err
    record("1", "second fine-tune of the same tasks", "exit 2 naming the pid", last_line(err))
    assert code == 2 and f"pid {pid}" in err
    serving = tmp_path / "serving"
    with lock_held_by_another_process(serving, ".export.lock") as pid:
        argv = ["--data-dir", str(data), "--model-name", "tiny", "--output-dir", str(serving)]
        code = export.main(argv)
    err = capsys.readouterr().err
    record("1", "second export into the same output", "exit 1 naming the pid", last_line(err))
    assert code == 1 and f"pid {pid}" in err


# ------------------------------------------------------------------ 2. hparam validation
@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"learning_rate": -5e-4}, "learning_rate: -0.0005 must be >= 0"),
        ({"num_train_steps": 0}, "num_train_steps: 0 must be >= 1"),
        ({"iterations_per_loop": 0}, "iterations_per_loop: 0 must be >= 1"),
        ({"save_checkpoints_steps": 0}, "save_checkpoints_steps: 0 must be >= 1"),
        ({"train_batch_size": "eight"}, "train_batch_size: 'eight' is a str, expected an integer"),
        ({"mask_prob": 1.5}, "mask_prob"),
        (
            {"model_hparam_overrides": {"hidden_dropout_prob": -0.1}},
            "hidden_dropout_prob: -0.1 must be in [0, 1]",
        ),
    ],
)
def test_bad_pretraining_hparams_are_named(tmp_path, capsys, overrides, message):
    data = write_corpus(tmp_path / "data", num_records=8)
    code = run_pretrain(data, **{"num_train_steps": 2, **overrides})
    err = capsys.readouterr().err
    record(
        "2",
        f"pretrain {json.dumps(overrides)}",
        f"exit 2: {message}",
        f"exit {code}: {last_line(err)}",
    )
    assert code == 2 and message in err
    assert not (data / "models" / "m" / "config.json").exists()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"learning_rate": -1e-4}, "learning_rate: -0.0001 must be > 0"),
        ({"train_batch_size": "eight"}, "train_batch_size: 'eight' is a str, expected an integer"),
        ({"warmup_proportion": 2}, "warmup_proportion: 2 must be in [0, 1]"),
        ({"num_train_epochs": 0}, "num_train_epochs: 0 must be > 0"),
    ],
)
def test_bad_finetuning_hparams_are_named(tmp_path, capsys, overrides, message):
    data = _finetune_data(tmp_path)
    code = _finetune(data, **overrides)
    err = capsys.readouterr().err
    record(
        "2",
        f"finetune {json.dumps(overrides)}",
        f"exit 2: {message}",
        f"exit {code}: {last_line(err)}",
    )
    assert code == 2 and message in err


# ------------------------------------------------------------------ 3-4. building TFRecords
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _build_inputs(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + [f"w{i}" for i in range(50)]) + "\n")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for k in range(3):
        text = "\n\n".join(" ".join(f"w{(k + i * j) % 50}" for j in range(20)) for i in range(30))
        (corpus / f"doc{k}.txt").write_text(text + "\n")
    return corpus, vocab


def _build(corpus, vocab, out, *extra):
    argv = ["--corpus-dir", str(corpus), "--vocab-file", str(vocab), "--output-dir", str(out)]
    return build_tfrecords.main([*argv, "--num-out-files", "2", "--no-progress", *extra])


def _snapshot(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def test_an_invalid_rebuild_leaves_the_previous_dataset_whole(tmp_path, capsys, monkeypatch):
    corpus, vocab = _build_inputs(tmp_path)
    out = tmp_path / "out"
    assert _build(corpus, vocab, out, "--max-seq-length", "16") == 0
    before = _snapshot(out)
    code = _build(corpus, vocab, out, "--overwrite", "--max-seq-length", "3")
    err = capsys.readouterr().err
    after = _snapshot(out)
    record(
        "3",
        "--overwrite --max-seq-length 3 over a built dataset",
        "exit 2, previous shards unchanged, no *.incomplete",
        f"exit {code}, {'unchanged' if after == before else 'CHANGED'}: {last_line(err)}",
    )
    assert code == 2 and "max_seq_length" in err and after == before

    # A build that fails half-way (here: while copying examples) leaves it whole too.
    from electra_tf.data import tfrecord_builder

    def broken(*args):
        raise OSError("simulated failure half-way through the build")

    monkeypatch.setattr(tfrecord_builder, "_copy_spool", broken)
    with pytest.raises(OSError, match="half-way"):
        _build(corpus, vocab, out, "--overwrite", "--max-seq-length", "32")
    after = _snapshot(out)
    record(
        "3",
        "rebuild that fails half-way",
        "previous dataset unchanged, no scratch left",
        "unchanged" if after == before else f"CHANGED: {sorted(after)}",
    )
    assert after == before
    assert not [n for n in os.listdir(out) if n.startswith(".") or n.endswith(".incomplete")]


def test_a_corpus_without_text_is_an_error(tmp_path, capsys):
    _, vocab = _build_inputs(tmp_path)
    corpus = tmp_path / "binary"
    corpus.mkdir()
    (corpus / "empty.txt").write_bytes(b"")
    (corpus / "blob.bin").write_bytes(bytes(range(256)) * 64)
    code = _build(corpus, vocab, tmp_path / "out")
    err = capsys.readouterr().err
    record(
        "4",
        "corpus of only empty/binary files",
        "exit 2: no examples",
        f"exit {code}: {last_line(err)}",
    )
    assert code == 2 and "no examples" in err
    assert not [n for n in os.listdir(tmp_path / "out") if "tfrecord" in n]


def test_a_second_build_into_one_directory_is_refused(tmp_path, capsys):
    corpus, vocab = _build_inputs(tmp_path)
    out = tmp_path / "out"
    with lock_held_by_another_process(out, ".build.lock") as pid:
        code = _build(corpus, vocab, out, "--overwrite")
    err = capsys.readouterr().err
    record(
        "4",
        "two builds into one directory",
        "second: exit 2 naming the pid",
        f"exit {code}: {last_line(err)}",
    )
    assert code == 2 and f"pid {pid}" in err
    assert _build(corpus, vocab, out, "--overwrite") == 0  # released: the next one runs


# ------------------------------------------------------------------ 5. empty fine-tuning data
@pytest.mark.parametrize("split", ["dev", "train"])
def test_empty_finetuning_split_is_a_one_line_error(tmp_path, capsys, split):
    data = _finetune_data(tmp_path)
    (data / "finetuning_data" / "sst" / f"{split}.tsv").write_text("sentence\tlabel\n")
    code = _finetune(data)
    err = capsys.readouterr().err
    record(
        "5",
        f"header-only {split}.tsv",
        f"exit 2 naming {split}.tsv, before anything is written",
        f"exit {code}: {last_line(err)}",
    )
    # Every file is read before the first step (the dev split too, which used to be reported
    # only after training): a usage error, and no model folder, lock or records.
    assert code == 2 and f"sst/{split}.tsv: no examples" in err
    assert not (data / "models" / "tiny" / "finetuning_models").exists()
    assert not (data / "models" / "tiny" / "results" / "sst_results.json").exists()


# ------------------------------------------------------------------ 7. bad TFRecords
def _rewrite(path, data: bytes):
    path.write_bytes(data)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other length", "no records"])
def test_bad_tfrecords_are_named_before_the_model_is_built(tmp_path, capsys, damage):
    data = write_corpus(tmp_path / "data", num_records=8)
    shard = _shards(data)[1]
    if damage == "truncated":
        _rewrite(shard, shard.read_bytes()[:-7])
    elif damage == "garbage":
        _rewrite(shard, os.urandom(300))
    elif damage == "other length":
        shutil.rmtree(data / "pretrain_tfrecords")
        write_corpus(data, num_records=8)  # the same files, read with another length below
    else:
        for path in _shards(data):
            _rewrite(path, b"")
    length = {"max_seq_length": 8} if damage == "other length" else {}
    code = run_pretrain(data, num_train_steps=2, **length)
    err = capsys.readouterr().err
    record(
        "7", f"{damage} TFRecord file", "exit 2 naming the file", f"exit {code}: {last_line(err)}"
    )
    assert code == 2, err
    assert "pretrain_data.tfrecord-" in err and "Traceback" not in err
    assert not os.path.exists(data / "models" / "m" / "ckpt-2.index")


def test_a_record_corrupt_mid_file_names_file_and_offset(tmp_path, capsys):
    data = write_corpus(tmp_path / "data", num_records=8)
    shard = _shards(data)[0]
    raw = bytearray(shard.read_bytes())
    offset = 0
    for _ in range(2):  # to the third record: length (8 bytes), crc (4), data, crc (4)
        offset += 16 + int.from_bytes(raw[offset : offset + 8], "little")
    raw[offset + 12 + 5] ^= 0xFF  # inside its data: only the data CRC notices
    shard.write_bytes(bytes(raw))
    code = run_pretrain(data, num_train_steps=4)
    err = capsys.readouterr().err
    record(
        "7",
        "record corrupt mid-file",
        "exit 2 naming file and offset",
        f"exit {code}: {last_line(err)}",
    )
    assert code == 2 and str(shard) in err and re.search(r"record at \d+", err), err


# ------------------------------------------------------------------ 8. full and read-only disk
def _mount_tmpfs(path, size):
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip() or 'not root'})")


def _umount(path):
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_full_disk_keeps_the_last_checkpoint_and_says_how_much_is_needed(tmp_path, capsys):
    data = write_corpus(tmp_path / "data", num_records=16)
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "1500k")
    try:
        model_dir = disk / "m"
        settings = {
            "num_train_steps": 400,
            "save_checkpoints_steps": 2,
            "keep_checkpoint_max": 0,  # keep every one: the disk fills up
            "model_dir": str(model_dir),
        }
        code = run_pretrain(data, **settings)
        err = capsys.readouterr().err
        record(
            "8",
            "disk fills up during a save",
            "exit 1: no space left on <dir>: N MB; partial removed",
            f"exit {code}: {last_line(err)}",
        )
        assert code == 1 and f"no space left on {model_dir}" in err and " MB" in err
        assert not [n for n in os.listdir(model_dir) if "_temp" in n]
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(str(model_dir))
        assert latest and tf.train.load_checkpoint(latest).get_tensor(
            "step/.ATTRIBUTES/VARIABLE_VALUE"
        )
        code = run_pretrain(data, **settings)  # the rerun: still full, still one clear line
        err = capsys.readouterr().err
        record(
            "8",
            "rerun on the full disk",
            "exit 1 naming the path",
            f"exit {code}: {last_line(err)}",
        )
        assert code == 1 and str(model_dir) in err and "Traceback" not in err
    finally:
        _umount(disk)


def test_a_read_only_model_dir_fails_before_training_or_evaluating(tmp_path, capsys):
    data = write_corpus(tmp_path / "data", num_records=8)
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "8m")
    try:
        model_dir = disk / "m"
        assert run_pretrain(data, num_train_steps=2, model_dir=str(model_dir)) == 0
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        capsys.readouterr()
        code = run_pretrain(data, num_train_steps=4, model_dir=str(model_dir))
        err = capsys.readouterr().err
        record(
            "8",
            "read-only model dir: train",
            "exit 2 before training",
            f"exit {code}: {last_line(err)}",
        )
        assert code == 2 and "cannot write to model dir" in err
        code = run_pretrain(
            data, num_train_steps=2, model_dir=str(model_dir), do_train=False, do_eval=True
        )
        captured = capsys.readouterr()
        record(
            "8",
            "read-only model dir: do_eval",
            "exit 2 before evaluating",
            f"exit {code}: {last_line(captured.err)}",
        )
        assert code == 2 and "cannot write to results directory" in captured.err
        assert "eval step" not in captured.out
    finally:
        _umount(disk)


# ------------------------------------------------------------------ 10. CPU runs that talk
def test_cpu_calls_are_short_and_progress_lines_come_between_reports():
    import io

    from electra_tf.config import pretraining_config
    from electra_tf.runs.cpu_calls import steps_per_call_limit
    from electra_tf.runs.progress import ProgressReporter
    from electra_tf.runtime.device_defaults import probe_machine

    config = pretraining_config(preset="small")
    assert steps_per_call_limit(config, probe_machine()) == 1  # this CPU-only machine
    now = [0.0]
    stream = io.StringIO()
    reporter = ProgressReporter(1000, 0, None, stream, clock=lambda: now[0])
    now[0] = 10.0
    assert not reporter.heartbeat(5, 640, 30.0)
    now[0] = 40.0
    assert reporter.heartbeat(20, 2560, 30.0)
    line = stream.getvalue().strip()
    record("10", "progress between report lines on CPU", "a line every 30 s with ETA", line)
    assert line.startswith("step 20/1000") and "tok/s" in line and "ETA 0:32:40" in line


def test_default_corpus_scan_says_what_it_does_and_how_long():
    from electra_tf.data.default_corpus import ScanProgress

    now = [0.0]
    lines: list[str] = []
    progress = ScanProgress([("a", 100), ("b", 300)], lines.append, 10.0, lambda: now[0])
    now[0] = 20.0
    progress.update(100, 50)
    record("10", "default corpus scan progress", "files, MB, time left", lines[-1] if lines else "")
    assert "scanned 1/2 files" in lines[0] and "about 60 s left" in lines[0]


# ------------------------------------------------------------------ 11. quiet start-up, fast --help
@pytest.mark.parametrize(
    "command",
    [
        "pretrain",
        "finetune",
        "export",
        "convert",
        "build_tfrecords",
        "learn_vocab",
        "build_default_corpus",
    ],
)
def test_help_imports_no_tensorflow(command):
    code = (
        f"import sys\nfrom electra_tf.cli import {command} as m\n"
        "try:\n    m.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('tensorflow' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=ROOT
    )
    assert result.stdout.strip().endswith("False"), result.stdout[-500:]


def test_convert_lists_the_formats_checkpoints_has():
    from electra_tf import checkpoints
    from electra_tf.cli import convert

    assert convert.FORMATS == tuple(checkpoints.FORMATS)


def test_cpu_start_up_prints_no_cuda_error():
    from electra_tf.runtime.device_defaults import has_nvidia_driver

    if has_nvidia_driver():
        pytest.skip("a machine with an NVIDIA driver: its CUDA messages are real")
    # The pre-training CLI probes the machine first (its "auto" settings): the process's first
    # device query, before start_tensorflow.
    code = (
        "import sys\nfrom electra_tf.runtime.device_defaults import probe_machine\n"
        "probe_machine()\n"
        "from electra_tf.runtime.tf_startup import start_tensorflow\nstart_tensorflow()\n"
        # A compiled cluster later on, as training's GELU/LayerNorm/dropout forms compile.
        "import tensorflow as tf\ntf.function(lambda x: x * 2, jit_compile=True)(tf.ones(3))\n"
        "sys.stderr.write('a real error still shows\\n')\n"
    )
    result = _python_without(("TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES"), code)
    record(
        "11",
        "TensorFlow start-up on a CPU-only machine",
        "no cuInit ERROR line",
        last_line(result.stderr),
    )
    assert "cuInit" not in result.stderr and "a real error still shows" in result.stderr
    assert "Compiled cluster using XLA" not in result.stderr, result.stderr


def test_a_command_sets_tensorflows_environment_before_its_imports_reach_it():
    # `python -m electra_tf.pretrain` imported TensorFlow (through its run modules) before
    # tf_startup set the log level: INFO lines filled the console unless make exported it.
    code = (
        "import os, sys\nimport electra_tf.cli.pretrain\n"
        "print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'), os.environ.get('TF_USE_LEGACY_KERAS'))\n"
    )
    result = _python_without(("TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS"), code)
    assert result.stdout.split() == ["2", "1"], result.stderr


def _python_without(variables: tuple[str, ...], code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter whose environment (the CLI tests') lacks `variables`."""
    env = {k: v for k, v in cli_env().items() if k not in variables}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
    )


# ------------------------------------------------------------------ 12. no machine's paths
def test_readme_and_bench_name_no_absolute_machine_paths():
    found = []
    files = ["README.md", "bench/README.md", "Makefile"]
    files += [os.path.join("bench", n) for n in os.listdir(os.path.join(ROOT, "bench"))]
    for name in files:
        if not name.endswith((".md", ".py", "Makefile")):
            continue
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if re.search(r"(^|[\s\"'`=(])/(work|home|Users|mnt|data)/", line):
                    found.append(f"{name}:{number}")
    record(
        "12", "absolute paths of one machine in README/bench", "none", ", ".join(found) or "none"
    )
    assert not found


def test_a_failed_atomic_write_names_its_file(tmp_path, monkeypatch):
    # The rerun on a full disk died writing config.json with "[Errno 28] No space left on
    # device" and no path.
    import errno

    from electra_tf.runtime import atomic_io

    real_open = open

    class FullFile:
        def __init__(self, path, mode, **kwargs):
            self.f = real_open(path, mode, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic_io, "open", FullFile, raising=False)
    target = tmp_path / "config.json"
    with pytest.raises(OSError) as caught:
        atomic_io.write_json(str(target), {"a": 1})
    record("8", "config.json write on a full disk", "names the file", str(caught.value))
    assert caught.value.filename == str(target) and caught.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == []


def test_stopping_make_stops_the_run(tmp_path):
    # `timeout make pretrain` killed make and left Python training: under make
    # (ELECTRA_STOP_WITH_PARENT=1) the run gets SIGTERM, which saves and stops it.
    marker = tmp_path / "terminated"
    child = (
        "import os, signal, sys, time\nfrom electra_tf.cli.pretrain import stop_with_parent\n"
        "stop_with_parent()\n"
        "signal.signal(signal.SIGTERM, lambda *a: (open(sys.argv[1], 'w').close(), os._exit(0)))\n"
        "print('ready', flush=True)\ntime.sleep(60)\n"
    )
    parent = (
        "import os, subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], "
        "stdout=subprocess.PIPE, text=True)\n"
        "p.stdout.readline()\nos._exit(0)  # as make does when killed\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT, ELECTRA_STOP_WITH_PARENT="1")
    subprocess.run([sys.executable, "-c", parent, child, str(marker)], env=env, timeout=60)
    wait_for(marker.exists, 30)
    record("10", "make (the parent) dies", "the run gets SIGTERM", "SIGTERM received")
