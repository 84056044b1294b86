"""How `make test` spreads the suite over pytest-xdist workers (``--dist loadfile --no-loadscope-reorder``).

Each test file runs whole on one worker, so its module-scoped fixtures (a server, a trained night) are built once;
the trained student adapter (tests/student/conftest.py) is used by one file only. Files are handed out longest
first, so that the run does not end waiting on one long night while the other workers idle (xdist hands each
worker its next file when it has fewer than two queued, so this is longest-first with a look-ahead of two).

How long a file takes comes from ``tests/durations.json``: seconds per file (setup, call and teardown of its
tests), measured on a 2-core machine, read as relative cost (a loaded machine inflates every number alike). A file
not in it counts :data:`UNKNOWN_SLOW` seconds when it holds a test marked slow, :data:`UNKNOWN_FAST` otherwise.
To measure again, run any set of files with ``--record-durations``; the files that ran replace their entries, the
others are kept (``make durations`` measures the whole suite as `make test` runs it)::

    .venv/bin/pytest -q -m 'not timing' --record-durations tests/durations.json tests/night/test_bom.py

The run also prints each worker's busy seconds, i.e. how evenly the workers finished.

(``--dist loadgroup`` with computed ``xdist_group`` marks would spread a file's independent tests too, but
pytest-xdist 3.8 groups by rewriting node ids, which pytest 9.2 no longer allows: the marks are silently
ignored, pytest-dev/pytest-xdist#1386.)
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
UNKNOWN_SLOW = 30.0  # seconds: a new file with an end-to-end test goes out among the long ones
UNKNOWN_FAST = 1.0


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """File -> measured seconds ({} when the file is missing)."""
    try:
        return {k: float(v) for k, v in json.loads(path.read_text())["files"].items()}
    except FileNotFoundError:
        return {}


def longest_files_first(items: list[pytest.Item], durations: dict[str, float] | None = None) -> None:
    """Reorder `items` in place: files by their measured seconds, longest first; a file's tests stay together
    and in order; files of equal cost keep their collection order."""
    durations = load_durations() if durations is None else durations
    slow = {file_of(item.nodeid) for item in items if item.get_closest_marker("slow")}

    def cost(name: str) -> float:
        if name in durations:
            return durations[name]
        return UNKNOWN_SLOW if name in slow else UNKNOWN_FAST

    first = {}  # the file's position in collection order, so that its tests stay together
    for i, item in enumerate(items):
        first.setdefault(file_of(item.nodeid), i)
    items.sort(key=lambda item: (-cost(file_of(item.nodeid)), first[file_of(item.nodeid)]))


class DurationRecorder:
    """Sums each file's test durations as reports arrive (in the xdist controller, from every worker) and, at the
    end, merges them into a durations file and prints each worker's busy seconds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.files: dict[str, float] = defaultdict(float)
        self.workers: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.files[file_of(report.nodeid)] += report.duration
        node = getattr(report, "node", None)  # the xdist worker that ran it (None without xdist)
        worker = getattr(getattr(node, "gateway", None), "id", None) or "main"
        self.workers[worker] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.files:
            return
        old: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {}
        files = {**old.get("files", {}), **{k: round(v, 1) for k, v in self.files.items()}}
        data = {
            "about": old.get(
                "about", "seconds per test file (setup + call + teardown); tests/xdist_layout.py"
            ),
            "files": dict(sorted(files.items(), key=lambda kv: (-kv[1], kv[0]))),
        }
        self.path.write_text(json.dumps(data, indent=1) + "\n")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        busy = ", ".join(f"{w} {s:.0f} s" for w, s in sorted(self.workers.items()))
        terminalreporter.write_line(f"durations: {len(self.files)} files into {self.path}; busy: {busy}")
