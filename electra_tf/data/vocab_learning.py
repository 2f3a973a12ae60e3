"""Learning a BERT-style WordPiece vocabulary from a corpus (tensorflow-text's learner).

Words are counted with our `BasicTokenizer`, i.e. exactly the splitting and normalisation the
tokenizers apply later (tensorflow-text's own `bert_vocab_from_dataset` counts words with its
BertTokenizer, which case-folds and would learn pieces our tokenizer never produces). The
counts go to `wordpiece_tokenizer_learner_lib.learn`, the learner behind
`bert_vocab_from_dataset`.

Layout: for vocabularies of at least 1000 entries, BERT's: [PAD]=0, [unused0..98]=1..99,
[UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103, then the learned pieces. Smaller ones put
[PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4 (a hundred fillers would crowd out real pieces).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from electra_tf.data.corpus import iter_text_files, list_inputs
from electra_tf.data.tokenization import BasicTokenizer
from electra_tf.runtime.atomic_io import write_text

_BERT_LAYOUT_MIN_SIZE = 1000


def reserved_tokens(vocab_size: int) -> list[str]:
    if vocab_size >= _BERT_LAYOUT_MIN_SIZE:
        return (
            ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        )
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def check_vocab_size(vocab_size: int) -> None:
    """A vocabulary must hold its reserved tokens and at least one word (ValueError)."""
    needed = len(reserved_tokens(vocab_size)) + 1
    if vocab_size < needed:
        raise ValueError(
            f"--vocab-size {vocab_size} cannot hold the special tokens "
            f"({', '.join(reserved_tokens(vocab_size))}) plus one word: use at least {needed}"
        )


def count_words(
    lines: Iterable[str], do_lower_case: bool = True, strip_accents: bool = True
) -> collections.Counter:
    basic = BasicTokenizer(do_lower_case, strip_accents)
    counts: collections.Counter = collections.Counter()
    for line in lines:
        counts.update(basic.tokenize(line))
    return counts


def corpus_lines(
    corpus_dir: str, max_bytes: int | None = None, strip_gutenberg: bool = False
) -> Iterable[str]:
    """Lines of every readable text file under `corpus_dir` (sorted), up to `max_bytes`;
    with `strip_gutenberg`, only each file's text between its Gutenberg START/END markers."""
    read = 0
    for item in list_inputs(corpus_dir):
        for text_file in iter_text_files(item):
            if text_file.skip_reason:
                continue
            for line in text_file.lines(strip_gutenberg):
                read += len(line)
                yield line
                if max_bytes is not None and read >= max_bytes:
                    return


def learn_vocab(
    word_counts: collections.Counter,
    vocab_size: int,
    max_unique_chars: int = 1000,
    num_iterations: int = 4,
) -> list[str]:
    """A WordPiece vocabulary of at most `vocab_size` entries (the learner aims for 95-100%)."""
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

    if vocab_size < 10:
        raise ValueError(f"vocab_size must be at least 10, got {vocab_size}")
    if not word_counts:
        raise ValueError("no words to learn a vocabulary from (empty corpus?)")
    reserved = reserved_tokens(vocab_size)
    vocab = learner.learn(
        dict(word_counts),
        vocab_size=vocab_size,
        reserved_tokens=reserved,
        # A piece must occur at least this often; small corpora need a low floor to reach size.
        lower_thresh=1,
        num_iterations=num_iterations,
        max_unique_chars=max_unique_chars,
        # True is what makes the learner write suffix pieces as "##piece" (and "##" + every
        # character); with False it drops the prefix, and unseen words become [UNK].
        include_joiner_token=True,
    )
    # The learner lists reserved tokens first, in our order; keep the first of any duplicate.
    # The bare joiner "##" is not a piece BERT's vocabularies have.
    seen: set[str] = {"##"}
    unique = [t for t in vocab if not (t in seen or seen.add(t))]
    assert unique[: len(reserved)] == reserved, "reserved tokens lost their ids"
    return unique[:vocab_size]


def frequency_vocab(word_counts: collections.Counter, vocab_size: int) -> list[str]:
    """A fast WordPiece vocabulary: every character seen twice (alone and as `##` suffix),
    frequent `##` word endings (10% of the room) and the most frequent whole words.

    Seconds instead of the learner's minutes on a 2-core machine; what the default corpus
    uses so that `make pretrain` starts quickly. Greedy longest-match over it is well defined
    (any word over the known characters decomposes).
    """
    check_vocab_size(vocab_size)
    if not word_counts:
        raise ValueError("no words to build a vocabulary from (empty corpus?)")
    reserved = reserved_tokens(vocab_size)
    chars: collections.Counter = collections.Counter()
    endings: collections.Counter = collections.Counter()
    for word, count in word_counts.items():
        if count <= 0:
            continue
        for ch in word:
            chars[ch] += count
        for k in (2, 3, 4):
            if len(word) > k + 1:
                endings["##" + word[-k:]] += count
    by_count = sorted(chars.items(), key=lambda kv: (-kv[1], kv[0]))
    alphabet = [c for c, n in by_count if n >= 2][:1000]
    tokens = list(reserved) + alphabet + ["##" + c for c in alphabet]
    room = vocab_size - len(tokens)
    ranked_endings = sorted(endings.items(), key=lambda kv: (-kv[1], kv[0]))
    ranked_words = sorted(word_counts.items(), key=lambda kv: (-kv[1], kv[0]))
    seen = set(tokens)
    for piece, _ in ranked_endings[: room // 10]:
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
    for word, _ in ranked_words:
        if len(tokens) >= vocab_size:
            break
        if word not in seen and len(word) <= 50:
            seen.add(word)
            tokens.append(word)
    return tokens[:vocab_size]


def write_vocab(tokens: list[str], path: str) -> None:
    """One token per line, written atomically."""
    write_text(path, "\n".join(tokens) + "\n")
