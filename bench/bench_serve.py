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
- `<row> in a Session`: `encode_ids` of the default export (and of the `--precision` one) run
  by a `tf.compat.v1.Session` with the same thread settings, as TF Serving runs a SavedModel:
  a Session rewrites the graph in its own order (docs/performance.md, "The residual adds"),
  so the two runtimes can run different kernels;
- `baseline`: with `--baseline DIR`, the same export made by another checkout of the project
  (e.g. the commit before a change), timed by this script in a subprocess whose PYTHONPATH
  starts with DIR;
- `electra-tf, <precision>`: with `--precision bfloat16` (or another), the same weights
  exported with that serving precision, where this checkout's `save_for_serving` takes a
  `precision` (else, e.g. for a --baseline from before it, the row is reported as skipped);
- `HF PyTorch`: the same weights, converted to a Hugging Face folder by this project's
  converter (`electra_tf.checkpoints.hf`), loaded as `ElectraForPreTraining` under `--hf-python`
  (an interpreter with torch and transformers, which are not project dependencies);
- `ONNX Runtime fp32` and `ONNX Runtime int8`: that HF model exported to ONNX under
  `--ort-python` (default: the `--hf-python` interpreter; it needs onnx and onnxruntime too),
  served by ONNX Runtime's CPU provider, float32 and with int8 dynamic quantization. The float32
  model's logits must match this project's on the same ids (< 1e-3) before it is timed; the int8
  model's largest difference is printed;
- `OpenVINO f32` and `OpenVINO bf16`: that ONNX model compiled by OpenVINO (its precision
  hint; bf16 is its default on bf16 CPUs) where `--ort-python` has openvino; checked the same way;
- `export via OpenVINO f32` and `export via OpenVINO bf16`: this checkout's float32 export
  (`--query-blocks 1`, as that command advises for OpenVINO) converted by
  `python -m electra_tf.export_openvino` (the runtime the project offers beside
  TensorFlow's, `electra_tf/serving/openvino_runtime.py`), `encode_ids` timed in this process
  with as many threads as TensorFlow runs ops at once, where this environment has openvino (the
  optional requirements-interop.txt).

The peers run bench/peer_torch.py (which imports nothing of this project); the rows' names,
statistics, report and picture are bench/serve_table.py.

    python -m bench.bench_serve [--calls 50] [--warmup 5] [--baseline DIR] [--no-xla]
        [--batches 1,32] [--seq 128] [--vocab-file V] [--hf-python P] [--ort-python P]
        [--precision bfloat16] [--threads 1,2] [--json F] [--png F]

TensorFlow runs with `--threads` (intra-op, inter-op; default: `TF_NUM_INTRAOP_THREADS` and
`TF_NUM_INTEROP_THREADS` where set, else 1,2, the setting the README gives a model server for
the default export); PyTorch and ONNX Runtime with their own defaults (one thread per core).
The table's header names the processor, its `tf.matmul` peak and the load average at the
start and end of the run.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # `python bench/bench_serve.py`: bench is a package
    raise SystemExit("run it from the repository root as: python -m bench.bench_serve")

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile

from bench import machine
from bench.machine import checkout_revision, default_peer_python, harness_command, run_peer, timed
from bench.serve_table import (
    EXPORT_VIA_OPENVINO,
    SESSION,
    SIGNATURES,
    draw,
    export_variants,
    print_report,
    stats,
)
from electra_tf.runtime import atomic_io

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--vocab-file", help="default: $ELECTRA_VOCAB if set, else a generated one (30,522 entries)"
    )
    parser.add_argument(
        "--hf-python",
        default=default_peer_python(),
        help="an interpreter with torch and transformers (default: $ELECTRA_PEER_PYTHON, else "
        "/tmp/hfenv/bin/python where it exists)",
    )
    parser.add_argument(
        "--ort-python", help="an interpreter with onnx and onnxruntime too (default: --hf-python)"
    )
    parser.add_argument("--no-ort", action="store_true", help="skip the ONNX Runtime rows")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50, help="timed calls per row (>= 50)")
    parser.add_argument("--baseline", help="another checkout of the project to time as well")
    parser.add_argument("--no-xla", action="store_true", help="skip the jit_compile export")
    parser.add_argument("--no-variants", action="store_true", help="only the default export")
    parser.add_argument(
        "--precision", help="also time the export with this serving precision (e.g. bfloat16)"
    )
    parser.add_argument("--batches", default="1,32", help="batch sizes (default 1,32)")
    parser.add_argument("--seq", type=int, default=128, help="sequence length (default 128)")
    parser.add_argument(
        "--threads",
        help="TensorFlow's intra-op,inter-op threads (0 = TensorFlow's default). Default: "
        "TF_NUM_INTRAOP_THREADS,TF_NUM_INTEROP_THREADS where either is set, else 1,2 (the "
        "README's serving setting)",
    )
    parser.add_argument("--json", help="also write every row's p50 / p99 (ms) here")
    parser.add_argument("--png", help="draw the p50s here (default: beside --json, as .png)")
    # Internal: what a --baseline subprocess is asked for; fewer calls and no picture (the cost
    # curve's p50 at each length).
    parser.add_argument("--tf-json", help=argparse.SUPPRESS)
    parser.add_argument("--min-calls", type=int, default=50, help=argparse.SUPPRESS)
    parser.add_argument("--no-png", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    problem = atomic_io.make_parents(args.json, args.png)
    if problem:
        parser.error(problem)
    if args.calls < args.min_calls:
        parser.error(f"--calls: p99 needs at least {args.min_calls} calls")
    args.batches = tuple(int(b) for b in args.batches.split(","))
    args.ort_python = args.ort_python or args.hf_python
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
    path = os.environ.get("ELECTRA_VOCAB", "")
    if path and os.path.isfile(path):
        return path, path
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


def export_options() -> set[str]:
    """The options this checkout's `save_for_serving` takes: where the export's options live
    (`precision` makes a bfloat16 twin of the model before `serving_module`, which never had
    it: looking there skipped the bfloat16 row on every build)."""
    from electra_tf.serving.kinds import save_for_serving

    return set(inspect.signature(save_for_serving).parameters)


def bench_tf(vocab_file: str, workdir: str, args: argparse.Namespace) -> tuple[dict, list[str]]:
    """({variant: {signature: {batch: [seconds per call]}}}, notes) for this checkout's exports.

    Also writes, for the peers, the model's weights as a Hugging Face folder
    (`workdir/hf/discriminator`) and its logits on a sample batch (`workdir/reference.npz`).
    """
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, as a serving binary links them)

    from electra_tf.config import pretraining_config
    from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
    from electra_tf.serving.kinds import save_for_serving

    # Before TensorFlow starts its pools (0 keeps its default).
    tf.config.threading.set_intra_op_parallelism_threads(args.threads[0])
    tf.config.threading.set_inter_op_parallelism_threads(args.threads[1])
    config = pretraining_config("bench", preset="small")
    model = ElectraDiscriminator(config.discriminator_config())
    model(dummy_inputs())
    if not args.tf_json:
        write_peer_inputs(model, config, workdir, args.seq, np, tf)
    # A checkout from before an option (a --baseline) has no such export.
    variants, notes = export_variants(args, export_options())
    results = {}
    for index, (variant, options) in enumerate(variants.items()):
        name = f"electra_small_{index}"
        path = save_for_serving(model, workdir, vocab_file, args.seq, name=name, **options)
        loaded = tf.saved_model.load(path)
        results[variant] = {signature: {} for signature in SIGNATURES}
        ids_by_batch = {}
        for batch in args.batches:
            texts = tf.constant(sample_texts(vocab_file, batch, args.seq))
            features = loaded.signatures["tokenize"](text=texts)
            assert features["input_ids"].shape == (batch, args.seq), features["input_ids"].shape
            ids = {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}
            ids_by_batch[batch] = {k: v.numpy() for k, v in ids.items()}
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
        if not args.tf_json and (variant == "electra-tf" or "precision" in options):
            print(f"timing {variant} in a Session", file=sys.stderr, flush=True)
            timings = session_timings(path, ids_by_batch, args)
            results[variant + SESSION] = {"encode_ids": timings}
    if not args.tf_json:  # the float32 export as OpenVINO takes it best: one query block
        path = save_for_serving(
            model, workdir, vocab_file, args.seq, name="electra_small_openvino", query_blocks=1
        )
        rows, note = bench_export_via_openvino(path, vocab_file, args)
        results.update(rows)
        notes.append(note)
    return results, notes


def session_timings(
    path: str, ids_by_batch: dict[int, dict], args: argparse.Namespace
) -> dict[int, list[float]]:
    """{batch: seconds per call} of `encode_ids` run by a TF1 Session (TF Serving's runtime) on
    the function rows' ids, with this run's intra-op and inter-op threads."""
    import tensorflow as tf

    from bench.serving_graph import signature_session

    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=args.threads[0], inter_op_parallelism_threads=args.threads[1]
    )
    timings = {}
    with signature_session(path, "encode_ids", config) as (session, signature):
        fetch = signature.outputs["replaced_probability"].name
        for batch, ids in ids_by_batch.items():
            feed = {signature.inputs[k].name: v for k, v in ids.items()}
            timings[batch] = timed(lambda f=feed: session.run(fetch, f), args.warmup, args.calls)
    return timings


def bench_export_via_openvino(
    export_dir: str, vocab_file: str, args: argparse.Namespace
) -> tuple[dict, str]:
    """The float32 export `export_dir` (made with `--query-blocks 1`, as the command advises for
    OpenVINO) as `python -m electra_tf.export_openvino` converts it, `encode_ids`
    timed at OpenVINO's f32 and bf16 (threads: the larger of TensorFlow's two pools, which is
    how many ops TensorFlow runs at once; OpenVINO's default where TensorFlow has its own), on the same ids as the TensorFlow rows; ({} and why) without
    OpenVINO."""
    try:
        from electra_tf.serving import openvino_runtime

        openvino_runtime.import_openvino()
    except Exception as error:  # the optional extra
        return {}, f"export via OpenVINO: skipped ({error})"
    import tensorflow as tf

    model_file = openvino_runtime.convert_export(export_dir, export_dir + "-openvino")
    loaded = tf.saved_model.load(export_dir)
    threads = 0 if 0 in args.threads else max(args.threads)
    rows = {}
    for name, precision in zip(EXPORT_VIA_OPENVINO, ("f32", "bf16"), strict=True):
        compiled = openvino_runtime.compile_model(model_file, precision, threads)
        rows[name] = {"encode_ids": {}}
        for batch in args.batches:
            texts = tf.constant(sample_texts(vocab_file, batch, args.seq))
            features = loaded.signatures["tokenize"](text=texts)
            ids = {k: features[k].numpy() for k in ("input_ids", "input_mask", "segment_ids")}
            request = compiled.create_infer_request()
            print(f"timing {name} encode_ids batch {batch}", file=sys.stderr, flush=True)
            rows[name]["encode_ids"][batch] = timed(
                lambda r=request, i=ids: r.infer(i), args.warmup, args.calls
            )
    return rows, f"export via OpenVINO: {threads or 'default'} threads"


def write_peer_inputs(model, config, workdir: str, seq: int, np, tf) -> None:
    """The model as a Hugging Face folder and its logits on two random rows, for the peers."""
    from electra_tf.checkpoints import hf

    weights = {name: v.numpy() for name, v in model.variable_map().items()}
    hf.write(weights, os.path.join(workdir, "hf"), {"discriminator": config.discriminator_config()})
    ids = np.random.default_rng(7).integers(1000, config.vocab_size, size=(2, seq)).astype(np.int32)
    inputs = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}
    logits = model({k: tf.constant(v) for k, v in inputs.items()})["logits"].numpy()
    np.savez(os.path.join(workdir, "reference.npz"), logits=logits, **inputs)


def bench_baseline(directory: str, vocab_file: str, args: argparse.Namespace) -> tuple[dict, str]:
    """This script's TF timings, run against the project checkout at `directory`."""
    with tempfile.TemporaryDirectory() as workdir:
        out = os.path.join(workdir, "baseline.json")
        command = [*harness_command(REPO, os.path.abspath(directory), "bench_serve")]
        command += ["--tf-json", out, "--no-xla", "--no-variants"]
        command += ["--vocab-file", vocab_file, "--warmup", str(args.warmup)]
        command += ["--calls", str(args.calls), "--seq", str(args.seq)]
        command += ["--min-calls", str(args.min_calls)]
        command += ["--batches", ",".join(map(str, args.batches))]
        command += ["--threads", ",".join(map(str, args.threads))]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["?"])[-1]
            return {}, f"skipped ({directory} failed: {last})"
        with open(out, encoding="utf-8") as f:
            timings = json.load(f)["electra-tf"]
    return {"baseline": _int_batches(timings)}, f"{directory} ({checkout_revision(directory)})"


def _int_batches(timings: dict) -> dict:
    """JSON keys are strings: batch sizes back to ints."""
    return {sig: {int(b): t for b, t in by_batch.items()} for sig, by_batch in timings.items()}


def peer_command(kind: str, workdir: str, args: argparse.Namespace) -> list[str]:
    command = [kind, "--seq", str(args.seq), "--batches", ",".join(map(str, args.batches))]
    command += ["--calls", str(args.calls), "--warmup", str(args.warmup)]
    command += ["--model-dir", os.path.join(workdir, "hf", "discriminator")]
    if kind == "ort":
        command += ["--reference", os.path.join(workdir, "reference.npz")]
    return command


def bench_hf(workdir: str, args: argparse.Namespace) -> tuple[dict, str]:
    records, why = run_peer(args.hf_python, peer_command("serve", workdir, args), "--hf-python")
    if not records:
        return {}, why or "skipped (no output)"
    note = f"torch {records[0]['torch']}, {records[0]['threads']} threads, the same weights"
    return {"HF PyTorch": {"encode_ids": {r["batch"]: r["seconds"] for r in records}}}, note


def bench_ort(workdir: str, args: argparse.Namespace) -> tuple[dict, str]:
    if args.no_ort:
        return {}, "skipped (--no-ort)"
    records, why = run_peer(args.ort_python, peer_command("ort", workdir, args), "--ort-python")
    if not records:
        return {}, why or "skipped (no output)"
    results: dict[str, dict] = {}
    differences = {}
    for r in records:
        if r["kind"] == "openvino":
            name = f"OpenVINO {r['precision']}"
        else:
            name = f"ONNX Runtime {'fp32' if r['precision'] == 'float32' else r['precision']}"
        results.setdefault(name, {"encode_ids": {}})["encode_ids"][r["batch"]] = r["seconds"]
        differences[name] = r["max_abs_diff"]
    agreement = ", ".join(
        f"{name} logits within {d:.1e} of this project's"
        for name, d in differences.items()
        if d is not None
    )
    versions = [f"onnxruntime {records[0]['onnxruntime']}"]
    versions += [f"openvino {r['openvino']}" for r in records[-1:] if r["kind"] == "openvino"]
    note = f"{', '.join(versions)}, {records[0]['threads']} threads; {agreement}"
    return results, note


def measure(args: argparse.Namespace) -> tuple[dict, list[str]]:
    """Every row's timings and the notes: this checkout's exports, then the baseline and the
    peers (each after the project's, with the same weights)."""
    with tempfile.TemporaryDirectory() as workdir:
        vocab_file, vocab_note = find_vocab(args.vocab_file, workdir)
        results, notes = bench_tf(vocab_file, workdir, args)
        notes = [f"vocab: {vocab_note}", *notes]
        if args.baseline:
            baseline, note = bench_baseline(args.baseline, vocab_file, args)
            results.update(baseline)
            notes.append(f"baseline: {note}")
        for name, bench in (("HF", bench_hf), ("ONNX Runtime", bench_ort)):
            peer, note = bench(workdir, args)
            results.update(peer)
            notes.append(f"{name}: {note}")
    return results, notes


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.tf_json:  # a --baseline subprocess: this checkout's default export only
        with tempfile.TemporaryDirectory() as workdir:
            vocab_file = args.vocab_file or find_vocab(None, workdir)[0]
            results, _ = bench_tf(vocab_file, workdir, args)
        atomic_io.write_json(args.tf_json, results)
        return 0
    load_start = machine.load_average()
    peak = machine.measure_peak()
    results, notes = measure(args)
    run_info = {"peak": peak, "load_start": load_start, "load_end": machine.load_average()}
    print_report(results, notes, args, run_info)
    summary = {
        variant: {
            signature: {batch: stats(seconds, batch) for batch, seconds in by_batch.items()}
            for signature, by_batch in by_signature.items()
        }
        for variant, by_signature in results.items()
    }
    if args.json:
        atomic_io.write_json(args.json, {"rows": summary, "notes": notes, **run_info}, indent=2)
    from electra_tf.evaluation import plots  # not at the top: see bench_train.write_outputs

    png = None if args.no_png else plots.png_path(args.png, args.json)
    if png:
        header = machine.header(run_info["peak"], run_info["load_start"], run_info["load_end"])
        draw(png, summary, header, args.seq)
        print(f"picture: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
