"""How `make test` spreads the suite over pytest-xdist workers (``--dist loadfile --no-loadscope-reorder``).

Each test file runs whole on one worker, so its module-scoped fixtures (a server, a trained night) are built once;
the trained student adapter (tests/student/conftest.py) is used by one file only. Files holding a test marked slow
are handed out first, so that the run does not end waiting on one long night while the other workers idle.

(``--dist loadgroup`` with computed ``xdist_group`` marks would spread a file's independent tests too, but
pytest-xdist 3.8 groups by rewriting node ids, which pytest 9.2 no longer allows: the marks are silently
ignored, pytest-dev/pytest-xdist#1386.)
"""

from __future__ import annotations

import pytest


def slow_files_first(items: list[pytest.Item]) -> None:
    """Reorder `items` in place: files with a slow test first; a file's tests stay together and in order."""
    slow = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow")}
    items.sort(
        key=lambda item: item.nodeid.split("::", 1)[0] not in slow
    )  # stable: collection order otherwise
