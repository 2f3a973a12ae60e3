"""Fine-tuning readers and featurization on tiny files written here (GLUE, SQuAD, MRQA, chunk)."""

import json

import pytest

from electra_tf.finetuning.config import finetuning_config
from electra_tf.finetuning.glue import featurize_pair
from electra_tf.finetuning.registry import get_task
from electra_tf.finetuning.scorers import get_span_labels, get_tags
from electra_tf.finetuning.task import DataError

WORDS = (
    "the cat sat on mat dog ran is a good bad movie who what where when did "
    "paris france capital of city in 1990 born he was ' \" ."
).split()


@pytest.fixture
def data_dir(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "##s"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return tmp_path


def make(data_dir, task, files, **hparams):
    folder = data_dir / "finetuning_data" / task
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_bytes(
            content.encode("utf-8") if isinstance(content, str) else content
        )
    config = finetuning_config("m", str(data_dir), {"task_names": [task], **hparams})
    from electra_tf.finetuning.registry import make_tokenizer

    return get_task(task, config, make_tokenizer(config)), config


# (task, header, row builder (a, b, label) -> line, labels)
GLUE_LAYOUTS = {
    "sst": ("sentence\tlabel", lambda a, b, y: f"{a}\t{y}", ["0", "1"]),
    "cola": (None, lambda a, b, y: f"src\t{y}\t*\t{a}", ["0", "1"]),
    "mrpc": ("Quality\t#1\t#2\ts1\ts2", lambda a, b, y: f"{y}\t1\t2\t{a}\t{b}", ["0", "1"]),
    "qqp": ("id\tq1id\tq2id\tq1\tq2\tdup", lambda a, b, y: f"0\t1\t2\t{a}\t{b}\t{y}", ["0", "1"]),
    "rte": (
        "index\ts1\ts2\tlabel",
        lambda a, b, y: f"0\t{a}\t{b}\t{y}",
        ["entailment", "not_entailment"],
    ),
    "qnli": (
        "index\tq\ts\tlabel",
        lambda a, b, y: f"0\t{a}\t{b}\t{y}",
        ["entailment", "not_entailment"],
    ),
    "mnli": (
        "\t".join(f"c{i}" for i in range(12)),
        lambda a, b, y: "\t".join(["x"] * 8 + [a, b, "x", y]),
        ["contradiction", "entailment", "neutral"],
    ),
    "sts": (
        "g\tf\ty\ti\ts\tscore\ts1\ts2\tlabel",
        lambda a, b, y: f"g\tf\ty\ti\ts\t0\t{a}\t{b}\t{y}",
        ["0.5", "4.25"],
    ),
}
PAIRS = [("the cat sat", "a dog ran"), ('he said "good" .', "the movie's bad")]


@pytest.mark.parametrize("task", sorted(GLUE_LAYOUTS))
def test_glue_reader_columns_labels_and_double_unordered(data_dir, task):
    header, row, labels = GLUE_LAYOUTS[task]
    lines = [row(a, b, labels[i % len(labels)]) for i, (a, b) in enumerate(PAIRS)]
    text = "\n".join(([header] if header else []) + lines)  # no final newline
    split = "dev_matched" if task == "mnli" else "dev"
    t, _ = make(data_dir, task, {f"{split}.tsv": text, "train.tsv": text + "\n"})
    dev = t.get_examples("dev")
    assert [e.text_a for e in dev] == [a for a, _ in PAIRS]  # quotes kept verbatim
    if task not in ("sst", "cola"):
        assert [e.text_b for e in dev] == [b for _, b in PAIRS]
    expected_labels = [labels[i % len(labels)] for i in range(len(PAIRS))]
    if task == "sts":
        expected_labels = [float(x) for x in expected_labels]
    assert [e.label for e in dev] == expected_labels
    train = t.get_examples("train")
    if task in ("mrpc", "sts"):  # double_unordered: swapped copies follow, new eids
        assert len(train) == 4
        assert (train[2].text_a, train[2].text_b) == (PAIRS[0][1], PAIRS[0][0])
        assert [e.eid for e in train] == [0, 1, 2, 3]
    else:
        assert len(train) == 2


def test_bom_and_missing_final_newline(data_dir):
    text = "\ufeffsentence\tlabel\nthe cat\t1\nthe dog\t0"
    t, _ = make(data_dir, "sst", {"dev.tsv": text})
    examples = t.get_examples("dev")
    assert [(e.text_a, e.label) for e in examples] == [("the cat", "1"), ("the dog", "0")]
    # A BOM on a header-less file must not leak into the first sentence either.
    t, _ = make(data_dir, "cola", {"dev.tsv": "\ufeffs\t1\t*\tthe cat\ns\t0\t*\tthe dog"})
    assert t.get_examples("dev")[0].text_a == "the cat"


def test_double_unordered_off(data_dir):
    header, row, _ = GLUE_LAYOUTS["mrpc"]
    text = "\n".join([header, row("the cat", "a dog", "1")])
    t, _ = make(data_dir, "mrpc", {"train.tsv": text}, double_unordered=False)
    assert len(t.get_examples("train")) == 1


def test_malformed_rows_name_file_and_line(data_dir):
    t, _ = make(data_dir, "rte", {"dev.tsv": "h1\th2\th3\th4\n0\ta\tb\tentailment\n0\tonly two\n"})
    with pytest.raises(DataError, match=r"rte/dev\.tsv:3: 2 tab-separated columns"):
        t.get_examples("dev")
    t, _ = make(data_dir, "rte", {"dev.tsv": "h1\th2\th3\th4\n0\ta\tb\tentails\n"})
    with pytest.raises(DataError, match=r"rte/dev\.tsv:2: label 'entails' is not one of"):
        t.get_examples("dev")
    t, _ = make(data_dir, "sts", {"dev.tsv": "a\tb\tc\nx\ty\t7.5\n"})
    with pytest.raises(DataError, match=r"sts/dev\.tsv:2: label 7.5 outside"):
        t.get_examples("dev")
    with pytest.raises(DataError, match=r"test\.tsv: file not found"):
        t.get_examples("test")


def test_test_split_columns_and_dummy_labels(data_dir):
    t, _ = make(data_dir, "sst", {"test.tsv": "index\tsentence\n0\tthe cat\n1\tthe dog\n"})
    examples = t.get_examples("test")
    assert [(e.eid, e.text_a, e.label) for e in examples] == [
        (0, "the cat", "0"),
        (1, "the dog", "0"),
    ]


def test_featurize_pair_truncates_longest_first(data_dir):
    t, _ = make(data_dir, "rte", {})
    tok = t.tokenizer
    f = featurize_pair(tok, "the cat sat on the mat", "a dog", 9)
    # 9 - 3 = 6 tokens: the longer sequence loses tokens from its end first.
    tokens = tok.convert_ids_to_tokens([i for i in f["input_ids"] if i])
    assert tokens == ["[CLS]", "the", "cat", "sat", "on", "[SEP]", "a", "dog", "[SEP]"]
    assert f["segment_ids"] == [0] * 6 + [1] * 3
    f = featurize_pair(tok, "the cat", None, 8)
    assert f["input_mask"] == [1] * 4 + [0] * 4 and f["segment_ids"] == [0] * 8
    assert len(f["input_ids"]) == 8


def test_classification_features(data_dir):
    t, _ = make(data_dir, "rte", {"dev.tsv": "i\ta\tb\tl\n0\tthe cat\ta dog\tnot_entailment\n"})
    (features,) = t.featurize(t.get_examples("dev")[0], is_training=False)
    assert features["rte_label_ids"] == 1 and features["task_id"] == 0 and features["rte_eid"] == 0


def squad_json(v2=True):
    context = "paris is the capital of france . he was born in 1990 ."
    qas = [
        {"id": "q1", "question": "what is the capital of france", "is_impossible": False,
         "answers": [{"text": "paris", "answer_start": 0}]},
        {"id": "q2", "question": "when was he born", "is_impossible": False,
         "answers": [{"text": "1990", "answer_start": context.index("1990")}]},
        {"id": "q3", "question": "who is the cat", "is_impossible": True, "answers": []},
    ]  # fmt: skip
    if not v2:
        qas = qas[:2]
        for q in qas:
            del q["is_impossible"]
    return json.dumps(
        {"version": "2.0", "data": [{"paragraphs": [{"context": context, "qas": qas}]}]}
    )


def test_squad_reader_and_doc_spans(data_dir):
    t, config = make(
        data_dir, "squad", {"train.json": squad_json()}, max_seq_length=16, doc_stride=4
    )
    examples = t.get_examples("train")
    assert [e.qas_id for e in examples] == ["q1", "q2", "q3"]
    assert examples[1].doc_tokens[examples[1].start_position] == "1990"
    assert examples[2].is_impossible and examples[2].start_position == -1
    features = t.featurize(examples[1], is_training=True)
    query_len = len(t.tokenizer.tokenize(examples[1].question_text))
    max_doc = 16 - query_len - 3
    n_doc = 13  # word pieces of the context
    # Spans of max_doc tokens every 4 tokens, the last one reaching the end.
    starts = list(range(0, n_doc - max_doc + 4, 4))
    assert len(features) == len(starts)
    for f, start in zip(features, starts, strict=True):
        answer_token = 11  # "1990" is the 12th word piece
        s, e = f["squad_start_positions"], f["squad_end_positions"]
        if start <= answer_token < start + max_doc:
            assert (s, e) == (answer_token - start + query_len + 2,) * 2
            assert t.tokenizer.convert_ids_to_tokens([f["input_ids"][s]]) == ["1990"]
        else:
            assert (s, e) == (0, 0)  # answer outside the span -> [CLS]
        assert f["segment_ids"][: query_len + 2] == [0] * (query_len + 2)
    impossible = t.featurize(examples[2], is_training=True)
    assert all(
        f["squad_start_positions"] == 0 and f["squad_is_impossible"] == 1 for f in impossible
    )
    assert [f["squad_eid"] for f in features] == [1000 + i for i in range(len(features))]


def test_squad_v1_and_malformed(data_dir):
    t, _ = make(data_dir, "squadv1", {"dev.json": squad_json(v2=False)})
    assert [e.answers for e in t.get_examples("dev")] == [["paris"], ["1990"]]
    broken = json.dumps({"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "q"}]}]}]})
    t, _ = make(data_dir, "squad", {"dev.json": broken})
    with pytest.raises(DataError, match=r"dev\.json: data\[0\]\.paragraphs\[0\]: malformed"):
        t.get_examples("dev")


def test_mrqa_jsonl_reader(data_dir):
    context = "paris is the capital of france ."
    line = {"context": context, "qas": [{"qid": "a1", "question": "what is the capital",
            "answers": ["paris", "Paris"], "detected_answers": [{"text": "paris", "char_spans": [[0, 4]]}]}]}  # fmt: skip
    text = json.dumps({"header": {"dataset": "x"}}) + "\n" + json.dumps(line)  # no final newline
    t, _ = make(
        data_dir, "newsqa", {"train.jsonl": "\ufeff" + text, "dev.jsonl": text + "\n{bad\n"}
    )
    (example,) = t.get_examples("train")
    assert (example.qid, example.start_position, example.end_position) == ("a1", 0, 0)
    with pytest.raises(DataError, match=r"newsqa/dev\.jsonl:3: invalid JSON"):
        t.get_examples("dev")


def test_bioes_round_trip():
    tags = ["B-NP", "I-NP", "O", "B-VP", "B-NP", "I-NP", "I-NP"]
    spans = get_span_labels(tags)
    assert spans == [(0, 1, "NP"), (3, 3, "VP"), (4, 6, "NP")]
    assert get_tags(spans, 7, "BIOES") == ["B-NP", "E-NP", "O", "S-VP", "B-NP", "I-NP", "E-NP"]
    assert get_span_labels(get_tags(spans, 7, "BIOES")) == spans


def test_chunk_reader_features_and_errors(data_dir):
    text = "\ufeff-DOCSTART- -X- O\n\nthe DT B-NP\ncats NNS I-NP\nsat VBD B-VP\n\nhe PRP B-NP\nran VBD B-VP"
    t, config = make(data_dir, "chunk", {"train.txt": text, "dev.txt": text}, max_seq_length=16)
    assert config.max_seq_length == 16
    examples = t.get_examples("train")
    inverse = {v: k for k, v in t.label_mapping().items()}
    assert [[inverse[i] for i in e.labels] for e in examples] == [
        ["B-NP", "E-NP", "S-VP"],
        ["S-NP", "S-VP"],
    ]
    (f,) = t.featurize(examples[0], is_training=True)
    # [CLS] the cat ##s sat [SEP]: first sub-token of each word is labelled.
    assert f["chunk_labeled_positions"][:3] == [1, 2, 4]
    assert f["chunk_labels_mask"][:4] == [1.0, 1.0, 1.0, 0.0]
    assert f["segment_ids"][:7] == [1] * 6 + [0]  # 1 for every real token, unlike GLUE
    (data_dir / "finetuning_data" / "chunk" / "test.txt").write_text("the DT B-NP\ncat\n")
    with pytest.raises(DataError, match=r"chunk/test\.txt:2: expected 'word ... tag'"):
        t._sentences("test")


def test_tasks_write_their_own_test_predictions(data_dir, capsys):
    """Each task kind writes its benchmark's submission file from the model's results (here
    crafted), or says it writes none: the runner needs no branch on task kinds."""
    out = data_dir / "out"
    out.mkdir()
    mnli, _ = make(data_dir, "mnli", {})
    results = {"test_matched": [(1, 2), (0, 0)], "test_mismatched": [(0, 1)], "diagnostic": []}
    mnli.write_test_predictions(
        lambda split: ({"eid": e, "predictions": p} for e, p in results[split]), str(out), 3
    )
    assert (out / "mnli_test_matched_3.tsv").read_text() == (
        "index\tprediction\n0\tcontradiction\n1\tneutral\n"
    )
    assert (out / "mnli_test_mismatched_3.tsv").read_text().endswith("0\tentailment\n")
    sts, _ = make(data_dir, "sts", {})
    sts.write_test_predictions(lambda split: iter([{"eid": 0, "predictions": 0.5}]), str(out), 1)
    assert (out / "sts_test_1.tsv").read_text() == "index\tprediction\n0\t2.500\n"  # 0-5 scale
    assert "Wrote 2 mnli test_matched predictions" in capsys.readouterr().out
    for name in ("chunk", "squadv1"):  # no submission format: nothing written, one line said
        task, _ = make(data_dir, name, {})
        task.write_test_predictions(lambda split: iter(()), str(out), 1)
        assert f"Skipping {name}: writing test predictions" in capsys.readouterr().out
    assert len(list(out.iterdir())) == 4  # mnli's three test splits (diagnostic: empty), sts
