"""bench/hybrid_init.py: which discriminator variables a hybrid checkpoint reinitialises."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import hybrid_init  # noqa: E402

NAMES = [
    "electra/embeddings/word_embeddings",
    "electra/embeddings/position_embeddings",
    "electra/embeddings/LayerNorm/gamma",
    "electra/encoder/layer_0/attention/self/query/kernel",
    "electra/encoder/layer_0/attention/self/key/kernel",
    "electra/encoder/layer_0/output/LayerNorm/gamma",
    "generator/embeddings_project/kernel",
    "generator/encoder/layer_0/attention/self/query/kernel",
    "discriminator_predictions/dense/kernel",
]


def test_fresh_selects_matching_discriminator_variables_only():
    chosen = hybrid_init.names_to_reinitialise(NAMES, ["self/query", "self/key"], None)
    assert chosen == NAMES[3:5]  # the generator's query kernel stays


def test_keep_reinitialises_every_other_discriminator_variable():
    chosen = hybrid_init.names_to_reinitialise(NAMES, None, ["word_embeddings"])
    assert chosen == NAMES[1:6]


@pytest.mark.parametrize("fresh, keep", [(None, None), (["a"], ["b"])])
def test_exactly_one_selector(fresh, keep):
    with pytest.raises(ValueError, match="exactly one"):
        hybrid_init.names_to_reinitialise(NAMES, fresh, keep)
