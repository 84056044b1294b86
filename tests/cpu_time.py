"""A CPU-time budget for the linear-time checks on hostile input (what any tenant can send).

It counts this thread's CPU time (``time.thread_time``), not the wall clock: other processes and threads on a
busy machine (`make test` runs its workers side by side) do not add to it, so a budget far above the linear
cost and far below a super-linear one holds under any load. Still a budget that depends on the machine's
speed: only tests marked ``timing`` use it (`make test` runs them alone, after the rest; tests/test_suite.py
checks that no other test does).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cpu_seconds_at_most(budget: float) -> Iterator[None]:
    """Fail when the block spends more than `budget` seconds of this thread's CPU time."""
    start = time.thread_time()
    yield
    used = time.thread_time() - start
    assert used < budget, (
        f"{used:.2f} s of CPU time, over the {budget:g} s budget: still linear in the input?"
    )
