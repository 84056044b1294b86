"""The student circuit breaker: a failing or hung student endpoint stops costing every request a timeout.

One :class:`Breaker` per student endpoint (its base URL). States:

- ``closed``: every request may ask the student; ``failures`` consecutive failures (a timeout, a refused
  connection, a 5xx, a body that is not a completion) open it.
- ``open``: nobody asks the student, the teacher answers at once; after ``probe_interval_s`` the next request
  becomes the one probe (``half_open``).
- ``half_open``: exactly one request (the probe) asks the student, every other one goes to the teacher; the
  probe's success closes the breaker, its failure opens it for another interval.

So a hung student costs at most one timeout per probe interval, not one per request. A success is any answer
the endpoint gave (a confident one, a doubtful one, one that breaks the request's contract: those are the
model's quality, not the endpoint's health). Calls that were already in flight when the breaker opened do not
close it when they succeed late: only the probe can. The state is in ``/metrics``
(``ratchet_student_breaker_state{endpoint}``: 0 closed, 1 half-open, 2 open).
"""

from __future__ import annotations

import time
from collections.abc import Callable

CLOSED, HALF_OPEN, OPEN = "closed", "half_open", "open"
STATE_VALUES = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}

# What Breaker.allow hands out: a normal call, or the half-open probe (the only call whose outcome closes it).
CALL, PROBE = "call", "probe"


class Breaker:
    """Consecutive-failure breaker with a single half-open probe (not thread-safe: one event loop)."""

    def __init__(
        self,
        failures: int,
        probe_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[str], None] | None = None,
    ):
        if failures < 1 or probe_interval_s <= 0:
            raise ValueError("a breaker needs failures >= 1 and probe_interval_s > 0")
        self.failures = failures
        self.probe_interval_s = probe_interval_s
        self._clock = clock
        self._on_change = on_change
        self.state = CLOSED
        self.consecutive = 0
        self.opened_at = 0.0
        self._probing = False

    def allow(self) -> str | None:
        """:data:`CALL` or :data:`PROBE` when the student may be asked now, None when the teacher must answer."""
        if self.state == CLOSED:
            return CALL
        if self._probing:
            return None
        if self.state == OPEN and self._clock() - self.opened_at < self.probe_interval_s:
            return None
        self._set(HALF_OPEN)
        self._probing = True
        return PROBE

    def success(self, ticket: str) -> None:
        if ticket == PROBE:
            self._probing = False
            self.consecutive = 0
            self._set(CLOSED)
        elif self.state == CLOSED:
            self.consecutive = 0

    def failure(self, ticket: str) -> None:
        if ticket == PROBE:
            self._probing = False
            self._open()
        elif self.state == CLOSED:
            self.consecutive += 1
            if self.consecutive >= self.failures:
                self._open()

    def abandon(self, ticket: str) -> None:
        """The call ended without a verdict (the client went away): a probe leaves the next request to probe."""
        if ticket == PROBE and self._probing:
            self._probing = False
            self._set(OPEN)  # opened_at unchanged: the interval has passed, the next request probes

    def _open(self) -> None:
        self.opened_at = self._clock()
        self._set(OPEN)

    def _set(self, state: str) -> None:
        if state != self.state:
            self.state = state
            if self._on_change is not None:
                self._on_change(state)
