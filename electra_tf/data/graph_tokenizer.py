"""In-graph WordPiece tokenizer (tensorflow-text) with the original FullTokenizer's output.

tensorflow-text's own `BertTokenizer` disagrees with the original on accented Greek and a few
other scripts: it case-folds (NFKC_Casefold) instead of lower-casing and normalises differently.
This module therefore does each step of the original's BasicTokenizer with plain string ops,
using character classes derived from Python's `unicodedata` (see `charclasses.py`), and only
hands the final words to `FastWordpieceTokenizer` (LinMaxMatch, which returns the same pieces
as the original's greedy longest-match-first loop).

Known residual differences: `tf.strings.lower` and `normalize_utf8` use TensorFlow's ICU tables,
which are newer than Python 3.11's Unicode 14; about sixty rarely used code points (scripts
added in Unicode 14-16) lower-case or decompose differently.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.data import charclasses
from electra_tf.data.tokenization import MAX_CHARS_PER_WORD, load_vocab, vocab_tokens


class GraphTokenizer(tf.Module):
    """Strings -> WordPiece ids inside a TF graph (for serving signatures and tf.data).

    Args:
      vocab_file: BERT-style vocabulary (validated by `load_vocab`).
      do_lower_case: lower-case, as the original.
      strip_accents: with `do_lower_case`, NFD + drop Mn marks (never without lower-casing).
      max_chars_per_word: words longer than this (in code points) become [UNK].

    `tokenize(strings)`: tf.string [batch] -> tf.RaggedTensor int32 [batch, (tokens)], without
    [CLS]/[SEP].
    """

    def __init__(
        self,
        vocab_file: str,
        do_lower_case: bool = True,
        strip_accents: bool = True,
        max_chars_per_word: int = MAX_CHARS_PER_WORD,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        vocab = load_vocab(vocab_file)
        # FastWordpieceTokenizer numbers tokens by list position, so pass them in id order.
        tokens = vocab_tokens(vocab)
        self.vocab_size = len(tokens)
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents and do_lower_case
        self.max_chars_per_word = max_chars_per_word
        self.cls_id = vocab["[CLS]"]
        self.sep_id = vocab["[SEP]"]
        self.pad_id = vocab["[PAD]"]
        self._unk_token = "[UNK]"
        self._removed = charclasses.re2_class(charclasses.removed_ranges())
        self._cjk = charclasses.re2_class(charclasses.CJK_RANGES)
        self._space = charclasses.re2_class(charclasses.split_space_ranges()) + "+"
        self._marks = charclasses.re2_class(charclasses.nonspacing_mark_ranges())
        self._punct = charclasses.re2_class(charclasses.punctuation_ranges())
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=tokens,
            suffix_indicator="##",
            # Our own character limit below decides [UNK]; 4 bytes per code point is UTF-8's
            # maximum, so the byte limit never fires first.
            max_bytes_per_word=4 * max_chars_per_word + 4,
            token_out_type=tf.int64,
            unknown_token=self._unk_token,
            no_pretokenization=True,
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        text = tf.strings.regex_replace(strings, self._removed, "")
        text = tf.strings.regex_replace(text, self._cjk, " \\0 ")
        words = tf_text.regex_split(text, self._space)  # [batch, (words)]
        flat = words.flat_values  # [num_words]
        if self.do_lower_case:
            # Per word, as the original: final sigma looks only inside the word.
            flat = tf.strings.lower(flat, encoding="utf-8")
            if self.strip_accents:
                flat = tf_text.normalize_utf8(flat, "NFD")
                flat = tf.strings.regex_replace(flat, self._marks, "")
        pieces = tf_text.regex_split(flat, self._punct, self._punct)  # [num_words, (pieces)]
        piece_values = pieces.flat_values  # [num_pieces]
        too_long = (
            tf.strings.length(piece_values, unit="UTF8_CHAR") > self.max_chars_per_word
        )  # [num_pieces]
        piece_values = tf.where(too_long, self._unk_token, piece_values)
        ids = self._wordpiece.tokenize(piece_values)  # [num_pieces, (wordpieces)]
        nested = words.with_flat_values(pieces.with_flat_values(ids))
        # [batch, (words), (pieces), (wordpieces)] -> [batch, (tokens)]
        return tf.cast(nested.merge_dims(1, 3), tf.int32)
