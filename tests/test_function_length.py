"""No function of the project over 80 lines (issue 55, docs/architecture.md): a longer one
does more than one thing a reader can hold at once. The tests themselves are left out (a
test reads top to bottom as its case); everything a run or a study calls is in."""

from __future__ import annotations

import ast
import os

from algorithms.paths import REPO_ROOT

LIMIT = 80
SKIPPED = {".git", ".venv", ".venv-legacy", "results", "data", "node_modules", "__pycache__"}


def project_files() -> list:
    """Every .py file of the project outside the test files and the environments."""
    found = []
    for root, dirs, files in os.walk(REPO_ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED and not d.startswith(".")]
        relative = os.path.relpath(root, REPO_ROOT)
        for name in files:
            path = os.path.normpath(os.path.join(relative, name))
            test_file = path.startswith(os.path.join("tests", "legacy")) or (
                path.startswith("tests" + os.sep) and name.startswith("test_")
            )
            if name.endswith(".py") and not test_file:
                found.append(path)
    return sorted(found)


def long_functions(source: str, path: str) -> list:
    """'path:line name (n lines)' for each function in `source` longer than LIMIT lines."""
    return [
        f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source, path))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > LIMIT
    ]


def test_the_scan_finds_a_long_function():
    long_one = "def f():\n" + "    x = 1\n" * LIMIT
    assert long_functions(long_one, "a.py") == ["a.py:1 f (81 lines)"]
    assert long_functions("def f():\n" + "    x = 1\n" * (LIMIT - 1), "a.py") == []


def test_no_function_of_the_project_is_over_80_lines():
    files = project_files()
    assert "run_all.py" in files and os.path.join("algorithms", "studies", "suite.py") in files
    found = []
    for path in files:
        with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as handle:
            found += long_functions(handle.read(), path)
    assert not found, "functions over 80 lines (split them): " + "; ".join(found)
