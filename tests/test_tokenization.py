"""FullTokenizer and GraphTokenizer against Model Garden's FullTokenizer (the original algorithm).

The vocabulary is built here from the test's own text, so every script below has some known
pieces, some partial pieces (exercising greedy longest-match with `##`) and some unknowns.
"""

import itertools
import unicodedata

import pytest
import tensorflow as tf
from official.nlp.tools import tokenization as mg_tokenization

from electra_tf.data.graph_tokenizer import GraphTokenizer
from electra_tf.data.tokenization import FullTokenizer, VocabError, load_vocab

TEXTS = [
    "",
    "   \t  \u3000 \u00a0 ",
    "Hello, World! It's 3.14 -- isn't it? (yes) [no] {maybe} <tag> a_b ~x^y`z|w\\v",
    "Café naïve résumé Ångström Zürich façade coöperate ÉCOLE",
    "ΟΔΟΣ ΣΟΦΟΣ σοφός Ἀθῆναι ΆΈΉΊΌΎΏ ὁ λόγος ΑΣΣ Σ. ΟΔΟΣ'",
    "İstanbul Straße ǅemal ﬁne ＡＢＣ １２３ Ⅻ ℌ",
    "中文字符测试，日本語のテキスト。한국어 텍스트 𠀀𠀁 豈",
    "see https://example.com/a_b?c=1&d=2#frag or mail me@example.org!",
    "emoji 🙂👍🏽 🇫🇷 family 👨‍👩‍👧 math 𝐀𝐁𝐂 𝔘𝔫𝔦",
    "ctrl\x00a\x07b\x1bc\u200bd\ufeffe\ufffdf\x0cg\x85h\u2028i\u2029j\x0bk\u00adl\rm\nn",
    " \u0301 e\u0301 \u0308u x\u0327 ",
    "a" * 199 + " " + "b" * 200 + " " + "c" * 201 + " " + "héllo" * 41 + " " + "ab" * 150,
    "Don\u2019t \u201cquote\u201d \u2014 dash \u2026 ellipsis \u00abguillemets\u00bb \u00bfqu\u00e9?",
    "العربية עברית हिन्दी ไทย Русский текст ЁЛКА",
    "Mixed CASE words: UNaffable unaffable Unaffable playing PLAYED",
    "tab\tseparated\tvalues\r\nand  multiple   spaces",
]


def _write_vocab(path, tokens):
    specials = ["[PAD]"] + [f"[unused{i}]" for i in range(3)] + ["[UNK]", "[CLS]", "[SEP]"]
    specials += ["[MASK]"]
    path.write_text("\n".join(specials + tokens) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    """Whole words, every 3-char prefix, `##` suffixes and most single characters from TEXTS
    under each tokenizer setting, leaving some characters out so [UNK] happens."""
    words = set()
    for lower in (True, False):
        basic = mg_tokenization.BasicTokenizer(do_lower_case=lower)
        for text in TEXTS:
            words.update(basic.tokenize(text))
            if lower:  # the lower-case-without-stripping variant's words too
                words.update(w.lower() for w in text.split())
    tokens = set()
    for i, word in enumerate(sorted(words)):
        if len(word) > 30:
            continue
        if i % 3 == 0:
            tokens.add(word)
        tokens.add(word[:3])
        for j, ch in enumerate(word):
            # Leave out a few characters so some words have no decomposition at all.
            if ord(ch) % 7 != 0:
                tokens.add(ch)
                tokens.add("##" + ch)
            if j >= 2:
                tokens.add("##" + word[j - 2 : j + 1])
    tokens.update(["un", "##aff", "##able", "play", "##ing", "##ed"])
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    printable = [
        t
        for t in tokens
        if t and not any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in t)
    ]
    _write_vocab(path, sorted(printable))
    return str(path)


def _reference(vocab_file, lower, strip):
    ref = mg_tokenization.FullTokenizer(vocab_file, do_lower_case=lower)
    # The original (google-research/electra) marks words over 200 characters [UNK]; Model
    # Garden's default is 400.
    ref.wordpiece_tokenizer.max_input_chars_per_word = 200
    if lower and not strip:
        # The original's strip_accents=False (PR #88): lower-case only. Model Garden lacks the
        # switch, so disable its accent step on this instance.
        ref.basic_tokenizer._run_strip_accents = lambda token: token
    return ref


SETTINGS = [(True, True), (True, False), (False, True), (False, False)]


@pytest.mark.parametrize("lower,strip", SETTINGS)
def test_full_tokenizer_matches_model_garden(vocab_file, lower, strip):
    ref = _reference(vocab_file, lower, strip)
    ours = FullTokenizer(vocab_file, do_lower_case=lower, strip_accents=strip)
    n_unk = 0
    for text in TEXTS:
        expected = ref.tokenize(text)
        assert ours.tokenize(text) == expected, text
        assert ours.tokenize_to_ids(text) == ref.convert_tokens_to_ids(expected), text
        n_unk += expected.count("[UNK]")
    # The fixture must exercise the unknown-word paths, and the text must not be all [UNK].
    assert 3 < n_unk < 100


@pytest.mark.parametrize("lower,strip", SETTINGS)
def test_graph_tokenizer_matches_model_garden(vocab_file, lower, strip):
    ref = _reference(vocab_file, lower, strip)
    graph = GraphTokenizer(vocab_file, do_lower_case=lower, strip_accents=strip)
    got = graph.tokenize(tf.constant([t.encode("utf-8") for t in TEXTS]))
    assert isinstance(got, tf.RaggedTensor) and got.dtype == tf.int32
    for text, ids in zip(TEXTS, got.to_list(), strict=True):
        assert ids == ref.convert_tokens_to_ids(ref.tokenize(text)), text


def test_settings_change_the_output(vocab_file):
    """Guards against a switch that silently does nothing."""
    text = TEXTS[3] + " " + TEXTS[4]
    outputs = {
        (lower, strip): tuple(FullTokenizer(vocab_file, lower, strip).tokenize(text))
        for lower, strip in SETTINGS
    }
    assert outputs[(True, True)] != outputs[(True, False)]
    assert outputs[(True, True)] != outputs[(False, False)]
    # Accents are only ever stripped while lower-casing (the original's rule).
    assert outputs[(False, True)] == outputs[(False, False)]


def test_greedy_longest_match(tmp_path):
    path = tmp_path / "vocab.txt"
    _write_vocab(path, ["un", "##a", "##aff", "##able", "play", "##in", "##ing", "x", "##x"])
    ours = FullTokenizer(str(path))
    assert ours.tokenize("Unaffable playing playin") == [
        "un", "##aff", "##able", "play", "##ing", "play", "##in"
    ]  # fmt: skip
    assert ours.tokenize("x" * 200) == ["x"] + ["##x"] * 199
    assert ours.tokenize("x" * 201 + " unz") == ["[UNK]", "[UNK]"]


def test_cache_does_not_change_results(vocab_file):
    ours = FullTokenizer(vocab_file)
    first = [ours.tokenize_to_ids(t) for t in TEXTS]
    second = [ours.tokenize_to_ids(t) for t in reversed(TEXTS)]
    assert first == second[::-1]


def test_unicode_steps_cover_every_code_point_class(vocab_file):
    """Spot-check single characters of every Unicode category against the reference."""
    ref = _reference(vocab_file, True, True)
    ours = FullTokenizer(vocab_file)
    seen = set()
    sample = []
    for cp in itertools.chain(range(0x3000), range(0x1F300, 0x1F400), range(0xE0000, 0xE0080)):
        cat = unicodedata.category(chr(cp))
        if cat != "Cs" and (cat, cp // 0x400) not in seen:
            seen.add((cat, cp // 0x400))
            sample.append(chr(cp))
    text = " ".join("a" + ch + "b" for ch in sample)
    assert ours.tokenize(text) == ref.tokenize(text)


def test_load_vocab_names_missing_token_and_file(tmp_path):
    path = tmp_path / "sp_vocab.txt"
    path.write_text("[PAD]\n[CLS]\n[SEP]\n[MASK]\nhello\n", encoding="utf-8")
    with pytest.raises(VocabError, match=r"\[UNK\]") as err:
        load_vocab(str(path))
    assert str(path) in str(err.value)
    with pytest.raises(VocabError, match="not found"):
        load_vocab(str(tmp_path / "nope.txt"))
    with pytest.raises(VocabError, match=r"\[UNK\]"):
        FullTokenizer(str(path))
    with pytest.raises(VocabError, match=r"\[UNK\]"):
        GraphTokenizer(str(path))


def test_shipped_unicode_classes_equal_this_pythons_derivation():
    # Workers load the packaged table instead of scanning 1.1M code points; it must be exactly
    # what the derivation gives (regenerate: python -m electra_tf.data.charclasses --write).
    from electra_tf.data import charclasses

    shipped = charclasses._shipped_tables()
    assert shipped is not None, f"{charclasses.TABLE_FILE} missing or for another Unicode version"
    assert shipped == charclasses.derive_tables()


def test_unicode_classes_fall_back_to_derivation_on_another_unicode_version(tmp_path, monkeypatch):
    import json

    from electra_tf.data import charclasses

    stale = tmp_path / "classes.json"
    stale.write_text(
        json.dumps({"unidata_version": "1.0.0", "classes": {"removed": [[65, 90]]}}),
        encoding="utf-8",
    )
    monkeypatch.setattr(charclasses, "TABLE_FILE", str(stale))
    charclasses._shipped_tables.cache_clear()
    charclasses._table.cache_clear()
    try:
        assert charclasses._shipped_tables() is None
        removed = charclasses.removed_ranges()
        assert (65, 90) not in removed and (0, 8) in removed  # NUL..BS are controls
    finally:
        charclasses._shipped_tables.cache_clear()
        charclasses._table.cache_clear()
