"""Variables' values as a traced graph reads them: in their own dtype under a mixed policy
(`true_value`), and as constants or other tensors made once per graph (`graph_constant`,
`per_graph`), which the serving encoder's query groups share."""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np
import tensorflow as tf


def true_value(variable) -> tf.Tensor:
    """A variable's value in its own dtype: under a mixed policy, a layer's call reads its
    float32 variables cast to the compute dtype (Keras' AutoCastVariable); this reads them as
    stored, for the float32 arithmetic inside the training clusters."""
    inner = getattr(variable, "_variable", variable)  # an AutoCastVariable's own variable
    return tf.convert_to_tensor(inner)


# {graph being traced: {key: tensor}}: what the ops of one inference graph share, made once
# however many ops read it (the query groups of the serving encoder each read every weight).
_PER_GRAPH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def per_graph(key, make: Callable[[], tf.Tensor]) -> tf.Tensor:
    """`make()`, called once per graph being traced and `key` (a tuple of ids and names)."""
    cache = _PER_GRAPH.setdefault(tf.compat.v1.get_default_graph(), {})
    if key not in cache:
        cache[key] = make()
    return cache[key]


def graph_constant(*variables, axis: int = -1) -> tf.Tensor:
    """The variables' current values, joined along `axis` (one variable: its value), as a
    constant of the graph being traced (read eagerly), made once per graph."""

    def make():
        with tf.init_scope():
            values = [tf.convert_to_tensor(true_value(v)).numpy() for v in variables]
        return tf.constant(np.concatenate(values, axis=axis))

    return per_graph(("constant", *map(id, variables), axis), make)
