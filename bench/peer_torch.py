"""Benchmark peers outside TensorFlow: Hugging Face PyTorch and ONNX Runtime, ELECTRA-Small.

Runs under ANOTHER interpreter (`--hf-python` / `--ort-python` of `bench_train` and
`bench_serve`): one with torch and transformers (and onnx, onnxruntime for `ort`), which are not
project dependencies. It imports nothing of this project, so the bench scripts run it by its
path. Every command prints one JSON line per measurement, with every timed step's seconds.

    python bench/peer_torch.py pretrain --batch 32 --seq 128 --steps 6 --warmup 2 [--bf16]
    python bench/peer_torch.py finetune --batch 32 --seq 128 --steps 6 --warmup 2 [--bf16]
    python bench/peer_torch.py qa --batch 32 --seq 384 --steps 6 --warmup 2 [--bf16]
    python bench/peer_torch.py serve --seq 128 --batches 1,32 --calls 50 --warmup 5 [--model-dir D]
    python bench/peer_torch.py ort --model-dir D --seq 128 --batches 1,32 --calls 50 --warmup 5
        [--reference ids_and_logits.npz]

Shapes are the small preset's: discriminator 12 x 256, 4 heads, FFN 1024; generator 12 x 64,
1 head, FFN 256; embedding width 128; vocabulary 30522.

- pretrain: `ElectraForMaskedLM` (generator) + `ElectraForPreTraining` (discriminator) sharing
  the embeddings and the generator's output table, 15% of positions masked afresh each step,
  replacements sampled from the generator, loss = MLM + 50 x replaced-token detection, AdamW
  (weight decay 0.01), global-norm clipping 1.0: ELECTRA's step, as a PyTorch user writes it.
- finetune: `ElectraForSequenceClassification` (2 labels, dropout 0.1), AdamW with a linear
  warm-up and decay, clipping 1.0: the fine-tuning step of a GLUE classifier.
- qa: `ElectraForQuestionAnswering` (start and end logits over the tokens), the same optimizer
  and schedule: the fine-tuning step of SQuAD at its length (384).
- `--bf16` (pretrain, finetune, qa): the forward pass under `torch.autocast("cpu",
  torch.bfloat16)`, Hugging Face's one-flag mixed precision (the gradients and the optimizer's
  update in float32, as the autocast recipe has them).
- serve: `ElectraForPreTraining` in inference mode on token ids; `--model-dir` loads the
  weights of an HF folder (else random weights of the same shapes).
- ort: the `--model-dir` discriminator exported to ONNX (opset 17), served by ONNX Runtime's
  CPU provider with every graph optimisation on, in float32 and with int8 dynamic quantization
  (`onnxruntime.quantization.quantize_dynamic`, weights int8, activations quantized per call).
  With `--reference` (an .npz of `input_ids`, `input_mask`, `segment_ids`, `logits`: another
  framework's output for the same weights), the float32 model's logits must agree (< 1e-3) before
  anything is timed; the int8 model's largest difference is reported. Where openvino is
  installed too, the same ONNX model compiled by OpenVINO for the CPU in f32 and bf16
  (`openvino_rows`), checked against `--reference` the same way.
"""

import argparse
import atexit
import json
import os
import resource
import shutil
import sys
import tempfile
import time

VOCAB = 30522
DISCRIMINATOR = dict(
    hidden_size=256, num_hidden_layers=12, num_attention_heads=4, intermediate_size=1024
)
GENERATOR = dict(hidden_size=64, num_hidden_layers=12, num_attention_heads=1, intermediate_size=256)
DISC_WEIGHT = 50.0
MASK_ID = 103


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def emit(record):
    import torch

    record.update(
        torch=torch.__version__, threads=torch.get_num_threads(), peak_rss_mib=peak_rss_mib()
    )
    print(json.dumps(record), flush=True)


def timed_steps(step, steps, warmup):
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def autocast(args):
    """The forward pass's precision context: bfloat16 autocast with --bf16, else float32."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16)


def precision(args):
    return "bfloat16" if args.bf16 else "float32"


def electra_config(**sizes):
    from transformers import ElectraConfig

    return ElectraConfig(vocab_size=VOCAB, embedding_size=128, **sizes)


def pretrain(args):
    import torch
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    torch.manual_seed(0)
    discriminator = ElectraForPreTraining(electra_config(**DISCRIMINATOR)).train()
    generator = ElectraForMaskedLM(electra_config(**GENERATOR)).train()
    # ELECTRA's sharing: one embeddings module, and the generator's output table is its rows.
    generator.electra.embeddings = discriminator.electra.embeddings
    generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
    params = list({id(p): p for m in (discriminator, generator) for p in m.parameters()}.values())
    optimizer = torch.optim.AdamW(params, lr=5e-4, weight_decay=0.01)
    batch, seq = args.batch, args.seq
    ids = torch.randint(1000, VOCAB, (batch, seq))
    masked_count = int((0.15 + 0.005) * seq)

    def step():
        scores = torch.rand(batch, seq)
        chosen = scores.topk(masked_count, dim=1).indices  # [batch, masked_count]
        masked = torch.zeros(batch, seq, dtype=torch.bool).scatter_(1, chosen, True)
        generator_ids = ids.masked_fill(masked, MASK_ID)
        with autocast(args):
            generated = generator(input_ids=generator_ids, labels=ids.masked_fill(~masked, -100))
        with torch.no_grad():  # sampling is outside the gradient path
            logits = generated.logits[masked].float()  # [batch * masked_count, vocab]
            sampled = torch.distributions.Categorical(logits=logits).sample()
        corrupted = ids.clone()
        corrupted[masked] = sampled
        with autocast(args):
            detected = discriminator(input_ids=corrupted, labels=(corrupted != ids).long())
            loss = generated.loss + DISC_WEIGHT * detected.loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()

    times = timed_steps(step, args.steps, args.warmup)
    emit({"kind": "pretrain", "batch": batch, "seq": seq, "seconds": times,
          "params": sum(p.numel() for p in params), "precision": precision(args)})  # fmt: skip


def _fine_tuning_step(args, model, inputs):
    """Times AdamW steps (linear warm-up and decay, clipping 1.0) of `model` on `inputs`."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    total = args.steps + args.warmup
    schedule = get_linear_schedule_with_warmup(optimizer, max(1, total // 10), total)

    def step():
        with autocast(args):
            loss = model(**inputs).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()

    return timed_steps(step, args.steps, args.warmup)


def finetune(args):
    import torch
    from transformers import ElectraForSequenceClassification

    torch.manual_seed(0)
    model = ElectraForSequenceClassification(electra_config(**DISCRIMINATOR, num_labels=2)).train()
    ids = torch.randint(1000, VOCAB, (args.batch, args.seq))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    inputs["labels"] = torch.randint(0, 2, (args.batch,))
    times = _fine_tuning_step(args, model, inputs)
    emit({"kind": "finetune", "batch": args.batch, "seq": args.seq, "seconds": times,
          "params": sum(p.numel() for p in model.parameters()),
          "precision": precision(args)})  # fmt: skip


def qa(args):
    import torch
    from transformers import ElectraForQuestionAnswering

    torch.manual_seed(0)
    model = ElectraForQuestionAnswering(electra_config(**DISCRIMINATOR)).train()
    ids = torch.randint(1000, VOCAB, (args.batch, args.seq))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    inputs["start_positions"] = torch.randint(0, args.seq, (args.batch,))
    inputs["end_positions"] = torch.randint(0, args.seq, (args.batch,))
    times = _fine_tuning_step(args, model, inputs)
    emit({"kind": "qa", "batch": args.batch, "seq": args.seq, "seconds": times,
          "params": sum(p.numel() for p in model.parameters()),
          "precision": precision(args)})  # fmt: skip


def load_discriminator(model_dir):
    import torch
    from transformers import ElectraForPreTraining

    torch.manual_seed(0)
    if model_dir:
        return ElectraForPreTraining.from_pretrained(model_dir).eval()
    return ElectraForPreTraining(electra_config(**DISCRIMINATOR)).eval()


def random_ids(batch, seq, seed):
    import numpy as np

    ids = np.random.default_rng(seed).integers(1000, VOCAB, size=(batch, seq)).astype(np.int64)
    return ids, np.ones_like(ids), np.zeros_like(ids)


def serve(args):
    import torch

    model = load_discriminator(args.model_dir)
    for batch in args.batches:
        ids, mask, segments = (torch.from_numpy(a) for a in random_ids(batch, args.seq, batch))

        def call(ids=ids, mask=mask, segments=segments):
            model(input_ids=ids, attention_mask=mask, token_type_ids=segments).logits.sum().item()

        with torch.inference_mode():
            times = timed_steps(call, args.calls, args.warmup)
        emit({"kind": "serve", "batch": batch, "seq": args.seq, "seconds": times})


def export_onnx(model, path, seq):
    import torch

    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = tuple(torch.from_numpy(a) for a in random_ids(2, seq, 0))
    with torch.inference_mode():
        torch.onnx.export(
            model, sample, path, input_names=names, output_names=["logits"], opset_version=17,
            dynamic_axes={name: {0: "batch", 1: "seq"} for name in names}, dynamo=False,
        )  # fmt: skip


def ort(args):
    import numpy as np
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = load_discriminator(args.model_dir)
    workdir = tempfile.mkdtemp(prefix="electra-ort-")  # the two ONNX models: ~66 MB
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    fp32_path = os.path.join(workdir, "electra_small.onnx")
    int8_path = os.path.join(workdir, "electra_small.int8.onnx")
    export_onnx(model, fp32_path, args.seq)
    quantize_dynamic(fp32_path, int8_path, weight_type=QuantType.QInt8)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    sessions = {
        precision: onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        for precision, path in (("float32", fp32_path), ("int8", int8_path))
    }
    agreement = {}
    if args.reference:
        reference = np.load(args.reference)
        feed = {
            "input_ids": reference["input_ids"].astype(np.int64),
            "attention_mask": reference["input_mask"].astype(np.int64),
            "token_type_ids": reference["segment_ids"].astype(np.int64),
        }
        for precision, session in sessions.items():
            got = session.run(None, feed)[0]
            agreement[precision] = float(np.abs(got - reference["logits"]).max())
        if not agreement["float32"] < 1e-3:
            sys.exit(
                f"ONNX Runtime float32 logits differ from the reference by {agreement['float32']}"
            )
    for precision, session in sessions.items():
        for batch in args.batches:
            ids, mask, segments = random_ids(batch, args.seq, batch)
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": segments}
            times = timed_steps(lambda s=session, f=feed: s.run(None, f), args.calls, args.warmup)
            emit({"kind": "ort", "precision": precision, "batch": batch, "seq": args.seq,
                  "seconds": times, "onnxruntime": onnxruntime.__version__,
                  "max_abs_diff": agreement.get(precision)})  # fmt: skip
    openvino_rows(args, fp32_path)


def openvino_rows(args, onnx_path):
    """The same ONNX model compiled by OpenVINO for the CPU, with INFERENCE_PRECISION_HINT f32
    and bf16 (OpenVINO's default where the CPU has bf16 units), PERFORMANCE_HINT LATENCY; each
    precision's largest logit difference from --reference. Skipped where openvino is not
    installed in this interpreter."""
    try:
        import openvino
    except ImportError:
        return
    import numpy as np

    core = openvino.Core()
    model = core.read_model(onnx_path)
    reference = np.load(args.reference) if args.reference else None
    for precision in ("f32", "bf16"):
        hints = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY"}
        request = core.compile_model(model, "CPU", hints).create_infer_request()
        difference = None
        if reference is not None:
            feed = {
                "input_ids": reference["input_ids"].astype(np.int64),
                "attention_mask": reference["input_mask"].astype(np.int64),
                "token_type_ids": reference["segment_ids"].astype(np.int64),
            }
            got = request.infer(feed)[0]
            difference = float(np.abs(got - reference["logits"]).max())
            if precision == "f32" and not difference < 1e-3:
                sys.exit(f"OpenVINO f32 logits differ from the reference by {difference}")
        for batch in args.batches:
            ids, mask, segments = random_ids(batch, args.seq, batch)
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": segments}
            times = timed_steps(lambda r=request, f=feed: r.infer(f), args.calls, args.warmup)
            emit({"kind": "openvino", "precision": precision, "batch": batch, "seq": args.seq,
                  "seconds": times, "openvino": openvino.__version__,
                  "max_abs_diff": difference})  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("pretrain", "finetune", "qa", "serve", "ort"))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--model-dir", default="")
    parser.add_argument("--reference", default="")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast (training steps)")
    args = parser.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",") if b.strip()]
    commands = {"pretrain": pretrain, "finetune": finetune, "qa": qa, "serve": serve, "ort": ort}
    commands[args.command](args)


if __name__ == "__main__":
    main()
