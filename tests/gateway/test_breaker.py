"""The student circuit breaker as a state machine (a fake clock, no I/O)."""

from __future__ import annotations

import pytest

from ratchet_gateway.breaker import CALL, CLOSED, HALF_OPEN, OPEN, PROBE, Breaker


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_opens_after_n_consecutive_failures_and_a_success_resets_the_count(clock):
    seen = []
    b = Breaker(3, 10.0, clock, on_change=seen.append)
    for _ in range(2):
        b.failure(b.allow())
    b.success(b.allow())  # the run of failures is broken
    for _ in range(2):
        b.failure(b.allow())
    assert b.state == CLOSED and b.allow() == CALL
    b.failure(CALL)
    assert b.state == OPEN and b.allow() is None and seen == [OPEN]


def test_one_probe_per_interval_closes_on_success_reopens_on_failure(clock):
    seen = []
    b = Breaker(1, 10.0, clock, on_change=seen.append)
    b.failure(b.allow())
    clock.t += 9.9
    assert b.allow() is None
    clock.t += 0.2
    assert b.allow() == PROBE and b.state == HALF_OPEN
    assert b.allow() is None  # only one probe at a time; the others go to the teacher
    b.failure(PROBE)
    assert b.state == OPEN and b.allow() is None
    clock.t += 10.0
    assert b.allow() == PROBE
    b.success(PROBE)
    assert b.state == CLOSED and b.allow() == CALL
    assert seen == [OPEN, HALF_OPEN, OPEN, HALF_OPEN, CLOSED]


def test_late_successes_of_old_calls_do_not_close_it_and_an_abandoned_probe_is_retried(clock):
    b = Breaker(2, 5.0, clock)
    t1, t2, t3 = b.allow(), b.allow(), b.allow()
    b.failure(t1)
    b.failure(t2)
    assert b.state == OPEN
    b.success(t3)  # a call made before it opened answered late: still open
    assert b.state == OPEN
    clock.t += 5.0
    probe = b.allow()
    b.abandon(probe)  # the probing client went away: no verdict, the next request probes
    assert b.state == OPEN and b.allow() == PROBE


def test_rejects_nonsense_settings():
    with pytest.raises(ValueError):
        Breaker(0, 1.0)
    with pytest.raises(ValueError):
        Breaker(1, 0.0)
