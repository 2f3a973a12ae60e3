"""What the serving graph runs after Grappler: the op types of the exported `encode_ids`, counted.

Exports a randomly initialised discriminator (the `small` preset, or `--preset`) with the
project's serving signatures, loads the SavedModel back and runs `encode_ids` once on
[batch, seq_len] ids with TensorFlow's run metadata on, which records the graphs as they run:
after Grappler (constant folding, the remapper's fusions) and oneDNN's layout pass (the
`_Mkl*` kernels). Each op type is printed with its count; a fused op shows what it fused, e.g.
`_MklNativeFusedMatMul[BiasAdd,GeluExact]`.

Two ways to load, as the two runtimes that serve a SavedModel:

- `--runtime function` (default): `tf.saved_model.load` and the signature's concrete function
  (TF2, as `make bench-serve` times it);
- `--runtime session`: `tf.compat.v1` Session + `saved_model.loader.load`, the path TF Serving's
  model server takes (a SavedModelBundle runs its signatures with Session::Run).

    python -m bench.serving_graph [--preset small] [--runtime function|session] [--jit-compile]

To see the graph of older code, run this same file against it, from outside both checkouts:
`PYTHONPATH=<old checkout> python <this checkout>/bench/serving_graph.py` (`-m` from this
checkout's root would import this checkout's electra_tf first). `TF_ENABLE_ONEDNN_OPTS=0` shows
what a TensorFlow without oneDNN runs.

`time_task_export` times a fine-tuned task's export the same way it is served (the
`finetune-run` rows of `make bench`, `bench/whole_run.run_whole_finetuning`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import inspect
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping

# Ops that hold no computation: the graph's plumbing, not what it runs.
PLUMBING = frozenset(
    "_Arg _Retval _DeviceArg _DeviceRetval Const NoOp Identity ReadVariableOp VarHandleOp "
    "_Send _Recv _HostSend _HostRecv".split()
)


def op_key(node) -> str:
    """`_MklNativeFusedMatMul[BiasAdd,GeluExact]` for a fused op, else the op type."""
    fused = node.attr["fused_ops"].list.s if "fused_ops" in node.attr else []
    if not fused:
        return node.op
    return f"{node.op}[{','.join(op.decode() for op in fused)}]"


def count_ops(graphs: Iterable, plumbing: bool = False) -> collections.Counter:
    """Op keys (`op_key`) -> count over GraphDefs, without the plumbing ops unless asked."""
    counts: collections.Counter = collections.Counter()
    for graph in graphs:
        for node in graph.node:
            if plumbing or node.op not in PLUMBING:
                counts[op_key(node)] += 1
    return counts


def function_graph_ops(function, inputs: Mapping) -> collections.Counter:
    """The ops that the first call of a TF2 concrete function ran (after Grappler), counted.

    The graphs are recorded when the function is instantiated, i.e. at its first call in the
    process: a function that already ran records none, which raises here rather than giving
    an empty count.
    """
    from tensorflow.python.eager import context

    context.enable_run_metadata()
    try:
        function(**inputs)
        metadata = context.export_run_metadata()
    finally:
        context.disable_run_metadata()
    graphs = [g for f in metadata.function_graphs for g in f.partition_graphs]
    if not graphs:
        raise ValueError("no graph was recorded: count the ops at the function's first call")
    return count_ops(graphs)


@contextlib.contextmanager
def signature_session(path: str, signature: str, config=None):
    """(a TF1 Session with the SavedModel at `path` loaded, as TF Serving runs it, the
    `signature`'s SignatureDef); `config`: the Session's ConfigProto (None: TensorFlow's)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    with tf.Graph().as_default() as graph, v1.Session(graph=graph, config=config) as session:
        meta = v1.saved_model.loader.load(session, [v1.saved_model.tag_constants.SERVING], path)
        yield session, meta.signature_def[signature]


def session_graph_ops(path: str, signature: str, inputs: Mapping) -> collections.Counter:
    """The ops that one Session::Run of a SavedModel signature ran, as TF Serving runs it."""
    import tensorflow as tf

    v1 = tf.compat.v1
    with signature_session(path, signature) as (session, signature_def):
        feeds = {signature_def.inputs[k].name: v for k, v in inputs.items()}
        fetches = {k: v.name for k, v in signature_def.outputs.items()}
        metadata = v1.RunMetadata()
        options = v1.RunOptions(output_partition_graphs=True)
        session.run(fetches, feeds, options=options, run_metadata=metadata)
    graphs = list(metadata.partition_graphs)
    graphs += [g for f in metadata.function_graphs for g in f.partition_graphs]
    return count_ops(graphs)


def export_discriminator(
    workdir: str, preset: str, vocab_size: int, jit_compile: bool, query_blocks: int | None = None
) -> str:
    """A random discriminator of `preset`, exported with the serving signatures; its path."""
    from electra_tf.config import pretraining_config
    from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
    from electra_tf.serving.kinds import serving_module
    from electra_tf.serving.saved_model import ExportSpec, write_export

    vocab_file = os.path.join(workdir, "vocab.txt")
    with open(vocab_file, "w", encoding="utf-8") as f:
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        f.write("\n".join(specials + [f"w{i}" for i in range(vocab_size - 5)]) + "\n")
    config = pretraining_config("graph", preset=preset, hparams={"vocab_size": vocab_size})
    model = ElectraDiscriminator(config.discriminator_config())
    model(dummy_inputs())
    options = {"jit_compile": True} if jit_compile else {}
    if query_blocks is not None:
        options["query_blocks"] = query_blocks
    for option in options:
        # Older checkouts (`PYTHONPATH=<old checkout>`) may not have the option.
        if option not in inspect.signature(serving_module).parameters:
            raise SystemExit(f"this checkout's serving_module has no {option} option")
    module = serving_module("discriminator", model, vocab_file, 512, **options)
    spec = ExportSpec("discriminator", "graph", module, "{}", vocab_file, {})
    return write_export(spec, workdir, None, False)


def random_ids(batch: int, seq_len: int, vocab_size: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    ids = rng.integers(5, vocab_size, size=[batch, seq_len]).astype(np.int32)
    mask = np.ones([batch, seq_len], np.int32)
    mask[0, seq_len // 2 :] = 0  # one padded row: the attention mask takes part
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


def time_task_export(data_dir: str, batch: int, seq: int, task: str, calls: int = 10) -> float:
    """`python -m electra_tf.export --task <task>` of the run's model, loaded back: the median
    ms of its `encode_ids` on a full-length batch (after 3 warm-up calls)."""
    import numpy as np
    import tensorflow as tf

    from electra_tf.cli import export

    out = os.path.join(data_dir, "serving")
    argv = ["--data-dir", data_dir, "--model-name", "bench", "--task", task, "--output-dir", out]
    if export.main(argv):
        raise RuntimeError("the export of the fine-tuned model failed (its output is above)")
    model = tf.saved_model.load(os.path.join(out, f"bench_{task}", "1"))
    ids = np.random.default_rng(1).integers(1000, 30000, size=(batch, seq)).astype(np.int32)
    feed = {"input_ids": tf.constant(ids), "input_mask": tf.ones_like(ids),
            "segment_ids": tf.zeros_like(ids)}  # fmt: skip
    encode = model.signatures["encode_ids"]
    seconds = []
    for index in range(3 + calls):
        start = time.perf_counter()
        encode(**feed)
        if index >= 3:
            seconds.append(time.perf_counter() - start)
    return 1000 * float(np.median(seconds))


# ---------------------------------------------------------------------------------- Model Garden
# Peer baseline for `make bench`: TF Model Garden's ElectraPretrainer, one full train step.
#
# Same shapes and step as the peer harness the project was asked to beat (ELECTRA-Small:
# discriminator 12 x 256 with 4 heads and FFN 1024, generator 12 x 64 with 1 head and FFN 256,
# embedding width 128, vocab 30522; Model Garden's legacy AdamWeightDecay; MLM + 50 x RTD loss;
# global-norm clipping). Model Garden is only a benchmark peer here: the project never imports it.
#
# `build_peer_step(batch, seq, jit, vocab)` returns `(step_fn, inputs)`; the bench worker times
# `step_fn(inputs)`.


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small", help="model preset (default small)")
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--runtime", choices=("function", "session"), default="function")
    parser.add_argument("--jit-compile", action="store_true", help="export with XLA")
    parser.add_argument(
        "--query-blocks",
        type=int,
        help="export with this many query blocks (default: the export's)",
    )
    parser.add_argument("--all", action="store_true", help="also count the plumbing ops")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, as a serving binary links them)
    from tensorflow.python.util import _pywrap_util_port

    inputs = random_ids(args.batch, args.seq, args.vocab_size)
    with tempfile.TemporaryDirectory() as workdir:
        path = export_discriminator(
            workdir, args.preset, args.vocab_size, args.jit_compile, args.query_blocks
        )
        if args.runtime == "session":
            counts = session_graph_ops(path, "encode_ids", inputs)
        else:
            encode = tf.saved_model.load(path).signatures["encode_ids"]
            counts = function_graph_ops(encode, {k: tf.constant(v) for k, v in inputs.items()})
    if not args.all:
        counts = collections.Counter({k: v for k, v in counts.items() if k not in PLUMBING})
    onednn = _pywrap_util_port.IsMklEnabled()
    print(f"`encode_ids` of the {args.preset} discriminator, {args.runtime} runtime, "
          f"TensorFlow {tf.__version__}, oneDNN {'on' if onednn else 'off'}, "
          f"jit_compile {args.jit_compile}, query_blocks {args.query_blocks or 'default'}; "
          f"{sum(counts.values())} ops "
          f"({'all' if args.all else 'without ' + ', '.join(sorted(PLUMBING))})\n")  # fmt: skip
    print("| ops | op type |")
    print("| ---: | --- |")
    for key, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"| {count} | `{key}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
