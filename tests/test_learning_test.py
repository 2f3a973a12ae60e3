"""The learning test (electra_tf/evaluation/learning_test.py): its synthetic language carries the
structure it claims, and ELECTRA pre-training pays off downstream in a short run, which it does
not with the same words shuffled."""

import json
import os

import numpy as np
import pytest

from electra_tf.evaluation import learning_test as lt

LANGUAGE = lt.TopicLanguage()


def test_sequences_are_written_from_their_topic():
    ids, topics = LANGUAGE.sample(500, np.random.default_rng(0))
    assert ids.shape == (500, LANGUAGE.seq_len)
    assert (ids[:, 0] == lt.CLS_ID).all() and (ids[:, -1] == lt.SEP_ID).all()
    word_topics = LANGUAGE.topic_of_id()[ids[:, 1:-1]]
    content = word_topics >= 0
    # Every content word is one of its sequence's topic; the rest are fillers.
    assert (word_topics == np.where(content, topics[:, None], -1)).all()
    assert abs(content.mean() - LANGUAGE.topic_prob) < 0.02
    again, _ = LANGUAGE.sample(500, np.random.default_rng(0))
    np.testing.assert_array_equal(ids, again)


def test_labels_are_the_topics_labels():
    ids, labels = LANGUAGE.labelled(400, np.random.default_rng(1))
    topic_of_id = LANGUAGE.topic_of_id()
    for row, label in zip(ids, labels, strict=True):
        topic = topic_of_id[row][topic_of_id[row] >= 0][0]
        assert label == LANGUAGE.label_of_topic()[topic]
    assert np.bincount(LANGUAGE.label_of_topic()).tolist() == [LANGUAGE.n_topics // 2] * 2


def test_ids_say_nothing_about_topics():
    ids = LANGUAGE.word_ids()
    assert sorted(ids) == list(range(lt.NUM_SPECIAL, LANGUAGE.vocab_size))
    topic_of_id = LANGUAGE.topic_of_id()
    content = np.flatnonzero(topic_of_id >= 0)
    # Rank correlation of id and topic near 0: no topic owns a block of ids.
    ranks = np.argsort(np.argsort(topic_of_id[content], kind="stable"))
    assert abs(np.corrcoef(content, ranks)[0, 1]) < 0.2


def test_labelled_and_held_out_sequences_use_disjoint_words():
    rng = np.random.default_rng(2)
    labelled, _ = LANGUAGE.sample(2000, rng, "labelled")
    held_out, _ = LANGUAGE.sample(2000, rng, "held_out")
    content = LANGUAGE.topic_of_id() >= 0
    seen = {int(i) for i in labelled.ravel() if content[i]}
    unseen = {int(i) for i in held_out.ravel() if content[i]}
    assert not seen & unseen
    assert len(seen | unseen) == int(content.sum())  # together, every content word
    with pytest.raises(ValueError, match="part"):
        LANGUAGE.sample(1, rng, "test")


def test_only_the_clusters_carry_the_labels_to_held_out_words():
    """Word statistics from many labels solve sequences written with the labelled words but
    are at chance on the held-out words; knowing the clusters solves those from few labels."""
    rng = np.random.default_rng(3)
    many = LANGUAGE.labelled(20_000, rng)
    few = LANGUAGE.labelled(lt.Protocol.n_labelled, rng)
    same_words = LANGUAGE.labelled(2000, rng)
    held_out = LANGUAGE.labelled(2000, rng, "held_out")
    assert lt.naive_bayes_accuracy(LANGUAGE, many, same_words) > 0.98
    assert abs(lt.naive_bayes_accuracy(LANGUAGE, many, held_out) - 0.5) < 0.05
    assert lt.naive_bayes_accuracy(LANGUAGE, few, held_out, clusters=True) > 0.98


def test_shuffled_text_keeps_the_words_and_loses_the_topics():
    rng = np.random.default_rng(4)
    ids, topics = LANGUAGE.sample(1000, rng)
    shuffled = lt.shuffle_words(ids, rng)
    assert (shuffled[:, [0, -1]] == ids[:, [0, -1]]).all()
    np.testing.assert_array_equal(np.sort(shuffled.ravel()), np.sort(ids.ravel()))

    def on_topic(x):  # fraction of content words of their sequence's topic
        word_topics = LANGUAGE.topic_of_id()[x[:, 1:-1]]
        return (word_topics == topics[:, None]).sum() / (word_topics >= 0).sum()

    assert on_topic(ids) == 1.0
    assert on_topic(shuffled) < 2.0 / LANGUAGE.n_topics


def test_summary_and_table():
    results = {0: {"random": 0.5, "masked_lm": 0.9, "electra": 0.8}}
    results[1] = {"random": 0.6, "masked_lm": 0.7, "electra": 0.9}
    stats = lt.summary(results)
    assert stats["electra"] == pytest.approx((0.85, np.std([0.8, 0.9], ddof=1)))
    assert stats["electra-random"] == pytest.approx((0.3, 0.0))
    assert stats["electra-masked_lm"][0] == pytest.approx(0.05)
    table = lt.format_table(results)
    assert "0.850±0.071" in table and "0.300±0.000" in table


def test_the_picture_is_redrawn_from_an_earlier_json(tmp_path, capsys):
    """--from-json: no runs; the table again and the picture beside the file (or at --png)."""
    record = {
        "protocol": {"pretrain_seconds": 60.0, "budget_clock": "cpu", "pretraining_text": "language"},
        "results": {"0": {"random": 0.5, "masked_lm": 0.9, "electra": 0.8},
                    "1": {"random": 0.6, "masked_lm": 0.7, "electra": 0.9}},
    }  # fmt: skip
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps(record))
    assert lt.main(["--from-json", str(earlier)]) == {
        0: record["results"]["0"],
        1: record["results"]["1"],
    }
    assert "0.850±0.071" in capsys.readouterr().out
    assert (tmp_path / "earlier.png").read_bytes()[:4] == b"\x89PNG"
    lt.main(["--from-json", str(earlier), "--png", str(tmp_path / "other.png")])
    assert (tmp_path / "other.png").exists()
    with pytest.raises(SystemExit):  # reading earlier results writes no new ones
        lt.main(["--from-json", str(earlier), "--json", str(tmp_path / "new.json")])
    del record["results"]["1"]["electra"]
    earlier.write_text(json.dumps(record))
    with pytest.raises(
        SystemExit, match=r"earlier.json: not a learning-test record \(no 'results.1.electra'\)"
    ):
        lt.main(["--from-json", str(earlier)])


def test_protocol_rejects_unknown_choices():
    with pytest.raises(ValueError, match="pretraining_text"):
        lt.Protocol(pretraining_text="noise")
    with pytest.raises(ValueError, match="budget_clock"):
        lt.Protocol(budget_clock="gpu")


def test_generator_settings_reach_the_pretraining_config():
    protocol = lt.Protocol(generator_hidden_size=0.125, generator_layers=0.5)
    config = lt.pretraining_config(hparams=lt.pretraining_hparams(protocol, "electra", 0))
    assert config.discriminator_config().hidden_size == protocol.hidden_size
    assert config.generator_config().hidden_size == protocol.hidden_size // 8
    assert config.generator_config().num_hidden_layers == protocol.num_layers // 2
    slow = lt.Protocol(generator_lr_multiplier=0.1)
    hparams = lt.pretraining_hparams(slow, "electra", 0)
    assert lt.pretraining_config(hparams=hparams).generator_lr_multiplier == 0.1


# The fast variant (default suite): one seed, ELECTRA (`ElectraPretrainer`, the default objective)
# pre-trained for FAST_STEPS steps (a step count, not a time budget, so that the result does not
# depend on the machine's load), then the command's fine-tuning protocol for it and for a random
# initialisation. The opt-in variants (ELECTRA_LEARNING_TEST_FULL=1) add the masked LM at the
# same step count, the control (the same words shuffled across sequences: the margin vanishes)
# and the command itself over three seeds. At 300 steps ELECTRA's margin over random
# initialisation varies with the run's seed as much as it is large. Seeds 0-7 (the language's
# seed 0, the random streams of `modeling/random_bits.py`), accuracy random -> ELECTRA:
#   0: 0.608 -> 0.756 (+0.148)   1: 0.569 -> 0.617 (+0.048)   2: 0.289 -> 0.521 (+0.232)
#   3: 0.492 -> 0.555 (+0.063)   4: 0.570 -> 0.480 (-0.090)   5: 0.331 -> 0.575 (+0.244)
#   6: 0.492 -> 0.730 (+0.238)   7: 0.524 -> 0.672 (+0.148)
# Most of that spread is the random initialisation's (0.29-0.61 on a two-label task). The test
# runs seed 7: its margin is the median's, and its random arm and its shuffled-text control
# (0.528) sit at chance, with the masked LM at 0.957. It asks for 0.05, about 2.3 standard
# errors of a difference of two accuracies on n_eval = 1000, which leaves the seed's margin
# about 4.5 standard errors of room for other CPUs' rounding. The size of the gain is the
# opt-in variants' and the command's (its CPU minute clears 0.15 on every seed).
FAST_STEPS = 300
FAST_MARGIN = 0.05
# The control's bound: shuffled text must not give the gain the full command shows.
CONTROL_MARGIN = 0.15
FAST_SEED = 7
SLOW = pytest.mark.skipif(
    not os.environ.get("ELECTRA_LEARNING_TEST_FULL"),
    reason="slow: set ELECTRA_LEARNING_TEST_FULL=1",
)


def fast_protocol(**changes) -> lt.Protocol:
    return lt.Protocol(pretrain_steps=FAST_STEPS, n_eval=1000, **changes)


def encoder_config(protocol: lt.Protocol):
    hparams = lt.pretraining_hparams(protocol, "electra", FAST_SEED)
    return lt.pretraining_config(hparams=hparams).discriminator_config()


@pytest.fixture(scope="module")
def fast_random_accuracy():
    protocol = fast_protocol()
    data = lt.task_data(protocol, FAST_SEED)
    return lt.finetune_and_score(protocol, encoder_config(protocol), None, data, FAST_SEED)


def pretrained_accuracy(protocol: lt.Protocol, objective: str) -> float:
    weights, budget = lt.pretrain(protocol, objective, FAST_SEED)
    assert budget.steps == FAST_STEPS
    data = lt.task_data(protocol, FAST_SEED)
    return lt.finetune_and_score(protocol, encoder_config(protocol), weights, data, FAST_SEED)


def test_electra_pretraining_beats_random_initialisation(fast_random_accuracy):
    pretrained = pretrained_accuracy(fast_protocol(), "electra")
    assert pretrained > fast_random_accuracy + FAST_MARGIN, (pretrained, fast_random_accuracy)


@SLOW
def test_masked_lm_pretraining_beats_random_initialisation(fast_random_accuracy):
    pretrained = pretrained_accuracy(fast_protocol(), "masked_lm")
    assert pretrained > fast_random_accuracy + FAST_MARGIN, (pretrained, fast_random_accuracy)


@SLOW
def test_pretraining_on_shuffled_text_does_not(fast_random_accuracy):
    """The control: the gain the full command shows is not there."""
    pretrained = pretrained_accuracy(fast_protocol(pretraining_text="shuffled"), "electra")
    assert pretrained < fast_random_accuracy + CONTROL_MARGIN, (pretrained, fast_random_accuracy)


@SLOW
def test_full_protocol_over_seeds(tmp_path):
    """The command at equal CPU budgets, 3 seeds: ELECTRA and the masked LM each beat random
    initialisation by 15+ points on every seed; the ELECTRA vs masked-LM margin is reported, not
    asserted. About 9 CPU minutes."""
    out = tmp_path / "learning_test.json"
    results = lt.main(["--seeds", "3", "--minutes", "1", "--json", str(out)])
    for seed, result in results.items():
        assert result["electra"] > result["random"] + 0.15, (seed, result)
        assert result["masked_lm"] > result["random"] + 0.15, (seed, result)
        assert result["electra_seconds"] == pytest.approx(result["masked_lm_seconds"], rel=0.1)
    record = json.loads(out.read_text())
    assert record["summary"]["electra-random"]["mean"] > 0.15
