"""Where the time goes: a per-op breakdown of the train step and the serving call, from TF's profiler.

Profiles, with `tf.profiler.experimental` (host tracer, trace written to `--logdir`), two paths:

- train: the project's own ELECTRA pre-training step, built as `electra_tf.pretrain` builds it
  (`pretraining_model.build_model`, `pretraining_model.build_optimizer`, `pretraining_model.make_train_function`) on synthetic full-length
  batches (bench/project_step.py), small preset, vocab 30522, float32, `jit_compile` as the config
  resolves it (off on CPU). Like the real loop, the steps run inside ONE call of the compiled
  `train_steps(iterator, num_steps)`: `--warmup` steps, then `--steps` steps timed without the
  profiler, then `--steps` steps profiled.
- serve: the `encode_ids` signature of the exported SavedModel (ELECTRA-Small discriminator, as
  `make bench-serve` exports it), loaded back with `tf.saved_model.load`, at each of
  `--serve-batches` (default 1 and 32) x `--seq`: `--warmup` calls, `--steps` calls timed without
  the profiler, then `--steps` calls profiled.

The trace is read back and summed by category in bench/profile_trace.py (which events count as
op kernels, XLA clusters, input pipeline, executor or background); each op kernel's self time
goes to the category of the first rule in `RULES` (bench/profile_rules.py) that it matches:
`--rules-markdown` prints that table, which docs/performance.md shows.

Shares are of the BUSY time (op self times + executor time); the summary also gives the wall
time per step (profiled, and unprofiled), the sum of op self times, and wall - busy (idle, or
untraced host work; negative when ops ran in parallel on several inter-op threads).

Usage (run alone on the machine for the real numbers; a few minutes):

    python -m bench.profile_breakdown [--path train|serve|both] [--steps 10] [--warmup 3]
        [--batch 32] [--seq 128] [--serve-batches 1,32] [--out breakdown.json] [--logdir DIR]
    python -m bench.profile_breakdown --quick      # tiny model, 2 steps: a smoke run
    python -m bench.profile_breakdown --rules-markdown   # the category rules, as a table

The trace stays in `--logdir` (default: a new temporary directory, printed) for TensorBoard's
profile plugin or Perfetto. CPU only: on a GPU the kernels run on the device planes, which this
reads nothing of, and with XLA (`--jit on`) the ops are fused into clusters that count as other.
"""

from __future__ import annotations

if (
    __name__ == "__main__" and not __package__
):  # `python bench/profile_breakdown.py`: bench is a package
    raise SystemExit("run it from the repository root as: python -m bench.profile_breakdown")

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from bench.profile_clusters import (
    attention_clusters,
    cluster_table,
    clusters_markdown,
    read_clusters,
)
from bench.profile_rules import (  # noqa: F401  (this module's names before the split)
    ATTENTION_PARTS,
    BATCH_MATMUL_TYPES,
    CATEGORIES,
    FRAMEWORK_TYPES,
    GATHER_TYPES,
    GELU_SCOPE,
    INPUT_TYPES,
    LAYER_NORM_SCOPE,
    LAYER_NORM_TYPES,
    MATMUL_TYPES,
    OPTIMIZER_SCOPE,
    RANDOM_TYPES,
    RULES,
    SOFTMAX_TYPES,
    VOCAB_MATMUL_SCOPE,
    VOCAB_SIZE,
    XLA_TYPE,
    attention_part,
    attention_scores_shaped,
    base_type,
    categorise,
    op_pattern,
    rules_markdown,
    scopes,
)
from bench.profile_trace import (  # noqa: F401  (this module's names before the split)
    GETNEXT_EVENT,
    OP_EVENT,
    TFDATA_EVENT,
    WINDOW,
    ShapeIndex,
    attention_line,
    attention_share,
    breakdown,
    markdown,
    nest,
    profile_calls,
    read_trace,
)
from electra_tf.runtime import atomic_io

# ---------------------------------------------------------------------------------- runs
QUICK_MODEL = {
    "model_hparam_overrides": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
    },
    "embedding_size": 16,
    # > 1000 (bench/project_step.py draws ids from 1000 up) and unlike any other dimension.
    "vocab_size": 1999,
}


def model_hparams(args: argparse.Namespace) -> dict[str, Any]:
    hparams: dict[str, Any] = {
        "train_batch_size": args.batch,
        "max_seq_length": args.seq,
        "precision": args.precision,
    }
    if args.jit != "auto":
        hparams["jit_compile"] = args.jit == "on"
    if args.quick:
        hparams.update(QUICK_MODEL)
    return hparams


def trace_breakdown(
    trace: dict[str, Any],
    steps: int,
    unprofiled_s: float,
    index: ShapeIndex,
    vocab_size: int,
    model_scope: str | None = None,
) -> dict[str, Any]:
    """`breakdown` of a trace (`read_trace`'s), with the shapes `index` finds for its ops."""
    return breakdown(
        trace["ops"],
        steps,
        trace["wall_s"],
        trace["executor_s"],
        trace["background_s"],
        unprofiled_s,
        index.for_ops(name for name, _, _ in trace["ops"]),
        vocab_size,
        model_scope=model_scope,
    )


def build_train_steps(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """(config, model, optimizer, compiled `train_steps`): the step as `electra_tf.pretrain`
    builds it, for the shapes and precision of `args`."""
    import tensorflow as tf
    import tf_keras as keras

    from bench.project_step import write_bench_vocab
    from electra_tf.config import pretraining_config
    from electra_tf.runs import pretraining_model
    from electra_tf.runtime.device_defaults import probe_machine

    data_dir = tempfile.mkdtemp(prefix="electra-profile-")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    config = pretraining_config(
        "profile", data_dir, preset="small", hparams=model_hparams(args), machine=probe_machine()
    )
    write_bench_vocab(data_dir, config.vocab_size)
    keras.mixed_precision.set_global_policy(config.precision)
    model = pretraining_model.build_model(config)
    optimizer = pretraining_model.build_optimizer(config, model)
    model.compile(optimizer=optimizer)
    train_steps = pretraining_model.make_train_function(
        model, tf.distribute.get_strategy(), bool(config.jit_compile)
    )
    return config, model, optimizer, train_steps


def profile_train(args: argparse.Namespace, logdir: str) -> dict[str, Any]:
    import tensorflow as tf

    from bench.project_step import synthetic_batches

    config, model, optimizer, train_steps = build_train_steps(args)
    iterator = iter(synthetic_batches(args.batch, args.seq, config.vocab_size))
    print(f"train: warming up ({args.warmup} steps)", file=sys.stderr, flush=True)
    train_steps(iterator, tf.constant(max(1, args.warmup))).numpy()
    steps = tf.constant(args.steps)
    start = time.perf_counter()
    train_steps(iterator, steps).numpy()
    unprofiled = (time.perf_counter() - start) / args.steps
    print(f"train: profiling {args.steps} steps", file=sys.stderr, flush=True)
    profile_calls(lambda: train_steps(iterator, steps).numpy(), 1, logdir)
    trace = read_trace(logdir)
    index = ShapeIndex().add_graph(train_steps.get_concrete_function(iterator, steps).graph)
    result = trace_breakdown(trace, args.steps, unprofiled, index, config.vocab_size)
    params = sum(int(tf.size(v)) for v in model.trainable_variables)
    clusters = read_clusters(trace["path"])
    result.update(
        attention=attention_share(
            result, args.seq, attention_clusters(clusters, index.calls, args.seq, args.steps)
        ),
        path="train",
        title=(
            f"train step, batch {args.batch} x seq {args.seq}, {config.precision}, "
            f"XLA {'on' if config.jit_compile else 'off'}, vocab {config.vocab_size}, "
            f"{params / 1e6:.1f}M parameters"
        ),
        trace=trace["path"],
        device_planes=trace["device_planes"],
        optimizer=type(optimizer).__name__,
        xla_clusters=cluster_table(clusters, args.steps),
    )
    if config.jit_compile:
        result["notes"] = [
            "XLA is on: the step's ops run fused inside XLA clusters, which count as other; "
            "rerun with --jit off for the per-op breakdown."
        ]
    return result


def export_encoder(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(config, model, the SavedModel loaded back): the discriminator exported as `make
    bench-serve` exports it."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, as a serving binary links them)

    from bench.project_step import write_bench_vocab
    from electra_tf.config import pretraining_config
    from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
    from electra_tf.runtime.device_defaults import probe_machine
    from electra_tf.serving.kinds import serving_module
    from electra_tf.serving.precision import bfloat16_twin, model_twin_builder
    from electra_tf.serving.saved_model import ExportSpec, write_export

    workdir = tempfile.mkdtemp(prefix="electra-profile-serve-")  # the export: ~60 MB at full size
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    config = pretraining_config(
        "profile", workdir, preset="small", hparams=model_hparams(args), machine=probe_machine()
    )
    vocab_file = write_bench_vocab(workdir, config.vocab_size)
    model = ElectraDiscriminator(config.discriminator_config())
    model(dummy_inputs())
    bfloat16 = args.serve_precision == "bfloat16"
    if bfloat16:  # the `--precision bfloat16` export's model and graph
        model = bfloat16_twin(model, model_twin_builder(model))
    module = serving_module("discriminator", model, vocab_file, args.seq, constant_kernels=bfloat16)
    spec = ExportSpec("discriminator", "electra_profile", module, "{}", vocab_file, {})
    export_dir = write_export(spec, os.path.join(workdir, "export"), None, False)
    return config, model, tf.saved_model.load(export_dir)


def profile_serve(args: argparse.Namespace, logdir: str) -> list[dict[str, Any]]:
    import numpy as np
    import tensorflow as tf

    config, model, loaded = export_encoder(args)  # `loaded` owns the variables: keep it
    encode = loaded.signatures["encode_ids"]
    index = ShapeIndex().add_graph(encode.graph)
    results = []
    rng = np.random.default_rng(0)
    for batch in args.serve_batches:
        ids = rng.integers(1000, config.vocab_size, size=(batch, args.seq)).astype(np.int32)
        ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
        inputs = {
            "input_ids": tf.constant(ids),
            "input_mask": tf.ones_like(ids),
            "segment_ids": tf.zeros_like(ids),
        }

        def call(inputs=inputs) -> None:
            encode(**inputs)["replaced_probability"].numpy()

        print(f"serve: batch {batch}", file=sys.stderr, flush=True)
        for _ in range(max(1, args.warmup)):  # the first call runs the graph optimisations
            call()
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        sub = os.path.join(logdir, f"serve_b{batch}")
        profile_calls(call, args.steps, sub)
        trace = read_trace(sub)
        unprofiled = statistics.median(times)
        result = trace_breakdown(
            trace, args.steps, unprofiled, index, config.vocab_size, model.name
        )
        result.update(
            attention=attention_share(result, args.seq),
            path="serve",
            batch=batch,
            title=(
                f"serving `encode_ids`, batch {batch} x seq {args.seq}, discriminator "
                f"{config.discriminator_config().num_hidden_layers} x "
                f"{config.discriminator_config().hidden_size}, {args.serve_precision} export "
                "(unprofiled time: median call)"
            ),
            trace=trace["path"],
            device_planes=trace["device_planes"],
        )
        results.append(result)
    return results


# ---------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=("train", "serve", "both"), default="both")
    parser.add_argument("--steps", type=int, help="profiled steps / calls (default 10; quick 2)")
    parser.add_argument(
        "--warmup", type=int, help="untimed steps / calls first (default 3; quick 1; at least 1)"
    )
    parser.add_argument("--batch", type=int, help="train batch (default 32; quick 4)")
    parser.add_argument("--seq", type=int, help="sequence length (default 128; quick 32)")
    parser.add_argument("--serve-batches", help="serving batch sizes (default 1,32; quick 1,4)")
    parser.add_argument("--precision", default="float32", help="train precision (float32)")
    parser.add_argument(
        "--serve-precision", default="float32", choices=("float32", "bfloat16"),
        help="the export's precision (bfloat16: as `export --precision bfloat16` writes it)",
    )  # fmt: skip
    parser.add_argument(
        "--jit",
        choices=("auto", "on", "off"),
        default="auto",
        help="train step XLA (auto: as the config resolves it, off on CPU)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny model, few steps: smoke run")
    parser.add_argument(
        "--no-peak", action="store_true", help="skip the tf.matmul peak (--quick skips it too)"
    )
    parser.add_argument("--intra", type=int, default=0, help="intra-op threads (0: TF default)")
    parser.add_argument("--inter", type=int, default=0, help="inter-op threads (0: TF default)")
    parser.add_argument("--out", help="write the breakdown as JSON here")
    parser.add_argument("--logdir", help="profiler trace directory (default: a new temp dir)")
    parser.add_argument(
        "--rules-markdown", action="store_true", help="print the category rules as a table"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    for field, full, small in (
        ("steps", 10, 2),
        ("warmup", 3, 1),
        ("batch", 32, 4),
        ("seq", 128, 32),
        ("serve_batches", "1,32", "1,4"),
    ):
        if getattr(args, field) is None:
            setattr(args, field, small if quick else full)
    args.serve_batches = [int(b) for b in str(args.serve_batches).split(",") if b.strip()]
    if args.steps < 1 or args.batch < 1 or args.seq < 4 or not args.serve_batches:
        parser.error("--steps, --batch, --serve-batches must be positive and --seq at least 4")
    return args


def start_tensorflow(args: argparse.Namespace) -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if args.intra:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra)
    if args.inter:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter)
    from electra_tf.runtime.tf_startup import start_tensorflow as start

    start()
    return tf


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rules_markdown:
        print(rules_markdown())
        return 0
    tf = start_tensorflow(args)
    logdir = args.logdir or tempfile.mkdtemp(prefix="electra-profile-trace-")
    os.makedirs(logdir, exist_ok=True)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    peak = None
    if not (args.quick or args.no_peak):  # the processor's matmul peak, for the header
        from bench.machine import measure_peak

        peak = measure_peak()
    results = []
    if args.path in ("train", "both"):
        results.append(profile_train(args, os.path.join(logdir, "train")))
    if args.path in ("serve", "both"):
        results += profile_serve(args, os.path.join(logdir, "serve"))
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    machine = {
        "tensorflow": tf.__version__,
        "cpus": os.cpu_count(),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "quick": args.quick,
        "matmul_peak": peak,
        "logdir": logdir,
    }
    from bench.machine import header

    print(
        f"## Profile breakdown{' (--quick: tiny model)' if args.quick else ''}\n\n"
        f"{header(peak, load_before, load_after)}\n\n"
        f"TensorFlow {machine['tensorflow']}, threads intra "
        f"{machine['intra_op_threads']} / inter {machine['inter_op_threads']} (0 = TF default); "
        f"trace in {logdir}\n"
    )
    for result in results:
        print(markdown(result["title"], result) + "\n")
        if result.get("xla_clusters"):
            print(clusters_markdown(result["xla_clusters"]) + "\n")
        for note in result.get("notes", []):
            print(f"NOTE: {note}\n")
        if result["device_planes"]:
            print(f"NOTE: device planes {result['device_planes']} were not read (host only).\n")
    if args.out:
        atomic_io.write_json(args.out, {"machine": machine, "profiles": results}, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
