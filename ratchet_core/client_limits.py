"""Per-client limits and the shared state behind them: requests and tokens per minute, a spend budget per day or
month, each client's spend so far, and which gateway replicas are alive.

Three control-DB tables (``ratchet_core.control_db``):

- ``client_limits``: one row per client with a limit (``ratchet admin client set``; every change with its actor,
  reason and time, and a row in the release audit log);
- ``client_spend``: what each replica has served each client in a budget window (``day:YYYY-MM-DD`` or
  ``month:YYYY-MM``, on the day the gateway stamps its rows with), as that replica's running total. A replica
  writes only its own rows, so replicas never contend for one; a client's spend is the sum over replicas;
- ``gateway_replicas``: a heartbeat per replica; the replicas seen within :data:`LIVE_S` are the live ones,
  among which each enforces its share of a rate limit.

How every gateway replica enforces them (``ratchet_gateway.limits``): rate limits with a token bucket per client
at the replica's share of the limit (limit / live replicas), so the sum over replicas is the limit; a budget
against the shared sum, which each replica flushes and reads about once a second. Tokens and dollars are admitted
by reservation (a request's worst case, held until its row settles it), so the overshoot is bounded and stated:
tokens/min by at most one request per replica (one larger than the replica's share, let through when its bucket
is full); a budget by at most one request per replica (one whose worst case passes what is left, let through when
the client has nothing else in flight there) plus what the other replicas served since this one last read the
shared sum (about a second or two of the client's traffic there: replicas do not see each other's requests in
flight). A client whose traffic reaches only some replicas gets less than its rate limit until the others see no
traffic for it.

This module is the contract both sides share: the CLI writes limits, gateways read them and write spend and
heartbeats. Nothing here is on a request's path: gateways call it from their background poll.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ratchet_core.control_db import client_limits, client_spend, gateway_replicas

Period = Literal["day", "month"]
PERIODS: tuple[Period, ...] = ("day", "month")
FIELDS = ("rpm", "tpm", "budget_usd", "budget_period")
LIVE_S = 10.0  # a replica whose heartbeat is older than this is not counted among the live ones


@dataclass(frozen=True)
class ClientLimits:
    """A client's limits; None: no such limit. A budget needs its period."""

    rpm: int | None = None
    tpm: int | None = None
    budget_usd: float | None = None
    budget_period: Period | None = None

    def __post_init__(self) -> None:
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a whole number >= 1 (or cleared)")
        if self.budget_usd is not None and not (math.isfinite(self.budget_usd) and self.budget_usd >= 0):
            raise ValueError("budget_usd must be a finite number of dollars >= 0 (or cleared)")
        if self.budget_period is not None and self.budget_period not in PERIODS:
            raise ValueError("budget_period must be day or month")
        if (self.budget_usd is None) != (self.budget_period is None):
            raise ValueError("a budget needs both --budget-usd and --budget-period (day or month)")

    @property
    def empty(self) -> bool:
        return all(getattr(self, f) is None for f in FIELDS)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def window(period: Period, day: str) -> str:
    """The budget window a request of `day` (YYYY-MM-DD) falls in: ``day:YYYY-MM-DD`` or ``month:YYYY-MM``."""
    return f"day:{day}" if period == "day" else f"month:{day[:7]}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# Limits (the CLI writes, gateways read) ---------------------------------------------------------------------------
def read_limits(engine: Engine) -> dict[str, ClientLimits]:
    """Every client's limits."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(client_limits)).mappings().all()
    return {r["client"]: _limits_of(r) for r in rows}


def _limits_of(row: Mapping[str, Any]) -> ClientLimits:
    return ClientLimits(row["rpm"], row["tpm"], row["budget_usd"], row["budget_period"])


def limit_rows(engine: Engine) -> list[dict[str, Any]]:
    """Every client's limits row (limits, actor, reason, when), by client."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(client_limits).order_by(client_limits.c.client)).mappings().all()
    return [dict(r) for r in rows]


def set_limits(
    conn: Connection, client: str, changes: Mapping[str, Any], clear: Iterable[str], actor: str, reason: str
) -> ClientLimits:
    """Apply `changes` (field -> value) and `clear` (fields back to no limit) to `client`'s limits in this
    transaction; ValueError when the result is not a valid set of limits. A client left without any limit loses
    its row."""
    row = conn.execute(sa.select(client_limits).where(client_limits.c.client == client)).mappings().first()
    old = _limits_of(row) if row is not None else ClientLimits()
    values = {**old.as_dict(), **dict(changes), **dict.fromkeys(clear)}
    if "budget_usd" in clear and "budget_period" not in changes:
        values["budget_period"] = None  # clearing the budget clears its period
    new = replace(old, **values)
    conn.execute(sa.delete(client_limits).where(client_limits.c.client == client))
    if not new.empty:
        conn.execute(
            client_limits.insert().values(
                client=client, **new.as_dict(), actor=actor, reason=reason, updated_at=_now()
            )
        )
    return new


# Spend (gateways write their own rows, everyone reads the sums) ---------------------------------------------------
def write_spend(engine: Engine, replica: str, totals: Mapping[tuple[str, str], float]) -> None:
    """Store this replica's running totals, (client, window) -> dollars, replacing its earlier ones."""
    if not totals:
        return
    now = _now()
    with engine.begin() as conn:
        for (client, win), usd in totals.items():
            key = (
                (client_spend.c.client == client)
                & (client_spend.c.budget_window == win)
                & (client_spend.c.replica == replica)
            )
            if conn.execute(sa.update(client_spend).where(key).values(usd=usd, updated_at=now)).rowcount == 0:
                conn.execute(
                    client_spend.insert().values(
                        client=client, budget_window=win, replica=replica, usd=usd, updated_at=now
                    )
                )


def read_spend(engine: Engine, windows: Iterable[str]) -> dict[tuple[str, str], float]:
    """(client, window) -> dollars served by every replica, for these windows."""
    wins = sorted(set(windows))
    if not wins:
        return {}
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(client_spend.c.client, client_spend.c.budget_window, sa.func.sum(client_spend.c.usd))
            .where(client_spend.c.budget_window.in_(wins))
            .group_by(client_spend.c.client, client_spend.c.budget_window)
        ).all()
    return {(c, w): float(usd or 0.0) for c, w, usd in rows}


def own_spend(engine: Engine, replica: str, windows: Iterable[str]) -> dict[tuple[str, str], float]:
    """This replica's stored totals for these windows (a restarted replica continues from them)."""
    wins = sorted(set(windows))
    if not wins:
        return {}
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(client_spend.c.client, client_spend.c.budget_window, client_spend.c.usd).where(
                (client_spend.c.replica == replica) & client_spend.c.budget_window.in_(wins)
            )
        ).all()
    return {(c, w): float(usd) for c, w, usd in rows}


# Replicas --------------------------------------------------------------------------------------------------------
def heartbeat(engine: Engine, replica: str, at: float) -> None:
    """Record that `replica` is alive at `at` (seconds since the epoch)."""
    with engine.begin() as conn:
        key = gateway_replicas.c.replica == replica
        if conn.execute(sa.update(gateway_replicas).where(key).values(seen_at=at)).rowcount == 0:
            conn.execute(gateway_replicas.insert().values(replica=replica, seen_at=at))


def live_replicas(engine: Engine, at: float, live_s: float = LIVE_S) -> int:
    """How many replicas sent a heartbeat within `live_s` seconds of `at` (at least 1: the caller)."""
    with engine.connect() as conn:
        n = conn.execute(
            sa.select(sa.func.count())
            .select_from(gateway_replicas)
            .where(gateway_replicas.c.seen_at >= at - live_s)
        ).scalar()
    return max(1, int(n or 0))


def leave(engine: Engine, replica: str) -> None:
    """A replica stopping: the others stop counting it at once."""
    with engine.begin() as conn:
        conn.execute(sa.delete(gateway_replicas).where(gateway_replicas.c.replica == replica))
