"""The demo's memory between runs (``$RATCHET_HOME/demo/state.json``) and its control of the accelerated clock.

State: the demo client's API key, the days whose night has run, the day whose traffic was started (the "open"
day: if its night did not run, the next `ratchet demo` runs it first), and the release-control state used when
no Dagster daemon runs the release sensor (``--no-dagster-ui``). Written atomically (temp file + rename), 0600
because it holds the demo's API key.

Clock: with ``--day-seconds S`` the demo owns ``$RATCHET_HOME/clock.json`` (the file ``ratchet_core.clock``
reads on every call, so the gateway follows it without a restart). At the start of each day's traffic it sets
the clock to that day's midnight; days then last S real seconds, and the clock WAITS for the day's traffic: it
stops at the day's last instant (``until``) however late the traffic runs on a loaded machine, so every request
the demo sends for a day is stamped that day. Once the day's requests are answered and sealed into the lake,
the clock moves to the next midnight and stands there through the night (``hold_clock_at``); the next day's
traffic starts it again. Nights run "between" days, so a slow night never eats the next day's traffic.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

STATE_VERSION = 1


@dataclass
class DemoState:
    api_key: str = ""
    days_done: list[str] = field(default_factory=list)
    open_day: str | None = None
    day_index: dict[str, int] = field(default_factory=dict)  # day -> workload day (0, 1, ...)
    bursts_done: dict[str, int] = field(default_factory=dict)  # open day -> traffic bursts already sent
    release_state: dict[str, Any] = field(default_factory=dict)
    version: int = STATE_VERSION

    @staticmethod
    def path(home: Path) -> Path:
        return home / "demo" / "state.json"

    @classmethod
    def load(cls, home: Path) -> DemoState:
        p = cls.path(home)
        if not p.exists():
            return cls(api_key="sk-ratchet-demo-" + secrets.token_hex(16))
        try:
            raw = json.loads(p.read_text())
        except ValueError as exc:
            raise ValueError(
                f"{p} is not valid JSON ({exc}); delete it to start the demo's days afresh "
                "(keys, ledger, lake and artifacts are kept)"
            ) from None
        known = {f for f in cls.__dataclass_fields__}
        state = cls(**{k: v for k, v in raw.items() if k in known})
        if not state.api_key:
            state.api_key = "sk-ratchet-demo-" + secrets.token_hex(16)
        return state

    def save(self, home: Path) -> None:
        p = self.path(home)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(".state.json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(asdict(self), indent=2, sort_keys=True))
        os.replace(tmp, p)

    def last_day(self) -> str | None:
        days = [*self.days_done, *([self.open_day] if self.open_day else [])]
        return max(days) if days else None

    def index_of(self, day: str) -> int:
        if day not in self.day_index:
            self.day_index[day] = len(self.day_index)
        return self.day_index[day]


def next_day(day: str) -> str:
    return (date.fromisoformat(day) + timedelta(days=1)).isoformat()


def midnight(day: str) -> datetime:
    return datetime.combine(date.fromisoformat(day), datetime.min.time(), UTC)


@dataclass(frozen=True)
class DayClock:
    """Maps real time to Ratchet's day: day `day` runs from real time `real_start` for `day_seconds` seconds."""

    day: str
    real_start: float
    day_seconds: float

    def real_time_at(self, fraction: float) -> float:
        """Real (epoch) time at `fraction` of the day (0 = midnight, 1 = the next midnight)."""
        return self.real_start + fraction * self.day_seconds

    @property
    def real_end(self) -> float:
        return self.real_time_at(1.0)


def set_accelerated_clock(
    home: Path, day: str, day_seconds: float, real_now: float | None = None, *, hold_at_day_end: bool = False
) -> DayClock:
    """Point ``$RATCHET_HOME/clock.json`` at midnight of `day`, now; every `day_seconds` real seconds is a day.

    `hold_at_day_end`: the clock stops at the day's last microsecond (the finest a ledger timestamp holds) until
    the file is rewritten: a day's late traffic is still that day's."""
    real_now = time.time() if real_now is None else real_now
    start = midnight(day)
    until = start + timedelta(days=1, microseconds=-1) if hold_at_day_end else None
    _write_clock(home, real_now, start, day_seconds, until)
    return DayClock(day, real_now, float(day_seconds))


def hold_clock_at(home: Path, day: str, day_seconds: float) -> None:
    """Stop the accelerated clock at midnight of `day` (between a day's traffic and the next: during the night)."""
    _write_clock(home, time.time(), midnight(day), day_seconds, midnight(day))


def _write_clock(
    home: Path, real_epoch: float, start: datetime, day_seconds: float, until: datetime | None
) -> None:
    path = home / "clock.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".clock.json.tmp")
    state: dict[str, Any] = {
        "real_epoch": real_epoch,
        "start": start.isoformat(),
        "day_seconds": float(day_seconds),
    }
    if until is not None:
        state["until"] = until.isoformat()
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)  # readers see the old or the new clock, never half a file


def real_day_clock(day: str) -> DayClock:
    """The real UTC day `day` as a DayClock (86400 s from its midnight)."""
    return DayClock(day, midnight(day).timestamp(), 86400.0)
