"""What did pre-training put into the word table? Nearest neighbours of chosen words.

    .venv/bin/python bench/embedding_neighbours.py --model-dir data/g32sstonly/models/s9-mlm-dapt \
        --checkpoint ckpt-3400 --vocab-file data/g64/vocab.txt --words good,bad,great,terrible

Loads a pre-training run's checkpoint, takes the discriminator's word table
(`electra/embeddings/word_embeddings`, the one fine-tuning starts from), removes its mean vector
(a learned table shares one large direction, which makes every raw cosine high) and prints, for
each word, its closest vocabulary entries by cosine, plus the mean norms of the word and
position vectors (their ratio decides how visible a word is after the embedding LayerNorm).
A word missing from the vocabulary (split into pieces) is named as such.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

WORDS = "good,bad,great,terrible,funny,dull,best,worst,love,hate"


def neighbours(
    table: np.ndarray, vocab: list[str], words: list[str], top: int
) -> dict[str, list[tuple[str, float]] | None]:
    """For each word, its `top` nearest other entries by cosine of the mean-centred rows
    (None for a word not in the vocabulary)."""
    if len(vocab) != table.shape[0]:
        raise ValueError(f"the vocabulary has {len(vocab)} entries, the table {table.shape[0]}")
    centred = table - table.mean(axis=0)
    norms = np.linalg.norm(centred, axis=1, keepdims=True)
    unit = centred / np.maximum(norms, 1e-12)
    index = {word: i for i, word in enumerate(vocab)}
    found: dict[str, list[tuple[str, float]] | None] = {}
    for word in words:
        if word not in index:
            found[word] = None
            continue
        cosine = unit @ unit[index[word]]
        cosine[index[word]] = -np.inf
        order = np.argsort(-cosine, kind="stable")[:top]
        found[word] = [(vocab[i], float(cosine[i])) for i in order]
    return found


def main(argv: list[str] | None = None) -> int:
    from attention_entropy import add_run_arguments, load_run

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_arguments(parser, "ckpt-3400")
    parser.add_argument("--vocab-file", required=True, help="the run's vocab.txt")
    parser.add_argument("--words", default=WORDS, help=f"comma-separated ({WORDS})")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args(argv)

    _, model, path = load_run(parser, args.model_dir, args.checkpoint)
    variables = model.variable_map()
    table = variables["electra/embeddings/word_embeddings"].numpy()
    positions = variables["electra/embeddings/position_embeddings"].numpy()
    with open(args.vocab_file, encoding="utf-8") as f:
        vocab = [line.rstrip("\n") for line in f]
    try:
        found = neighbours(table, vocab, [w for w in args.words.split(",") if w], args.top)
    except ValueError as error:
        parser.error(f"{args.vocab_file}: {error}")
    print(
        f"{path}: mean norm of word vectors {np.linalg.norm(table, axis=1).mean():.3f}, "
        f"of position vectors {np.linalg.norm(positions, axis=1).mean():.3f}"
    )
    for word, near in found.items():
        shown = (
            "not in the vocabulary" if near is None else " ".join(f"{w}:{c:.2f}" for w, c in near)
        )
        print(f"{word}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
