"""The package's size limits: no module in electra_tf/ over 450 lines, no function (or method,
nested ones included) over 60 lines, `def` line to last line as `ast` counts them.

A module over the limit is split (the moved code importable from its old module), a function
over it is cut where a reader gains; neither is raised here. The only exceptions are the
temporary ones below.
"""

from __future__ import annotations

import ast
import os

import pytest

PACKAGE = "electra_tf"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PACKAGE)
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


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


def package_modules() -> dict[str, str]:
    """Every module of the package: path relative to electra_tf/ -> its text."""
    modules = {}
    for directory, _, files in os.walk(ROOT):
        for file in sorted(files):
            if file.endswith(".py"):
                path = os.path.join(directory, file)
                with open(path, encoding="utf-8") as f:
                    modules[os.path.relpath(path, ROOT).replace(os.sep, "/")] = f.read()
    return modules


def test_no_module_or_function_over_the_limits():
    modules = package_modules()
    assert len(modules) > 100 and "pretraining/masking.py" in modules  # the walk found them
    found = [
        violation
        for path, source in sorted(modules.items())
        for violation in size_violations(source, f"{PACKAGE}/{path}")
    ]
    assert not found, "split these (move code verbatim, re-export moved names):\n" + "\n".join(
        found
    )


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
