"""bench/bench_train.py's parent: rounds, rows and the --baseline row, with the workers faked
(a real worker builds ELECTRA-Small, too slow for the suite; `make bench` runs them)."""

import pytest

from bench import bench_train


@pytest.fixture
def fake_workers(monkeypatch):
    calls = []
    speed = {"default": 500.0, "mg-fp32": 400.0}

    def run_child(extra, args, timeout, root=bench_train.ROOT):
        calls.append((extra[0], root))
        if extra[0] == "--matmul-worker":
            return {"float32_gflops": 100.0, "bfloat16_gflops": 400.0}
        config = extra[0].split("=", 1)[1]
        tokens = speed[config] * (0.8 if root != bench_train.ROOT else 1.0)
        return {
            "config": config, "params": 1, "step_s": 1.0, "tokens_per_s": tokens, "build_s": 0.0,
            "peak_rss_mib": 100.0, "precision": "float32", "jit_compile": False,
        }  # fmt: skip

    monkeypatch.setattr(bench_train, "run_child", run_child)
    return calls


def test_the_baseline_row_runs_the_default_config_from_the_other_checkout(
    fake_workers, tmp_path, capsys
):
    other = tmp_path / "old"
    (other / "electra_tf").mkdir(parents=True)
    argv = ["--configs", "default", "--rounds", "2", "--no-extras", "--baseline", str(other)]
    assert bench_train.main(argv) == 0
    workers = [c for c in fake_workers if c[0] != "--matmul-worker"]
    # Interleaved: baseline, default, peer in each round; only the baseline from the other tree.
    assert workers == 2 * [
        ("--worker=default", str(other)),
        ("--worker=default", bench_train.ROOT),
        ("--worker=mg-fp32", bench_train.ROOT),
    ]
    out = capsys.readouterr().out
    assert "| baseline | float32 | off | 400 | 1.00x |" in out
    assert "| default | float32 | off | 500 | 1.25x |" in out


def test_a_baseline_without_the_package_is_refused(fake_workers, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        bench_train.main(["--no-extras", "--baseline", str(tmp_path)])
    assert e.value.code == 2
    assert f"--baseline {tmp_path}: no electra_tf package" in capsys.readouterr().err
    assert fake_workers == []
