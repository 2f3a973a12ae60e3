"""data_prep/build_gutenberg_data.py: book split, vocabulary on the training books only,
licence text stripped, both TFRecord splits, and a rerun that keeps what exists."""

import lzma
import os

import tensorflow as tf

from electra_tf.cli import build_gutenberg_data


def _book(words, licence):
    body = "\n".join(" ".join(words[i : i + 6]) for i in range(0, len(words), 6))
    return (
        f"The Project Gutenberg eBook\n{licence}\n"
        f"*** START OF THE PROJECT GUTENBERG EBOOK X ***\n{body}\n"
        f"*** END OF THE PROJECT GUTENBERG EBOOK X ***\n{licence}\n"
    )


def test_split_vocab_and_records(tmp_path, capsys):
    books = tmp_path / "books"
    books.mkdir()
    for i in range(6):
        words = [f"common{j % 7}" for j in range(300)] + [f"book{i}word{j}" for j in range(30)]
        text = _book(words, "licencetext " * 20)
        if i % 2:
            (books / f"pg{i}.txt.xz").write_bytes(lzma.compress(text.encode()))
        else:
            (books / f"pg{i}.txt").write_text(text)
    (books / "MANIFEST.tsv").write_text("file\ttitle\n")
    data = tmp_path / "data"
    argv = ["--books-dir", str(books), "--data-dir", str(data), "--heldout-every", "3"]
    argv += ["--vocab-size", "200", "--train-shards", "2", "--num-processes", "1"]
    argv += ["--max-seq-length", "32"]
    assert build_gutenberg_data.main(argv) == 0
    assert sorted(os.listdir(data / "corpus-heldout")) == ["pg2.txt", "pg5.txt.xz"]
    assert len(os.listdir(data / "corpus-train")) == 4
    vocab = (data / "vocab.txt").read_text().split("\n")
    assert "licencetext" not in vocab  # the licence was stripped before counting
    assert "common3" in vocab and not any(w.startswith("book2") for w in vocab)
    for folder, shards in (("pretrain_tfrecords", 2), ("tfrecords-heldout", 2)):
        files = sorted((data / folder).glob("pretrain_data.tfrecord-*"))
        assert len(files) == shards
        assert sum(1 for f in files for _ in tf.data.TFRecordDataset(str(f))) > 0
    before = {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert build_gutenberg_data.main(argv) == 0  # a rerun keeps everything
    assert "keeping" in capsys.readouterr().out
    assert before == {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file()}


def test_a_rerun_rebuilds_records_whose_build_was_stopped(tmp_path, capsys):
    books = tmp_path / "books"
    books.mkdir()
    for i in range(4):
        words = [f"common{j % 7}" for j in range(200)] + [f"book{i}word{j}" for j in range(20)]
        (books / f"pg{i}.txt").write_text(_book(words, "licencetext " * 5))
    data = tmp_path / "data"
    argv = ["--books-dir", str(books), "--data-dir", str(data), "--heldout-every", "2"]
    argv += ["--vocab-size", "120", "--train-shards", "2", "--num-processes", "1"]
    argv += ["--max-seq-length", "32"]
    assert build_gutenberg_data.main(argv) == 0
    records = data / "pretrain_tfrecords"
    whole = sorted(os.listdir(records))
    # What `kill -9` during the training split's build leaves: its lock and staging folder,
    # no records (a first build) or the previous ones (a rebuild).
    for name in whole:
        (records / name).unlink()
    (records / ".build.lock").write_text("{}")
    (records / ".staging-abc123").mkdir()
    (records / ".staging-abc123" / "pretrain_data.tfrecord-0-of-2.incomplete").write_bytes(b"x")
    capsys.readouterr()
    assert build_gutenberg_data.main(argv) == 0
    out = capsys.readouterr().out
    assert f"keeping {records}" not in out and f"keeping {data / 'tfrecords-heldout'}" in out
    assert sorted(os.listdir(records)) == whole  # rebuilt whole, the scratch removed
