"""Serving latency: the exported ELECTRA-Small discriminator vs Hugging Face PyTorch (`make bench-serve`).

Exports a randomly initialised ELECTRA-Small discriminator (the `small` preset) with this
project's serving signatures, loads the SavedModel back with `tf.saved_model.load` and times
`serving_default` (raw strings, tokenized in the graph) and `encode_ids` (token ids) at
batch 1 and 32, sequence length 128. In the same run, a separate interpreter (`--hf-python`,
with torch and transformers, which are not project dependencies) times Hugging Face
`ElectraForPreTraining` of the same shape on random token ids. Prints median milliseconds.

    python bench/bench_serve.py [--vocab-file V] [--hf-python /tmp/hfenv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ_LEN = 128
BATCHES = (1, 32)
VOCAB_CANDIDATES = (
    os.environ.get("ELECTRA_VOCAB", ""),
    os.path.join(REPO, "..", "shared", "data", "vocab", "bert-uncased-vocab.txt"),
)

# Runs under --hf-python. The same shapes as the small preset's discriminator.
HF_CODE = r"""
import json, statistics, sys, time
import torch
from transformers import ElectraConfig, ElectraForPreTraining
warmup, iters, seq = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
model = ElectraForPreTraining(ElectraConfig(
    vocab_size=30522, embedding_size=128, hidden_size=256, num_hidden_layers=12,
    num_attention_heads=4, intermediate_size=1024)).eval()
for batch in map(int, sys.argv[4].split(",")):
    ids = torch.randint(1000, 30522, (batch, seq))
    times = []
    with torch.inference_mode():
        for i in range(warmup + iters):
            start = time.perf_counter()
            model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.sum().item()
            times.append(time.perf_counter() - start)
    print(json.dumps({"batch": batch, "median_ms": 1000 * statistics.median(times[warmup:]),
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--vocab-file", help="default: the BERT uncased vocab if found, else a generated one"
    )
    default_hf = "/tmp/hfenv/bin/python"
    parser.add_argument("--hf-python", default=default_hf if os.path.exists(default_hf) else "")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    return parser.parse_args()


def find_vocab(given: str | None, workdir: str) -> tuple[str, str]:
    if given:
        return given, given
    for path in VOCAB_CANDIDATES:
        if path and os.path.isfile(path):
            return path, "BERT uncased"
    # 30,522 entries like BERT's: the five specials, then made-up words and continuations.
    path = os.path.join(workdir, "vocab.txt")
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = [a + b + c for a in letters for b in letters for c in letters]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *("##" + x for x in letters)]
    tokens += words[: 30522 - len(tokens)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return path, "generated (30,522 entries)"


def sample_texts(vocab_file: str, batch: int) -> list[str]:
    """Texts of whole vocabulary words, long enough to fill 128 tokens after truncation."""
    with open(vocab_file, encoding="utf-8") as f:
        words = [w.strip() for w in f if w.strip().isalpha() and w.strip().islower()]
    words = words[1000:] or words
    return [
        " ".join(words[(i * 131 + j * 7) % len(words)] for j in range(SEQ_LEN * 2))
        for i in range(batch)
    ]


def median_ms(fn, warmup: int, iters: int) -> float:
    times = []
    for _ in range(warmup + iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[warmup:])


def bench_tf(
    vocab_file: str, workdir: str, warmup: int, iters: int
) -> dict[tuple[str, int], float]:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, as a serving binary links them)

    from electra_tf.config import pretraining_config
    from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
    from electra_tf.serving.kinds import serving_module
    from electra_tf.serving.saved_model import ExportSpec, write_export

    config = pretraining_config("bench", preset="small")
    model = ElectraDiscriminator(config.discriminator_config())
    model(dummy_inputs())
    module = serving_module("discriminator", model, vocab_file, SEQ_LEN)
    spec = ExportSpec("discriminator", "electra_small", module, "{}", vocab_file, {})
    path = write_export(spec, workdir, None, False)
    loaded = tf.saved_model.load(path)
    serve, encode = loaded.signatures["serving_default"], loaded.signatures["encode_ids"]
    results = {}
    for batch in BATCHES:
        texts = tf.constant(sample_texts(vocab_file, batch))
        features = loaded.signatures["tokenize"](text=texts)
        assert features["input_ids"].shape == (batch, SEQ_LEN), features["input_ids"].shape
        ids = {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}
        print(f"timing electra-tf batch {batch}", file=sys.stderr, flush=True)
        results[("raw text", batch)] = median_ms(
            lambda t=texts: serve(text=t)["replaced_probability"].numpy(), warmup, iters
        )
        results[("token ids", batch)] = median_ms(
            lambda i=ids: encode(**i)["replaced_probability"].numpy(), warmup, iters
        )
    return results


def bench_hf(hf_python: str, warmup: int, iters: int) -> tuple[dict[int, float], str]:
    if not hf_python or not os.path.exists(hf_python):
        return {}, "skipped (no --hf-python interpreter; see the README)"
    command = [hf_python, "-c", HF_CODE, str(warmup), str(iters), str(SEQ_LEN)]
    command.append(",".join(map(str, BATCHES)))
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["?"])[-1]
        return {}, f"skipped ({hf_python} failed: {last})"
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    note = f"torch {rows[0]['torch']}, {rows[0]['threads']} threads" if rows else ""
    return {r["batch"]: r["median_ms"] for r in rows}, note


def main() -> None:
    args = parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory() as workdir:
        vocab_file, vocab_note = find_vocab(args.vocab_file, workdir)
        tf_results = bench_tf(vocab_file, workdir, args.warmup, args.iters)
    hf_results, hf_note = bench_hf(args.hf_python, args.warmup, args.iters)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nELECTRA-Small discriminator, seq {SEQ_LEN}, median of {args.iters} calls "
          f"after {args.warmup} warm-up; {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"load average {load:.1f}; vocab: {vocab_note}; HF: {hf_note}\n")  # fmt: skip
    print("| model | input | batch 1 (ms) | batch 32 (ms) |")
    print("| --- | --- | --- | --- |")
    for kind in ("raw text", "token ids"):
        cells = " | ".join(f"{tf_results[(kind, b)]:.1f}" for b in BATCHES)
        print(
            f"| electra-tf SavedModel `{'serving_default' if kind == 'raw text' else 'encode_ids'}` | {kind} | {cells} |"
        )
    if hf_results:
        cells = " | ".join(f"{hf_results[b]:.1f}" for b in BATCHES)
        print(f"| HF PyTorch ElectraForPreTraining | token ids | {cells} |")
    else:
        print(f"| HF PyTorch ElectraForPreTraining | token ids | {hf_note} | |")


if __name__ == "__main__":
    main()
