"""Agreement of our tokenizers with Model Garden's FullTokenizer, line by line.

    .venv/bin/python tools/tokenizer_agreement.py \
        --corpus-dir path/to/books \
        --vocab-file path/to/bert-uncased-vocab.txt

Reference: `official.nlp.tools.tokenization.FullTokenizer` (the original's algorithm) with the
original's 200-character word limit (Model Garden defaults to 400). Prints, for
`FullTokenizer` (ours, Python) and `GraphTokenizer` (ours, tensorflow-text), lines with
identical ids / total lines, and a few disagreeing lines.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus-dir", required=True)
    parser.add_argument("--vocab-file", required=True)
    parser.add_argument("--no-lower-case", dest="do_lower_case", action="store_false")
    parser.add_argument("--max-lines", type=int, default=0, help="0: every line")
    parser.add_argument("--batch-size", type=int, default=512)
    args = parser.parse_args(argv)

    import tensorflow as tf
    from official.nlp.tools import tokenization as mg_tokenization

    from electra_tf.data.graph_tokenizer import GraphTokenizer
    from electra_tf.data.tokenization import MAX_CHARS_PER_WORD, FullTokenizer

    lines: list[str] = []
    for path in sorted(glob.glob(os.path.join(args.corpus_dir, "*.txt"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            lines.extend(line.rstrip("\n") for line in f)
    if args.max_lines:
        lines = lines[: args.max_lines]

    reference = mg_tokenization.FullTokenizer(args.vocab_file, do_lower_case=args.do_lower_case)
    reference.wordpiece_tokenizer.max_input_chars_per_word = MAX_CHARS_PER_WORD
    ours = FullTokenizer(args.vocab_file, do_lower_case=args.do_lower_case)
    graph = GraphTokenizer(args.vocab_file, do_lower_case=args.do_lower_case)

    start = time.perf_counter()
    expected = [reference.convert_tokens_to_ids(reference.tokenize(line)) for line in lines]
    ref_s = time.perf_counter() - start
    start = time.perf_counter()
    python_ids = [ours.tokenize_to_ids(line) for line in lines]
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    graph_ids: list[list[int]] = []
    for i in range(0, len(lines), args.batch_size):
        batch = tf.constant([s.encode("utf-8") for s in lines[i : i + args.batch_size]])
        graph_ids.extend(graph.tokenize(batch).to_list())
    graph_s = time.perf_counter() - start

    n_tokens = sum(len(e) for e in expected)
    print(f"lines {len(lines)}, reference tokens {n_tokens}")
    for name, got, seconds in (
        ("FullTokenizer (ours)", python_ids, ours_s),
        ("GraphTokenizer", graph_ids, graph_s),
    ):
        bad = [i for i, (e, g) in enumerate(zip(expected, got, strict=True)) if e != g]
        same = len(lines) - len(bad)
        print(
            f"{name}: identical {same}/{len(lines)} ({100.0 * same / max(1, len(lines)):.4f}%), "
            f"{n_tokens / seconds:,.0f} tokens/s (reference {n_tokens / ref_s:,.0f} tokens/s)"
        )
        for i in bad[:5]:
            print(f"  line {i}: {lines[i][:120]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
