"""Weight formats are plugins: a toy format, defined in this module and registered with one
call, round-trips a tiny pretrainer (native -> toy -> native, bit-exact) through the CLI."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers_pretrainer import SPECIAL_IDS, tiny_config

from electra_tf import checkpoints
from electra_tf.checkpoints import format_registry
from electra_tf.checkpoints.weights import SourceWeights
from electra_tf.cli import convert
from electra_tf.config import save_config

TOY_FILE = "weights.toy.npz"


# ------------------------------------------------------------------------------- the toy format
def _detect(path: str, keys) -> bool:
    return os.path.isfile(os.path.join(path, TOY_FILE))


def _read_config(path: str):
    return checkpoints.read_config_file(os.path.join(path, checkpoints.CONFIG_FILE))


def _read(path: str, config=None) -> SourceWeights:
    with np.load(os.path.join(path, TOY_FILE)) as stored:
        weights = {name: stored[name] for name in stored.files}
    return SourceWeights(weights, "toy", path, config or _read_config(path))


def _write(weights, directory: str, config, global_step, vocab) -> None:
    np.savez(os.path.join(directory, TOY_FILE), **weights)
    save_config(config, os.path.join(directory, checkpoints.CONFIG_FILE))


FORMAT = format_registry.WeightFormat(
    name="toy",
    detect=_detect,
    detect_order=5,
    read_config=_read_config,
    read=_read,
    write=_write,
    rename=lambda name, shape, config, native_vars=None: [(f"toy:{name}", tuple(shape))],
)


@pytest.fixture
def toy_format():
    format_registry.register("toy", __name__, "a test's format: one .npz by original name")
    yield
    format_registry.unregister("toy")


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    from electra_tf.pretraining.pretrainer import ElectraPretrainer

    model = ElectraPretrainer(tiny_config(), **SPECIAL_IDS).build_variables()
    path = str(tmp_path_factory.mktemp("toy") / "native")
    checkpoints.save_weights(model, path, "native")
    return path


def test_a_registered_format_round_trips_a_model(toy_format, native, tmp_path, capsys):
    toy, back = str(tmp_path / "toy"), str(tmp_path / "back")
    assert convert.main(["--to", "toy", "--input", native, "--output", toy]) == 0
    assert checkpoints.detect_format(toy) == "toy"
    dry = ["--to", "native", "--input", toy, "--output", back, "--dry-run"]
    assert convert.main(dry) == 0
    printed = capsys.readouterr().out.splitlines()
    assert any(
        line.startswith(
            "toy:electra/encoder/layer_1/attention/output/dense/kernel [32, 32] -> model:"
        )
        for line in printed
    )
    assert convert.main(["--to", "native", "--input", toy, "--output", back]) == 0
    original, returned = checkpoints.read_weights(native), checkpoints.read_weights(back)
    assert returned.fmt == "native" and sorted(returned.weights) == sorted(original.weights)
    for name, value in original.weights.items():
        np.testing.assert_array_equal(returned.weights[name], value, err_msg=name)


def test_the_registry_is_the_one_list_of_formats():
    from electra_tf import config

    assert checkpoints.FORMATS == format_registry.names() == convert.FORMATS
    assert config.INIT_CHECKPOINT_FORMATS == ("auto", *format_registry.names())
    for name in format_registry.names():
        assert format_registry.get(name).name == name
    with pytest.raises(ValueError, match="already registered"):
        format_registry.register("hf", __name__, "a second hf")
