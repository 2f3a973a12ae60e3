"""Unicode character classes of BERT's BasicTokenizer, derived from Python's `unicodedata`.

The original tokenizer (google-research/electra `model/tokenization.py`, identical to Model
Garden's `official.nlp.tools.tokenization`) decides per character with `unicodedata.category`.
Both of our tokenizers use regular-expression classes instead: Python `re` for `FullTokenizer`
and RE2 (through `tf.strings` / tensorflow-text) for `GraphTokenizer`. Deriving every class from
the same `unicodedata` table keeps the two in agreement with the original, whatever Unicode
version RE2's own `\\p{...}` tables carry.

Building the classes scans all 1.1M code points once per process (about half a second); the
result is cached.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Iterable

import numpy as np

# CJK Unified Ideograph blocks that the original surrounds with spaces (`_is_chinese_char`).
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)

Ranges = tuple[tuple[int, int], ...]


@functools.cache
def _categories() -> np.ndarray:
    # One pass over every code point (surrogates get "Cs" and are never part of a class).
    return np.array([unicodedata.category(chr(cp)) for cp in range(sys.maxunicode + 1)])


def _ranges(mask: np.ndarray) -> Ranges:
    """Runs of True in a per-code-point mask, as inclusive (first, last) pairs."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1) - 1
    return tuple(zip(starts.tolist(), ends.tolist(), strict=True))


def _code_points() -> np.ndarray:
    return np.arange(sys.maxunicode + 1)


@functools.cache
def removed_ranges() -> Ranges:
    """`_clean_text`: NUL, U+FFFD and control characters (Cc, Cf) other than \\t \\n \\r."""
    cats = _categories()
    cp = _code_points()
    mask = np.isin(cats, ["Cc", "Cf"]) | (cp == 0) | (cp == 0xFFFD)
    mask[[0x9, 0xA, 0xD]] = False
    return _ranges(mask)


@functools.cache
def punctuation_ranges() -> Ranges:
    """All non-alphanumeric printable ASCII, plus every Unicode P* category."""
    cp = _code_points()
    ascii_punct = (
        ((cp >= 33) & (cp <= 47))
        | ((cp >= 58) & (cp <= 64))
        | ((cp >= 91) & (cp <= 96))
        | ((cp >= 123) & (cp <= 126))
    )
    return _ranges(ascii_punct | np.char.startswith(_categories(), "P"))


@functools.cache
def split_space_ranges() -> Ranges:
    """What `whitespace_tokenize` (`str.split()`) splits on among characters that survive
    `_clean_text`: Zs, \\t \\n \\r, and also U+2028/U+2029, which `_is_whitespace` misses."""
    mask = np.zeros(sys.maxunicode + 1, dtype=bool)
    # `re`'s \s on str patterns is exactly `str.isspace()`; surrogates cannot be in a str.
    everything = "".join(chr(cp) for cp in range(0xD800)) + "".join(
        chr(cp) for cp in range(0xE000, sys.maxunicode + 1)
    )
    for match in re.finditer(r"\s", everything):
        cp = ord(match.group())
        mask[cp] = True
    removed = np.zeros_like(mask)
    for lo, hi in removed_ranges():
        removed[lo : hi + 1] = True
    return _ranges(mask & ~removed)


@functools.cache
def nonspacing_mark_ranges() -> Ranges:
    return _ranges(_categories() == "Mn")


def bmp_only(ranges: Ranges) -> Ranges:
    """The part of `ranges` below U+10000. Python's `re` matches a class of BMP code points
    with a bitmap but walks a class with astral ranges range by range (20x slower), so the
    tokenizer uses BMP classes for the usual lines without astral characters."""
    return tuple((lo, min(hi, 0xFFFF)) for lo, hi in ranges if lo <= 0xFFFF)


def python_class(ranges: Iterable[tuple[int, int]], negate: bool = False) -> str:
    """A Python `re` character class matching the code-point ranges."""
    parts = []
    for lo, hi in ranges:
        parts.append(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}")
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


def re2_class(ranges: Iterable[tuple[int, int]], negate: bool = False) -> str:
    """An RE2 character class (for `tf.strings.regex_replace`, `tf_text.regex_split`)."""
    parts = []
    for lo, hi in ranges:
        parts.append(f"\\x{{{lo:x}}}" if lo == hi else f"\\x{{{lo:x}}}-\\x{{{hi:x}}}")
    return "[" + ("^" if negate else "") + "".join(parts) + "]"
