"""Unicode character classes of BERT's BasicTokenizer, derived from Python's `unicodedata`.

The original tokenizer (google-research/electra `model/tokenization.py`, identical to Model
Garden's `official.nlp.tools.tokenization`) decides per character with `unicodedata.category`.
Both of our tokenizers use regular-expression classes instead: Python `re` for `FullTokenizer`
and RE2 (through `tf.strings` / tensorflow-text) for `GraphTokenizer`. Deriving every class from
the same `unicodedata` table keeps the two in agreement with the original, whatever Unicode
version RE2's own `\\p{...}` tables carry.

Deriving the classes scans all 1.1M code points (about 1.5 s, paid by every data-preparation
worker). So the derived ranges ship with the package in `unicode_classes.json`, keyed by
`unicodedata.unidata_version`: a Python whose Unicode database differs derives them itself,
and a test checks that the shipped file equals the derivation. Regenerate it with
`python -m electra_tf.data.charclasses --write`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from electra_tf.runtime.atomic_io import write_text

if TYPE_CHECKING:
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


TABLE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unicode_classes.json")


@functools.cache
def _categories() -> np.ndarray:
    import numpy as np

    # One pass over every code point (surrogates get "Cs" and are never part of a class).
    return np.array([unicodedata.category(chr(cp)) for cp in range(sys.maxunicode + 1)])


def _ranges(mask: np.ndarray) -> Ranges:
    """Runs of True in a per-code-point mask, as inclusive (first, last) pairs."""
    import numpy as np

    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1) - 1
    return tuple(zip(starts.tolist(), ends.tolist(), strict=True))


def _code_points() -> np.ndarray:
    import numpy as np

    return np.arange(sys.maxunicode + 1)


def _derive_removed_ranges() -> Ranges:
    """`_clean_text`: NUL, U+FFFD and control characters (Cc, Cf) other than \\t \\n \\r."""
    import numpy as np

    cats = _categories()
    cp = _code_points()
    mask = np.isin(cats, ["Cc", "Cf"]) | (cp == 0) | (cp == 0xFFFD)
    mask[[0x9, 0xA, 0xD]] = False
    return _ranges(mask)


def _derive_punctuation_ranges() -> Ranges:
    """All non-alphanumeric printable ASCII, plus every Unicode P* category."""
    import numpy as np

    cp = _code_points()
    ascii_punct = (
        ((cp >= 33) & (cp <= 47))
        | ((cp >= 58) & (cp <= 64))
        | ((cp >= 91) & (cp <= 96))
        | ((cp >= 123) & (cp <= 126))
    )
    return _ranges(ascii_punct | np.char.startswith(_categories(), "P"))


def _derive_split_space_ranges() -> Ranges:
    """What `whitespace_tokenize` (`str.split()`) splits on among characters that survive
    `_clean_text`: Zs, \\t \\n \\r, and also U+2028/U+2029, which `_is_whitespace` misses."""
    import numpy as np

    mask = np.zeros(sys.maxunicode + 1, dtype=bool)
    # `re`'s \s on str patterns is exactly `str.isspace()`; surrogates cannot be in a str.
    everything = "".join(chr(cp) for cp in range(0xD800)) + "".join(
        chr(cp) for cp in range(0xE000, sys.maxunicode + 1)
    )
    for match in re.finditer(r"\s", everything):
        cp = ord(match.group())
        mask[cp] = True
    removed = np.zeros_like(mask)
    for lo, hi in _derive_removed_ranges():
        removed[lo : hi + 1] = True
    return _ranges(mask & ~removed)


def _derive_nonspacing_mark_ranges() -> Ranges:
    return _ranges(_categories() == "Mn")


_DERIVATIONS: dict[str, Callable[[], Ranges]] = {
    "removed": _derive_removed_ranges,
    "punctuation": _derive_punctuation_ranges,
    "split_space": _derive_split_space_ranges,
    "nonspacing_mark": _derive_nonspacing_mark_ranges,
}


def derive_tables() -> dict[str, Ranges]:
    """Every class derived from this Python's `unicodedata` (slow: see the module docstring)."""
    return {name: derive() for name, derive in _DERIVATIONS.items()}


@functools.cache
def _shipped_tables() -> dict[str, Ranges] | None:
    """The packaged tables when they were derived from this Python's Unicode version."""
    try:
        with open(TABLE_FILE, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if data.get("unidata_version") != unicodedata.unidata_version:
        return None
    tables = data.get("classes", {})
    if set(tables) != set(_DERIVATIONS):
        return None
    return {name: tuple((lo, hi) for lo, hi in ranges) for name, ranges in tables.items()}


@functools.cache
def _table(name: str) -> Ranges:
    shipped = _shipped_tables()
    return shipped[name] if shipped is not None else _DERIVATIONS[name]()


def removed_ranges() -> Ranges:
    """`_clean_text`: NUL, U+FFFD and control characters (Cc, Cf) other than \\t \\n \\r."""
    return _table("removed")


def punctuation_ranges() -> Ranges:
    """All non-alphanumeric printable ASCII, plus every Unicode P* category."""
    return _table("punctuation")


def split_space_ranges() -> Ranges:
    """Zs, \\t \\n \\r and U+2028/U+2029 (see `_derive_split_space_ranges`)."""
    return _table("split_space")


def nonspacing_mark_ranges() -> Ranges:
    """Mn: the accents that accent stripping drops after NFD."""
    return _table("nonspacing_mark")


def write_tables(path: str = TABLE_FILE) -> None:
    """Derives every class and writes the version-keyed table file (atomically)."""
    data = {
        "unidata_version": unicodedata.unidata_version,
        "classes": {name: [list(r) for r in ranges] for name, ranges in derive_tables().items()},
    }
    write_text(path, json.dumps(data, separators=(",", ":")) + "\n")


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Derive the tokenizer's Unicode classes.")
    parser.add_argument("--write", action="store_true", help=f"(re)write {TABLE_FILE}")
    args = parser.parse_args(argv)
    if args.write:
        write_tables()
        print(f"wrote {TABLE_FILE} (Unicode {unicodedata.unidata_version})")
    else:
        shipped = _shipped_tables()
        state = "matches" if shipped == derive_tables() else "differs from"
        print(
            f"{TABLE_FILE} {state} this Python's Unicode {unicodedata.unidata_version} derivation"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
