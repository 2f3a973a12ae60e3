"""tools/original_parity's own logic: the trajectory check's tolerance band and verdict, its
batch stream, argument errors and the injected bugs, with no copy of the original needed; and
(only with ELECTRA_ORIGINAL_MIRROR set) a short real trajectory against the original's code.

Run from the repository root (`make test` / `python -m pytest`), where `tools` is importable.
"""

import os
import subprocess
import sys
import types

import numpy as np
import pytest

from tools.original_parity import mutations, runtime, trajectory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _curves(steps, project_shift=0.0, weight_jump_at=None):
    """Fabricated per-step curves: the perturbed original drifts 1e-6 per step from the
    original; the project sits `project_shift` away; optionally its weights jump at a step."""
    curves = {}
    for i, name in enumerate(trajectory.LOSSES):
        base = [10.0 / (i + 1) - 0.001 * t for t in range(steps)]
        curves[f"original_{name}"] = base
        curves[f"reference_{name}"] = [x + 1e-6 * (t + 1) for t, x in enumerate(base)]
        curves[f"project_{name}"] = [x + project_shift for x in base]
    curves["reference_weight_distance"] = [2e-7 * (t + 1) for t in range(steps)]
    curves["weight_distance"] = [1e-7 * (t + 1) for t in range(steps)]
    if weight_jump_at is not None:
        for t in range(weight_jump_at, steps):
            curves["weight_distance"][t] = 1e-2
    return curves


def test_running_max_and_band():
    assert trajectory.running_max([1.0, 3.0, 2.0, 0.0, 4.0]) == [1.0, 3.0, 3.0, 3.0, 4.0]
    # The band never shrinks when the reference drift dips, and adds the floor per step.
    band = trajectory.tolerance_band([1e-6, 3e-6, 2e-6], 10.0, [1e-7, 1e-7, 2e-7])
    assert band == pytest.approx([1e-5 + 1e-7, 3e-5 + 1e-7, 3e-5 + 2e-7])
    assert trajectory.tolerance_band([0.0, 0.0], 10.0, 1e-6) == [1e-6, 1e-6]


def test_verdict_ok_within_the_band():
    result = trajectory.evaluate(_curves(50, project_shift=5e-6), 10.0, 1e-5, 1e-6)
    assert result["failures"] == []
    assert result["max_loss_deviation"] == pytest.approx(5e-6, rel=1e-3)
    line = trajectory.verdict_line(result, 10.0)
    assert line.startswith(
        "PARITY OK (max per-step loss deviation 5.000e-06, max weight distance 5.000e-06"
    )
    assert "tolerance 10 x running max" in line


def test_verdict_fails_on_a_fabricated_divergence(capsys):
    result = trajectory.evaluate(_curves(50, weight_jump_at=30), 10.0, 1e-5, 1e-6)
    assert len(result["failures"]) == 1
    assert "weights: 20 step(s) outside the band, first after step 30" in result["failures"][0]
    assert trajectory.report(result, 10.0) == 1
    out = capsys.readouterr().out
    assert "PARITY FAILED (1 quantity(ies) outside the band" in out
    # A loss that leaves the band is named with its first step.
    curves = _curves(50)
    curves["project_generator"][12] += 1.0
    result = trajectory.evaluate(curves, 10.0, 1e-5, 1e-6)
    assert result["failures"][0].startswith(
        "generator loss: 1 step(s) outside the band, first at step 12"
    )
    assert trajectory.report(result, 10.0) == 1


def test_a_larger_factor_widens_the_band():
    curves = _curves(20, project_shift=5e-5)
    for name in trajectory.LOSSES:  # the perturbed original 1e-5 away at every step
        curves[f"reference_{name}"] = [x + 1e-5 for x in curves[f"original_{name}"]]
    assert trajectory.evaluate(curves, 1.0, 0.0, 1e-6)["failures"]
    assert not trajectory.evaluate(curves, 10.0, 0.0, 1e-6)["failures"]


def test_batch_stream_is_a_fixed_function_of_the_step():
    a, b = trajectory.batch_at(7, np), trajectory.batch_at(7, np)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["input_ids"], trajectory.batch_at(8, np)["input_ids"])
    ids, mask, seg = a["input_ids"], a["input_mask"], a["segment_ids"]
    assert ids.shape == (runtime.BATCH, runtime.SEQ) and mask[0].all()  # row 0 has no padding
    for row in range(runtime.BATCH):
        n = int(mask[row].sum())
        assert ids[row, 0] == runtime.CLS and ids[row, n - 1] == runtime.SEP
        assert (ids[row, n:] == 0).all() and (seg[row, n:] == 0).all()
        assert (ids[row, 1 : n - 1] != runtime.MASK).all()
        assert seg[row, n - 1] == 1 and seg[row, 0] == 0


def test_hparams_schedule_spans_the_run():
    hp = trajectory.hparams(1000)
    assert hp["num_train_steps"] == 1000 and hp["num_warmup_steps"] == 100
    assert hp["model_hparam_overrides"]["hidden_dropout_prob"] == 0.0
    assert hp["model_hparam_overrides"]["attention_probs_dropout_prob"] == 0.0
    assert trajectory.hparams(10, warmup=3)["num_warmup_steps"] == 3
    # The base dict is not modified.
    assert runtime.BASE_HPARAMS["num_train_steps"] == runtime.NUM_TRAIN_STEPS


@pytest.mark.parametrize("mirror", ["", "/nonexistent/electra.git"])
def test_missing_mirror_says_how_to_get_one(mirror, monkeypatch):
    monkeypatch.delenv("ELECTRA_ORIGINAL_MIRROR", raising=False)
    with pytest.raises(SystemExit) as e:
        trajectory.main(["--mirror", mirror, "--steps", "4"])
    message = str(e.value)
    assert "git clone --mirror https://github.com/google-research/electra" in message
    assert "ELECTRA_ORIGINAL_MIRROR" in message
    if mirror:
        assert mirror in message


def test_a_work_tree_clone_is_accepted(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/master\n")
    assert runtime.resolve_mirror(str(tmp_path)) == str(tmp_path / ".git")


def test_argument_errors(capsys):
    with pytest.raises(SystemExit) as e:
        trajectory.main(["--mirror", ROOT, "--steps", "1"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        trajectory.main(["--mirror", ROOT, "--mutation", "no_such_bug"])
    assert e.value.code == 2
    assert "no_such_bug" in capsys.readouterr().err


def _tool_modules():
    folder = os.path.join(ROOT, "tools", "original_parity")
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".py"))


def test_no_tool_uses_another_modules_private_names():
    """The tools share their runtime through public names only: no `from tools... import _x`
    and no `module._x` on an imported tools module."""
    import ast

    offences = []
    for path in _tool_modules():
        tree = ast.parse(open(path, encoding="utf-8").read())
        tool_modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tools"):
                for alias in node.names:
                    if alias.name.startswith("_"):
                        offences.append(f"{path}:{node.lineno} imports {alias.name}")
                    tool_modules.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in tool_modules
                and node.attr.startswith("_")
            ):
                offences.append(f"{path}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert offences == []


def test_the_project_pieces_come_from_the_training_run(monkeypatch):
    """A missing training-run module stops the tools (no fallback to another optimizer or a
    plain checkpoint that the training loop does not write)."""
    from tools.original_parity import project_side

    monkeypatch.setitem(sys.modules, "electra_tf.runs.pretraining_model", None)
    with pytest.raises(ImportError):
        project_side.build_optimizer(None, None)
    monkeypatch.setitem(sys.modules, "electra_tf.checkpoints.training_state", None)
    side = object.__new__(project_side.ProjectSide)
    side.model = side.tf = None
    side.optimizer = types.SimpleNamespace(iterations=None)
    with pytest.raises(ImportError):
        side.checkpoints(ROOT)


def test_an_unknown_mutation_is_an_error():
    with pytest.raises(ValueError, match="no_such_bug"):
        mutations.apply("no_such_bug")


def test_every_trajectory_mutation_has_an_expected_one_step_outcome():
    assert set(mutations.EXPECTED_ONE_STEP) == set(mutations.TRAJECTORY_MUTATIONS)
    assert not set(mutations.MUTATIONS) & set(mutations.TRAJECTORY_MUTATIONS)
    assert mutations.ALL == {**mutations.MUTATIONS, **mutations.TRAJECTORY_MUTATIONS}


def test_decay_from_warmup_end_leaves_the_warmup_alone(monkeypatch):
    from electra_tf import optimization

    monkeypatch.setattr(
        optimization.ElectraSchedule, "__call__", optimization.ElectraSchedule.__call__
    )
    schedule = optimization.ElectraSchedule(5e-4, 100, warmup_steps=10)
    before = [float(schedule(s)) for s in range(0, 100, 3)]
    mutations.apply("decay_from_warmup_end")
    after = [float(schedule(s)) for s in range(0, 100, 3)]
    steps = list(range(0, 100, 3))
    for s, b, a in zip(steps, before, after, strict=True):
        if s < 10:  # the step the one-step check compares (4) is inside the warm-up
            assert a == b
        else:
            assert a > b
    # After warm-up: peak x (1 - (s - w) / (T - w)).
    assert float(schedule(55)) == pytest.approx(5e-4 * (1 - 45 / 90), rel=1e-6)


def test_adam_beta2_mutation(monkeypatch):
    from electra_tf import optimization

    monkeypatch.setattr(
        optimization.AdamWeightDecay, "__init__", optimization.AdamWeightDecay.__init__
    )
    mutations.apply("adam_beta2")
    assert optimization.AdamWeightDecay(learning_rate=1e-3).beta_2 == 0.9991


@pytest.mark.skipif(
    not os.environ.get("ELECTRA_ORIGINAL_MIRROR"),
    reason="needs the original's code: set ELECTRA_ORIGINAL_MIRROR to a git copy of "
    "google-research/electra (git clone --mirror https://github.com/google-research/electra)",
)
def test_real_trajectory_few_steps(tmp_path):
    out = tmp_path / "trajectory.json"
    r = subprocess.run(
        [sys.executable, "-m", "tools.original_parity.trajectory", "--steps", "6", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "PARITY OK (max per-step loss deviation" in r.stdout
    assert "bit-identical" in r.stdout  # the resume leg ran in a new process
    import json

    data = json.loads(out.read_text())
    assert len(data["curves"]["project_total"]) == 6 and data["failures"] == []
