"""The size limits of the package and of the code beside it: no module in electra_tf/, bench/ or
tools/ over 450 lines, no function (or method, nested ones included) over 60 lines, `def` line
to last line as `ast` counts them; at most 20 entries at the package's root and 20 modules in
bench/, so that a reader can take either in at a glance.

A module over the limit is split (the moved code importable from its old module), a function
over it is cut where a reader gains; neither is raised here. The only exceptions are the
temporary ones below.
"""

from __future__ import annotations

import ast
import os

import pytest

PACKAGE = "electra_tf"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.join(REPO, PACKAGE)
# The package, the benchmarks and the checking tools: one set of limits for all three.
TREES = (PACKAGE, "bench", "tools")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
MAX_ROOT_ENTRIES = 20  # files and folders directly under electra_tf/
MAX_BENCH_MODULES = 20  # .py files of bench/, its __init__.py included


def size_violations(source: str, where: str) -> list[str]:
    """Every limit `source` (a module's text, named `where`) breaks, one line each."""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{where}: {lines} lines (limit {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(
                    f"{where}:{node.lineno} {node.name}: {length} lines "
                    f"(limit {MAX_FUNCTION_LINES})"
                )
    return found


def tree_modules(tree: str) -> dict[str, str]:
    """Every module under the folder `tree` of the repository: path from the repository's root
    -> its text."""
    modules = {}
    for directory, _, files in os.walk(os.path.join(REPO, tree)):
        for file in sorted(files):
            if file.endswith(".py"):
                path = os.path.join(directory, file)
                with open(path, encoding="utf-8") as f:
                    modules[os.path.relpath(path, REPO).replace(os.sep, "/")] = f.read()
    return modules


def folder_entries(directory: str, suffix: str = "") -> list[str]:
    """What a reader sees in `directory` (`ls`: no dot-files, no `__pycache__`), ending in
    `suffix` where one is given."""
    return sorted(
        name
        for name in os.listdir(directory)
        if not name.startswith(".") and name != "__pycache__" and name.endswith(suffix)
    )


def count_violations(directory: str) -> list[str]:
    """The folder-size limits `directory` (a copy of the repository's layout) breaks."""
    found = []
    root = folder_entries(os.path.join(directory, PACKAGE))
    if len(root) > MAX_ROOT_ENTRIES:
        found.append(f"{PACKAGE}/: {len(root)} entries (limit {MAX_ROOT_ENTRIES}): {root}")
    bench = folder_entries(os.path.join(directory, "bench"), ".py")
    if len(bench) > MAX_BENCH_MODULES:
        found.append(f"bench/: {len(bench)} modules (limit {MAX_BENCH_MODULES}): {bench}")
    return found


def test_no_module_or_function_over_the_limits():
    modules = {path: text for tree in TREES for path, text in tree_modules(tree).items()}
    # The walk found each tree.
    assert len(modules) > 150 and "electra_tf/pretraining/masking.py" in modules
    assert "bench/bench_train.py" in modules and "tools/identity_check.py" in modules
    found = [
        violation
        for path, source in sorted(modules.items())
        for violation in size_violations(source, path)
    ]
    assert not found, "split these (move code verbatim, re-export moved names):\n" + "\n".join(
        found
    )


def test_the_package_root_and_bench_are_within_their_counts():
    assert folder_entries(ROOT) and "__init__.py" in folder_entries(ROOT)  # the listing works
    found = count_violations(REPO)
    assert not found, "group these into a subpackage or merge modules:\n" + "\n".join(found)


def _planted_layout(base, root_entries: int, bench_modules: int) -> str:
    """A repository layout with that many package-root entries and bench/ modules (empty files
    and one folder), plus what the counts must not see (`__pycache__`, dot-files, a README)."""
    package, bench = base / PACKAGE, base / "bench"
    package.mkdir(parents=True)
    bench.mkdir()
    (package / "modeling").mkdir()
    for index in range(root_entries - 1):
        (package / f"m{index}.py").write_text("")
    for index in range(bench_modules):
        (bench / f"b{index}.py").write_text("")
    for folder in (package, bench):
        (folder / "__pycache__").mkdir()
        (folder / ".hidden").write_text("")
    (bench / "README.md").write_text("")
    return str(base)


def test_a_21st_root_entry_or_bench_module_is_refused(tmp_path):
    at_limit = _planted_layout(tmp_path / "at", MAX_ROOT_ENTRIES, MAX_BENCH_MODULES)
    assert count_violations(at_limit) == []
    over = _planted_layout(tmp_path / "over", MAX_ROOT_ENTRIES, MAX_BENCH_MODULES)
    (tmp_path / "over" / PACKAGE / "planted.py").write_text("")
    (tmp_path / "over" / "bench" / "planted.py").write_text("")
    found = count_violations(over)
    assert len(found) == 2, found
    assert found[0].startswith(f"{PACKAGE}/: 21 entries (limit 20)") and "planted.py" in found[0]
    assert found[1].startswith("bench/: 21 modules (limit 20)") and "planted.py" in found[1]


def _function(name: str, body_lines: int, indent: str = "") -> str:
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines))
    return f"{indent}def {name}():\n{body}"


@pytest.mark.parametrize(
    "source, expected",
    [
        (_function("fits", MAX_FUNCTION_LINES - 1), []),
        (_function("long", MAX_FUNCTION_LINES), ["m.py:1 long: 61 lines (limit 60)"]),
        (
            "class C:\n" + _function("method", MAX_FUNCTION_LINES, indent="    "),
            ["m.py:2 method: 61 lines (limit 60)"],
        ),
        ("x = 0\n" * MAX_MODULE_LINES, []),
        ("x = 0\n" * (MAX_MODULE_LINES + 1), ["m.py: 451 lines (limit 450)"]),
    ],
    ids=["function-at-limit", "function-over", "method-over", "module-at-limit", "module-over"],
)
def test_size_violations(source, expected):
    assert size_violations(source, "m.py") == expected
