"""`python -m electra_tf.pretrain` end to end on a tiny corpus (in-process `main`)."""

import glob
import json
import os

import pytest
import tensorflow as tf
from helpers_pretrain_cli import hparams, write_corpus

from electra_tf.cli import pretrain
from electra_tf.runtime import device_defaults


def _argv(data_dir, model_name, **overrides):
    argv = ["--data-dir", str(data_dir), "--model-name", model_name, "--preset", "tiny"]
    return [*argv, "--hparams", hparams(**overrides)]


def _main(data_dir, model_name, **overrides):
    return pretrain.main(_argv(data_dir, model_name, **overrides))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run of 4 steps, then the same command with num_train_steps 6 (a resume); each with
    the number of times it asked the hardware (`device_defaults.accelerator`, the probe's
    device query)."""
    data = write_corpus(tmp_path_factory.mktemp("cli") / "data")
    outputs = []
    query = device_defaults.accelerator
    for steps in (4, 6):
        probes = []

        def counted(probes=probes):
            probes.append(1)
            return query()

        with _capture() as out, pytest.MonkeyPatch.context() as patch:
            patch.setattr(device_defaults, "accelerator", counted)
            code = _main(data, "m", num_train_steps=steps)
        outputs.append((code, out.getvalue(), len(probes)))
    return data, outputs


class _capture:
    """stdout into a StringIO (module fixtures cannot use capsys)."""

    def __enter__(self):
        import contextlib
        import io

        self.buffer = io.StringIO()
        self._redirect = contextlib.redirect_stdout(self.buffer)
        self._redirect.__enter__()
        return self.buffer

    def __exit__(self, *exc):
        self._redirect.__exit__(*exc)


def test_the_run_probes_the_machine_once_and_resolves_auto_for_it(trained):
    data, outputs = trained
    assert [probes for _, _, probes in outputs] == [1, 1]
    # "auto" settings are this machine's answer, not the portable one's.
    saved = json.loads((data / "models" / "m" / "config.json").read_text())
    args = pretrain.parse_args(_argv(data, "m", num_train_steps=4))
    here = pretrain.build_config(args, device_defaults.probe_machine())
    for key in ("parallel_micro_batches", "intra_op_threads", "inter_op_threads"):
        assert saved[key] == getattr(here, key), key


def test_first_run_writes_config_checkpoints_and_tensorboard(trained):
    data, [(code, out, _), _] = trained
    assert code == 0
    model_dir = data / "models" / "m"
    saved = json.loads((model_dir / "config.json").read_text())
    assert saved["vocab_size"] == 64 and saved["max_seq_length"] == 16
    assert "vocab_size: using 64" in out
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-6")
    assert os.path.exists(str(model_dir / "ckpt-2.index"))
    # The CPU announcement names the step's layout ("auto" resolves it) and the thread pools.
    announce = [x for x in out.splitlines() if x.startswith("Training steps")][0]
    split = saved["parallel_micro_batches"] > 1
    assert (f"{saved['parallel_micro_batches']} micro-batches side by side" in announce) == split
    assert "TensorFlow threads intra-op" in announce, announce
    # The console line: step/total, the metrics, throughput in real tokens, elapsed, ETA.
    line = [x for x in out.splitlines() if x.startswith("step 4/4")][0]
    for part in ("loss ", "masked_lm_accuracy ", "disc_auc ", "steps/s", "tok/s", "ETA"):
        assert part in line, line
    tags = set()
    for path in glob.glob(str(model_dir / "tensorboard" / "train" / "events*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(v.tag for v in event.summary.value)
    for tag in ("loss", "masked_lm_accuracy", "learning_rate", "steps_per_sec", "tokens_per_sec"):
        assert tag in tags, sorted(tags)


def test_second_run_resumes_instead_of_starting_over(trained):
    _, [_, (code, out, _)] = trained
    assert code == 0
    assert "ckpt-4 (step 4)" in out
    assert "step 2/6" not in out and "step 6/6" in out


def test_eval_writes_metrics(trained):
    data, _ = trained
    with _capture() as out:
        code = _main(data, "m", num_train_steps=6, do_train=False, do_eval=True)
    assert code == 0
    results = json.loads((data / "models" / "m" / "results" / "eval_step6.json").read_text())
    assert results["global_step"] == 6 and results["eval_batches"] == 3
    for key in ("masked_lm_accuracy", "disc_auc", "disc_accuracy", "loss"):
        assert 0 <= results[key] < 1e4, (key, results)
    assert "eval step 6" in out.getvalue()


def test_every_checkpoint_is_scored_on_the_same_corruption(tmp_path):
    # At learning rate 0 the checkpoints differ only in their step and sampling-RNG state, so
    # evaluation on the same masks and Gumbel noise must give identical metrics.
    data = write_corpus(tmp_path / "data", num_records=16)
    frozen = {"num_train_steps": 4, "save_checkpoints_steps": 2, "learning_rate": 0.0}
    with _capture():
        assert _main(data, "frozen", **frozen) == 0
        argv = ["--data-dir", str(data), "--model-name", "frozen", "--preset", "tiny"]
        evaluate = hparams(**frozen, do_train=False, do_eval=True)
        assert pretrain.main([*argv, "--all-checkpoints", "--hparams", evaluate]) == 0
    results = data / "models" / "frozen" / "results"
    at_2, at_4 = (json.loads((results / f"eval_step{s}.json").read_text()) for s in (2, 4))
    assert at_2["global_step"] == 2 and at_4["global_step"] == 4
    for key in ("masked_lm_accuracy", "masked_lm_loss", "disc_auc", "disc_loss", "loss"):
        assert at_2[key] == at_4[key], key


def test_refuses_to_resume_a_differently_shaped_model(trained, capsys):
    data, _ = trained
    overrides = {"hidden_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2}
    code = _main(data, "m", num_train_steps=8, model_hparam_overrides=overrides)
    assert code == 2
    err = capsys.readouterr().err
    assert "refusing to resume" in err and "model_hparam_overrides" in err


def test_unknown_hparam_names_the_closest_key(tmp_path, capsys):
    code = _main(tmp_path, "m", num_train_step=3)
    assert code == 2
    assert "did you mean 'num_train_steps'" in capsys.readouterr().err


def test_explicit_vocab_size_smaller_than_the_vocab_is_an_error(tmp_path, capsys):
    data = write_corpus(tmp_path / "data", num_records=4)
    assert _main(data, "m", vocab_size=10) == 2
    assert "smaller than the 64 entries" in capsys.readouterr().err
