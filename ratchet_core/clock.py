"""Ratchet's clock: real UTC time, or an accelerated clock for demos and simulations.

With ``RATCHET_DAY_SECONDS=S`` and ``RATCHET_CLOCK_START=YYYY-MM-DD``, every S real seconds count as one day,
starting at midnight UTC of the start day when the process first read the clock's epoch file
(``$RATCHET_HOME/clock.json``, so the gateway, the demo driver and Dagster agree on "today").
Without them, ``now()`` is ``datetime.now(UTC)``.

The epoch file may also name an ``until`` instant: the accelerated clock stops there (``now()`` returns it) until
the file is rewritten. The demo sets it to the last instant of the day whose traffic it is sending, so a day
whose traffic runs late on a loaded machine stays that day, and moves the clock on only when the day's traffic
was answered and sealed (``ratchet_cli.demo.state``).
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, date, datetime, timedelta


def _accelerated() -> tuple[float, datetime, float, datetime | None] | None:
    from ratchet_core.settings import clock_settings

    day_seconds, start_day, home = clock_settings()
    if not day_seconds:
        return None
    start = datetime.fromisoformat(start_day).replace(tzinfo=UTC)
    epoch_file = home / "clock.json"
    until = None
    try:
        state = json.loads(epoch_file.read_text())
        real_epoch = float(state["real_epoch"])
        start = datetime.fromisoformat(state["start"])
        day_seconds = state["day_seconds"]
        until = datetime.fromisoformat(state["until"]) if state.get("until") else None
    except (FileNotFoundError, KeyError, ValueError):
        real_epoch = time.time()
        epoch_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = epoch_file.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {"real_epoch": real_epoch, "start": start.isoformat(), "day_seconds": float(day_seconds)}
            )
        )
        os.replace(tmp, epoch_file)
    return float(day_seconds), start, real_epoch, until


def now() -> datetime:
    """Current time on Ratchet's clock (timezone-aware UTC)."""
    acc = _accelerated()
    if acc is None:
        return datetime.now(UTC)
    day_seconds, start, real_epoch, until = acc
    elapsed_days = (time.time() - real_epoch) / day_seconds
    moving = start + timedelta(days=elapsed_days)
    return moving if until is None else min(moving, until)


def today() -> date:
    """Current UTC day on Ratchet's clock."""
    return now().date()
