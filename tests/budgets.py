"""Resource budgets asserted in tests: which assertions measure how fast or how big rather than what happened.

A functional test asserts what happened; how fast or how big (CPU seconds, memory, wall clock) depends on the
machine and its load, so such a budget belongs in a test marked ``timing`` (`make test` runs those alone, after
the rest) or in ``make bench`` (benchmarks/). :func:`budget_asserts` finds the ones outside: an ``assert`` that
bounds a measured value from above (``measured < limit``, ``limit > measured``) where the measured side names CPU
time, memory or elapsed time, and any use of ``tests.cpu_time.cpu_seconds_at_most``. Waiting for something with
a deadline (``time.monotonic() < deadline``) is not a budget: it only fails when the thing never happens.
tests/test_suite.py runs it over the whole suite.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

MEASURED = re.compile(
    r"cpu_seconds|cpu_time|thread_time|process_time|perf_counter|rss|\.mb\(|memory_info|maxrss|elapsed|\bwall\b"
    r"|\btook\b|duration",
    re.IGNORECASE,
)
BUDGET_HELPERS = {"cpu_seconds_at_most"}


def _is_timing(decorators: list[ast.expr]) -> bool:
    return any("mark.timing" in ast.unparse(d) for d in decorators)


def _module_is_timing(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and "mark.timing" in ast.unparse(node.value)
        for node in tree.body
    )


def _measured_bounds(test: ast.expr) -> list[str]:
    found = []
    for node in ast.walk(test):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            left, right = sides[i], sides[i + 1]
            measured = (
                left
                if isinstance(op, ast.Lt | ast.LtE)
                else right
                if isinstance(op, ast.Gt | ast.GtE)
                else None
            )
            if measured is None:
                continue
            text = ast.unparse(measured)
            if MEASURED.search(text) and "deadline" not in ast.unparse(node):
                found.append(ast.unparse(node))
    return found


def budget_asserts(source: str, name: str = "<test>") -> list[str]:
    """``name:line: <assertion>`` for each resource budget asserted outside a ``timing`` test in ``source``."""
    tree = ast.parse(source)
    if _module_is_timing(tree):
        return []
    problems = []
    for top in tree.body:
        if isinstance(top, ast.ClassDef):
            if _is_timing(top.decorator_list):
                continue
            functions = [f for f in top.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
        elif isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef):
            functions = [top]
        else:
            continue
        for function in functions:
            if _is_timing(function.decorator_list):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Assert):
                    problems += [
                        f"{name}:{node.lineno}: assert {text}" for text in _measured_bounds(node.test)
                    ]
                elif isinstance(node, ast.Name | ast.Attribute):
                    ident = node.id if isinstance(node, ast.Name) else node.attr
                    if ident in BUDGET_HELPERS and not isinstance(getattr(node, "ctx", None), ast.Store):
                        problems.append(f"{name}:{node.lineno}: {ident}")
    return problems


def suite_budget_asserts(root: Path) -> list[str]:
    """:func:`budget_asserts` over every module under ``root`` (the ``tests`` folder: tests, fixtures, helpers)."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        problems += budget_asserts(path.read_text(encoding="utf-8"), str(path.relative_to(root.parent)))
    return problems
