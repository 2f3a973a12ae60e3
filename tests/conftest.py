"""Test set-up: CPU only, quiet TensorFlow logs, fixed seeds per test."""

import os
import random

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # as the commands start (tf_startup.py)

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
        "precision of the same code path, a bench tool through its real workers); runs with "
        "ELECTRA_SLOW_TESTS=1",
    )


# The modules that take longest (seconds on 2 cores, a fresh clone), longest first. `make test`
# hands whole modules to its 2 workers in collection order (`-n 2 --dist loadfile
# --no-loadscope-reorder`; xdist would otherwise order them by their number of tests, which put
# the 6-test, 220 s multi-worker module last): long ones first, so that the run does not end
# with one worker alone on a long module.
LONGEST_FIRST = (
    "test_distribute_multiworker.py",  # ~220: five pretrain commands, seven processes
    "test_reliability.py",  # ~110
    "test_resume.py",  # ~100
    "test_accumulation.py",
    "test_serving_graph.py",
    "test_export_precision.py",
    "test_learning_test.py",
    "test_export_electric.py",
    "test_export_models.py",
    "test_export.py",
    "test_api.py",
    "test_keras_models.py",  # ~90: two fits on raw text, three exports
    "test_electric_training.py",
)


def _longest_first(item) -> int:
    name = os.path.basename(str(item.fspath))
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_longest_first)  # stable: the rest keep their order
    # The default run stays well under CI's time limit on 2 cores; the slow variants run on
    # demand (ELECTRA_SLOW_TESTS=1 make test).
    if os.environ.get("ELECTRA_SLOW_TESTS"):
        return
    skip = pytest.mark.skip(reason="slow variant: set ELECTRA_SLOW_TESTS=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
