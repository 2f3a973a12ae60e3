"""The benchmark tables' arithmetic, without running a step: bench/train_table.py (medians,
per-round ratios against the peers, MFU), bench/cost_curve.py (the per-length table and its
verdicts), bench/bench_serve.py (latency ratios, the export rows an option can add) and
bench/machine.py (the processor line)."""

import argparse

import pytest

from bench import bench_serve, cost_curve, machine, serve_table, train_table

PEAK = {"float32_gflops": 100.0, "bfloat16_gflops": 400.0}


def record(config, seq, round_index, tokens, precision="float32", rss=100.0):
    return {
        "config": config, "seq": seq, "round": round_index, "batch": 4096 // seq,
        "tokens_per_s": tokens, "peak_rss_mib": rss, "precision": precision,
        "jit_compile": None if config.startswith("hf") else False,
    }  # fmt: skip


TASKS = {"default": "pretrain", "mg-fp32": "pretrain", "hf-fp32": "pretrain",
         "finetune": "finetune", "hf-finetune": "finetune"}  # fmt: skip


def flops(task, seq):
    return {"pretrain": 1e6, "finetune": 5e5}[task] * seq / 128


def test_ratios_pair_each_round_and_length_with_its_own_peer():
    records = [
        # Round 0 is loaded (everything at half speed), round 1 not: per-round ratios are 2.0 and
        # 2.0, though the medians of tokens/s alone (150 / 75) would also give 2.0 ...
        record("default", 128, 0, 100), record("mg-fp32", 128, 0, 50),
        record("default", 128, 1, 200), record("mg-fp32", 128, 1, 100),
        # ... here the project ran in the loaded round only: its ratio is 100 / 50, not 100 / 75.
        record("default", 512, 0, 100), record("mg-fp32", 512, 0, 50),
        record("mg-fp32", 512, 1, 100),
        record("finetune", 128, 0, 300, rss=50), record("finetune", 128, 1, 360, rss=70),
        record("hf-finetune", 128, 0, 100), record("hf-finetune", 128, 1, 120),
    ]  # fmt: skip
    names = ["default", "finetune", "mg-fp32", "hf-finetune", "hf-fp32"]
    rows = train_table.summarise(records, names, TASKS, flops, PEAK)
    by = {(r["seq"], r["config"]): r for r in rows}
    assert by[(128, "default")]["ratios"] == {
        "vs MG fp32": 2.0,
        "vs HF PyTorch": None,
        "vs HF bf16": None,
    }
    assert by[(512, "default")]["ratios"]["vs MG fp32"] == 2.0
    assert by[(512, "mg-fp32")]["tokens_per_s"] == 75  # the median of its two rounds
    assert by[(128, "finetune")]["ratios"] == {
        "vs MG fp32": None,
        "vs HF PyTorch": 3.0,
        "vs HF bf16": None,
    }
    assert by[(128, "hf-finetune")]["ratios"]["vs HF PyTorch"] == 1.0
    assert by[(128, "finetune")]["peak_rss_mib"] == 70
    # MFU: 330 tokens/s x 0.5 MFLOP / 100 GFLOP/s.
    assert by[(128, "finetune")]["mfu"] == pytest.approx(330 * 5e5 / 1e11)
    assert by[(128, "hf-fp32")]["failed"] and by[(512, "finetune")]["failed"]
    assert train_table.ratio_at(rows, "default", "vs MG fp32", 512) == 2.0
    table = train_table.markdown(rows)
    assert (
        "| 128 | 32 | finetune | finetune | float32 | off | 330 | - | 3.00x | - | 0.2% | 70 |"
        in (table)
    )
    assert "| 128 | | hf-fp32 | failed |" in table


def test_mfu_uses_the_bf16_peak_for_bf16_rows_and_none_without_a_peak():
    records = [record("default", 128, 0, 400, precision="mixed_bfloat16")]
    rows = train_table.summarise(records, ["default"], TASKS, flops, PEAK)
    assert rows[0]["mfu"] == pytest.approx(400 * 1e6 / 400e9)
    rows = train_table.summarise(records, ["default"], TASKS, flops, None)
    assert rows[0]["mfu"] is None and "| - | 100 |" in train_table.markdown(rows)


def curve_records(ratio_128, ratio_512, bf16_ratio=2.0):
    """Two rounds at 128 and 512: the project's float32 step at 1000 tokens/s and its bf16 step
    at 1500, Model Garden's (float32 only) at 1000 / ratio, PyTorch's at half Model Garden's
    (bf16: 750 / bf16_ratio); in round 1 everything runs at half speed (the ratios stay)."""
    records = []
    for seq, ratio in ((128, ratio_128), (512, ratio_512)):
        for round_index, speed in ((0, 1.0), (1, 0.5)):
            speeds = {"default": 1000.0, "mg-fp32": 1000.0 / ratio, "hf-fp32": 500.0 / ratio,
                      "bf16": 1500.0, "hf-bf16": 750.0 / bf16_ratio}  # fmt: skip
            records += [record(config, seq, round_index, tokens * speed,
                               "mixed_bfloat16" if "bf16" in config else "float32")
                        for config, tokens in speeds.items()]  # fmt: skip
    return records


def test_cost_curve_rows_and_verdicts():
    serving = {
        128: {"electra-tf": {1: 10.0, 32: 200.0}, "HF PyTorch": {1: 20.0, 32: 500.0}},
        512: {"electra-tf": {1: 50.0, 32: 1000.0}, "HF PyTorch": {1: 80.0, 32: 3000.0}},
    }
    attention = {128: {"train": 0.1, "serve": 0.08}, 512: {"train": 0.3}}
    records = curve_records(1.8, 1.5)
    # A bf16 peer round missing at 512 pairs nothing with it: the round left is used.
    records = [r for r in records if not (r["config"] == "hf-bf16" and r["seq"] == 512
                                          and r["round"] == 1)]  # fmt: skip
    names = list(cost_curve.TRAIN_CONFIGS)
    train_rows = train_table.summarise(
        records, names, dict.fromkeys(names, "pretrain"), flops, PEAK
    )
    rows = cost_curve.curve_rows(train_rows, serving, attention, [128, 512])
    assert rows[0]["serve"][32] == {"ours_ms": 200.0, "hf_ms": 500.0, "ratio": 2.5}
    assert rows[1]["serve"][1]["ratio"] == pytest.approx(1.6)
    assert rows[0]["train"]["float32"]["tokens_per_s"] == 750.0  # the median of 1000 and 500
    # bf16 against Model Garden's float32 step (it has no bf16 one) and PyTorch's bf16.
    assert rows[1]["train"]["mixed_bfloat16"]["ratios"] == pytest.approx(
        {"Model Garden": 2.25, "HF PyTorch": 4.0}
    )
    table = cost_curve.markdown(rows)
    assert "| 128 | float32 | 32 | 750 | 1.80x | 3.60x | 10.0% |" in table
    assert "| 512 | float32 | 8 | 750 | 1.50x | 3.00x | 30.0% |" in table
    assert "| 512 | mixed_bfloat16 | 8 | 1125 | 2.25x | 4.00x | - |" in table
    assert "| 128 | 10.0 / 20.0 | 2.00x | 200.0 / 500.0 | 2.50x | 8.0% |" in table
    assert table.splitlines()[-1] == "| 512 | 50.0 / 80.0 | 1.60x | 1000.0 / 3000.0 | 3.00x | - |"
    verdicts = cost_curve.verdicts(rows)
    assert verdicts[0] == (
        "- training float32 Model Garden: 1.80x at 128, 1.50x at 512: WORSE by 17%"
    )
    assert verdicts[2] == (
        "- training mixed_bfloat16 Model Garden: 2.70x at 128, 2.25x at 512: WORSE by 17%"
    )
    assert verdicts[5] == "- serving batch 32 HF PyTorch: 2.50x at 128, 3.00x at 512: no worse"
    assert verdicts[6:] == [
        "- training float32 at 512: 1.50x Model Garden (target 1.8x or more: NOT met)",
        "- training mixed_bfloat16 at 512: 2.25x Model Garden (target 1.8x or more: met)",
    ]
    # A length that failed is said so, not compared.
    rows[1]["train"]["float32"] = None
    assert cost_curve.verdicts(rows)[0] == (
        "- training float32 Model Garden: not measured at both 128 and 512"
    )
    assert "| 512 | float32 | | failed | | | |" in cost_curve.markdown(rows)


def test_the_curve_runs_every_line_once():
    assert cost_curve.TRAIN_CONFIGS == ("default", "mg-fp32", "hf-fp32", "bf16", "hf-bf16")
    for config in cost_curve.TRAIN_CONFIGS:
        assert config in train_table.CONFIGS and config in cost_curve.SYSTEMS


def test_serving_ratios_against_every_peer():
    results = {
        "electra-tf": {"encode_ids": {1: [0.010] * 3, 32: [0.2] * 3}},
        "HF PyTorch": {"encode_ids": {1: [0.020] * 3, 32: [0.3] * 3}},
        "ONNX Runtime fp32": {"encode_ids": {1: [0.015] * 3}},
        "ONNX Runtime int8": {"encode_ids": {1: [0.005] * 3}},
    }
    ratios = {(p, b): r for _, p, b, r in serve_table.p50_ratios(results, (1, 32))}
    assert ratios == pytest.approx(
        {
            ("HF PyTorch", 1): 2.0,
            ("HF PyTorch", 32): 1.5,
            ("ONNX Runtime fp32", 1): 1.5,
            ("ONNX Runtime int8", 1): 0.5,
        }  # fmt: skip
    )


def test_onnx_runtime_and_openvino_records_become_rows_with_their_agreement(monkeypatch):
    def record(kind, precision, batch, seconds, difference):
        return {"kind": kind, "precision": precision, "batch": batch, "seconds": seconds,
                "max_abs_diff": difference, "threads": 2, "onnxruntime": "1.0",
                "openvino": "2026"}  # fmt: skip

    records = [
        record("ort", "float32", 1, [0.02], 1e-6),
        record("ort", "int8", 1, [0.01], 0.2),
        record("openvino", "f32", 1, [0.012], 2e-6),
        record("openvino", "bf16", 1, [0.006], 3e-2),
    ]
    monkeypatch.setattr(bench_serve, "run_peer", lambda *a: (records, ""))
    args = argparse.Namespace(no_ort=False, ort_python="py", seq=128, batches=[1], calls=1)
    args.warmup = 0
    results, note = bench_serve.bench_ort("/w", args)
    assert set(results) == {
        "ONNX Runtime fp32",
        "ONNX Runtime int8",
        "OpenVINO f32",
        "OpenVINO bf16",
    }
    assert results["OpenVINO bf16"] == {"encode_ids": {1: [0.006]}}
    assert "openvino 2026" in note and "OpenVINO bf16 logits within 3.0e-02" in note
    results["electra-tf"] = {"encode_ids": {1: [0.012]}}
    ratios = {(p, b): r for _, p, b, r in serve_table.p50_ratios(results, (1,))}
    assert ratios[("OpenVINO bf16", 1)] == pytest.approx(0.5)  # OpenVINO twice as fast


def test_this_builds_precision_export_gets_its_row_and_an_older_one_is_skipped():
    """The bfloat16 row comes from this build's export (`save_for_serving`'s `precision`),
    every variant's options are ones it takes; a --baseline without the option is skipped."""
    import inspect

    from electra_tf.serving.kinds import save_for_serving

    args = argparse.Namespace(no_variants=False, no_xla=False, precision="bfloat16")
    variants, notes = bench_serve.export_variants(args, bench_serve.export_options())
    assert notes == [] and variants["electra-tf, bfloat16"] == {"precision": "bfloat16"}
    assert set(variants) == {
        "electra-tf",
        "electra-tf, query_blocks 1",
        "electra-tf, jit_compile",
        "electra-tf, bfloat16",
    }
    for options in variants.values():
        inspect.signature(save_for_serving).bind(None, "out", "vocab.txt", 128, **options)
    older = {"model", "output_dir", "vocab_file", "max_seq_length", "query_blocks"}
    args = argparse.Namespace(no_variants=True, no_xla=False, precision="bfloat16")
    variants, notes = bench_serve.export_variants(args, older)
    assert variants == {"electra-tf": {}}
    assert notes == ["--precision bfloat16: skipped (this export has no precision option)"]
    args = argparse.Namespace(no_variants=False, no_xla=True, precision=None)
    assert list(bench_serve.export_variants(args, {"query_blocks", "jit_compile"})[0]) == [
        "electra-tf",
        "electra-tf, query_blocks 1",
    ]


CPUINFO = """processor\t: 0
model name\t: AMD EPYC 9R45
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 amx_tile
processor\t: 1
model name\t: AMD EPYC 9R45
flags\t\t: fpu sse2
"""


def test_processor_line_names_the_model_and_its_vector_units():
    assert machine.read_cpuinfo(CPUINFO) == (
        "AMD EPYC 9R45",
        ["fma", "avx2", "avx512f", "avx512_bf16", "amx_tile"],
    )
    line = machine.header(PEAK, 1.25, 3.5)
    assert line.startswith("processor: ") and "CPUs" in line
    assert "tf.matmul peak fp32 100, bf16 400 GFLOP/s" in line
    assert line.endswith("load average 1.2 at start, 3.5 at end")


def test_the_whole_run_is_set_beside_its_step():
    rows = [
        {"config": "finetune", "seq": 128, "failed": False, "tokens_per_s": 5000.0},
        {
            "config": "finetune-run",
            "seq": 128,
            "failed": False,
            "tokens_per_s": 4600.0,
            "batch": 32,
            "eval_ms": 250.0,
            "export_ms": 200.0,
        },
        {"config": "finetune-run", "seq": 256, "failed": False, "tokens_per_s": 100.0},
    ]
    lines = train_table.whole_run_lines(rows)
    # 4600 / 5000; at 256 there is no step row to compare with.
    assert lines == [
        "\nfinetune-run: the whole fine-tuning run at 92% of the finetune step's tokens/s "
        "(4600 against 5000)",
        "finetune-run: evaluation 250 ms per batch of 32, the task's serving export 200 ms "
        "(0.80x the export's speed)",
    ]


def test_the_checkpoint_cost_is_stated_at_500_step_intervals():
    # 32 x 128 tokens a step at 4096 tok/s: 1 s a step; a 2.5 s checkpoint every 500 steps.
    row = {"config": "finetune-run-ckpt", "seq": 128, "failed": False, "tokens_per_s": 4096.0,
           "batch": 32, "ckpt_ms": 2500.0, "ckpt_count": 9}  # fmt: skip
    assert train_table.whole_run_lines([row]) == [
        "finetune-run-ckpt: a training checkpoint 2500 ms (median of 9), every 500 steps "
        "0.50% of the run's time (1.00 s a step)"
    ]
    assert train_table.CONFIGS["finetune-run-ckpt"]["hparams"] == {"save_checkpoints_steps": 50}
