"""Per-client limits at one gateway replica: requests per minute, tokens per minute, a spend budget per day or
month (``ratchet admin client set``; ``ratchet_core.client_limits`` says where they live and how every replica
enforces its part).

:class:`ClientLimiter` is a request hook (``ratchet_gateway.hooks``, stage ``validated``): once a model request
(any API the chat pipeline serves) is authenticated and valid, before routing and before any model is called, it
refuses a client over a limit with a 429 in OpenAI's shape and a ``retry-after`` header:

- requests per minute: a token bucket of the replica's share of the limit (``rpm / live replicas``), refilled
  continuously, one token per request: ``type: requests``, ``code: rate_limit_exceeded``;
- tokens per minute: the same bucket of tokens, charged with each answer's ``total_tokens`` once it is known, so a
  client in debt waits until the bucket refills: ``type: tokens``, ``code: rate_limit_exceeded``;
- budget: the client's spend in the window (the sum every replica flushed, plus what this one served since its
  last flush) against the budget, in dollars at the ledger's prices (``actual_cost_usd``, litellm's price map):
  ``type: insufficient_quota``, ``code: insufficient_quota``, retry after the window ends.

A refused request calls no model and writes no ledger row. Every answered request row is observed
(:meth:`observe`): its spend and tokens. The background poll (:meth:`poll`, about once a second with the manifest's)
reads the limits (a change takes effect within a poll), sends this replica's heartbeat and counts the live ones,
flushes its spend and reads everyone's. ``/metrics`` shows refusals and spend per client (never a key), to the
admin key only. Feedback, which calls no model, counts against requests per minute alone (:meth:`admit_request`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ratchet_core import client_limits as cl
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.hooks import RequestHook, RequestInfo


class Bucket:
    """A token bucket: `capacity` tokens, refilled at `rate` per second; may go into debt (below zero)."""

    __slots__ = ("capacity", "rate", "tokens", "at")

    def __init__(self, capacity: float, rate: float, now: float):
        self.capacity, self.rate, self.tokens, self.at = capacity, rate, capacity, now

    def resize(self, capacity: float, rate: float) -> None:
        self.tokens = min(self.tokens, capacity)
        self.capacity, self.rate = capacity, rate

    def level(self, now: float) -> float:
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return self.tokens

    def wait(self, need: float, now: float) -> float:
        """Seconds until `need` tokens are there (0: they are)."""
        have = self.level(now)
        return 0.0 if have >= need else (need - have) / self.rate


@dataclass(frozen=True)
class Refusal:
    kind: str  # rpm | tpm | budget (the metrics label)
    error: GatewayError


class ClientLimiter(RequestHook):
    """This replica's enforcement of every client's limits (module docstring). One per gateway."""

    def __init__(self, gw: Any):
        self.gw = gw  # the ratchet_gateway.state.Gateway that owns it (which imports this module)
        self.limits: dict[str, cl.ClientLimits] = {}
        self.live = 1
        self._buckets: dict[tuple[str, str], Bucket] = {}
        self._served: dict[tuple[str, str], float] = defaultdict(
            float
        )  # (client, window) -> this replica's total
        self._flushed: dict[tuple[str, str], float] = {}  # what was flushed of it
        self._shared: dict[tuple[str, str], float] = {}  # everyone's total, as last read
        self._loaded: set[str] = set()  # windows whose stored totals of this replica were read back
        self.refused: dict[tuple[str, str], int] = defaultdict(int)  # (client, kind) -> refusals here

    # the request path ---------------------------------------------------------------------------------------
    async def validated(self, info: RequestInfo, received: Any) -> None:
        self.admit(received.client, received.day)

    def admit(self, client: str, day: str) -> None:
        """Count one model request of `client` (on `day`), or raise its 429 (GatewayError). The chat pipeline's
        APIs reach it through the ``validated`` hook; a model route outside the pipeline (embeddings) calls it."""
        limits = self.limits.get(client)
        if limits is None:
            return
        refusal = self.check(client, day, limits, time.monotonic())
        if refusal is not None:
            self.refused[(client, refusal.kind)] += 1
            self.gw.metrics.client_limited.labels(client, refusal.kind).inc()
            raise refusal.error

    def admit_request(self, client: str) -> None:
        """Count one request of `client` that calls no model (feedback) against its requests per minute only, or
        raise its 429: it spends no tokens or dollars, so neither of those limits refuses it."""
        limits = self.limits.get(client)
        if limits is None or limits.rpm is None:
            return
        now = time.monotonic()
        bucket = self._bucket(client, "rpm", limits.rpm, now)
        wait = bucket.wait(1, now)
        if wait > 0:
            self.refused[(client, "rpm")] += 1
            self.gw.metrics.client_limited.labels(client, "rpm").inc()
            raise self._rate_refusal(client, "rpm", limits.rpm, wait).error
        bucket.tokens -= 1

    def check(self, client: str, day: str, limits: cl.ClientLimits, now: float) -> Refusal | None:
        """The refusal of one more request of `client` now, or None (then its request is counted)."""
        if limits.budget_usd is not None and limits.budget_period is not None:
            win = cl.window(limits.budget_period, day)
            spent = self.spent(client, win)
            if spent >= limits.budget_usd:
                return self._over_budget(client, limits, spent)
        if limits.tpm is not None:
            wait = self._bucket(client, "tpm", limits.tpm, now).wait(1, now)
            if wait > 0:
                return self._rate_refusal(client, "tpm", limits.tpm, wait)
        if limits.rpm is not None:
            bucket = self._bucket(client, "rpm", limits.rpm, now)
            wait = bucket.wait(1, now)
            if wait > 0:
                return self._rate_refusal(client, "rpm", limits.rpm, wait)
            bucket.tokens -= 1
        return None

    def observe(self, row: dict[str, Any]) -> None:
        """A request row this replica committed: its dollars count against the client's budget windows, its
        tokens against its tokens per minute."""
        client = row["client"]
        usd = float(row.get("actual_cost_usd") or 0.0)
        if usd > 0:
            for period in cl.PERIODS:
                self._served[(client, cl.window(period, row["day"]))] += usd
        tokens = int(row.get("total_tokens") or 0)
        bucket = self._buckets.get((client, "tpm"))
        if tokens and bucket is not None:
            bucket.level(time.monotonic())
            bucket.tokens -= tokens

    def spent(self, client: str, win: str) -> float:
        """The client's spend in a window: everyone's flushed total plus what this replica served since."""
        key = (client, win)
        return self._shared.get(key, 0.0) + self._served.get(key, 0.0) - self._flushed.get(key, 0.0)

    def _bucket(self, client: str, kind: str, per_minute: int, now: float) -> Bucket:
        share = per_minute / self.live
        bucket = self._buckets.get((client, kind))
        if bucket is None:
            bucket = self._buckets[(client, kind)] = Bucket(share, share / 60.0, now)
        elif bucket.capacity != share:
            bucket.level(now)
            bucket.resize(share, share / 60.0)
        return bucket

    def _rate_refusal(self, client: str, kind: str, limit: int, wait: float) -> Refusal:
        unit = "requests" if kind == "rpm" else "tokens"
        seconds = max(1, math.ceil(wait))
        share = limit / self.live
        err = GatewayError(
            429,
            f"Rate limit reached for {unit} per minute: client {client} may use {limit} {unit}/min "
            f"({share:g} at each of {self.live} gateway replicas); retry in {seconds} s, or ask the operator to "
            f"raise it (ratchet admin client set {client} --{kind} N).",
            "rate_limit_exceeded",
            type_=unit,
            headers={
                "retry-after": str(seconds),
                f"x-ratelimit-limit-{unit}": str(limit),
                f"x-ratelimit-remaining-{unit}": "0",
                f"x-ratelimit-reset-{unit}": f"{seconds}s",
            },
        )
        return Refusal(kind, err)

    def _over_budget(self, client: str, limits: cl.ClientLimits, spent: float) -> Refusal:
        period = limits.budget_period
        assert period is not None and limits.budget_usd is not None
        ends, seconds = self._window_end(period)
        err = GatewayError(
            429,
            f"Client {client} has used its budget: ${spent:.4f} of ${limits.budget_usd:g} this {period}. It resets "
            f"at {ends} (in about {seconds} s); ask the operator to raise it (ratchet admin client set {client} "
            "--budget-usd X --budget-period day|month).",
            "insufficient_quota",
            type_="insufficient_quota",
            headers={"retry-after": str(seconds)},
        )
        return Refusal("budget", err)

    def _window_end(self, period: str) -> tuple[str, int]:
        """When the current budget window ends (on the gateway's clock) and how many real seconds until then."""
        gw = self.gw
        now = gw.clock_now() if gw.clock_now is not None else datetime.now(UTC)
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        if period == "day":
            end = start + timedelta(days=1)
        else:
            first = start.replace(day=1)
            end = (first + timedelta(days=32)).replace(day=1)
        clock_s = (end - now).total_seconds()
        real_s = clock_s * (gw.settings.day_seconds / 86_400) if gw.settings.day_seconds else clock_s
        return end.strftime("%Y-%m-%dT%H:%MZ"), max(1, math.ceil(real_s))

    # the background poll ------------------------------------------------------------------------------------
    def today(self) -> str:
        gw = self.gw
        now = gw.clock_now() if gw.clock_now is not None else datetime.now(UTC)
        return now.strftime("%Y-%m-%d")

    async def poll(self) -> None:
        """Read limits, beat, count live replicas, flush this replica's spend and read everyone's (in a thread)."""
        engine = self.gw.engine
        if engine is None:
            return
        replica = self.gw.ledger.replica
        day = self.today()
        windows = [cl.window(p, day) for p in cl.PERIODS]
        dirty = {k: v for k, v in self._served.items() if self._flushed.get(k) != v}
        new_windows = [w for w in windows if w not in self._loaded]

        def sync() -> tuple[dict, int, dict, dict]:
            own = cl.own_spend(engine, replica, new_windows) if new_windows else {}
            cl.write_spend(engine, replica, {k: v + own.get(k, 0.0) for k, v in dirty.items()})
            cl.heartbeat(engine, replica, time.time())
            return (
                cl.read_limits(engine),
                cl.live_replicas(engine, time.time()),
                cl.read_spend(engine, windows),
                own,
            )

        limits, live, shared, own = await asyncio.to_thread(sync)
        for key, usd in own.items():  # a restarted replica continues its own totals
            self._served[key] += usd
        for key in dirty:
            self._flushed[key] = dirty[key] + own.get(key, 0.0)
        for key in own:
            self._flushed.setdefault(key, self._served[key])
        self._loaded.update(new_windows)
        self.limits, self.live, self._shared = limits, live, shared
        metrics = self.gw.metrics
        for (client, win), usd in shared.items():
            metrics.client_spend.labels(client, win.split(":", 1)[0]).set(usd)

    async def close(self) -> None:
        """Flush this replica's spend and stop counting it among the live replicas."""
        engine = self.gw.engine
        if engine is None:
            return
        replica = self.gw.ledger.replica
        dirty = {k: v for k, v in self._served.items() if self._flushed.get(k) != v}

        def sync() -> None:
            cl.write_spend(engine, replica, dirty)
            cl.leave(engine, replica)

        await asyncio.to_thread(sync)

    # the dashboard ------------------------------------------------------------------------------------------
    def view(self, client: str) -> dict[str, Any]:
        """The caller's limits, spend in its budget window and refusals at this replica (its dashboard)."""
        limits = self.limits.get(client, cl.ClientLimits())
        out: dict[str, Any] = {**limits.as_dict(), "replicas": self.live}
        if limits.budget_period is not None and limits.budget_usd is not None:
            win = cl.window(limits.budget_period, self.today())
            spent = self.spent(client, win)
            out.update(window=win, spent_usd=spent, remaining_usd=max(0.0, limits.budget_usd - spent))
        out["refused"] = {kind: self.refused.get((client, kind), 0) for kind in ("rpm", "tpm", "budget")}
        return out
