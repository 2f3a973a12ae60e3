"""The learning test's synthetic language (`electra_tf.evaluation.learning_test`).

The language (`TopicLanguage`): `n_topics` hidden topics, each owning `words_per_topic` content
words, plus `n_filler` filler words shared by all. A sequence draws one topic and emits
`[CLS] w_1 ... w_n [SEP]`: each w_i independently is, with probability `topic_prob`, a uniform
word of its topic, else a uniform filler word. Word ids are a random permutation and every
content word has the same frequency, so neither a word's id nor its count says which topic it
belongs to: only the words it co-occurs with do.

`naive_bayes_accuracy` gives the unit tests' reference points; `features` is the encoder's
input dict for the language's sequences.
"""

from __future__ import annotations

import dataclasses

import numpy as np

PAD_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3
NUM_SPECIAL = 4
PARTS = ("all", "labelled", "held_out")


@dataclasses.dataclass(frozen=True)
class TopicLanguage:
    """The synthetic language (module docstring); `seed` draws the word ids and the labels."""

    n_topics: int = 24
    words_per_topic: int = 8
    n_filler: int = 16
    seq_len: int = 32  # with [CLS] and [SEP]
    topic_prob: float = 0.5
    seed: int = 0

    @property
    def vocab_size(self) -> int:
        return NUM_SPECIAL + self.n_topics * self.words_per_topic + self.n_filler

    def word_ids(self) -> np.ndarray:
        """int [n_topics * words_per_topic + n_filler]: the id of each word, topic words
        first (topic t's words are rows t * words_per_topic ...), filler last; a random
        permutation of the non-special ids, so an id says nothing about its topic."""
        rng = np.random.default_rng([self.seed, 0])
        return NUM_SPECIAL + rng.permutation(self.vocab_size - NUM_SPECIAL)

    def topic_of_id(self) -> np.ndarray:
        """int [vocab_size]: each id's topic; -1 for filler and special tokens."""
        topics = np.full(self.vocab_size, -1)
        n_content = self.n_topics * self.words_per_topic
        topics[self.word_ids()[:n_content]] = np.arange(n_content) // self.words_per_topic
        return topics

    def label_of_topic(self) -> np.ndarray:
        """int [n_topics]: the task's label of each topic, a balanced random 0/1 split."""
        rng = np.random.default_rng([self.seed, 1])
        return rng.permutation(np.arange(self.n_topics) % 2)

    def sample(
        self, n: int, rng: np.random.Generator, part: str = "all"
    ) -> tuple[np.ndarray, np.ndarray]:
        """`n` sequences: int32 input_ids [n, seq_len] and their topics [n]. `part` picks
        each topic's words: "all" (pre-training), "labelled" (the first half: the task's
        labelled set) or "held_out" (the second half: the task's evaluation set)."""
        if part not in PARTS:
            raise ValueError(f"part {part!r} is not one of {PARTS}")
        width, half = self.seq_len - 2, self.words_per_topic // 2
        first, count = {"all": (0, self.words_per_topic), "labelled": (0, half)}.get(
            part, (half, self.words_per_topic - half)
        )
        topics = rng.integers(0, self.n_topics, n)
        in_topic = rng.random((n, width)) < self.topic_prob
        topic_words = topics[:, None] * self.words_per_topic + first
        topic_words = topic_words + rng.integers(0, count, (n, width))
        filler = self.n_topics * self.words_per_topic + rng.integers(0, self.n_filler, (n, width))
        words = self.word_ids()[np.where(in_topic, topic_words, filler)]
        ids = np.concatenate(
            [np.full((n, 1), CLS_ID), words, np.full((n, 1), SEP_ID)], axis=1
        ).astype(np.int32)
        return ids, topics

    def labelled(
        self, n: int, rng: np.random.Generator, part: str = "labelled"
    ) -> tuple[np.ndarray, np.ndarray]:
        """`n` sequences of `part` (as `sample`'s) and their task labels [n]."""
        ids, topics = self.sample(n, rng, part)
        return ids, self.label_of_topic()[topics].astype(np.int32)


def shuffle_words(ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The control text: every word of `ids` [n, seq_len] moved to a random place in the whole
    set ([CLS] and [SEP] stay): the same words, counts and length, no co-occurrence."""
    words = ids[:, 1:-1].ravel()
    shuffled = ids.copy()
    shuffled[:, 1:-1] = rng.permutation(words).reshape(len(ids), -1)
    return shuffled


def naive_bayes_accuracy(
    language: TopicLanguage,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    clusters: bool = False,
) -> float:
    """Accuracy of a multinomial naive Bayes classifier (add-1/2 smoothing) trained on `train`
    (ids, labels), on `test`: with bag-of-words features; with `clusters`, on each token's
    topic instead of its word (what a model that learned the clusters from context knows;
    filler and special tokens are dropped). The reference points of the unit tests."""

    def tokens(ids: np.ndarray) -> np.ndarray:
        if not clusters:
            return ids
        topics = language.topic_of_id()[ids]
        return np.where(topics >= 0, topics, language.n_topics)  # one bucket for the rest

    size = language.n_topics + 1 if clusters else language.vocab_size
    counts = np.full((2, size), 0.5)
    for label in (0, 1):
        np.add.at(counts[label], tokens(train[0][train[1] == label]).ravel(), 1.0)
    if clusters:
        counts[:, language.n_topics] = 1.0  # uninformative by construction
    log_probs = np.log(counts) - np.log(counts.sum(axis=1, keepdims=True))
    prior = np.log(np.bincount(train[1], minlength=2) + 1.0)
    scores = log_probs[:, tokens(test[0])].sum(axis=-1).T + prior  # [n, 2]
    return float(np.mean(scores.argmax(axis=-1) == test[1]))


def features(input_ids: np.ndarray) -> dict[str, np.ndarray]:
    """The encoder's input dict for unpadded single-segment sequences."""
    return {
        "input_ids": input_ids,
        "input_mask": np.ones_like(input_ids),
        "segment_ids": np.zeros_like(input_ids),
    }
