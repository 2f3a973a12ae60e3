"""The ONE description of an ELECTRA checkpoint's parts, under the original's TF1 names
(docs/faithfulness.md, section 9): scopes, the embedding block and its sharing, a layer's
paths, the heads, and the layout of the per-head attention tensors.

Every model's `variable_map()` spells its keys with these names, the original's checkpoints
are recognised by them (`checkpoints.original.is_model_variable`), and every other format's
table is keyed by them (`encoder_table`): a format module lists only its own paths, key by key.
Pure Python and NumPy (no TensorFlow), so that every layer can import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

# ------------------------------------------------------------------------------- scopes
DISCRIMINATOR = "electra"  # the discriminator's encoder, and the shared embedding block
GENERATOR = "generator"  # a separate (masked-LM) generator's encoder
TWO_TOWER = ("generator_ltr", "generator_rtl")  # Electric's two-tower cloze generator
ENCODER_SCOPES = (DISCRIMINATOR, GENERATOR, *TWO_TOWER)
DISCRIMINATOR_HEAD = "discriminator_predictions"
GENERATOR_HEAD = "generator_predictions"
CLOZE_HEAD = "cloze_predictions"
HEAD_SCOPES = (f"{DISCRIMINATOR_HEAD}/", f"{GENERATOR_HEAD}/")
# Variables that belong to the generator alone (the shared embeddings are the discriminator's).
GENERATOR_SCOPES = tuple(f"{s}/" for s in (GENERATOR, GENERATOR_HEAD, *TWO_TOWER, CLOZE_HEAD))

# ------------------------------------------------------------------------------- embeddings
WORD_EMBEDDINGS = "word_embeddings"
POSITION_EMBEDDINGS = "position_embeddings"
TOKEN_TYPE_EMBEDDINGS = "token_type_embeddings"
EMBEDDING_TABLES = (WORD_EMBEDDINGS, POSITION_EMBEDDINGS, TOKEN_TYPE_EMBEDDINGS)
EMBEDDINGS = "embeddings"  # `<scope>/embeddings/...`
EMBEDDINGS_NORM = f"{EMBEDDINGS}/LayerNorm"
# The embedding block: shared by both networks unless `untied_generator_embeddings`.
EMBEDDING_KEYS = (
    *(f"{EMBEDDINGS}/{table}" for table in EMBEDDING_TABLES),
    f"{EMBEDDINGS_NORM}/gamma",
    f"{EMBEDDINGS_NORM}/beta",
)
PROJECTION = "embeddings_project"  # E -> H, only where embedding_size != hidden_size
PROJECTION_KEYS = (f"{PROJECTION}/kernel", f"{PROJECTION}/bias")

# ------------------------------------------------------------------------------- one layer
QUERY, KEY, VALUE = "attention/self/query", "attention/self/key", "attention/self/value"
ATTENTION_OUTPUT = "attention/output/dense"
ATTENTION_NORM = "attention/output/LayerNorm"
INTERMEDIATE = "intermediate/dense"
OUTPUT = "output/dense"
OUTPUT_NORM = "output/LayerNorm"
_DENSES = (QUERY, KEY, VALUE, ATTENTION_OUTPUT)
LAYER_KEYS = (  # below `<scope>/encoder/layer_i/`
    *(f"{path}/{leaf}" for path in _DENSES for leaf in ("kernel", "bias")),
    f"{ATTENTION_NORM}/gamma",
    f"{ATTENTION_NORM}/beta",
    *(f"{path}/{leaf}" for path in (INTERMEDIATE, OUTPUT) for leaf in ("kernel", "bias")),
    f"{OUTPUT_NORM}/gamma",
    f"{OUTPUT_NORM}/beta",
)

# ------------------------------------------------------------------------------- heads
DISCRIMINATOR_HEAD_KEYS = tuple(
    f"{DISCRIMINATOR_HEAD}/{dense}/{leaf}"
    for dense in ("dense", "dense_1")
    for leaf in ("kernel", "bias")
)
GENERATOR_OUTPUT_BIAS = f"{GENERATOR_HEAD}/output_bias"
GENERATOR_HEAD_KEYS = (
    f"{GENERATOR_HEAD}/dense/kernel",
    f"{GENERATOR_HEAD}/dense/bias",
    f"{GENERATOR_HEAD}/LayerNorm/gamma",
    f"{GENERATOR_HEAD}/LayerNorm/beta",
    GENERATOR_OUTPUT_BIAS,
)


def embeddings_prefix(scope: str) -> str:
    return f"{scope}/{EMBEDDINGS}"


def layer_prefix(scope: str, index: int) -> str:
    """`electra/encoder/layer_3`: the original's path of one transformer block."""
    return f"{scope}/encoder/layer_{index}"


def is_encoder_variable(name: str) -> bool:
    """A transformer block's variable of the discriminator (an encoder's, not the generator's)."""
    return name.startswith(f"{DISCRIMINATOR}/encoder/")


# ------------------------------------------------------------------------------- sharing
def own_generator_embeddings(names) -> bool:
    """Whether weights keyed by original name hold the generator's own embedding block
    (`untied_generator_embeddings`); without it, a generator reads `electra/embeddings/*`."""
    return f"{GENERATOR}/{EMBEDDINGS}/{WORD_EMBEDDINGS}" in names


def embeddings_shared(disc: Mapping[str, np.ndarray], gen: Mapping[str, np.ndarray]) -> bool:
    """THE rule for a format that stores a generator's embedding block beside the
    discriminator's (HF, Model Garden, KerasHub): it is the shared block when every tensor of
    the discriminator's block (`disc`, by any key) is in `gen` under that key, equal bit for
    bit; otherwise the generator has its own tables (`untied_generator_embeddings`)."""
    return all(key in gen and np.array_equal(disc[key], gen[key]) for key in disc)


# ------------------------------------------------------------------------------- layouts
# How a format lays out a tensor: as the original, [H, H] <-> [H, n, d] (or [H] <-> [n, d] for a
# bias), [H, H] <-> [n, d, H] (n heads of width d = H / n).
PLAIN, HEADS, HEADS_OUT = "plain", "heads", "heads-out"


def split_heads(value: np.ndarray, layout: str, num_heads: int) -> np.ndarray:
    """An original-layout tensor in a per-head `layout`."""
    if layout == HEADS:  # [H, H] -> [H, n, d]; [H] -> [n, d]
        return value.reshape(*value.shape[:-1], num_heads, value.shape[-1] // num_heads)
    if layout == HEADS_OUT:  # [H, H] -> [n, d, H]
        return value.reshape(num_heads, value.shape[0] // num_heads, value.shape[1])
    return value


def merge_heads(value: np.ndarray, layout: str) -> np.ndarray:
    """A per-head `layout` tensor in the original layout (the inverse of `split_heads`)."""
    if layout == HEADS:  # [H, n, d] -> [H, H]; [n, d] -> [H]
        return value.reshape(*value.shape[:-2], value.shape[-2] * value.shape[-1])
    if layout == HEADS_OUT:  # [n, d, H] -> [H, H]
        return value.reshape(value.shape[0] * value.shape[1], value.shape[2])
    return value


# ------------------------------------------------------------------------------- tables
def format_paths(embeddings, projection, layer) -> dict[str, str | tuple[str, str]]:
    """A format's paths keyed by EMBEDDING_KEYS, PROJECTION_KEYS and LAYER_KEYS, each given
    in the order of those keys (a path, or (path, layout))."""
    keyed: dict[str, str | tuple[str, str]] = {}
    for keys, paths in ((EMBEDDING_KEYS, embeddings), (PROJECTION_KEYS, projection)) + (
        (LAYER_KEYS, layer),
    ):
        keyed.update(zip(keys, paths, strict=True))
    return keyed


def encoder_table(
    scope: str,
    num_layers: int,
    projection: bool,
    paths: Mapping[str, str | tuple[str, str]],
    layer_root: Callable[[int], str],
    root: str = "",
) -> list[tuple[str, str, str]]:
    """(original name, format path, layout) for one encoder. `paths` maps each key of
    EMBEDDING_KEYS, PROJECTION_KEYS and LAYER_KEYS to the format's path (and a layout, PLAIN
    if none) below `root` (layer keys below `layer_root(i)`)."""

    def row(name: str, key: str, base: str) -> tuple[str, str, str]:
        path, layout = paths[key] if isinstance(paths[key], tuple) else (paths[key], PLAIN)
        return name, f"{base}{path}", layout

    keys = EMBEDDING_KEYS + (PROJECTION_KEYS if projection else ())
    rows = [row(f"{scope}/{key}", key, root) for key in keys]
    for i in range(num_layers):
        base = f"{root}{layer_root(i)}/"
        rows += [row(f"{layer_prefix(scope, i)}/{key}", key, base) for key in LAYER_KEYS]
    return rows


def separate_networks(config) -> list[tuple[str, object]]:
    """(scope, ModelConfig) of each encoder a format stores apart: the discriminator, and the
    generator when it is a network of its own."""
    found = [(DISCRIMINATOR, config.discriminator_config())]
    if config.has_discriminator and config.untied_generator:
        found.append((GENERATOR, config.generator_config()))
    return found


def placed_at(name: str, scope: str, row_name: str, config) -> bool:
    """Whether the tensor `name` goes to `row_name` of the encoder at `scope`: its own place,
    or a generator's copy of the shared embedding block."""
    if row_name == name:
        return True
    return (
        scope == GENERATOR
        and not config.untied_generator_embeddings
        and name.startswith(f"{DISCRIMINATOR}/{EMBEDDINGS}/")
        and row_name == name.replace(f"{DISCRIMINATOR}/", f"{GENERATOR}/", 1)
    )


def split_shape(shape, layout: str, num_heads: int) -> tuple[int, ...]:
    """The shape of an original-layout tensor of `shape` in `layout`."""
    return split_heads(np.empty(tuple(shape), np.int8), layout, num_heads).shape
