"""BERT WordPiece tokenization as the original ELECTRA's `model/tokenization.py`, but fast.

`FullTokenizer` produces the same tokens as the original `FullTokenizer` (and Model Garden's
`official.nlp.tools.tokenization.FullTokenizer`, the same algorithm): `_clean_text` (drop NUL,
U+FFFD, Cc/Cf controls), spaces around CJK ideographs, whitespace split, lower-casing with
accent stripping (NFD, drop Mn) when `do_lower_case`, punctuation split, then greedy
longest-match-first WordPiece with a `##` prefix and `[UNK]` for unknown words and words longer
than 200 characters.

The original walks every character in Python. Here each of those steps is one regular
expression over the whole line; this is exact because every step is per character or stops at
whitespace (lower-casing's final-sigma context does not cross whitespace, NFD reordering does
not cross a starter). WordPiece results are cached per word, so a word is matched once. The
measurement that justified not using Model Garden's `FullTokenizer` (in requirements.txt):
`make bench-data`, where the project's data path runs 9.5-11.5x the original's pure-Python one
(2 processes against 1; bench/README.md, its data-preparation row); tests/test_tokenization.py
checks that both give the same ids.

This module does not import TensorFlow (data-preparation workers use it); `GraphTokenizer`, the
in-graph twin built on tensorflow-text, is in `graph_tokenizer`.
"""

from __future__ import annotations

import os
import re
import unicodedata

from electra_tf.data import charclasses

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The original's WordpieceTokenizer bound; Model Garden's default is 400.
MAX_CHARS_PER_WORD = 200
_CACHE_LIMIT = 1_000_000


class VocabError(ValueError):
    """A vocabulary file that cannot be used; the message names the file."""


def load_vocab(path: str, required: tuple[str, ...] = SPECIAL_TOKENS) -> dict[str, int]:
    """Reads a one-token-per-line vocabulary into {token: id}, id = line number.

    Raises:
      VocabError: the file is missing, empty, not UTF-8 text (a binary file), repeats a token,
        or lacks one of `required`; the message names
        the token and the file (the original died with `KeyError: '[UNK]'`).
    """
    if os.path.isdir(path):
        raise VocabError(f"vocabulary file {path} is a folder; give the vocab.txt inside it")
    if not os.path.isfile(path):
        raise VocabError(f"vocabulary file not found: {path}")
    vocab: dict[str, int] = {}
    try:
        with open(path, encoding="utf-8", errors="strict") as f:
            for index, line in enumerate(f):
                token = line.strip()
                if token and token in vocab:
                    # The original silently keeps the later line's id, leaving the earlier id
                    # unused: almost always a vocabulary edited by hand or concatenated.
                    raise VocabError(
                        f"{path}:{index + 1}: the token {token!r} repeats line "
                        f"{vocab[token] + 1}; every token of a vocabulary must be on one line only"
                    )
                vocab[token] = index
    except UnicodeDecodeError as e:
        raise VocabError(
            f"vocabulary {path} is not UTF-8 text (byte {e.start}: {e.reason}); "
            "a vocabulary is one token per line"
        ) from None
    if not vocab:
        raise VocabError(f"vocabulary file is empty: {path}")
    missing = [t for t in required if t not in vocab]
    if missing:
        raise VocabError(
            f"vocabulary {path} lacks the special token(s) {', '.join(missing)}; a BERT-style "
            f"WordPiece vocabulary needs {', '.join(required)} "
            "(build one with data_prep/learn_vocab.py)"
        )
    return vocab


def id_count(vocab: dict[str, int]) -> int:
    """The ids a vocabulary spans, its largest id + 1: the embedding rows it needs. Not
    `len(vocab)`: blank lines, which map to one entry "", still take an id each."""
    return max(vocab.values()) + 1


def vocab_tokens(vocab: dict[str, int]) -> list[str]:
    """The vocabulary in id order (ids without a line, if any, map to "")."""
    tokens = [""] * id_count(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    return tokens


class _Patterns:
    """The BasicTokenizer steps as compiled regular expressions (see charclasses.py)."""

    def __init__(self, bmp_only: bool) -> None:
        def ranges(r: charclasses.Ranges) -> charclasses.Ranges:
            return charclasses.bmp_only(r) if bmp_only else r

        cls = charclasses.python_class
        self.removed = re.compile(cls(ranges(charclasses.removed_ranges())))
        self.cjk = re.compile(cls(ranges(charclasses.CJK_RANGES)))
        self.marks = re.compile(cls(ranges(charclasses.nonspacing_mark_ranges())))
        punct = ranges(charclasses.punctuation_ranges())
        space = ranges(charclasses.split_space_ranges())
        # A punctuation mark alone, or a run of anything that is neither punctuation nor space.
        self.words = re.compile(cls(punct) + "|" + cls(punct + space, negate=True) + "+")


class BasicTokenizer:
    """The original's BasicTokenizer (clean, CJK spacing, lower-case/strip accents, punctuation
    split) without a vocabulary; also what vocabulary learning counts words with."""

    def __init__(self, do_lower_case: bool = True, strip_accents: bool = True) -> None:
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents and do_lower_case
        self._ascii_control = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
        # After cleaning, printable ASCII is alphanumeric or punctuation; the rest is space.
        self._ascii_words = re.compile("[A-Za-z0-9]+|[!-/:-@\\[-`{-~]")
        self._bmp = _Patterns(bmp_only=True)
        self._full = _Patterns(bmp_only=False)

    def tokenize(self, text: str) -> list[str]:
        """Words and punctuation marks after cleaning, lower-casing and accent stripping."""
        if text.isascii():
            if self._ascii_control.search(text):
                text = self._ascii_control.sub("", text)
            if self.do_lower_case:
                text = text.lower()
            return self._ascii_words.findall(text)
        rx = self._bmp if max(text) <= "\uffff" else self._full
        text = rx.removed.sub("", text)
        text = rx.cjk.sub(" \\g<0> ", text)
        if self.do_lower_case:
            text = text.lower()
            if self.strip_accents:
                text = rx.marks.sub("", unicodedata.normalize("NFD", text))
        return rx.words.findall(text)


class FullTokenizer:
    """End-to-end WordPiece tokenizer, the original's `FullTokenizer` behaviour.

    Args:
      vocab_file: one token per line; must hold [PAD] [UNK] [CLS] [SEP] [MASK].
      do_lower_case: lower-case the text (and strip accents, see below).
      strip_accents: with `do_lower_case`, decompose (NFD) and drop Mn marks. As in the
        original (PR #88), accents are never stripped when not lower-casing.
      max_chars_per_word: longer words become [UNK] (the original: 200).
    """

    def __init__(
        self,
        vocab_file: str,
        do_lower_case: bool = True,
        strip_accents: bool = True,
        max_chars_per_word: int = MAX_CHARS_PER_WORD,
    ) -> None:
        self.vocab_file = vocab_file
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents and do_lower_case
        self.max_chars_per_word = max_chars_per_word
        self.unk_id = self.vocab["[UNK]"]
        self._max_piece_len = max(len(t) for t in self.vocab)
        self._cache: dict[str, list[int]] = {}
        self.basic_tokenize = BasicTokenizer(do_lower_case, strip_accents).tokenize

    # ------------------------------------------------------------------ wordpiece
    def _wordpiece(self, word: str) -> list[int]:
        vocab = self.vocab
        if len(word) > self.max_chars_per_word:
            return [self.unk_id]
        ids = []
        start, n = 0, len(word)
        while start < n:
            # No vocabulary entry is longer than _max_piece_len, so longer candidates cannot
            # match; starting there gives the original's greedy longest match.
            end = min(n, start + self._max_piece_len)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                return [self.unk_id]
            ids.append(found)
            start = end
        return ids

    def _word_ids(self, word: str) -> list[int]:
        ids = self._cache.get(word)
        if ids is None:
            ids = self._wordpiece(word)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[word] = ids
        return ids

    def tokenize_to_ids(self, text: str) -> list[int]:
        """Token ids of one text (the data-preparation hot path)."""
        cache = self._cache
        out: list[int] = []
        for word in self.basic_tokenize(text):
            ids = cache.get(word)
            if ids is None:
                ids = self._word_ids(word)
            out += ids
        return out

    def tokenize(self, text: str) -> list[str]:
        inv = self.inv_vocab
        return [inv[i] for i in self.tokenize_to_ids(text)]

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [self.vocab[t] for t in tokens]

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self.inv_vocab[i] for i in ids]
