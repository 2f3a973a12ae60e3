"""Corpus -> TFRecords: packing statistics, record format, determinism and error paths."""

import argparse
import gzip
import io
import lzma
import math
import os
import random
import tarfile

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.cli.tfrecord_flags import add_build_flags
from electra_tf.data import vocab_learning
from electra_tf.data.corpus import gutenberg_body
from electra_tf.data.example_builder import ExampleBuilder, ExampleSerializer
from electra_tf.data.tfrecord_builder import BuildOptions, build_pretraining_tfrecords

L = 64
N_DOC_TAGS = 30
SPECIALS = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _vocab(tmp_path):
    words = SPECIALS + [f"a{i}" for i in range(N_DOC_TAGS)] + [f"b{i}" for i in range(N_DOC_TAGS)]
    words += [f"w{i}" for i in range(200)]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return str(path), {w: i for i, w in enumerate(words)}


def _document(rng, doc_id):
    """Lines that each start with the document's two tag words (aX bY)."""
    tag = f"a{doc_id // N_DOC_TAGS} b{doc_id % N_DOC_TAGS}"
    lines = []
    for _ in range(rng.randint(1, 12)):
        body = " ".join(f"w{rng.randrange(200)}" for _ in range(rng.randint(0, 30)))
        lines.append(f"{tag} {body}".strip())
    return lines


def _corpus(tmp_path, n_files=4, docs_per_file=40, seed=0):
    rng = random.Random(seed)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    doc_id = 0
    for f in range(n_files):
        docs = []
        for _ in range(docs_per_file):
            docs.append("\n".join(_document(rng, doc_id)))
            doc_id += 1
        (corpus / f"part{f}.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return corpus


def _read_records(output_dir, length=L):
    spec = {  # the original's pretrain_data.py parsing spec
        name: tf.io.FixedLenFeature([length], tf.int64)
        for name in ("input_ids", "input_mask", "segment_ids")
    }
    files = sorted(tf.io.gfile.glob(os.path.join(output_dir, "pretrain_data.tfrecord-*")))
    records = []
    for path in files:
        for raw in tf.data.TFRecordDataset(path):
            parsed = tf.io.parse_single_example(raw, spec)
            records.append({k: v.numpy() for k, v in parsed.items()})
    return files, records


def _build(tmp_path, corpus, out="out", **kwargs):
    vocab_file = kwargs.pop("vocab_file", None) or _vocab(tmp_path)[0]
    options = BuildOptions(
        corpus_dir=str(corpus),
        vocab_file=vocab_file,
        output_dir=str(tmp_path / out),
        max_seq_length=L,
        num_out_files=kwargs.pop("num_out_files", 7),
        progress=False,
        **kwargs,
    )
    return build_pretraining_tfrecords(options)


def test_segment_and_target_statistics():
    """10% single-segment examples and 5% short targets, observed on the builder itself.

    Lines of 10 tokens and max length 64: a full-length example buffers 7 lines, and without
    the single-segment draw B is never empty, so P(no B | full target) is exactly 0.1.
    """
    rng = random.Random(1)
    builder = ExampleBuilder(64, cls_id=1, sep_id=2, rng=rng)
    full, full_single, short, n = 0, 0, 0, 0
    while n < 6000:
        target = builder.target_length
        example = builder.add_line(list(range(10, 20)))
        if example is None:
            continue
        n += 1
        input_ids, segment_ids = example
        if target == 64:
            full += 1
            full_single += max(segment_ids) == 0
            assert len(input_ids) == 64  # 70 buffered tokens, truncated to the length
        else:
            short += 1
            assert 5 <= target < 64 and len(input_ids) <= 64
    p_single = full_single / full
    assert abs(p_single - 0.1) < 4 * math.sqrt(0.1 * 0.9 / full), p_single
    p_short = 0.05 * (1 - 1 / 60)  # randint(5, 64) can return 64 itself
    assert abs(short / n - p_short) < 4 * math.sqrt(p_short * (1 - p_short) / n), short / n


def test_records_are_well_formed_and_never_cross_documents(tmp_path):
    corpus = _corpus(tmp_path)
    vocab_file, vocab = _vocab(tmp_path)
    stats = _build(tmp_path, corpus, vocab_file=vocab_file)
    files, records = _read_records(tmp_path / "out")
    assert len(files) == 7 and all("-of-7" in f for f in files)
    assert len(records) == stats.examples > 100
    assert stats.documents == 160
    tag_a = {vocab[f"a{i}"] for i in range(N_DOC_TAGS)}
    tag_b = {vocab[f"b{i}"] for i in range(N_DOC_TAGS)}
    n_two_segments = 0
    for r in records:
        ids, mask, seg = r["input_ids"], r["input_mask"], r["segment_ids"]
        assert ids.shape == mask.shape == seg.shape == (L,)
        n = int(mask.sum())
        assert (mask[:n] == 1).all() and (mask[n:] == 0).all() and (ids[n:] == 0).all()
        assert ids[0] == vocab["[CLS]"] and ids[n - 1] == vocab["[SEP]"]
        assert (seg[n:] == 0).all()
        n_a = int((seg[:n] == 0).sum())
        assert (seg[:n_a] == 0).all() and (seg[n_a:n] == 1).all()  # 0...0 1...1, then pad
        assert ids[n_a - 1] == vocab["[SEP]"]
        assert list(ids[:n]).count(vocab["[SEP]"]) == (2 if n_a < n else 1)
        n_two_segments += n_a < n
        # Every line starts with its document's tags: one document per example.
        assert len({int(t) for t in ids[:n] if t in tag_a}) == 1
        assert len({int(t) for t in ids[:n] if t in tag_b}) == 1
    assert n_two_segments > len(records) // 3
    assert stats.example_tokens + stats.padding == L * len(records)
    assert stats.example_tokens == int(sum(r["input_mask"].sum() for r in records))


def _mixed_corpus(tmp_path):
    """Plain, .gz, .xz and a .tar.gz of two members."""
    rng = random.Random(3)
    corpus = tmp_path / "mixed"
    corpus.mkdir()
    texts = ["\n\n".join("\n".join(_document(rng, d * 7 + k)) for k in range(7)) for d in range(6)]
    (corpus / "a.txt").write_text(texts[0], encoding="utf-8")
    (corpus / "b.txt.gz").write_bytes(gzip.compress(texts[1].encode()))
    (corpus / "c.txt.xz").write_bytes(lzma.compress(texts[2].encode()))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i, text in enumerate(texts[3:5]):
            data = text.encode()
            info = tarfile.TarInfo(f"docs/m{i}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (corpus / "d.tar.gz").write_bytes(buf.getvalue())
    sub = corpus / "nested"
    sub.mkdir()
    (sub / "e.txt").write_text(texts[5], encoding="utf-8")
    return corpus


def test_two_processes_write_the_same_bytes_as_one(tmp_path):
    corpus = _mixed_corpus(tmp_path)
    one = _build(tmp_path, corpus, out="one", num_processes=1, seed=5)
    two = _build(tmp_path, corpus, out="two", num_processes=2, seed=5)
    assert one.text_files == two.text_files == 6 and one.documents == 42
    assert one.examples == two.examples > 0
    for k in range(7):
        name = f"pretrain_data.tfrecord-{k}-of-7"
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    other = _build(tmp_path, corpus, out="other", num_processes=1, seed=6)
    _, rec5 = _read_records(tmp_path / "one")
    _, rec6 = _read_records(tmp_path / "other")
    assert other.tokens == one.tokens  # the seed changes packing, not tokenization
    assert [r["input_ids"].tolist() for r in rec5] != [r["input_ids"].tolist() for r in rec6]


def test_one_doc_per_file_skips_blank_lines(tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    # Two tiny "documents" per file, separated by a blank line.
    (corpus / "x.txt").write_text("a0 b0 w1\n\na0 b0 w2\n", encoding="utf-8")
    (corpus / "y.txt").write_text("a1 b1 w3\n\n\na1 b1 w4\n", encoding="utf-8")
    split = _build(tmp_path, corpus, out="split", num_out_files=1)
    joined = _build(tmp_path, corpus, out="joined", num_out_files=1, blanks_separate_docs=False)
    assert (split.documents, split.examples) == (4, 4)
    assert (joined.documents, joined.examples) == (2, 2)


@pytest.mark.parametrize(
    "argv,expected",
    [
        ([], True),
        (["--blanks-separate-docs"], True),
        (["--blanks-separate-docs=true"], True),
        (["--blanks-separate-docs=false"], False),
        (["--blanks-separate-docs", "False"], False),
        (["--no-blanks-separate-docs"], False),
        (["--one-doc-per-file"], False),
    ],
)
def test_blanks_separate_docs_flag_switches_both_ways(argv, expected):
    parser = argparse.ArgumentParser()
    add_build_flags(parser)
    assert parser.parse_args(argv).blanks_separate_docs is expected


def test_bad_bytes_empty_and_binary_files_are_reported_not_fatal(tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "bad.txt").write_bytes(b"a0 b0 w1 \xff\xfe w2\nw3 \xc3\n")
    (corpus / "empty.txt").write_bytes(b"")
    (corpus / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    stats = _build(tmp_path, corpus, num_out_files=1)
    assert stats.replaced_chars == 3
    assert stats.examples == 1 and stats.tokens == 5
    assert sorted(s.split(":")[0] for s in stats.skipped) == ["blob.bin", "empty.txt"]
    assert "binary" in " ".join(stats.skipped) and "empty" in " ".join(stats.skipped)


def test_error_paths(tmp_path, capsys):
    from electra_tf.cli.tfrecord_flags import options_from_flags, run_build

    corpus = _corpus(tmp_path, n_files=1, docs_per_file=2)
    parser = argparse.ArgumentParser()
    add_build_flags(parser)
    args = parser.parse_args(["--num-out-files", "2", "--no-progress"])

    bad_vocab = tmp_path / "bad_vocab.txt"
    bad_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[MASK]\nw1\n", encoding="utf-8")
    assert (
        run_build(options_from_flags(args, str(corpus), str(bad_vocab), str(tmp_path / "o"))) == 2
    )
    err = capsys.readouterr().err
    assert "[SEP]" in err and str(bad_vocab) in err

    vocab_file, _ = _vocab(tmp_path)
    missing = str(tmp_path / "nowhere")
    assert run_build(options_from_flags(args, missing, vocab_file, str(tmp_path / "o"))) == 2
    assert "corpus directory not found" in capsys.readouterr().err

    out = tmp_path / "user_dir"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert run_build(options_from_flags(args, str(corpus), vocab_file, str(out))) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == ["notes.txt"]

    # With --overwrite: our own stale shards go, the user's file stays.
    (out / "pretrain_data.tfrecord-5-of-9").write_bytes(b"stale")
    args.overwrite = True
    assert run_build(options_from_flags(args, str(corpus), vocab_file, str(out))) == 0
    assert sorted(os.listdir(out)) == [
        "build_summary.json", "notes.txt",
        "pretrain_data.tfrecord-0-of-2", "pretrain_data.tfrecord-1-of-2",
    ]  # fmt: skip


def test_serializer_matches_tf_train_example():
    serializer = ExampleSerializer(max_length=8, vocab_size=40000)
    ids = [101, 5, 127, 128, 16383, 16384, 39999]
    seg = [0, 0, 0, 1, 1, 1, 1]
    raw = serializer.serialize(ids, seg)
    example = tf.train.Example.FromString(raw)
    feats = example.features.feature
    assert list(feats["input_ids"].int64_list.value) == ids + [0]
    assert list(feats["input_mask"].int64_list.value) == [1] * 7 + [0]
    assert list(feats["segment_ids"].int64_list.value) == seg + [0]
    reference = tf.train.Example(
        features=tf.train.Features(
            feature={
                k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                for k, v in (
                    ("input_ids", ids + [0]),
                    ("input_mask", [1] * 7 + [0]),
                    ("segment_ids", seg + [0]),
                )
            }
        )
    )
    assert example == reference
    with pytest.raises(ValueError, match="max_length 8"):
        serializer.serialize(list(range(9)), [0] * 9)
    np.testing.assert_array_equal(
        tf.io.parse_single_example(raw, {"input_ids": tf.io.FixedLenFeature([8], tf.int64)})[
            "input_ids"
        ].numpy(),
        ids + [0],
    )


def test_gutenberg_boilerplate_is_stripped_only_when_asked(tmp_path):
    corpus = tmp_path / "g"
    corpus.mkdir()
    book = [
        "\ufeffThe Project Gutenberg eBook of w0",
        "a0 b0 w9",
        "*** START OF THE PROJECT GUTENBERG EBOOK W0 ***",
        "a0 b0 w1",
        "a0 b0 w2",
        "*** END OF THE PROJECT GUTENBERG EBOOK W0 ***",
        "a0 b0 w8 licence",
    ]
    (corpus / "pg1.txt").write_text("\n".join(book) + "\n", encoding="utf-8")
    # No START marker: nothing is dropped, whatever the flag says.
    (corpus / "plain.txt").write_text("a1 b1 w3\na1 b1 w4\n", encoding="utf-8")
    kept = _build(tmp_path, corpus, out="kept", num_out_files=1, blanks_separate_docs=False)
    body = _build(
        tmp_path,
        corpus,
        out="body",
        num_out_files=1,
        blanks_separate_docs=False,
        strip_gutenberg=True,
    )
    assert kept.lines == len(book) + 2
    assert body.lines == 2 + 2
    assert list(gutenberg_body(iter(book))) == book[3:5]
    plain = [f"line {i}" for i in range(1200)]  # longer than the header search window
    assert list(gutenberg_body(iter(plain))) == plain
    assert list(gutenberg_body(iter(plain[:3]))) == plain[:3]
    lines = vocab_learning.corpus_lines(str(corpus), strip_gutenberg=True)
    assert sorted(line.strip() for line in lines) == sorted(book[3:5] + ["a1 b1 w3", "a1 b1 w4"])


# ---------------------------------------------------------------- stopped builds
def _our_files(folder):
    """{name: contents} of the files a build writes (no scratch, lock or swap record); of the
    summary, its counts but not its timing or the options that name folders."""
    import json

    files = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and not p.name.startswith("."):
            files[p.name] = p.read_bytes()
            if p.name == "build_summary.json":
                stats = json.loads(files[p.name])["stats"]
                files[p.name] = {k: v for k, v in stats.items() if k != "seconds"}
    return files


def _children(pid):
    """Pids whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process parents from /proc")
def test_kill_9_mid_build_keeps_the_previous_build_and_a_rerun_restarts_cleanly(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # Large enough that the workers' shards exist long enough for the poll below to see them:
    # on a 2-core Zen 5 the whole build of 60 documents per file took 0.2 s, its shards
    # visible for 35 ms (the poll missed them once); with 480, about 0.3 s.
    corpus = _corpus(tmp_path, n_files=24, docs_per_file=480)
    vocab_file, _ = _vocab(tmp_path)
    out = tmp_path / "out"
    _build(tmp_path, corpus, vocab_file=vocab_file, seed=1)  # the previous build
    previous = _our_files(out)
    command = [
        sys.executable, "-m", "electra_tf.cli.build_tfrecords", "--corpus-dir", str(corpus),
        "--vocab-file", vocab_file, "--output-dir", str(out), "--max-seq-length", str(L),
        "--num-out-files", "7", "--seed", "2", "--num-processes", "2", "--overwrite",
        "--no-progress",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=root)
    proc = subprocess.Popen(command, env=env, cwd=root, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(n.endswith(".bin") for _, _, names in os.walk(out) for n in names):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "no worker wrote examples in 120 s"
        time.sleep(0.01)
    workers = _children(proc.pid)
    proc.kill()  # SIGKILL: no clean-up runs in the parent
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert workers, "the build had no worker processes"
    deadline = time.monotonic() + 30
    while any(_running(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [w for w in workers if _running(w)], "workers outlived the killed build"
    # The previous build is whole; the stopped one left only its scratch and lock (hidden).
    assert _our_files(out) == previous
    assert all(n.startswith(".") for n in os.listdir(out) if n not in previous)

    # The same command again starts afresh: its output is a clean build's, nothing is left.
    rerun = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    _build(tmp_path, corpus, out="clean", vocab_file=vocab_file, seed=2, num_processes=1)
    assert _our_files(out) == _our_files(tmp_path / "clean") != previous
    assert sorted(os.listdir(out)) == sorted(previous)


def test_a_swap_in_stopped_half_way_is_finished_not_mixed(tmp_path, monkeypatch):
    from electra_tf.data import tfrecord_builder

    corpus = _corpus(tmp_path)
    vocab_file, _ = _vocab(tmp_path)
    out = tmp_path / "out"
    _build(tmp_path, corpus, vocab_file=vocab_file, seed=1, num_out_files=9)
    previous = _our_files(out)
    real_replace = os.replace
    moved = []

    def replace_then_stop(source, target):
        if os.path.dirname(target) == str(out):  # the swap-in's renames, not the shards'
            if len(moved) == 3:
                raise KeyboardInterrupt  # Ctrl-C after three files were swapped in
            moved.append(os.path.basename(target))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace_then_stop)
    with pytest.raises(KeyboardInterrupt):
        _build(tmp_path, corpus, vocab_file=vocab_file, seed=2, overwrite=True)
    monkeypatch.setattr(os, "replace", real_replace)
    assert len(moved) == 3 and not tfrecord_builder.is_complete(str(out))
    # Half of each build: what the record exists to finish (7 new shards replace 9 old).
    assert _our_files(out) != previous and os.path.exists(out / tfrecord_builder.SWAP_RECORD)

    assert tfrecord_builder.complete_swap_in(str(out))  # what the next build does first
    _build(tmp_path, corpus, out="clean", vocab_file=vocab_file, seed=2)
    assert _our_files(out) == _our_files(tmp_path / "clean")
    assert tfrecord_builder.is_complete(str(out))
    # The next build removes the finished swap's staging folder and builds as asked.
    _build(tmp_path, corpus, vocab_file=vocab_file, seed=2, overwrite=True)
    assert sorted(os.listdir(out)) == sorted(_our_files(tmp_path / "clean"))
