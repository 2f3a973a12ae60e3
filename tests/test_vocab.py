"""Vocabulary learning: BERT's special-token layout, usable by the tokenizers, no [UNK] on the
training text."""

import collections

from electra_tf.data import vocab_learning
from electra_tf.data.tokenization import FullTokenizer, load_vocab

TEXT = (
    "The quick brown fox jumps over the lazy dog. Foxes are quicker than dogs; "
    "jumping, running and walking are what quick animals do. Naïve café owners "
    "watched the jumper jump again and again."
).split(". ")


def _counts():
    return vocab_learning.count_words(TEXT * 20)


def test_wordpiece_learner_small_layout(tmp_path):
    tokens = vocab_learning.learn_vocab(_counts(), vocab_size=120)
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert 20 < len(tokens) <= 120 and len(set(tokens)) == len(tokens)
    path = tmp_path / "vocab.txt"
    vocab_learning.write_vocab(tokens, str(path))
    tokenizer = FullTokenizer(str(path))
    ids = [i for line in TEXT for i in tokenizer.tokenize_to_ids(line)]
    assert tokenizer.unk_id not in ids  # every training word decomposes
    assert "naive" in " ".join(tokenizer.tokenize("naïve")).replace(" ##", "")
    # Words the learner never saw whole still decompose, through "##" suffix pieces.
    assert any(t.startswith("##") and len(t) > 2 for t in tokens) and "##" not in tokens
    for word in ("jumpers", "dogfox", "walked"):
        pieces = tokenizer.tokenize(word)
        assert "[UNK]" not in pieces and len(pieces) > 1, (word, pieces)
        assert all(p.startswith("##") for p in pieces[1:]), (word, pieces)


def test_bert_layout_for_full_size_vocab(tmp_path):
    counts = collections.Counter({f"word{i}": 4000 - i for i in range(3000)})
    counts.update(_counts())
    tokens = vocab_learning.frequency_vocab(counts, vocab_size=1200)
    assert len(tokens) == 1200 and len(set(tokens)) == 1200
    path = tmp_path / "vocab.txt"
    vocab_learning.write_vocab(tokens, str(path))
    vocab = load_vocab(str(path))
    assert [vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [
        0,
        100,
        101,
        102,
        103,
    ]
    assert vocab["[unused0]"] == 1 and vocab["[unused98]"] == 99
    tokenizer = FullTokenizer(str(path))
    assert tokenizer.tokenize("word0 Word1") == ["word0", "word1"]
    assert tokenizer.unk_id not in tokenizer.tokenize_to_ids("word2999 zebra")  # via ## chars
