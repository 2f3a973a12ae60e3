"""Fine-tuned task exports (pair classification, STS, QA, chunking): CLI from a fine-tuning
checkpoint -> SavedModel -> fresh process -> the Keras model's outputs, re-derived in NumPy."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers_reliability import record

from electra_tf.cli import export
from electra_tf.config import ModelConfig
from electra_tf.data.tokenization import FullTokenizer
from electra_tf.finetuning.config import finetuning_config, save_finetuning_config
from electra_tf.finetuning.glue import featurize_pair
from electra_tf.finetuning.model import FinetuningModel
from electra_tf.finetuning.registry import get_tasks
from electra_tf.finetuning.task import shared_feature_specs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "the cat dog sat on a mat who where is was . ? , un ##s ##ed big red".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
TASKS = ("mrpc", "sts", "squad", "chunk")
MAX_LEN = 16
PAIRS = [
    ("The cat sat.", "A cat sat on the mat."),
    ("", "the dog"),  # empty text_a
    ("who sat ?", ""),  # empty text_b: a single text, as the Python featurizer
    ("where is the big red dog ?", " ".join(["the cat sat on a mat ."] * 30)),  # too long
    (b"the \xffcat", b"dog \xc3"),  # invalid UTF-8
]
LOADER = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # the tokenizer's ops
paths, pairs_file, out_file = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
pairs = [[bytes.fromhex(x) for x in pair] for pair in json.load(open(pairs_file))]
a, b = tf.constant([p[0] for p in pairs]), tf.constant([p[1] for p in pairs])
def listed(v):
    a = v.numpy()
    if v.dtype == tf.string:
        return np.vectorize(lambda x: x.decode("utf-8"), otypes=[object])(a).tolist()
    return a.tolist()
result = {}
for path in paths:
    model = tf.saved_model.load(path)
    serve, tokenize = model.signatures["serving_default"], model.signatures["tokenize"]
    args = {"text": a} if "text" in serve.structured_input_signature[1] else {"text_a": a, "text_b": b}
    result[path] = {
        "serving_default": {k: listed(v) for k, v in serve(**args).items()},
        "tokenize": {k: listed(v) for k, v in tokenize(**args).items()},
    }
json.dump(result, open(out_file, "w"))
"""


def _text(x) -> str:
    return x.decode("utf-8", "ignore") if isinstance(x, bytes) else x


def _hex(x) -> str:
    return (x if isinstance(x, bytes) else x.encode("utf-8")).hex()


def _qa_features(tokenizer, question: str, context: str, max_query: int) -> dict[str, list[int]]:
    """The original QA layout: [CLS] question (<= max_query) [SEP] context [SEP], segments 0/1."""
    q = tokenizer.tokenize(question)[:max_query]
    c = tokenizer.tokenize(context)[: MAX_LEN - 3 - len(q)]
    tokens = ["[CLS]", *q, "[SEP]", *c, "[SEP]"] if c else ["[CLS]", *q, "[SEP]"]
    segments = [0] * (len(q) + 2) + [1] * (len(tokens) - len(q) - 2)
    pad = MAX_LEN - len(tokens)
    return {
        "input_ids": tokenizer.convert_tokens_to_ids(tokens) + [0] * pad,
        "input_mask": [1] * len(tokens) + [0] * pad,
        "segment_ids": segments + [0] * pad,
    }


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    data_dir = root / "data"
    (data_dir / "finetuning_data" / "chunk").mkdir(parents=True)
    (data_dir / "finetuning_data" / "chunk" / "train.txt").write_text(
        "the DT B-NP\ncat NN I-NP\nsat VBD B-VP\n\non IN B-PP\na DT B-NP\nmat NN I-NP\n"
    )
    vocab_file = data_dir / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    config = finetuning_config(
        "tiny",
        str(data_dir),
        {"max_seq_length": MAX_LEN, "max_query_length": 5, "init_checkpoint": None},
        tasks=",".join(TASKS),
    )
    tokenizer = FullTokenizer(str(vocab_file))
    tasks = get_tasks(config, tokenizer)
    specs = shared_feature_specs(config) + [s for t in tasks for s in t.feature_specs()]
    model_config = ModelConfig(
        vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=MAX_LEN, embedding_size=16,
    )  # fmt: skip
    tf.random.set_seed(3)
    model = FinetuningModel(model_config, tasks, specs)
    # What the fine-tuning runner leaves in a trial's directory.
    run_dir = data_dir / "models" / "tiny" / "finetuning_models" / f"{config.tasks_str}_model_1"
    run_dir.mkdir(parents=True)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(run_dir), 1).save(5)
    save_finetuning_config(config, str(run_dir / "finetuning_config.json"))
    (run_dir / "model_config.json").write_text(json.dumps(model_config.to_dict()))

    paths = []
    for task in TASKS:
        args = ["--data-dir", str(data_dir), "--model-name", "tiny", "--task", task]
        assert export.main([*args, "--checkpoint", str(run_dir)]) == 0
        paths.append(str(data_dir / "models" / "tiny" / "serving" / f"tiny_{task}" / "1"))
    pairs_file, out_file = root / "pairs.json", root / "out.json"
    pairs_file.write_text(json.dumps([[_hex(a), _hex(b)] for a, b in PAIRS]))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run(
        [sys.executable, "-c", LOADER, ",".join(paths), str(pairs_file), str(out_file)],
        check=True, env=env, cwd=REPO,
    )  # fmt: skip
    outputs = json.loads(out_file.read_text())
    return {
        "model": model,
        "tasks": dict(zip(TASKS, tasks, strict=True)),
        "tokenizer": tokenizer,
        "out": dict(zip(TASKS, [outputs[p] for p in paths], strict=True)),
        "paths": dict(zip(TASKS, paths, strict=True)),
    }


def _run(model, tasks, features: dict[str, np.ndarray], extra=None):
    batch = {k: tf.constant(v, tf.int32) for k, v in features.items()}
    batch["task_id"] = tf.zeros([len(features["input_ids"])], tf.int32)
    for task in tasks.values():
        for spec in task.feature_specs():
            shape = (len(features["input_ids"]), *([MAX_LEN] if spec.shape else []))
            batch[spec.name] = tf.zeros(shape, tf.int32 if spec.is_int else tf.float32)
    batch.update(extra or {})
    _, outputs = model(batch, training=False)
    return {
        name: {k: np.asarray(v) for k, v in out.items()}
        for name, out in outputs.items()
        if name != "task_id"
    }


def _glue_features(tokenizer):
    rows = [featurize_pair(tokenizer, _text(a), _text(b), MAX_LEN) for a, b in PAIRS]
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def _check_ids(out, features):
    length = np.asarray(out["tokenize"]["input_ids"]).shape[1]
    for key in ("input_ids", "input_mask", "segment_ids"):
        np.testing.assert_array_equal(out["tokenize"][key], features[key][:, :length])


def test_pair_classification(exported):
    features = _glue_features(exported["tokenizer"])
    _check_ids(exported["out"]["mrpc"], features)
    logits = _run(exported["model"], exported["tasks"], features)["mrpc"]["logits"]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    got = exported["out"]["mrpc"]["serving_default"]
    np.testing.assert_allclose(got["probabilities"], probs, atol=1e-5)
    assert got["label"] == [["0", "1"][i] for i in probs.argmax(-1)]
    assert got["tokens"][2][:4] == ["[CLS]", "who", "sat", "?"] and got["tokens"][2][5] == ""


def test_sts_score_is_on_the_label_scale(exported):
    features = _glue_features(exported["tokenizer"])
    predictions = _run(exported["model"], exported["tasks"], features)["sts"]["predictions"]
    got = exported["out"]["sts"]["serving_default"]
    np.testing.assert_allclose(got["score"], 5.0 * predictions, atol=1e-5)


def test_qa_best_span_from_the_beam(exported):
    tokenizer = exported["tokenizer"]
    rows = [_qa_features(tokenizer, _text(a), _text(b), 5) for a, b in PAIRS]
    features = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    out = exported["out"]["squad"]
    _check_ids(out, features)
    head = _run(exported["model"], exported["tasks"], features)["squad"]
    got = out["serving_default"]
    np.testing.assert_allclose(got["answerable_logit"], head["answerable_logit"], atol=1e-5)
    context = (features["segment_ids"] > 0) & (features["input_mask"] > 0)
    for i in range(len(PAIRS)):
        best, span = -np.inf, (0, 0)
        for k, start in enumerate(head["start_top_index"][i]):
            for j, end in enumerate(head["end_top_index"][i, k]):
                ok = context[i, start] and context[i, end] and 0 <= end - start < 30
                score = head["start_top_log_probs"][i, k] + head["end_top_log_probs"][i, k, j]
                if ok and score > best:
                    best, span = score, (start, end)
        assert (got["start_index"][i], got["end_index"][i]) == span
        tokens = tokenizer.convert_ids_to_tokens(features["input_ids"][i][span[0] : span[1] + 1])
        expected = " ".join(tokens).replace(" ##", "") if np.isfinite(best) else ""
        assert got["answer_text"][i] == expected
    assert got["start_index"][2] == 0 and got["answer_text"][2] == ""  # no context: no span


def test_chunk_tags_every_word(exported):
    tokenizer = exported["tokenizer"]
    rows = [featurize_pair(tokenizer, _text(a), None, MAX_LEN) for a, _ in PAIRS]
    features = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    features["segment_ids"] = features["input_mask"].copy()  # the original tagging layout
    out = exported["out"]["chunk"]
    _check_ids(out, features)
    positions = np.tile(np.arange(MAX_LEN), (len(PAIRS), 1))
    head = _run(exported["model"], exported["tasks"], features,
                {"chunk_labeled_positions": tf.constant(positions, tf.int32)})["chunk"]  # fmt: skip
    mapping = exported["tasks"]["chunk"].label_mapping()
    # The model's BIOES labels are served in the files' scheme, IOB2 (S-X -> B-X, E-X -> I-X).
    iob2 = {"S": "B", "E": "I"}
    names = [iob2.get(tag[0], tag[0]) + tag[1:] for tag in sorted(mapping, key=mapping.get)]
    assert {"S-NP", "E-NP"} & set(mapping) and not {n[0] for n in names} & {"S", "E"}
    got = out["serving_default"]
    length = len(got["tag"][0])
    tokens = np.array([tokenizer.convert_ids_to_tokens(r) for r in features["input_ids"]])
    starts = (features["input_mask"] > 0) & ~np.isin(tokens, ["[CLS]", "[SEP]"])
    starts &= ~np.char.startswith(tokens.astype(str), "##")
    expected = np.where(starts, np.array(names)[head["logits"].argmax(-1)], "")
    assert got["tag"] == expected[:, :length].tolist()
    assert got["tag"][0][1] != "" and got["tag"][0][0] == ""  # "the" tagged, [CLS] not


def _outcome(serve, inputs) -> str:
    try:
        outputs = serve(**inputs)
    except tf.errors.InvalidArgumentError as e:
        text = " ".join(e.message.split())
        reason = re.search(
            r"Shape of tensor \S+ \S+ is not compatible[^.]*|[^.:\[]*batch size", text
        )
        return f"InvalidArgumentError: {reason.group(0) if reason else text[:120]}"
    batches = sorted({int(v.shape[0]) for v in outputs.values()})
    return f"ok, batch {', '.join(map(str, batches))}"


def _serve(path):
    import tensorflow_text  # noqa: F401  (the tokenizer's ops)

    serve = tf.saved_model.load(path).signatures["serving_default"]
    return serve, "text" in serve.structured_input_signature[1]


@pytest.mark.parametrize("task", TASKS)
def test_bad_batches_are_refused_and_an_empty_batch_answers(exported, task):
    # Issue #13 item 6: a rank-2 input was flattened into a bigger batch, text_a/text_b of
    # different sizes gave a GatherV2 error, a batch of 0 failed on classification exports.
    serve, single = _serve(exported["paths"][task])
    args = {"text": ["a cat"]} if single else {"text_a": ["a cat"], "text_b": ["the dog"]}
    rank2 = {k: tf.constant([[v[0], v[0]], [v[0], v[0]]]) for k, v in args.items()}
    got = _outcome(serve, rank2)
    record("6", f"{task} export: rank-2 text [2, 2]", "refused (shape)", got)
    assert got.startswith("InvalidArgumentError") and "not compatible" in got
    if not single:
        got = _outcome(serve, {"text_a": tf.constant(["a", "b"]), "text_b": tf.constant(["c"])})
        record("6", f"{task} export: text_a of 2, text_b of 1", "refused (batch size)", got)
        assert "same batch size" in got
    got = _outcome(serve, {k: tf.constant([], tf.string) for k in args})
    record("6", f"{task} export: a batch of 0 strings", "outputs of batch 0", got)
    assert got.startswith("ok") and "batch 0" in got


def test_export_json_lists_every_signature_input(exported):
    # Pair tasks (MRPC, STS: two text columns; QA: question and context) take two strings.
    pair = {"mrpc": True, "sts": True, "squad": True, "chunk": False}
    for task, path in exported["paths"].items():
        with open(os.path.join(path, "assets", "export.json"), encoding="utf-8") as f:
            info = json.load(f)
        signatures = info["signatures"]
        record("6", f"{task} export.json inputs", "named", signatures["serving_default"]["inputs"])
        expected = ["text_a", "text_b"] if pair[task] else ["text"]
        assert signatures["serving_default"]["inputs"] == expected, task
        assert signatures["tokenize"]["inputs"] == signatures["serving_default"]["inputs"]
        assert signatures["encode_ids"]["inputs"] == ["input_ids", "input_mask", "segment_ids"]
