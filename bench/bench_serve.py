"""Serving latency: the exported ELECTRA-Small discriminator vs Hugging Face PyTorch (`make bench-serve`).

Exports a randomly initialised ELECTRA-Small discriminator (the `small` preset) with this
project's serving signatures, loads the SavedModel back with `tf.saved_model.load` and times
`serving_default` (raw strings, tokenized in the graph) and `encode_ids` (token ids) at
batch 1 and 32, sequence length 128: `--warmup` calls, then `--calls` timed calls (at least 50)
per signature and batch. Reported per row: p50 and p99 latency, and requests/s (one request =
one text or one row of ids; batch / mean call latency).

Rows, all from one run:

- `electra-tf`: the export as `make export` writes it (Grappler fuses the encoder's dense
  layers, LayerNorms and attention products into oneDNN kernels when it loads the model);
- `electra-tf, query_blocks 1`: the same weights exported with `--query-blocks 1` (the encoder
  as one group of positions, the export before the default became 2);
- `electra-tf, jit_compile`: the same weights exported with `--jit-compile` (XLA), unless
  `--no-xla`;
- `baseline`: with `--baseline DIR`, the same export made by another checkout of the project
  (e.g. the commit before a change), timed by this script in a subprocess whose PYTHONPATH
  starts with DIR;
- `HF PyTorch`: `ElectraForPreTraining` of the same shapes on random ids, under `--hf-python`
  (an interpreter with torch and transformers, which are not project dependencies).

    python -m bench.bench_serve [--calls 50] [--warmup 5] [--baseline DIR] [--no-xla]
        [--batches 1,32] [--seq 128] [--vocab-file V] [--hf-python /tmp/hfenv/bin/python]
        [--threads 1,2]

TensorFlow runs with `--threads` (intra-op, inter-op; default: `TF_NUM_INTRAOP_THREADS` and
`TF_NUM_INTEROP_THREADS` where set, else 1,2, the setting the README gives a model server for
the default export); PyTorch with its own default (one thread per core).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # `python bench/bench_serve.py`: bench is a package
    raise SystemExit("run it from the repository root as: python -m bench.bench_serve")

import argparse
import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from bench.bench_train import checkout_revision

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIGNATURES = ("serving_default", "encode_ids")
VOCAB_CANDIDATES = (
    os.environ.get("ELECTRA_VOCAB", ""),
    os.path.join(REPO, "..", "shared", "data", "vocab", "bert-uncased-vocab.txt"),
)

# Runs under --hf-python. The same shapes as the small preset's discriminator; prints one JSON
# line per batch size with every timed call's seconds.
HF_CODE = r"""
import json, sys, time
import torch
from transformers import ElectraConfig, ElectraForPreTraining
warmup, calls, seq = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
model = ElectraForPreTraining(ElectraConfig(
    vocab_size=30522, embedding_size=128, hidden_size=256, num_hidden_layers=12,
    num_attention_heads=4, intermediate_size=1024)).eval()
for batch in map(int, sys.argv[4].split(",")):
    ids = torch.randint(1000, 30522, (batch, seq))
    times = []
    with torch.inference_mode():
        for i in range(warmup + calls):
            start = time.perf_counter()
            model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.sum().item()
            times.append(time.perf_counter() - start)
    print(json.dumps({"batch": batch, "seconds": times[warmup:], "torch": torch.__version__,
                      "threads": torch.get_num_threads()}))
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--vocab-file", help="default: the BERT uncased vocab if found, else a generated one"
    )
    default_hf = "/tmp/hfenv/bin/python"
    parser.add_argument("--hf-python", default=default_hf if os.path.exists(default_hf) else "")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50, help="timed calls per row (>= 50)")
    parser.add_argument("--baseline", help="another checkout of the project to time as well")
    parser.add_argument("--no-xla", action="store_true", help="skip the jit_compile export")
    parser.add_argument("--batches", default="1,32", help="batch sizes (default 1,32)")
    parser.add_argument("--seq", type=int, default=128, help="sequence length (default 128)")
    parser.add_argument(
        "--threads",
        help="TensorFlow's intra-op,inter-op threads (0 = TensorFlow's default). Default: "
        "TF_NUM_INTRAOP_THREADS,TF_NUM_INTEROP_THREADS where either is set, else 1,2 (the "
        "README's serving setting)",
    )
    # Internal: what a --baseline subprocess is asked for.
    parser.add_argument("--tf-json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.calls < 50:
        parser.error("--calls: p99 needs at least 50 calls")
    args.batches = tuple(int(b) for b in args.batches.split(","))
    if args.threads is None:
        # The environment's pools, as TensorFlow itself would read them.
        env = [os.environ.get(f"TF_NUM_{pool}OP_THREADS") for pool in ("INTRA", "INTER")]
        args.threads = ",".join(v or "0" for v in env) if any(env) else "1,2"
    try:
        args.threads = tuple(int(t) for t in args.threads.split(","))
    except ValueError:
        args.threads = ()
    if len(args.threads) != 2 or min(args.threads) < 0:
        parser.error(f"--threads: expected two integers >= 0, INTRA,INTER; got {args.threads}")
    return args


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


def sample_texts(vocab_file: str, batch: int, seq_len: int) -> list[str]:
    """Texts of whole vocabulary words, long enough to fill `seq_len` tokens after truncation."""
    with open(vocab_file, encoding="utf-8") as f:
        words = [w.strip() for w in f if w.strip().isalpha() and w.strip().islower()]
    words = words[1000:] or words
    return [
        " ".join(words[(i * 131 + j * 7) % len(words)] for j in range(seq_len * 2))
        for i in range(batch)
    ]


def timed(fn, warmup: int, calls: int) -> list[float]:
    """Seconds of each of `calls` calls of `fn`, after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile, linear between the closest ranks (numpy's default)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def bench_tf(vocab_file: str, workdir: str, args: argparse.Namespace) -> dict:
    """{variant: {signature: {batch: [seconds per call]}}} for this checkout's exports."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, as a serving binary links them)

    from electra_tf.config import pretraining_config
    from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
    from electra_tf.serving.kinds import serving_module
    from electra_tf.serving.saved_model import ExportSpec, write_export

    # Before TensorFlow starts its pools (0 keeps its default).
    tf.config.threading.set_intra_op_parallelism_threads(args.threads[0])
    tf.config.threading.set_inter_op_parallelism_threads(args.threads[1])
    config = pretraining_config("bench", preset="small")
    model = ElectraDiscriminator(config.discriminator_config())
    model(dummy_inputs())
    variants = {"electra-tf": {}}
    # A checkout from before an option (a --baseline) has no such export.
    options_taken = inspect.signature(serving_module).parameters
    if "query_blocks" in options_taken:
        variants["electra-tf, query_blocks 1"] = {"query_blocks": 1}
    if not args.no_xla and "jit_compile" in options_taken:
        variants["electra-tf, jit_compile"] = {"jit_compile": True}
    results = {}
    for index, (variant, options) in enumerate(variants.items()):
        module = serving_module("discriminator", model, vocab_file, args.seq, **options)
        name = f"electra_small_{index}"
        spec = ExportSpec("discriminator", name, module, "{}", vocab_file, {})
        loaded = tf.saved_model.load(write_export(spec, workdir, None, False))
        results[variant] = {signature: {} for signature in SIGNATURES}
        for batch in args.batches:
            texts = tf.constant(sample_texts(vocab_file, batch, args.seq))
            features = loaded.signatures["tokenize"](text=texts)
            assert features["input_ids"].shape == (batch, args.seq), features["input_ids"].shape
            ids = {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}
            serve, encode = loaded.signatures["serving_default"], loaded.signatures["encode_ids"]
            calls_of = {
                "serving_default": lambda f=serve, t=texts: f(text=t),
                "encode_ids": lambda f=encode, i=ids: f(**i),
            }
            for signature in SIGNATURES:
                print(f"timing {variant} {signature} batch {batch}", file=sys.stderr, flush=True)
                call = calls_of[signature]
                results[variant][signature][batch] = timed(
                    lambda c=call: c()["replaced_probability"].numpy(), args.warmup, args.calls
                )
    return results


def bench_baseline(directory: str, vocab_file: str, args: argparse.Namespace) -> tuple[dict, str]:
    """This script's TF timings, run against the project checkout at `directory`."""
    with tempfile.TemporaryDirectory() as workdir:
        out = os.path.join(workdir, "baseline.json")
        command = [sys.executable, os.path.abspath(__file__), "--tf-json", out, "--no-xla"]
        command += ["--vocab-file", vocab_file, "--warmup", str(args.warmup)]
        command += ["--calls", str(args.calls), "--seq", str(args.seq)]
        command += ["--batches", ",".join(map(str, args.batches))]
        command += ["--threads", ",".join(map(str, args.threads))]
        # `directory`'s electra_tf; `bench` is this checkout's unless `directory` has a package.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(directory), REPO]))
        run = subprocess.run(command, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["?"])[-1]
            return {}, f"skipped ({directory} failed: {last})"
        with open(out, encoding="utf-8") as f:
            timings = json.load(f)["electra-tf"]
    return {"baseline": _int_batches(timings)}, f"{directory} ({checkout_revision(directory)})"


def _int_batches(timings: dict) -> dict:
    """JSON keys are strings: batch sizes back to ints."""
    return {sig: {int(b): t for b, t in by_batch.items()} for sig, by_batch in timings.items()}


def bench_hf(hf_python: str, args: argparse.Namespace) -> tuple[dict, str]:
    if not hf_python or not os.path.exists(hf_python):
        return {}, "skipped (no --hf-python interpreter; see the README)"
    command = [hf_python, "-c", HF_CODE, str(args.warmup), str(args.calls), str(args.seq)]
    command.append(",".join(map(str, args.batches)))
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["?"])[-1]
        return {}, f"skipped ({hf_python} failed: {last})"
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    note = f"torch {rows[0]['torch']}, {rows[0]['threads']} threads" if rows else ""
    return {"HF PyTorch": {"encode_ids": {r["batch"]: r["seconds"] for r in rows}}}, note


def stats(seconds: list[float], batch: int) -> dict[str, float]:
    return {
        "p50": 1000 * percentile(seconds, 50),
        "p99": 1000 * percentile(seconds, 99),
        "requests_per_s": batch * len(seconds) / sum(seconds),
    }


def print_report(results: dict, notes: list[str], args: argparse.Namespace) -> None:
    import tensorflow as tf

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    intra, inter = (t or "default" for t in args.threads)
    print(f"\nELECTRA-Small discriminator, seq {args.seq}; {args.calls} timed calls per row after "
          f"{args.warmup} warm-up; {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"load average {load:.1f}; TensorFlow {tf.__version__}, threads intra {intra} / inter "
          f"{inter}; " + "; ".join(notes) + "\n")  # fmt: skip
    print("| model | signature | batch | p50 (ms) | p99 (ms) | requests/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for variant, by_signature in results.items():
        for signature, by_batch in by_signature.items():
            for batch, seconds in sorted(by_batch.items()):
                s = stats(seconds, batch)
                print(f"| {variant} | `{signature}` | {batch} | {s['p50']:.1f} | {s['p99']:.1f} "
                      f"| {s['requests_per_s']:.1f} |")  # fmt: skip
    p50 = {
        (variant, signature, batch): percentile(seconds, 50)
        for variant, by_signature in results.items()
        for signature, by_batch in by_signature.items()
        for batch, seconds in by_batch.items()
    }
    print("\nRatios of p50 latencies (> 1: the first is faster):")
    for variant in [v for v in results if v.startswith("electra-tf")]:
        for batch in args.batches:
            ours = p50[(variant, "encode_ids", batch)]
            for peer in ("HF PyTorch", "baseline"):
                if (peer, "encode_ids", batch) in p50:
                    ratio = p50[(peer, "encode_ids", batch)] / ours
                    print(f"- {variant} `encode_ids` vs {peer}, batch {batch}: {ratio:.2f}x")
            text = p50[(variant, "serving_default", batch)]
            print(f"- {variant} `serving_default` / `encode_ids`, batch {batch}: "
                  f"{text / ours:.2f} (raw text's cost over ids)")  # fmt: skip


def main() -> None:
    args = parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory() as workdir:
        vocab_file, vocab_note = find_vocab(args.vocab_file, workdir)
        results = bench_tf(vocab_file, workdir, args)
        if args.tf_json:
            with open(args.tf_json, "w", encoding="utf-8") as f:
                json.dump(results, f)
            return
        notes = [f"vocab: {vocab_note}"]
        if args.baseline:
            baseline, note = bench_baseline(args.baseline, vocab_file, args)
            results.update(baseline)
            notes.append(f"baseline: {note}")
    hf, hf_note = bench_hf(args.hf_python, args)
    results.update(hf)
    notes.append(f"HF: {hf_note}")
    print_report(results, notes, args)


if __name__ == "__main__":
    main()
