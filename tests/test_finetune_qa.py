"""QA post-processing on crafted head outputs, and a multi-task (SQuAD 2.0 + chunk) run."""

import json

import numpy as np
import pytest

from electra_tf.finetuning.config import finetuning_config
from electra_tf.finetuning.qa_predictions import get_final_text
from electra_tf.finetuning.registry import get_task, make_tokenizer

WORDS = "paris is the capital of france . he was born in 1990 who what when cat dt nn".split()
CONTEXT = "Paris is the capital of France. He was born in 1990."


@pytest.fixture
def data_dir(tmp_path):
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])
    )
    qas = [
        {"id": "q1", "question": "what is the capital of france", "is_impossible": False,
         "answers": [{"text": "Paris", "answer_start": 0}]},
        {"id": "q2", "question": "when was he born", "is_impossible": False,
         "answers": [{"text": "1990", "answer_start": CONTEXT.index("1990")}]},
        {"id": "q3", "question": "who is the cat", "is_impossible": True, "answers": []},
    ]  # fmt: skip
    squad = tmp_path / "finetuning_data" / "squad"
    squad.mkdir(parents=True)
    text = json.dumps({"data": [{"paragraphs": [{"context": CONTEXT, "qas": qas}]}]})
    (squad / "train.json").write_text(text)
    (squad / "dev.json").write_text(text)
    chunk = tmp_path / "finetuning_data" / "chunk"
    chunk.mkdir(parents=True)
    sentences = "he PRP B-NP\nwas VBD B-VP\nborn VBN I-VP\n\nthe DT B-NP\ncat NN I-NP\n"
    (chunk / "train.txt").write_text(sentences * 4)
    (chunk / "dev.txt").write_text(sentences)
    return tmp_path


def test_get_final_text_restores_original_characters():
    assert get_final_text("france", "France.", True) == "France"
    assert get_final_text("1990", "1990.", True) == "1990"
    assert get_final_text("london", "France.", True) == "France."  # no alignment -> whole span


def test_span_scorer_on_crafted_outputs(data_dir):
    config = finetuning_config(
        "m", str(data_dir), {"max_seq_length": 32, "beam_size": 3}, tasks="squad"
    )
    task = get_task("squad", config, make_tokenizer(config))
    scorer = task.get_scorer("dev")
    answers = {"q1": ("paris", -1.0), "q2": ("1990", -4.0), "q3": ("paris", 2.0)}
    for example in task.get_examples("dev"):
        (feature,) = task.featurize(example, False, for_eval=True)
        tokens = feature["tokens"]
        target = tokens.index(answers[example.qas_id][0], tokens.index("[SEP]"))
        start_index = np.array([0, target, target + 1])  # [CLS] first: never a valid start
        end_index = np.array([[0, 1, 2], [target, target + 1, target - 1], [target + 1, 0, 0]])
        scorer.update(
            {
                "eid": feature["squad_eid"],
                "loss": 0.0,
                "start_top_index": start_index,
                "start_top_log_probs": np.array([-0.1, -0.5, -2.0]),
                "end_top_index": end_index,
                "end_top_log_probs": np.array(
                    [[-0.1, -0.2, -0.3], [-0.3, -0.9, -0.1], [-0.2, -1, -1]]
                ),
                "answerable_logit": answers[example.qas_id][1],
                "start_logits": np.zeros(32),
                "end_logits": np.zeros(32),
            }
        )
    results = dict(scorer.get_results())
    preds = json.loads(open(scorer.predictions_path()).read())
    odds = json.loads(open(scorer.null_odds_path()).read())
    # Best valid candidate: start=target, end=target (-0.5 - 0.3); the end-before-start one is
    # skipped even though its score is higher. Text comes back with the original casing.
    assert preds == {"q1": "Paris", "q2": "1990", "q3": "Paris"}
    assert odds == {"q1": -1.0, "q2": -4.0, "q3": 2.0}
    # At -2.75: q1 (-1) and q3 (2) are answered "" -> q1 wrong, q2 right, q3 right.
    assert results["exact"] == pytest.approx(200 / 3)
    assert results["HasAns_exact"] == pytest.approx(50.0) and results["NoAns_exact"] == 100.0
    assert results["best_exact"] == pytest.approx(100.0)  # any threshold in [-1, 2) is perfect


def test_multitask_squad_and_chunk_run(data_dir, capsys):
    from electra_tf.runs.finetuning import run_finetuning

    squad = data_dir / "finetuning_data" / "squad"
    (squad / "test.json").write_text((squad / "dev.json").read_text())

    hparams = {
        "init_checkpoint": None,
        "task_names": ["squad", "chunk"],
        "model_hparam_overrides": {
            "hidden_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 1,
            "intermediate_size": 32,
        },
        "embedding_size": 8,
        "vocab_size": 5 + len(WORDS),
        "max_seq_length": 24,
        "beam_size": 4,
        "train_batch_size": 4,
        "eval_batch_size": 4,
        "num_train_epochs": 1,
        "write_test_outputs": True,
    }
    config = finetuning_config("m", str(data_dir), hparams)
    (results,) = run_finetuning(config)
    assert {"exact", "f1", "best_exact", "HasAns_exact", "NoAns_exact"} <= set(results["squad"])
    assert {"precision", "recall", "f1"} <= set(results["chunk"])
    assert 0.0 <= results["chunk"]["f1"] <= 100.0
    qa_dir = data_dir / "models" / "m" / "results" / "squad,chunk_qa"
    assert set(json.loads((qa_dir / "squad_preds.json").read_text())) == {"q1", "q2", "q3"}
    assert (qa_dir / "squad_null_odds.json").exists()
    # Test predictions: SQuAD 2.0's answers ("" past the null-odds threshold) and null odds;
    # chunking has no submission format.
    out = data_dir / "models" / "m" / "test_predictions"
    answers = json.loads((out / "squad_test_1_predictions.json").read_text())
    odds = json.loads((out / "squad_test_1_null_odds.json").read_text())
    assert set(answers) == set(odds) == {"q1", "q2", "q3"}
    assert all((answers[q] == "") == (odds[q] > config.qa_na_threshold) for q in answers)
    assert "Skipping chunk: writing test predictions" in capsys.readouterr().out
