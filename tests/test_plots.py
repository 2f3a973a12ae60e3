"""The pictures (electra_tf/evaluation/plots.py) and the commands' drawing of them: each kind of
chart from a small fixed input, and each command's `draw` from the rows its table prints. What is
checked: a PNG under 150 KB, the panels' titles and axis labels, and the drawn data (lines'
points, bars' lengths), never pixels. Last, that training and serving do not load matplotlib."""

import os
import subprocess
import sys

from bench import bench_serve, bench_train, cost_curve, train_table
from electra_tf.evaluation import plots
from tools.original_parity import curves

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_BYTES = 150 * 1024
HEADER = "processor: AMD EPYC 9R45, 2 CPUs, fma avx2; load average 1.0 at start, 2.0 at end"


def assert_small_png(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert len(data) < MAX_BYTES, (path, len(data))


def drawn_lines(ax, label):
    return [line for line in ax.get_lines() if line.get_label() == label]


# ---------------------------------------------------------------------------- one per kind
STEPS = [0, 100, 200]
ORIGINAL = {m: [[3.0, 2.0, 1.0], [3.2, 2.2, 1.2]] for m in curves.METRICS}
PROJECT = {m: [[3.1, 2.1, 1.9], [3.1, 2.1, 2.1]] for m in curves.METRICS}
MUTATED = {m: [[5.0, 4.0, 3.0], [5.0, 4.0, 3.0]] for m in curves.METRICS}


def test_curve_parity(tmp_path):
    result = curves.verdict({"original": ORIGINAL, "project": PROJECT}, STEPS, 3.0, 0.5)
    path = str(tmp_path / "curves.png")
    figure = plots.curve_parity(path, STEPS, ORIGINAL, PROJECT, result["bands"],
                                [("under a bug", MUTATED)], "electra-tf", "CURVES OK")  # fmt: skip
    assert_small_png(path)
    assert figure.get_suptitle() == "CURVES OK"
    titles = [ax.get_title() for ax in figure.axes]
    assert titles == ["total loss", "masked-LM accuracy (generator)", "discriminator accuracy",
                      "discriminator AUC"]  # fmt: skip
    ax = figure.axes[0]
    assert ax.get_xlabel() == "step"
    assert len(drawn_lines(ax, "original, one line per seed")) == 1  # one label, two lines
    assert len([line for line in ax.get_lines() if line.get_color() == plots.ORIGINAL]) == 2
    # The project's mean leaves the band at step 200 only (2.0 against 1.0 to 1.2).
    (outside,) = drawn_lines(ax, "mean outside the band")
    assert list(outside.get_xdata()) == [200] and list(outside.get_ydata()) == [2.0]
    (mutated,) = drawn_lines(ax, "under a bug, one line per seed")
    assert list(mutated.get_ydata()) == [5.0, 4.0, 3.0]


def test_per_seed_accuracy(tmp_path):
    results = {0: {"random": 0.5, "masked_lm": 0.9, "electra": 0.8},
               1: {"random": 0.4, "masked_lm": 1.0, "electra": 0.9}}  # fmt: skip
    columns = [("random", "random init"), ("masked_lm", "masked LM"), ("electra", "ELECTRA")]
    path = str(tmp_path / "learning.png")
    figure = plots.per_seed_accuracy(path, results, columns, 0.5, "Learning test")
    assert_small_png(path)
    (ax,) = figure.axes
    assert ax.get_title() == "Learning test" and ax.get_ylabel() == "held-out accuracy"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["random init", "masked LM", "ELECTRA"]
    (seed1,) = drawn_lines(ax, "seed 1")
    assert list(seed1.get_ydata()) == [0.4, 1.0, 0.9]
    (chance,) = drawn_lines(ax, "chance (0.5)")
    assert list(chance.get_ydata()) == [0.5, 0.5]


def test_speed_bars(tmp_path):
    panels = {"seq 128": [("default", 500.0, "electra-tf"), ("mg-fp32", 400.0, "peers")],
              "seq 512": [("default", 125.0, "electra-tf")]}  # fmt: skip
    path = str(tmp_path / "bars.png")
    figure = plots.speed_bars(path, panels, "tokens/s", HEADER)
    assert_small_png(path)
    assert figure.get_suptitle() == plots._wrapped(HEADER)
    assert [ax.get_title() for ax in figure.axes] == ["seq 128", "seq 512"]
    ax = figure.axes[0]
    assert ax.get_xlabel() == "tokens/s"
    # The table's first row on top: barh draws bottom-up.
    assert [t.get_text() for t in ax.get_yticklabels()] == ["mg-fp32", "default"]
    assert [bar.get_width() for bar in ax.patches] == [400.0, 500.0]


def test_cost_vs_length(tmp_path):
    panels = [
        ("training", "µs per token", {"electra-tf": {128: 2.0, 512: 3.0}, "MG": {128: 2.5}}),
        ("serving", "p50 ms", {"electra-tf": {128: 10.0, 512: 40.0}, "MG": {128: None}}),
    ]
    path = str(tmp_path / "cost.png")
    figure = plots.cost_vs_length(path, panels, HEADER)
    assert_small_png(path)
    assert [ax.get_title() for ax in figure.axes] == ["training", "serving"]
    assert [ax.get_xlabel() for ax in figure.axes] == ["sequence length"] * 2
    assert [ax.get_ylabel() for ax in figure.axes] == ["µs per token", "p50 ms"]
    (ours,) = drawn_lines(figure.axes[0], "electra-tf")
    assert list(ours.get_xdata()) == [128, 512] and list(ours.get_ydata()) == [2.0, 3.0]
    (peer,) = drawn_lines(figure.axes[1], "MG")
    assert list(peer.get_xdata()) == []  # a length not measured is left out, not drawn as 0
    # A system keeps its colour across panels.
    assert peer.get_color() == drawn_lines(figure.axes[0], "MG")[0].get_color()


# ---------------------------------------------------------------------------- the commands
def test_a_command_draws_at_png_else_beside_its_json():
    assert plots.png_path("p.png", "out/r.json") == "p.png"
    assert plots.png_path(None, "out/r.json") == "out/r.png"
    assert plots.png_path(None, None, "earlier.json") == "earlier.png"
    assert plots.png_path(None, None) is None


def train_records():
    record = {"batch": 32, "peak_rss_mib": 100.0, "precision": "float32", "jit_compile": False}
    speeds = {"default": 500.0, "mg-fp32": 400.0, "hf-fp32": 250.0}
    return [
        {**record, "config": name, "seq": seq, "round": 0, "tokens_per_s": tokens * 128 / seq}
        for seq in (128, 512)
        for name, tokens in speeds.items()
    ]


def train_rows():
    names = ["default", "mg-fp32", "hf-fp32"]
    tasks = dict.fromkeys(names, "pretrain")
    return train_table.summarise(train_records(), names, tasks, lambda task, seq: 1e6, None)


def test_bench_train_draws_its_rows(tmp_path):
    path = str(tmp_path / "bench.png")
    bench_train.draw(path, train_rows(), HEADER)
    assert_small_png(path)


def test_bench_serve_draws_its_summary(tmp_path):
    results = {"electra-tf": {"encode_ids": {1: [0.010] * 3, 32: [0.2] * 3}},
               "HF PyTorch": {"encode_ids": {1: [0.020] * 3}}}  # fmt: skip
    summary = {v: {s: {b: bench_serve.stats(t, b) for b, t in by_batch.items()}
                   for s, by_batch in by_sig.items()} for v, by_sig in results.items()}  # fmt: skip
    path = str(tmp_path / "serve.png")
    bench_serve.draw(path, summary, HEADER, 128)
    assert_small_png(path)


def test_cost_curve_draws_its_rows(tmp_path):
    serving = {128: {"electra-tf": {1: 10.0, 32: 200.0}, "HF PyTorch": {1: 20.0, 32: 500.0}}}
    rows = cost_curve.curve_rows(train_rows(), serving, {}, [128, 512])
    path = str(tmp_path / "cost.png")
    cost_curve.draw(path, rows, train_rows(), HEADER)
    assert_small_png(path)


def test_the_figures_the_commands_draw(monkeypatch, tmp_path):
    """What each command's `draw` hands the plotting function: the same rows as its table."""
    calls = {}
    for name in ("speed_bars", "cost_vs_length"):
        monkeypatch.setattr(plots, name, lambda *a, _n=name: calls.setdefault(_n, a))
    bench_train.draw("x.png", train_rows(), HEADER)
    _, panels, label, title = calls["speed_bars"]
    assert title == HEADER and label.startswith("tokens/s")
    assert panels["sequence length 512, batch 32"] == [
        ("default", 125.0, "electra-tf"), ("mg-fp32", 100.0, "peers"), ("hf-fp32", 62.5, "peers")
    ]  # fmt: skip
    serving = {128: {"electra-tf": {1: 10.0, 32: 200.0}, "HF PyTorch": {1: 20.0}}}
    cost_curve.draw("x.png", cost_curve.curve_rows(train_rows(), serving, {}, [128, 512]),
                    train_rows(), HEADER)  # fmt: skip
    _, panels, _ = calls["cost_vs_length"]
    assert panels[0][2]["Model Garden"] == {128: 1e6 / 400.0, 512: 1e6 / 100.0}
    assert panels[2][0] == "serving `encode_ids`, batch 32"
    assert panels[2][2] == {
        "electra-tf": {128: 200.0, 512: None},
        "HF PyTorch": {128: None, 512: None},
    }


def test_the_cost_curves_serving_runs_draw_nothing(monkeypatch, tmp_path):
    """bench-curve runs bench_serve once per length for its p50s: no picture of each."""
    seen = []
    monkeypatch.setattr(cost_curve, "run_module", lambda *a: seen.append(a) or (False, "stop"))
    args = cost_curve.parse_args([])
    assert cost_curve.serve_at(128, args, str(tmp_path)) == {}
    ((module, arguments, _),) = seen
    assert module == "bench_serve" and "--no-png" in arguments
    assert bench_serve.parse_args(arguments).no_png


# ---------------------------------------------------------------------------- lazy import
def test_training_and_serving_do_not_load_matplotlib():
    """The entry points of training, fine-tuning, export and serving, and the plotting module
    itself, imported in a fresh process after TensorFlow starts as the commands start it
    (`tf_startup`, which sets TF_USE_LEGACY_KERAS=1: TensorFlow 2.20 otherwise imports Keras 3
    for `tf.keras`, whose `keras.src.visualization` imports matplotlib.pyplot whenever it is
    installed): no matplotlib module loaded."""
    code = (
        "import sys\n"
        "from electra_tf.runtime.tf_startup import start_tensorflow\n"
        "start_tensorflow()\n"
        "import electra_tf.cli.pretrain, electra_tf.cli.finetune, electra_tf.cli.export\n"
        "import electra_tf.runs.pretraining, electra_tf.runs.finetuning\n"
        "import electra_tf.serving.loading, electra_tf.serving.saved_model\n"
        "import electra_tf.evaluation.plots\n"
        "assert 'tensorflow' in sys.modules\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    env.pop("TF_USE_LEGACY_KERAS", None)  # the commands' own setting, not the test's
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
