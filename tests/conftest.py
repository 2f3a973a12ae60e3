"""Test set-up: CPU only, quiet TensorFlow logs, fixed seeds per test."""

import os
import random

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    import tensorflow as tf

    random.seed(0)
    np.random.seed(0)
    tf.random.set_seed(0)
    yield


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: a longer variant of a check the default run already makes (another model or "
        "precision of the same code path); runs with ELECTRA_SLOW_TESTS=1",
    )


def pytest_collection_modifyitems(config, items):
    # The default run stays well under CI's time limit on 2 cores; the slow variants run on
    # demand (ELECTRA_SLOW_TESTS=1 make test).
    if os.environ.get("ELECTRA_SLOW_TESTS"):
        return
    skip = pytest.mark.skip(reason="slow variant: set ELECTRA_SLOW_TESTS=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
