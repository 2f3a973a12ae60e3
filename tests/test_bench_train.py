"""bench/bench_train.py's parent: rounds, lengths, rows, the peers and the --baseline row, with
the workers faked (a real worker builds ELECTRA-Small, too slow for the suite; `make bench`
runs them); then one tiny run through the real workers at two sequence lengths."""

import json
import time

import pytest

from bench import bench_train

TINY = (
    '{"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 1, '
    '"num_attention_heads": 2, "intermediate_size": 64}, "embedding_size": 16, '
    '"vocab_size": 1999}'
)


# A pretrain-run worker's whole-run figures (bench/whole_run.py), over `record`'s.
PRETRAIN_RUN = {
    "run_steps": 300, "wall_s": 100.0, "steady_tokens_per_s": 495.0, "input_ms": 1.5,
    "ckpt_count": 3, "ckpt_ms": 400.0, "phases": {
        "start-up": 3.0, "first trace": 1.0, "first call": 0.5, "input": 0.5, "steps": 93.0,
        "checkpoints": 1.2, "metrics and logging": 0.5, "evaluation": 0.0, "other": 0.3,
    },
}  # fmt: skip


@pytest.fixture
def fake_workers(monkeypatch):
    calls = []
    speed = {"default": 500.0, "mg-fp32": 400.0, "finetune": 900.0, "squad": 600.0}
    speed.update({"finetune-bf16": 1200.0, "squad-bf16": 900.0})
    torch_speed = {"hf-fp32": 250.0, "hf-finetune": 300.0, "hf-finetune-bf16": 400.0}
    torch_speed.update({"hf-squad": 200.0, "hf-squad-bf16": 300.0})

    def record(config, tokens, jit):
        return {
            "config": config, "params": 1, "step_s": 1.0, "tokens_per_s": tokens,
            "build_s": 0.0, "peak_rss_mib": 100.0, "precision": "float32", "jit_compile": jit,
        }  # fmt: skip

    def run_child(extra, args, timeout, root=bench_train.ROOT, seq=None, batch=None):
        calls.append((extra[0], root, seq, batch))
        if extra[0] == "--matmul-worker":
            return {"float32_gflops": 100.0, "bfloat16_gflops": 400.0}
        config = extra[0].split("=", 1)[1]
        if config == "pretrain-run":
            return {**record(config, 475.0, False), **PRETRAIN_RUN, "run_steps": args.run_steps}
        # A longer sequence is slower per token; the other checkout is slower.
        tokens = speed[config] * 128 / (seq or 128) * (0.8 if root != bench_train.ROOT else 1.0)
        return record(config, tokens, False)

    def run_torch_child(name, args, timeout, seq, batch):
        calls.append((name, "torch", seq, batch))
        return record(name, torch_speed[name] * 128 / seq, None)

    monkeypatch.setattr(bench_train, "run_child", run_child)
    monkeypatch.setattr(bench_train, "run_torch_child", run_torch_child)
    return calls


def test_the_baseline_row_runs_the_default_config_from_the_other_checkout(
    fake_workers, tmp_path, capsys
):
    other = tmp_path / "old"
    (other / "electra_tf").mkdir(parents=True)
    argv = ["--configs", "default", "--rounds", "2", "--no-extras", "--baseline", str(other)]
    assert bench_train.main([*argv, "--hf-python", ""]) == 0
    workers = [c[:2] for c in fake_workers if c[0] != "--matmul-worker"]
    # Interleaved: baseline, default, peer in each round; only the baseline from the other tree.
    assert workers == 2 * [
        ("--worker=default", str(other)),
        ("--worker=default", bench_train.ROOT),
        ("--worker=mg-fp32", bench_train.ROOT),
    ]
    out = capsys.readouterr().out
    assert "| 128 | 32 | baseline | pretrain | float32 | off | 400 | 1.00x | - |" in out
    assert "| 128 | 32 | default | pretrain | float32 | off | 500 | 1.25x | - |" in out


def test_a_baseline_without_the_package_is_refused(fake_workers, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        bench_train.main(["--no-extras", "--baseline", str(tmp_path)])
    assert e.value.code == 2
    assert f"--baseline {tmp_path}: no electra_tf package" in capsys.readouterr().err
    assert fake_workers == []


def test_seq_lengths_at_a_fixed_number_of_tokens_per_batch(fake_workers, capsys, tmp_path):
    argv = ["--configs", "default,hf-fp32", "--seq-lengths", "128,256,512", "--no-extras"]
    argv += ["--tokens-per-batch", "4096", "--rounds", "1", "--hf-python", str(tmp_path)]
    assert bench_train.main([*argv, "--json", str(tmp_path / "bench.json")]) == 0
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"  # beside the JSON
    shapes = [(c[0], c[2], c[3]) for c in fake_workers if c[0] != "--matmul-worker"]
    assert shapes == [
        (name, seq, batch)
        for seq, batch in ((128, 32), (256, 16), (512, 8))
        for name in ("--worker=default", "hf-fp32", "--worker=mg-fp32")
    ]
    out = capsys.readouterr().out
    assert "sequence length 128 (batch 32), 256 (batch 16), 512 (batch 8)" in out
    # Per length: the ratio to each peer of the same length (500/400 and 500/250 at every one).
    assert "| 512 | 8 | default | pretrain | float32 | off | 125 | 1.25x | 2.00x |" in out
    assert "| 512 | 8 | hf-fp32 | pretrain | float32 | - | 62 | 0.62x | 1.00x |" in out
    assert "processor: " in out and "load average " in out


def test_finetune_rows_against_pytorch_and_rows_skipped_without_an_interpreter(
    fake_workers, capsys
):
    # hf-finetune, the fine-tuning row's peer, is added as mg-fp32 is to a pre-training row.
    argv = ["--configs", "finetune,hf-fp32", "--rounds", "1", "--no-extras"]
    assert bench_train.main([*argv, "--hf-python", "/nonexistent/python"]) == 0
    out = capsys.readouterr().out
    assert "hf-fp32, hf-finetune: skipped (no --hf-python interpreter" in out
    assert "| 128 | 32 | finetune | finetune | float32 | off | 900 | - | - |" in out
    fake_workers.clear()
    assert bench_train.main([*argv, "--hf-python", bench_train.PEER_TORCH]) == 0
    out = capsys.readouterr().out
    # The fine-tuning step against PyTorch's fine-tuning step; no Model Garden peer for it.
    assert "| 128 | 32 | finetune | finetune | float32 | off | 900 | - | 3.00x |" in out
    names = [c[0] for c in fake_workers if c[0] != "--matmul-worker"]
    assert names == ["--worker=finetune", "hf-fp32", "--worker=mg-fp32", "hf-finetune"]


def test_squad_rows_at_their_own_length_and_bf16_rows_against_pytorch_autocast(
    fake_workers, capsys, tmp_path
):
    # SQuAD's step runs at 384 whatever --seq says; a bf16 row brings PyTorch's bf16 autocast
    # peer beside its float32 one.
    argv = ["--configs", "finetune-bf16,squad,squad-bf16", "--rounds", "1", "--no-extras"]
    assert bench_train.main([*argv, "--hf-python", bench_train.PEER_TORCH]) == 0
    runs = [(c[0], c[2]) for c in fake_workers if c[0] != "--matmul-worker"]
    assert runs == [
        ("--worker=finetune-bf16", 128), ("hf-finetune", 128), ("hf-finetune-bf16", 128),
        ("--worker=squad", 384), ("--worker=squad-bf16", 384),
        ("hf-squad", 384), ("hf-squad-bf16", 384),
    ]  # fmt: skip
    out = capsys.readouterr().out
    # finetune-bf16: 1200 / 300 against PyTorch float32, 1200 / 400 against its bf16 autocast.
    assert (
        "| 128 | 32 | finetune-bf16 | finetune | float32 | off | 1200 | - | 4.00x | 3.00x |" in out
    )
    # At 384 the fakes scale by 128 / 384: squad 200 tokens/s, hf-squad 66.7, hf-squad-bf16 100.
    assert "| 384 | 32 | squad | squad | float32 | off | 200 | - | 3.00x | 2.00x |" in out
    assert "| 384 | 32 | squad-bf16 | squad | float32 | off | 300 | - | 4.50x | 3.00x |" in out


def test_the_torch_rows_pass_bf16_and_read_the_precision(monkeypatch, tmp_path):
    seen = []

    class Done:
        returncode = 0
        stdout = json.dumps({
            "batch": 32, "seq": 384, "seconds": [2.0], "params": 1, "precision": "bfloat16",
            "torch": "x", "threads": 2, "peak_rss_mib": 1.0,
        })  # fmt: skip
        stderr = ""

    monkeypatch.setattr(bench_train.subprocess, "run", lambda c, **k: seen.append(c) or Done)
    args = bench_train.parse_args(["--hf-python", "py", "--steps", "1"])
    result = bench_train.run_torch_child("hf-squad-bf16", args, 10, 384, 32)
    assert seen[0][2:4] == ["qa", "--batch=32"] and seen[0][-1] == "--bf16"
    assert result["precision"] == "bfloat16" and result["tokens_per_s"] == 32 * 384 / 2.0
    bench_train.run_torch_child("hf-finetune", args, 10, 128, 32)
    assert "--bf16" not in seen[1]


def test_the_whole_pretraining_run_brings_its_step_and_says_where_its_time_went(
    fake_workers, capsys, tmp_path
):
    out_json = tmp_path / "bench.json"
    argv = ["--configs", "pretrain-run", "--rounds", "1", "--no-extras", "--skip-peer"]
    assert bench_train.main([*argv, "--run-steps", "40", "--json", str(out_json)]) == 0
    # The step it is set beside (default, 500 tokens/s) runs in the same rounds; --run-steps
    # reaches the worker (below: on its command line).
    workers = [c[0] for c in fake_workers if c[0] != "--matmul-worker"]
    assert workers == ["--worker=pretrain-run", "--worker=default"]
    out = capsys.readouterr().out
    assert (
        "\npretrain-run: the whole pre-training run (40 steps) at 95% of the default step's "
        "tokens/s (475 against 500); its training calls alone at 99%; its 100.0 s: steps 93.0 s, "
        "start-up 3.0 s, first trace 1.0 s, first call 0.5 s, input 0.5 s, checkpoints 1.2 s, "
        "metrics and logging "
        "0.5 s, evaluation 0.0 s, other 0.3 s (input 1.5 ms a batch read alone; 3 checkpoints, "
        "400 ms each)" in out
    )
    row = json.loads(out_json.read_text())["summary"]["rows"][0]
    assert row["config"] == "pretrain-run" and row["step_share"] == pytest.approx(0.95)
    assert row["phases"] == PRETRAIN_RUN["phases"] and row["wall_s"] == 100.0


def test_the_run_steps_reach_the_worker_command(monkeypatch):
    seen = []

    class Done:
        returncode, stdout, stderr = 0, bench_train.RESULT_TAG + "{}", ""

    monkeypatch.setattr(bench_train.subprocess, "run", lambda c, **k: seen.append(c) or Done)
    args = bench_train.parse_args(["--run-steps", "7"])
    bench_train.run_child(["--worker=pretrain-run"], args, 10)
    assert "--worker=pretrain-run" in seen[0] and "--run-steps=7" in seen[0]


def test_a_tiny_whole_pretraining_run_in_phases(capsys):
    """The pretrain-run worker itself: `python -m electra_tf.pretrain` of a tiny model for 6
    steps (--run-steps), a checkpoint every 2; its phases are disjoint (none below 0, their sum
    the wall time) and its wall time no longer than this test's own clock says."""
    argv = ["--worker", "pretrain-run", "--batch", "2", "--seq", "24", "--run-steps", "6"]
    args = bench_train.parse_args([*argv, "--hparams", TINY])
    started = time.perf_counter()
    record = bench_train.worker(args)
    elapsed = time.perf_counter() - started
    assert "step 6/6" in capsys.readouterr().out  # the command's own last progress line
    assert record["run_steps"] == 6 and sum(record["call_steps"]) == 6
    assert record["ckpt_count"] == 3 and record["shape"] == [2, 24]
    assert record["params"] < 200_000  # the tiny model, not ELECTRA-Small
    phases = record["phases"]
    assert list(phases) == [
        "start-up", "first trace", "first call", "input", "steps", "checkpoints",
        "metrics and logging", "evaluation", "other",
    ]  # fmt: skip
    assert min(phases.values()) >= 0, phases
    assert phases["start-up"] > 0 and phases["first trace"] > 0 and phases["checkpoints"] > 0
    assert phases["first call"] > 0  # the graph optimiser, at least, runs on the first call
    assert sum(phases.values()) == pytest.approx(record["wall_s"], abs=1e-6)
    assert record["wall_s"] <= elapsed
    assert record["tokens_per_s"] == pytest.approx(6 * 2 * 24 / record["wall_s"])


def test_unknown_configuration_and_bad_lengths_are_refused(capsys):
    with pytest.raises(SystemExit):
        bench_train.main(["--configs", "default,fp64"])
    assert "unknown configuration 'fp64'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_train.main(["--seq-lengths", "128,x"])
    assert "expected integers separated by commas: '128,x'" in capsys.readouterr().err


@pytest.mark.slow  # `make bench` itself; the harness is tested above with fake workers
def test_a_tiny_run_through_the_real_workers_at_a_length_of_its_own(capsys, tmp_path, monkeypatch):
    """The real subprocesses, steps and table: the pre-training and fine-tuning steps of a tiny
    model, 1 timed step at length 48 (not the default 128, so a worker that ignored the length
    would show; the sweep over lengths is `test_seq_lengths_at_a_fixed_number_of_tokens_per_batch`)."""
    out_json = tmp_path / "bench.json"
    argv = ["--configs", "default,finetune", "--seq-lengths", "48", "--batch", "2"]
    argv += ["--steps", "1", "--warmup", "1", "--rounds", "1", "--skip-peer", "--no-extras"]
    argv += ["--no-peak", "--hf-python", "", "--hparams", TINY, "--json", str(out_json)]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert bench_train.main(argv) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out, out
    rows = json.loads(out_json.read_text())["summary"]["rows"]
    assert [(r["seq"], r["config"], r["batch"]) for r in rows] == [
        (48, "default", 2), (48, "finetune", 2),
    ]  # fmt: skip
    records = json.loads(out_json.read_text())["records"]
    for row in rows:
        assert row["tokens_per_s"] > 0 and row["mfu"] is None
    # Each worker ran the shape of its row, with the tiny model (not ELECTRA-Small): both
    # steps built from the hparams given.
    assert [r["shape"] for r in records] == [[2, 48], [2, 48]]
    assert all(r["params"] < 200_000 for r in records), [r["params"] for r in records]
