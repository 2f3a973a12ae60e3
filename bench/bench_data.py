"""Data-preparation speed: our build_tfrecords (N processes) vs the original's pure-Python path.

    make bench-data                      # an 8 MB slice of the default corpus's sources
    .venv/bin/python -m bench.bench_data --corpus-dir BOOKS_DIR \
        --vocab-file bert-uncased-vocab.txt

Baseline, in the same run over the same files: Model Garden's FullTokenizer (the original's
algorithm, pure Python), the same packing, `tf.train.Example` + `TFRecordWriter`, one process
(the original's default). Reported: corpus WordPiece tokens per wall-clock second, start-up
included for both.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # `python bench/bench_data.py`: bench is a package
    raise SystemExit("run it from the repository root as: python -m bench.bench_data")

import argparse
import glob
import os
import random
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def _generated_corpus(out_dir: str, max_mb: float) -> str:
    """Documentation prose of the Python installation and its packages (what the default corpus
    is made of), split over 8 files."""
    from electra_tf.data.default_corpus import iter_documents, source_roots

    corpus = os.path.join(out_dir, "corpus")
    os.makedirs(corpus)
    docs, size = [], 0
    for paragraphs in iter_documents(source_roots()):
        docs.append("\n".join(paragraphs))
        size += len(docs[-1])
        if size > max_mb * 1e6:
            break
    for i in range(8):
        with open(os.path.join(corpus, f"part{i}.txt"), "w", encoding="utf-8") as f:
            f.write("\n\n".join(docs[i::8]) + "\n")
    return corpus


def _baseline(corpus_dir: str, vocab_file: str, out_dir: str, max_len: int) -> int:
    """The original's single-process pipeline with Model Garden's FullTokenizer."""
    import tensorflow as tf
    from official.nlp.tools import tokenization as mg

    from electra_tf.data.example_builder import ExampleBuilder

    tokenizer = mg.FullTokenizer(vocab_file, do_lower_case=True)
    vocab = tokenizer.vocab
    builder = ExampleBuilder(max_len, vocab["[CLS]"], vocab["[SEP]"], random.Random(0))
    writers = [tf.io.TFRecordWriter(os.path.join(out_dir, f"b-{k}")) for k in range(8)]
    n_tokens, n_written = 0, 0

    def write(example):
        nonlocal n_written
        if example is None:
            return
        ids, seg = example
        pad = max_len - len(ids)
        feats = {
            "input_ids": ids + [0] * pad,
            "input_mask": [1] * len(ids) + [0] * pad,
            "segment_ids": seg + [0] * pad,
        }
        proto = tf.train.Example(
            features=tf.train.Features(
                feature={
                    k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                    for k, v in feats.items()
                }
            )
        )
        writers[n_written % len(writers)].write(proto.SerializeToString())
        n_written += 1

    for path in sorted(glob.glob(os.path.join(corpus_dir, "*"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    write(builder.flush())
                    continue
                ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))
                n_tokens += len(ids)
                write(builder.add_line(ids))
        write(builder.flush())
    for w in writers:
        w.close()
    return n_tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus-dir", help="Default: a generated slice of docstrings.")
    parser.add_argument("--vocab-file", help="Default: a frequency vocabulary of the slice.")
    parser.add_argument("--max-mb", type=float, default=8.0, help="Size of the generated slice.")
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--max-seq-length", type=int, default=128)
    args = parser.parse_args(argv)

    from electra_tf.data import vocab_learning
    from electra_tf.data.tfrecord_builder import BuildOptions, build_pretraining_tfrecords

    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus_dir or _generated_corpus(tmp, args.max_mb)
        vocab_file = args.vocab_file
        if vocab_file is None:
            vocab_file = os.path.join(tmp, "vocab.txt")
            counts = vocab_learning.count_words(vocab_learning.corpus_lines(corpus))
            vocab_learning.write_vocab(vocab_learning.frequency_vocab(counts, 30522), vocab_file)

        start = time.perf_counter()
        stats = build_pretraining_tfrecords(
            BuildOptions(
                corpus_dir=corpus,
                vocab_file=vocab_file,
                output_dir=os.path.join(tmp, "ours"),
                max_seq_length=args.max_seq_length,
                num_processes=args.num_processes,
                num_out_files=8,
                progress=False,
            )
        )
        ours_s = time.perf_counter() - start

        os.makedirs(os.path.join(tmp, "baseline"))
        # The baseline's imports (TensorFlow, Model Garden) are left out of its time; ours
        # includes everything, worker start-up too.
        import tensorflow  # noqa: F401
        from official.nlp.tools import tokenization  # noqa: F401

        start = time.perf_counter()
        base_tokens = _baseline(
            corpus, vocab_file, os.path.join(tmp, "baseline"), args.max_seq_length
        )
        base_s = time.perf_counter() - start

    print(
        f"corpus {corpus if args.corpus_dir else f'generated {args.max_mb} MB'}, "
        f"{stats.tokens:,} tokens, {stats.examples:,} examples"
    )
    print(
        f"ours, {args.num_processes} processes: {ours_s:.1f} s, {stats.tokens / ours_s:,.0f} tokens/s"
    )
    print(
        f"pure Python (Model Garden FullTokenizer), 1 process: {base_s:.1f} s, "
        f"{base_tokens / base_s:,.0f} tokens/s"
    )
    print(f"speed-up {(stats.tokens / ours_s) / (base_tokens / base_s):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
