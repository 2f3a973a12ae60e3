"""The conversion surface tried as a careless or hostile user would: `--overwrite` over a
user's own files, outputs that are (or hold, or sit in) the input, links, two writers, paths
that cannot be written, vocabularies that do not fit, and KerasHub / Model Garden configs that
disagree with their weights. Each case records its row for `make reliability`
(tests/helpers_reliability.py) before it asserts.

One tiny TF1 checkpoint (3 layers; E 8, H 16, a 1-layer generator; 20 ids) and its
conversions are shared by the module: no pre-training."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess

import pytest
from helpers_reliability import last_line, lock_held_by_another_process, record
from test_checkpoints import original_shapes, write_tf1_checkpoint

from electra_tf.cli import convert, finetune
from electra_tf.serving import saved_model

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB = "".join(f"{token}\n" for token in SPECIAL + [f"w{i}" for i in range(15)])  # 20 ids
needs_interop = pytest.mark.skipif(
    importlib.util.find_spec("keras_hub") is None or importlib.util.find_spec("official") is None,
    reason="keras-hub (requirements-interop.txt) or tf-models-official is not installed",
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A TF1 checkpoint with vocab.txt beside it (the input of every case) and its native
    conversion."""
    root = tmp_path_factory.mktemp("convert_cases")
    shapes = original_shapes(
        vocab=20, emb=8, hidden=16, layers=3, gen_hidden=8, gen_layers=1, positions=16
    )
    write_tf1_checkpoint(str(root / "orig"), shapes, step=5)
    (root / "orig" / "vocab.txt").write_text(VOCAB)
    assert _convert("native", root / "orig", root / "native") == 0
    return root


@pytest.fixture(scope="module")
def foreign(tiny):
    """The checkpoint as a KerasHub preset and as a Model Garden export."""
    for fmt in ("kerashub", "modelgarden"):
        assert _convert(fmt, tiny / "orig", tiny / fmt) == 0
    return tiny


def _convert(fmt, source, output, *extra) -> int:
    return convert.main(["--to", fmt, "--input", str(source), "--output", str(output), *extra])


def _files(folder) -> dict[str, bytes]:
    found = {}
    for directory, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = f.read()
    return found


def _one_line_error(code: int, err: str) -> bool:
    return code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ 1. nothing the user wrote
def test_overwrite_keeps_a_users_files_anywhere_below_the_output(tiny, tmp_path, capsys):
    out = tmp_path / "hf"
    assert _convert("hf", tiny / "orig", out) == 0
    (out / "assets").mkdir()
    (out / "assets" / "logo.png").write_bytes(b"user's")
    (out / "generator" / "notes.txt").write_text("user's")
    before = _files(out)
    capsys.readouterr()
    code = _convert("hf", tiny / "orig", out, "--overwrite")
    err = capsys.readouterr().err
    record(
        "1",
        "convert --overwrite: user files in assets/ and generator/",
        "exit 2 naming the files; nothing deleted",
        f"exit {code}: {last_line(err)}",
    )
    assert _one_line_error(code, err)
    assert "assets/logo.png" in err and "generator/notes.txt" in err and "2 file(s)" in err
    assert _files(out) == before
    # Moved out, the same output is replaced as before.
    shutil.rmtree(out / "assets")
    os.remove(out / "generator" / "notes.txt")
    assert _convert("hf", tiny / "orig", out, "--overwrite") == 0


def test_export_overwrite_keeps_a_users_file_beside_a_saved_model(tmp_path):
    """The same rule where `export` replaces a version: a SavedModel's own files only."""
    version = tmp_path / "m_discriminator" / "1"
    (version / "variables").mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    (version / "variables" / "variables.index").write_bytes(b"")
    saved_model.check_writable(str(version), overwrite=True)  # an export's files only: fine
    (version / "variables" / "mine.npy").write_bytes(b"user's")
    with pytest.raises(saved_model.ExportError) as caught:
        saved_model.check_writable(str(version), overwrite=True)
    record(
        "1",
        "export --overwrite: a user file in variables/",
        "ExportError naming the file",
        str(caught.value),
    )
    assert "variables/mine.npy" in str(caught.value)


LABELS = {"same": "= the input", "inside": "inside the input", "around": "holding the input"}


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_an_output_that_is_inside_or_around_the_input_is_refused(tiny, capsys, where):
    source = tiny / "native"
    output = {"same": source, "inside": source / "hf", "around": tiny}[where]
    before = _files(source)
    code = _convert("native" if where == "same" else "hf", source, output, "--overwrite")
    err = capsys.readouterr().err
    record(
        "1",
        f"convert: output {LABELS[where]} (--overwrite)",
        "exit 2: the input's folder; input untouched",
        f"exit {code}: {last_line(err)}",
    )
    assert _one_line_error(code, err) and "input" in err and str(output) in err
    assert _files(source) == before and not (source / "hf").exists()


def test_a_symlinked_output_is_refused_without_strays(tiny, tmp_path, capsys):
    target = tmp_path / "real"
    assert _convert("hf", tiny / "orig", target) == 0
    before = _files(target)
    link = tmp_path / "link"
    link.symlink_to(target)
    code = _convert("hf", tiny / "orig", link, "--overwrite")
    err = capsys.readouterr().err
    record(
        "1",
        "convert --overwrite: the output is a symbolic link",
        "exit 2 naming the link and its target; no strays",
        f"exit {code}: {last_line(err)}",
    )
    assert _one_line_error(code, err) and str(link) in err and str(target) in err
    assert sorted(os.listdir(tmp_path)) == ["link", "real"] and _files(target) == before


def test_a_second_writer_to_one_output_is_refused_naming_the_first(tiny, tmp_path, capsys):
    out = tmp_path / "kh"
    with lock_held_by_another_process(tmp_path, ".kh.lock") as pid:
        code = _convert("hf", tiny / "orig", out)
    err = capsys.readouterr().err
    record(
        "1",
        "two converts to one output",
        "exit 2: in use by pid N; nothing written",
        f"exit {code}: {last_line(err)}",
    )
    assert _one_line_error(code, err) and f"in use by pid {pid}" in err
    assert not out.exists() and sorted(os.listdir(tmp_path)) == [".kh.lock"]


# ------------------------------------------------------------------ 2. config against weights
@needs_interop
@pytest.mark.parametrize(
    "key, value, held",
    [("num_layers", 2, 3), ("num_heads", 4, 1), ("max_sequence_length", 32, 16)],
)
def test_a_kerashub_config_that_disagrees_with_its_weights_is_named(
    foreign, tmp_path, capsys, key, value, held
):
    preset = tmp_path / "preset"
    shutil.copytree(foreign / "kerashub", preset)
    values = json.loads((preset / "config.json").read_text())
    values["config"][key] = value
    (preset / "config.json").write_text(json.dumps(values))
    code = _convert("hf", preset, tmp_path / "out")
    err = capsys.readouterr().err
    record(
        "2",
        f"KerasHub config.json {key} {value}, weights {held}",
        "exit 2 naming both values and the file",
        f"exit {code}: {last_line(err)}",
    )
    assert _one_line_error(code, err) and f"{key} {value} where the weights hold {held}" in err
    assert str(preset / "config.json") in err and not (tmp_path / "out").exists()


@needs_interop
def test_a_model_garden_config_that_disagrees_with_its_weights_is_named(foreign, tmp_path, capsys):
    export = tmp_path / "mg"
    shutil.copytree(foreign / "modelgarden", export)
    values = json.loads((export / "encoder_config.json").read_text())
    values["num_layers"] = 2
    (export / "encoder_config.json").write_text(json.dumps(values))
    code = _convert("hf", export, tmp_path / "out")
    err = capsys.readouterr().err
    record(
        "2",
        "Model Garden encoder_config.json num_layers 2, weights 3",
        "exit 2 naming both values and the file",
        f"exit {code}: {last_line(err)}",
    )
    assert _one_line_error(code, err) and "num_layers 2 where the weights hold 3" in err
    assert str(export / "encoder_config.json") in err


# ------------------------------------------------------------------ 5. one-line errors
def test_an_output_that_cannot_be_written_is_one_line(tiny, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    code = _convert("hf", tiny / "orig", tmp_path / "file" / "out")
    err = capsys.readouterr().err
    record(
        "5",
        "convert: output path under a regular file",
        "exit 2 naming the file",
        f"exit {code}: {last_line(err)}",
    )
    assert _one_line_error(code, err) and f"{tmp_path / 'file'} is a file" in err
    disk = tmp_path / "ro"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here (not root)")
    try:
        code = _convert("hf", tiny / "orig", disk / "out")
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    err = capsys.readouterr().err
    record(
        "5",
        "convert: read-only output parent",
        "exit 2: cannot write to ...",
        f"exit {code}: {last_line(err)}",
    )
    assert _one_line_error(code, err) and "cannot write to output out in" in err


@needs_interop
def test_a_binary_vocabulary_is_named_before_a_kerashub_tokenizer(tiny, tmp_path, capsys):
    binary = tmp_path / "vocab.bin"
    binary.write_bytes(b"\xff\xfe\x00[PAD]\n\x80\n")
    code = _convert("kerashub", tiny / "orig", tmp_path / "out", "--vocab-file", str(binary))
    err = capsys.readouterr().err
    record(
        "5",
        "convert --to kerashub: binary vocabulary",
        "exit 2 naming the file",
        f"exit {code}: {last_line(err)}",
    )
    assert _one_line_error(code, err) and f"{binary} is not UTF-8 text" in err
    assert not (tmp_path / "out").exists()


@needs_interop
def test_a_model_garden_export_beside_a_vocabulary_of_another_size(foreign, tmp_path, capsys):
    export = tmp_path / "mg"
    shutil.copytree(foreign / "modelgarden", export)
    (export / "vocab.txt").write_text("".join(f"{t}\n" for t in SPECIAL + ["a", "b"]))
    code = _convert("kerashub", export, tmp_path / "out")
    err = capsys.readouterr().err
    record(
        "5",
        "Model Garden export beside a 7-token vocab (20 rows)",
        "exit 2 naming the vocab, its size and the rows",
        f"exit {code}: {last_line(err)}",
    )
    assert _one_line_error(code, err)
    assert f"{export / 'vocab.txt'} has 7 entries" in err and "has 20 embedding rows" in err


def test_a_vocabulary_of_another_size_than_the_embeddings_is_refused(tiny, tmp_path, capsys):
    bigger = tmp_path / "bigger.txt"
    bigger.write_text(VOCAB + "extra\n")
    code = _convert("hf", tiny / "orig", tmp_path / "o1", "--vocab-file", str(bigger))
    err = capsys.readouterr().err
    record(
        "5",
        "convert: vocabulary of 21 ids for 20 embedding rows",
        "exit 2 naming the vocab, its size and the rows",
        f"exit {code}: {last_line(err)}",
    )
    assert _one_line_error(code, err) and f"{bigger} has 21 entries" in err
    assert "20 embedding rows" in err and not (tmp_path / "o1").exists()
    # Fewer ids than rows: refused unless the padding is declared.
    smaller = tmp_path / "smaller.txt"
    smaller.write_text("".join(f"{t}\n" for t in SPECIAL))
    args = ["--vocab-file", str(smaller)]
    assert _convert("hf", tiny / "orig", tmp_path / "o2", *args) == 2
    assert "--vocab-padding" in capsys.readouterr().err
    assert _convert("hf", tiny / "orig", tmp_path / "o2", *args, "--vocab-padding") == 0
    assert (tmp_path / "o2" / "vocab.txt").read_text() == smaller.read_text()


def test_fine_tuning_from_a_home_with_fewer_vocabulary_ids_than_rows_is_refused(
    tiny, tmp_path, capsys
):
    home = tmp_path / "home_hf"
    assert _convert("hf", tiny / "orig", home) == 0  # 20 embedding rows
    data = tmp_path / "data"
    (data / "finetuning_data" / "sst").mkdir(parents=True)
    (data / "vocab.txt").write_text("".join(f"{t}\n" for t in SPECIAL + ["the", "good"]))
    rows = "sentence\tlabel\n" + "".join(f"the good .\t{i % 2}\n" for i in range(8))
    for split in ("train", "dev"):
        (data / "finetuning_data" / "sst" / f"{split}.tsv").write_text(rows)
    hparams = {"init_checkpoint": str(home), "max_seq_length": 12, "train_batch_size": 8}
    argv = ["--data-dir", str(data), "--model-name", "m", "--tasks", "sst"]
    code = finetune.main([*argv, "--hparams", json.dumps(hparams)])
    err = capsys.readouterr().err
    record(
        "5",
        "fine-tune from a converted home, 7-id vocab for 20 rows",
        "an error naming the vocab, its size and the rows",
        f"exit {code}: {last_line(err)}",
    )
    assert code == 1 and "Traceback" not in err
    assert f"{data / 'vocab.txt'} has 7 entries but {home}" in err and "20 embedding rows" in err


# ------------------------------------------------------------------ 6. legitimate reruns
def test_convert_into_an_existing_empty_folder_needs_no_overwrite(tiny, tmp_path, capsys):
    out = tmp_path / "made_for_it"
    out.mkdir()
    code = _convert("hf", tiny / "orig", out)
    err = capsys.readouterr().err
    record("6", "convert into an existing empty folder", "exit 0", f"exit {code}: {last_line(err)}")
    assert code == 0, err
    assert (out / "discriminator" / "config.json").exists()


def test_convert_overwrite_replaces_its_own_output_of_another_format(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    assert _convert("original", tiny / "orig", out) == 0
    code = _convert("hf", tiny / "orig", out, "--overwrite")
    err = capsys.readouterr().err
    record(
        "6",
        "convert --overwrite over convert's own output in another format",
        "exit 0, replaced",
        f"exit {code}: {last_line(err)}",
    )
    assert code == 0, err
    assert (out / "discriminator" / "config.json").exists()
    assert not list(out.glob("model.ckpt-*"))
    # A user's file beside that other format's files still keeps the folder.
    assert _convert("original", tiny / "orig", out, "--overwrite") == 0
    (out / "notes.txt").write_text("mine")
    assert _convert("hf", tiny / "orig", out, "--overwrite") == 2
    assert "notes.txt" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"


def test_fine_tuning_from_a_home_convert_padded_on_purpose(tiny, tmp_path, capsys):
    home = tmp_path / "home_hf"
    (tmp_path / "small.txt").write_text("".join(f"{t}\n" for t in SPECIAL + ["the", "good"]))
    args = ["--vocab-file", str(tmp_path / "small.txt"), "--vocab-padding"]
    assert _convert("hf", tiny / "orig", home, *args) == 0  # 7 ids for 20 rows, declared
    data = tmp_path / "data"
    (data / "finetuning_data" / "sst").mkdir(parents=True)
    rows = "sentence\tlabel\n" + "".join(f"the good .\t{i % 2}\n" for i in range(8))
    for split in ("train", "dev"):
        (data / "finetuning_data" / "sst" / f"{split}.tsv").write_text(rows)
    argv = [
        "--data-dir",
        str(data),
        "--model-name",
        "m",
        "--tasks",
        "sst",
        "--pretrained",
        str(home),
    ]
    hparams = {"max_seq_length": 12, "train_batch_size": 8, "eval_batch_size": 8}
    assert finetune.main([*argv, "--hparams", json.dumps(hparams)]) == 1
    err = capsys.readouterr().err
    assert '"vocab_padding": true' in err, err
    code = finetune.main([*argv, "--hparams", json.dumps({**hparams, "vocab_padding": True})])
    err = capsys.readouterr().err
    record(
        "6",
        "fine-tune from a home convert --vocab-padding wrote",
        'exit 0 with "vocab_padding": true',
        f"exit {code}: {last_line(err)}",
    )
    assert code == 0, err


def test_make_finetune_passes_a_data_dir_with_spaces_as_one_argument(tmp_path):
    data = tmp_path / "a path" / "with spaces"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shown = subprocess.run(
        ["make", "-n", "-C", root, "finetune", f"DATA_DIR={data}", "TASK=sst"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.replace("\\\n", " ")  # the recipe's continued lines as one
    line = next(line for line in shown.splitlines() if "electra_tf.finetune" in line)
    words = shlex.split(line)
    assert words[words.index("--data-dir") + 1] == str(data), line
