"""The package's import layering: no import cycle between modules, and no import from a lower
layer to a higher one.

`LAYERS` is the one statement of the order, lowest first. A module belongs to the layer of the
longest prefix that names it. A stage's objectives, models and tasks sit below `checkpoints`
(which builds the pretrainer to read a native checkpoint); the runs (`electra_tf.runs`) sit
above it, since a run loads pre-trained weights in every format and saves its own.

Every `import` and `from ... import` counts, lazy ones inside functions included: an import
deferred to keep `import electra_tf` cheap is still a dependency, and a lazy import is how a
cycle hides. `importlib.import_module` with a string (`electra_tf.api`, which resolves the
public names on first use) is not an import statement and is not seen; `api` sits at the top.
"""

from __future__ import annotations

import ast
import os

import pytest

from electra_tf import MOVED_MODULES

PACKAGE = "electra_tf"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PACKAGE)
# The package, the benchmarks and the checking tools: no cycle among all three.
TREES = (PACKAGE, "bench", "tools")

# Lowest first. A module may import modules of its own layer or of the layers before it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "core",
        (
            "config",
            "runtime",
            "optimization",
            # The checkpoint's names and the format registry: read by the model layers and
            # `convert --help`; the checkpoints package imports its modules lazily.
            "checkpoints.names",
            "checkpoints.format_registry",
        ),
    ),
    ("data", ("data",)),
    ("modeling", ("modeling",)),
    ("stages", ("pretraining", "finetuning")),
    ("checkpoints and serving", ("checkpoints", "serving")),
    # The Keras models a user fits: `from_pretrained` reads every weight format, and they tell
    # `save_for_serving` how they serve (`serving.module.ServingHead`), unimported by serving.
    ("Keras task models", ("finetuning.keras_models",)),
    ("runs", ("runs",)),
    (
        "commands and API",
        (
            "cli",
            "pretrain",
            "finetune",
            "export",
            "export_openvino",
            "convert",
            "api",
            "evaluation",
            "",
        ),
    ),
]


def module_files(tree: str = PACKAGE) -> dict[str, str]:
    """Every module under the folder `tree` of the repository (the package by default): dotted
    name -> file (a package is its `__init__.py`)."""
    found = {}
    for directory, _, files in os.walk(os.path.join(os.path.dirname(ROOT), tree)):
        for file in files:
            if not file.endswith(".py"):
                continue
            path = os.path.join(directory, file)
            parts = os.path.relpath(path, os.path.dirname(ROOT))[: -len(".py")].split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def moved(module: str) -> str:
    """`module` under its name now: an import by an old name (`electra_tf.MOVED_MODULES`, kept
    working for users) is an import of the moved module."""
    for old, new in MOVED_MODULES.items():
        if module == old or module.startswith(old + "."):
            return new + module[len(old) :]
    return module


def imported_modules(name: str, path: str, modules: set[str]) -> set[str]:
    """The package's modules that `name` imports (`from pkg import sub` names module `sub`)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_package = path.endswith("__init__.py")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(moved(alias.name) for alias in node.names if moved(alias.name) in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                package = name.split(".")
                package = package if is_package else package[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:
                # `from pkg import sub` imports the module `sub`; `from pkg import Name`, `pkg`.
                target = moved(f"{base}.{alias.name}")
                found.add(target if target in modules else moved(base))
    return (found & modules) - {name}


def layer_of(module: str) -> int:
    """The layer of the longest prefix naming `module`; "" names the package itself only (its
    `__init__`), so a new module that no entry names is an error, not a silent member."""
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            full = f"{PACKAGE}.{prefix}" if prefix else PACKAGE
            below = bool(prefix) and module.startswith(full + ".")
            if (module == full or below) and len(full) > best_length:
                best, best_length = index, len(full)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return best


def import_graph(trees: tuple[str, ...] = (PACKAGE,)) -> dict[str, set[str]]:
    """module -> the modules of `trees` it imports (by default the package's own graph)."""
    files = {name: path for tree in trees for name, path in module_files(tree).items()}
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def imports_of(graph: dict[str, set[str]], importers: str, targets: tuple[str, ...]) -> list[str]:
    """Every import in `graph` from a module under `importers` to one under `targets`."""
    return [
        f"{module} imports {target}"
        for module, imported in sorted(graph.items())
        if module == importers or module.startswith(importers + ".")
        for target in sorted(imported)
        if any(target == t or target.startswith(t + ".") for t in targets)
    ]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None (DFS colouring)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == 1:
                return path[path.index(successor) :] + [successor]
            if successor not in state:
                cycle = visit(successor)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_graph_sees_imports():
    # Guards against a collector that finds nothing (then every check below passes vacuously).
    graph = import_graph()
    assert "electra_tf.modeling" in graph["electra_tf.pretraining.networks"]
    assert "electra_tf.config" in graph["electra_tf.modeling.encoder"]
    assert sum(map(len, graph.values())) > 100


def test_no_import_cycle():
    # The benchmarks and tools too: they import the package and each other.
    graph = import_graph(TREES)
    assert {"bench.serve_table", "bench.machine"} <= graph["bench.bench_serve"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_package_imports_neither_bench_nor_tools():
    # bench/ and tools/ are not installed: an import of them from the package fails for users.
    found = imports_of(import_graph(TREES), PACKAGE, ("bench", "tools"))
    assert not found, "\n".join(found)


def test_imports_of_finds_a_planted_import():
    graph = {"electra_tf.data.corpus": {"bench.machine"}, "bench.machine": {"electra_tf.data"}}
    assert imports_of(graph, PACKAGE, ("bench", "tools")) == [
        "electra_tf.data.corpus imports bench.machine"
    ]
    assert imports_of(graph, "bench", ("tools",)) == []


def test_every_module_is_in_a_layer():
    for module in import_graph():
        layer_of(module)


@pytest.mark.parametrize("module", ["electra_tf.new_module", "electra_tf.new_package.part"])
def test_a_module_no_layer_names_is_refused(module):
    # A new top-level module or package joins no layer by default (the package's own entry ""
    # names only `electra_tf/__init__.py`).
    with pytest.raises(AssertionError, match="is in no layer"):
        layer_of(module)
    assert layer_of("electra_tf") == len(LAYERS) - 1
    assert layer_of("electra_tf.data.corpus") == 1


def test_no_import_from_a_lower_layer_to_a_higher_one():
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in sorted(import_graph().items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert not upward, "\n".join(upward)


@pytest.mark.parametrize(
    "graph, cycle",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, None),  # a diamond is not a cycle
    ],
)
def test_find_cycle(graph, cycle):
    assert find_cycle(graph) == cycle


def test_an_import_by_an_old_name_counts_as_one_of_the_moved_module(tmp_path):
    old = sorted(MOVED_MODULES)[0]
    path = tmp_path / "m.py"
    path.write_text(f"import {old}\nfrom electra_tf import {old.rsplit('.', 1)[1]}\n")
    assert imported_modules("electra_tf.m", str(path), {MOVED_MODULES[old]}) == {MOVED_MODULES[old]}


def test_a_module_takes_the_layer_of_its_longest_prefix():
    assert layer_of("electra_tf.pretraining.masking") < layer_of("electra_tf.checkpoints.hf")
    assert layer_of("electra_tf.checkpoints.hf") < layer_of("electra_tf.runs.pretraining")
    assert layer_of("electra_tf.finetuning.task") < layer_of("electra_tf.checkpoints.hf")
    assert layer_of("electra_tf.data.corpus") < layer_of("electra_tf.modeling.encoder")
    assert layer_of("electra_tf") == len(LAYERS) - 1


def test_test_helpers_follow_one_naming_scheme():
    # tests/ holds test modules (test_*.py, what pytest collects), pytest's conftest.py, and
    # the helpers they share, all named helpers_*.py: a helper named like a test would be
    # collected, and one named otherwise is found only by reading every import.
    tests = os.path.dirname(os.path.abspath(__file__))
    modules = [f for f in os.listdir(tests) if f.endswith(".py")]
    assert "conftest.py" in modules and any(f.startswith("helpers_") for f in modules)
    others = [f for f in modules if f != "conftest.py" and not f.startswith(("test_", "helpers_"))]
    assert not others, f"name these helpers_*.py (or test_*.py if they hold tests): {others}"
