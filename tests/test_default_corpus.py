"""The default corpus's documents: grouped by package so that examples are not mostly padding.

The original's packing ends an example with its document (example_builder.py), so a corpus of
one-docstring documents trains mostly on padding; `group_documents` joins a package's files into
documents of at least _MIN_DOC_CHARS and splits long ones at paragraph boundaries.
"""

import hashlib
import os
import random

import numpy as np
import pytest

from electra_tf.data import default_corpus

# Words with enough common English function words for `looks_like_english`.
_WORDS = (
    "the of and to a in is for that this be it with as are on by or an if not from can which "
    "model layer value token sequence training data batch corpus example document paragraph "
    "returns given number string list array shape first second each other used when where"
).split()


def _paragraph(rng: random.Random, words: int = 50) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def _fake_tree(root: str) -> None:
    """Three packages of small modules with four short docstrings each, a top-level module and a
    long manual: 102 short docstrings in all, which were 102 documents of about 50 tokens."""
    rng = random.Random(7)
    for package in ("alpha", "beta", "gamma"):
        os.makedirs(os.path.join(root, package))
        for m in range(8):
            docstrings = [
                f'"""{_paragraph(rng, 20)}\n\n{_paragraph(rng, 20)}\n"""' for _ in range(4)
            ]  # module, class and function docstrings
            body = "\n\ndef f():\n    ".join(docstrings)
            with open(os.path.join(root, package, f"mod{m}.py"), "w") as f:
                f.write(body + "\n")
    with open(os.path.join(root, "top.py"), "w") as f:
        f.write("\n".join(f'"""{_paragraph(rng)}"""' for _ in range(6)) + "\n")
    with open(os.path.join(root, "alpha", "manual.md"), "w") as f:  # ~40,000 characters
        f.write("\n\n".join(_paragraph(rng, 60) for _ in range(110)) + "\n")


def _documents(split_dir: str) -> list[list[str]]:
    docs = []
    for name in sorted(os.listdir(split_dir)):
        with open(os.path.join(split_dir, name), encoding="utf-8") as f:
            docs += [d.splitlines() for d in f.read().split("\n\n") if d.strip()]
    return docs


def test_group_documents_joins_a_package_and_splits_long_files():
    p = [f"p{i:08d}" for i in range(20)]  # 9 characters + a line break: 10 each
    files = [
        ("a", p[0:1]),
        ("a", p[1:2]),
        ("a", p[2:4]),  # 40 >= 30: the document closes before the next file
        ("a", p[4:5]),
        ("b", p[5:6]),  # another package: closes at 10 characters
        ("b", p[6:13]),  # 80 characters: split before passing 50
        ("c", ["x" * 70]),  # one paragraph longer than max_chars stays whole
    ]
    got = list(default_corpus.group_documents(files, min_chars=30, max_chars=50))
    assert got == [p[0:4], p[4:5], p[5:10], p[10:13], ["x" * 70]]


def test_package_key():
    roots = ["/r", "/r/lib/site"]
    assert default_corpus.package_key("/r/os.py", roots) == "/r"
    assert default_corpus.package_key("/r/email/mime/text.py", roots) == "/r/email"
    assert default_corpus.package_key("/r/lib/site/numpy/core/a.py", roots) == "/r/lib/site/numpy"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The default corpus built twice from the fake tree, through the real builder."""
    root = str(tmp_path_factory.mktemp("tree"))
    _fake_tree(root)
    patch = pytest.MonkeyPatch()
    patch.setattr(default_corpus, "source_roots", lambda: [os.path.realpath(root)])
    runs = []
    try:
        for name in ("a", "b"):
            log: list[str] = []
            data_dir = str(tmp_path_factory.mktemp(name))
            marker = default_corpus.build_default_data(
                data_dir, vocab_size=200, num_processes=1, log=log.append
            )
            runs.append((data_dir, marker, "\n".join(log)))
    finally:
        patch.undo()
    return runs


def test_documents_are_grouped_split_and_held_out_by_hash(built):
    data_dir, marker, _ = built[0]
    train = _documents(os.path.join(data_dir, "corpus"))
    held_out = _documents(os.path.join(data_dir, "eval_corpus"))
    docs = train + held_out
    sizes = sorted(sum(len(p) + 1 for p in d) for d in docs)
    # 102 docstrings (~240 characters each) and a 40,000-character manual: grouped, not one each.
    assert 5 <= len(docs) <= 12, sizes
    assert max(sizes) <= default_corpus._MAX_DOC_CHARS  # the manual was split
    # Only the last document of a package (3, and the top-level modules) may be short.
    assert sum(s < default_corpus._MIN_DOC_CHARS for s in sizes) <= 4, sizes
    # Held out by hash: every 50th document, or (none drawn, as here) the smallest hash.
    digests = {"\n".join(d): hashlib.sha1("\n".join(d).encode()).digest() for d in docs}
    drawn = sorted(t for t, h in digests.items() if h[0] % 50 == 0)
    expected = drawn or [min(digests, key=digests.get)]
    assert sorted("\n".join(d) for d in held_out) == expected
    paragraphs = [p for d in docs for p in d]
    assert len(paragraphs) == len({p.lower() for p in paragraphs})  # de-duplicated
    assert marker["settings"]["version"] >= 2  # builds of one-docstring documents are redone


def test_build_is_deterministic(built):
    (_, first, _), (_, second, _) = built
    # The build summaries hold timings and paths; the text, vocabulary and records are the same.
    files = [{k: v for k, v in m["files"].items() if "summary" not in k} for m in (first, second)]
    assert files[0] == files[1] and any(k.startswith("pretrain_tfrecords/") for k in files[0])


def test_examples_are_mostly_real_tokens(built):
    import tensorflow as tf

    data_dir, marker, log = built[0]
    assert "padding" in log  # the build says how much of its examples is padding
    folder = os.path.join(data_dir, "pretrain_tfrecords")
    files = sorted(os.path.join(folder, n) for n in os.listdir(folder) if ".tfrecord-" in n)
    spec = {"input_mask": tf.io.FixedLenFeature([128], tf.int64)}
    masks = np.array(
        [
            tf.io.parse_single_example(r, spec)["input_mask"].numpy()
            for r in tf.data.TFRecordDataset(files)
        ]
    )
    assert len(masks) >= 60
    padding = 1.0 - masks.mean()
    assert abs(100 * padding - marker["tfrecords"]["pretrain_tfrecords"]["padding_percent"]) < 0.06
    print(f"padding {padding:.1%} of {masks.size} positions")
    assert padding < 0.15, f"{padding:.1%} of {masks.size} positions are padding"


def test_a_finished_build_says_its_padding_again(built):
    data_dir, marker, log = built[0]
    percent = marker["tfrecords"]["pretrain_tfrecords"]["padding_percent"]
    assert f"padding {percent:.1f}%" in log  # as the build printed it
    again: list[str] = []
    assert (
        default_corpus.build_default_data(
            data_dir, vocab_size=200, num_processes=1, log=again.append
        )
        == marker
    )
    assert len(again) == 1 and "already built" in again[0] and f"padding {percent:.1f}%" in again[0]
