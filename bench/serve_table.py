"""`make bench-serve`'s table: the rows' names, each row's p50 / p99 / requests per second, the
ratios between rows, the printed report and its picture.

Functions over the timings `bench_serve` measured (`{row: {signature: {batch: [seconds per
call]}}}`), so the arithmetic is tested without exporting a model (as `train_table` is for
`bench_train`).
"""

from __future__ import annotations

import argparse

from bench import machine

SIGNATURES = ("serving_default", "encode_ids")
# The suffix of a row that TF Serving's runtime ran (`session_timings`).
SESSION = " in a Session"
# The rows "export via OpenVINO": this checkout's float32 export converted by
# `python -m electra_tf.export_openvino`, timed in this process (the runtime the project offers
# beside TensorFlow's); the other OpenVINO rows compile the peers' ONNX model.
EXPORT_VIA_OPENVINO = ("export via OpenVINO f32", "export via OpenVINO bf16")
PEERS = ("HF PyTorch", "ONNX Runtime fp32", "ONNX Runtime int8", "OpenVINO f32", "OpenVINO bf16",
         *EXPORT_VIA_OPENVINO, "baseline")  # fmt: skip


def export_variants(args: argparse.Namespace, options_taken) -> tuple[dict[str, dict], list[str]]:
    """{row name: save_for_serving options} for this checkout's exports, and notes on those
    this checkout's export cannot make (a --baseline from before an option)."""
    variants: dict[str, dict] = {"electra-tf": {}}
    notes = []
    if not args.no_variants:
        if "query_blocks" in options_taken:
            variants["electra-tf, query_blocks 1"] = {"query_blocks": 1}
        if not args.no_xla and "jit_compile" in options_taken:
            variants["electra-tf, jit_compile"] = {"jit_compile": True}
    if args.precision:
        if "precision" in options_taken:
            variants[f"electra-tf, {args.precision}"] = {"precision": args.precision}
        else:
            notes.append(
                f"--precision {args.precision}: skipped (this export has no precision option)"
            )
    return variants, notes


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile, linear between the closest ranks (numpy's default)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def stats(seconds: list[float], batch: int) -> dict[str, float]:
    return {
        "p50": 1000 * percentile(seconds, 50),
        "p99": 1000 * percentile(seconds, 99),
        "requests_per_s": batch * len(seconds) / sum(seconds),
    }


def p50_ratios(results: dict, batches) -> list[tuple[str, str, int, float]]:
    """(our variant, peer, batch, peer p50 / our p50) for every electra-tf export and peer."""
    p50 = {
        (variant, signature, batch): percentile(seconds, 50)
        for variant, by_signature in results.items()
        for signature, by_batch in by_signature.items()
        for batch, seconds in by_batch.items()
    }
    ratios = []
    for variant in [v for v in results if v.startswith("electra-tf")]:
        for batch in batches:
            ours = p50.get((variant, "encode_ids", batch))
            for peer in PEERS:
                if ours and (peer, "encode_ids", batch) in p50:
                    ratios.append((variant, peer, batch, p50[(peer, "encode_ids", batch)] / ours))
    return ratios


def print_report(results: dict, notes: list[str], args: argparse.Namespace, run_info: dict) -> None:
    import tensorflow as tf

    intra, inter = (t or "default" for t in args.threads)
    print(f"\nELECTRA-Small discriminator, seq {args.seq}; {args.calls} timed calls per row after "
          f"{args.warmup} warm-up; TensorFlow {tf.__version__}, threads intra {intra} / inter "
          f"{inter}; " + "; ".join(notes))  # fmt: skip
    print(machine.header(run_info["peak"], run_info["load_start"], run_info["load_end"]) + "\n")
    print("| model | signature | batch | p50 (ms) | p99 (ms) | requests/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for variant, by_signature in results.items():
        for signature, by_batch in by_signature.items():
            for batch, seconds in sorted(by_batch.items()):
                s = stats(seconds, batch)
                print(f"| {variant} | `{signature}` | {batch} | {s['p50']:.1f} | {s['p99']:.1f} "
                      f"| {s['requests_per_s']:.1f} |")  # fmt: skip
    print("\nRatios of p50 latencies (> 1: the first is faster):")
    for variant, peer, batch, ratio in p50_ratios(results, args.batches):
        print(f"- {variant} `encode_ids` vs {peer}, batch {batch}: {ratio:.2f}x")
    for variant in [v for v in results if v.startswith("electra-tf, ")]:
        # A Session row against the float32 export in a Session.
        float32 = "electra-tf" + SESSION if variant.endswith(SESSION) else "electra-tf"
        for batch in args.batches:
            ours = percentile(results[variant]["encode_ids"][batch], 50)
            base = percentile(results[float32]["encode_ids"][batch], 50)
            print(f"- {variant} `encode_ids` vs the float32 export, batch {batch}: "
                  f"{base / ours:.2f}x")  # fmt: skip
    for variant in [v for v in results if v.endswith(SESSION)]:
        for batch in args.batches:
            ours = percentile(results[variant]["encode_ids"][batch], 50)
            function = percentile(results[variant[: -len(SESSION)]]["encode_ids"][batch], 50)
            print(
                f"- {variant} / the function runtime, batch {batch}: {ours / function:.2f} "
                "(a Session's cost over `tf.saved_model.load`)"
            )
    for variant in [
        v for v in results if v.startswith("electra-tf") and SIGNATURES[0] in results[v]
    ]:
        for batch in args.batches:
            ours = percentile(results[variant]["encode_ids"][batch], 50)
            text = percentile(results[variant]["serving_default"][batch], 50)
            print(f"- {variant} `serving_default` / `encode_ids`, batch {batch}: "
                  f"{text / ours:.2f} (raw text's cost over ids)")  # fmt: skip


def draw(path: str, summary: dict, header: str, seq: int) -> None:
    """The table's p50 latencies as bars (`plots.speed_bars`), a panel per batch size, the
    processor line as the title. `summary`: {row: {signature: {batch: `stats`}}}."""
    from electra_tf.evaluation import plots

    panels: dict[int, list[tuple[str, float, str]]] = {}
    for variant, by_signature in summary.items():
        group = "peers" if variant in PEERS and variant != "baseline" else "electra-tf"
        for signature, by_batch in by_signature.items():
            for batch, s in by_batch.items():
                panels.setdefault(int(batch), []).append(
                    (f"{variant}, {signature}", s["p50"], group)
                )
    titled = {f"batch {b}, sequence length {seq}": bars for b, bars in sorted(panels.items())}
    plots.speed_bars(path, titled, "p50 latency (ms)", header)
