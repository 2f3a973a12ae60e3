"""Token tagging data: the chunk task's label mapping keyed by its data, a user's CoNLL and
JSONL tagging files read as written, and every bad tagging file refused with file:line."""

from __future__ import annotations

import json
import os

import pytest

from electra_tf.config import ConfigError
from electra_tf.finetuning.config import finetuning_config
from electra_tf.finetuning.registry import get_task, make_tokenizer
from electra_tf.finetuning.task import DataError

WORDS = "john mary smith paris london met in visited the and".split()

# The same three sentences in IOB1 (CoNLL-2003's original files) and IOB2 (BIO).
IOB1 = [
    [("john", "I-PER"), ("smith", "I-PER"), ("visited", "O"), ("paris", "I-LOC")],
    [("mary", "I-PER"), ("john", "B-PER"), ("met", "O")],  # two people side by side
    [("london", "I-LOC"), ("and", "O"), ("paris", "I-LOC")],
]
IOB2 = [
    [("john", "B-PER"), ("smith", "I-PER"), ("visited", "O"), ("paris", "B-LOC")],
    [("mary", "B-PER"), ("john", "B-PER"), ("met", "O")],
    [("london", "B-LOC"), ("and", "O"), ("paris", "B-LOC")],
]


def conll(sentences, docstart: bool = True) -> str:
    lines = ["-DOCSTART- -X- -X- O", ""] if docstart else []
    for sentence in sentences:
        lines += [f"{word} NNP B-NP {tag}" for word, tag in sentence] + [""]
    return "\n".join(lines)


def jsonl(sentences) -> str:
    return "".join(
        json.dumps({"tokens": [w for w, _ in s], "ner": [t for _, t in s]}) + "\n"
        for s in sentences
    )


@pytest.fixture
def data_dir(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "##s"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return tmp_path


def user_task(data_dir, files: dict[str, str], **description):
    """A UserTaggingTask over `files` written in `data_dir/ner/` (complete description)."""
    from electra_tf.finetuning.user_tagging import UserTaggingTask, complete_description

    folder = data_dir / "ner"
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    desc = {"name": "ner", "kind": "tagging", **description}
    for split in ("train", "dev", "test"):
        if split in desc:
            desc[split] = str(folder / desc[split])
    complete_description(desc, str(folder / "task.json"))
    hparams = {"max_seq_length": 12, "task_names": ["ner"], "user_tasks": {"ner": desc}}
    config = finetuning_config("m", str(data_dir), hparams)
    return UserTaggingTask(config, "ner", make_tokenizer(config))


def chunk_task(data_dir, files: dict[str, str]):
    folder = data_dir / "finetuning_data" / "chunk"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    config = finetuning_config("m", str(data_dir), {"task_names": ["chunk"]})
    return get_task("chunk", config, make_tokenizer(config)), config


CHUNK = "the DT B-NP\ncat NN I-NP\nsat VBD B-VP\n\non IN B-PP\na DT B-NP\n"


def test_chunk_label_mapping_follows_the_data_and_is_not_written(data_dir):
    """A tag added to the chunk data is in the next run's mapping (the old cache file keyed by
    the task name alone gave a bare KeyError), and reading writes nothing."""
    task, config = chunk_task(data_dir, {"train.txt": CHUNK})
    assert set(task.label_mapping()) == {"B-NP", "E-NP", "S-VP", "S-NP", "S-PP"}
    task.get_examples("train")
    task, _ = chunk_task(data_dir, {"train.txt": CHUNK + "\nran VBD B-ADJP\n"})
    examples = task.get_examples("train")  # the old code: KeyError 'S-ADJP'
    assert "S-ADJP" in task.label_mapping()
    assert examples[-1].labels == [task.label_mapping()["S-ADJP"]]
    assert task.featurization_key()["label_mapping"] == task.label_mapping()
    assert not os.path.exists(config.tfrecords_dir())  # nothing written before training


def test_chunk_keeps_dev_tags_and_serves_iob2(data_dir):
    """As the original, chunk's labels include dev's tags (no error, no KeyError); its export
    answers the files' IOB2 (S-/E- predictions served as B-/I-)."""
    task, _ = chunk_task(data_dir, {"train.txt": CHUNK, "dev.txt": "he PRP B-LST\n"})
    assert task.get_examples("dev")[0].labels == [task.label_mapping()["S-LST"]]
    options = task.serving_options()
    mapping = task.label_mapping()
    assert options["single_segment_id"] == 1
    assert options["label_names"] == [
        {"S": "B", "E": "I"}.get(t[0], t[0]) + t[1:] for t in sorted(mapping, key=mapping.get)
    ]
    assert {n.split("-")[0] for n in options["label_names"]} == {"B", "I"}


def test_chunk_empty_dev_is_an_error_naming_the_file(data_dir):
    task, _ = chunk_task(data_dir, {"train.txt": CHUNK, "dev.txt": "\n\n"})
    with pytest.raises(DataError, match=r"chunk/dev\.txt: no tagged sentence"):
        task.get_examples("dev")


@pytest.mark.parametrize("form", ["conll", "jsonl"])
@pytest.mark.parametrize("scheme", ["IOB1", "IOB2"])
def test_user_tags_read_as_written(data_dir, form, scheme):
    sentences = IOB1 if scheme == "IOB1" else IOB2
    if form == "conll":
        task = user_task(data_dir, {"train.conll": conll(sentences)}, train="train.conll")
    else:
        files = {"train.jsonl": jsonl(sentences)}
        task = user_task(data_dir, files, train="train.jsonl", text="tokens", label="ner")
    expected = sorted({t for s in sentences for _, t in s})
    assert task.description["labels"] == expected
    assert task.description["tag_scheme"] == scheme
    assert task.serving_options() == {"label_names": expected, "single_segment_id": 0}
    examples = task.get_examples("train")
    names = task.labels()
    assert [[names[i] for i in e.labels] for e in examples] == [
        [t for _, t in s] for s in sentences
    ]
    assert [e.words for e in examples] == [[w for w, _ in s] for s in sentences]
    (features,) = task.featurize(examples[0], is_training=True)
    assert features["segment_ids"][:7] == [0] * 7  # a single text's segment ids: 0
    assert features["input_mask"][:7] == [1] * 6 + [0]
    assert features["ner_labeled_positions"][:4] == [1, 2, 3, 4]


def test_conll_tag_column_by_index(data_dir):
    text = "john I-PER NNP\nsmith I-PER NNP\n"
    task = user_task(data_dir, {"t.conll": text}, train="t.conll", label="1")
    assert task.description["labels"] == ["I-PER"]


def test_user_labels_given_keep_their_order_and_must_cover_train(data_dir):
    files = {"train.conll": conll(IOB2)}
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG"]
    task = user_task(data_dir, files, train="train.conll", labels=labels)
    assert task.serving_options()["label_names"] == labels
    with pytest.raises(DataError, match=r"train\.conll:3: tag 'B-PER' is not in the task file"):
        user_task(data_dir, files, train="train.conll", labels=["O", "B-LOC"])
    with pytest.raises(ConfigError, match=r"\"labels\": 'PER' is not O or B-/I-/E-/S-"):
        user_task(data_dir, files, train="train.conll", labels=["O", "PER"])


# ------------------------------------------------------------------ bad data: one line each
def test_dev_tag_unseen_in_train(data_dir):
    dev = conll([[("john", "B-PER")], [("paris", "B-ORG"), ("met", "O")]], docstart=False)
    files = {"train.conll": conll(IOB2), "dev.conll": dev}
    task = user_task(data_dir, files, train="train.conll", dev="dev.conll")
    with pytest.raises(DataError, match=r"ner/dev\.conll:3: tag 'B-ORG' is not in the train"):
        task.get_examples("dev")


@pytest.mark.parametrize(
    "text, message",
    [
        ("john B-PER\nsmith PER\n", r"train\.conll:2: tag 'PER' is not O or B-/I-/E-/S-"),
        ("john B-PER\nsmith i-PER\n", r"train\.conll:2: tag 'i-PER' is not O or"),
        ("john B-PER\n\nsmith\n", r"train\.conll:3: expected 'word \.\.\. tag'"),
        ("-DOCSTART- O\n\n\n", r"train\.conll: no tagged sentence"),
        ("", r"train\.conll: no tagged sentence"),
    ],
)
def test_bad_conll(data_dir, text, message):
    with pytest.raises(DataError, match=message):
        user_task(data_dir, {"train.conll": text}, train="train.conll")


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"tokens": ["john", "smith"], "ner": ["B-PER"]}\n', r"l:1: 2 tokens but 1 ner; give"),
        ('{"tokens": ["a"], "ner": ["O"]}\n[1, 2]\n', r"l:2: a JSONL line must be an object"),
        ('{"tokens": ["a"], "ner": ["O"]}\n{"tokens": ["a"]\n', r"l:2: not JSON"),
        ('{"tokens": "john", "ner": ["O"]}\n', r"l:1: key 'tokens' must be a list of strings"),
        ('{"tokens": ["john"], "ner": ["X"]}\n', r"l:1: tag 'X' is not O or B-/I-/E-/S-"),
        ('{"tokens": [], "ner": []}\n', r"l:1: no tokens"),
        ("\n", r"l: no sentence"),
    ],
)
def test_bad_jsonl(data_dir, text, message):
    with pytest.raises(DataError, match=r"train\.json" + message):
        user_task(data_dir, {"train.jsonl": text}, train="train.jsonl", text="tokens", label="ner")


def test_user_tagging_keeps_every_word_that_fits(data_dir):
    """A user's sentence is cut only when its pieces do not fit (max_seq_length 12 here: [CLS],
    10 one-piece words, [SEP]); the original's test, which chunk keeps, counts the words left
    too and would keep only 1 of these 8 words."""
    words = "john mary smith paris london met in visited".split()
    sentence = [[(w, "O") for w in words]]
    task = user_task(data_dir, {"train.txt": conll(sentence)}, train="train.txt", dev="train.txt")
    (example,) = task.get_examples("train")
    (features,) = task.featurize(example, is_training=True)
    assert sum(features["ner_labels_mask"]) == 8
    assert sum(features["input_mask"]) == 10
    longer = [[(w, "O") for w in (words + words)[:12]]]
    task = user_task(data_dir, {"train.txt": conll(longer)}, train="train.txt", dev="train.txt")
    (features,) = task.featurize(task.get_examples("train")[0], is_training=True)
    assert sum(features["ner_labels_mask"]) == 10 and sum(features["input_mask"]) == 12
    assert features["input_ids"][11] == 3  # the closing [SEP]
    chunk, _ = chunk_task(data_dir, {"train.txt": CHUNK, "dev.txt": CHUNK})
    object.__setattr__(chunk.config, "max_seq_length", 12)
    kept = [i for i in range(1, 9) if not chunk.truncates_before(i, 10, i, 1)]
    assert kept == [1]  # the original's rule, unchanged for chunk
