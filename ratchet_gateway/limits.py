"""Per-client limits at one gateway replica: requests per minute, tokens per minute, a spend budget per day or
month (``ratchet admin client set``; ``ratchet_core.client_limits`` says where they live and how every replica
enforces its part).

:class:`ClientLimiter` is a request hook (``ratchet_gateway.hooks``, stage ``validated``): once a model request
(any API the chat pipeline serves) is authenticated and valid, before routing and before any model is called, it
refuses a client over a limit with a 429 in OpenAI's shape and a ``retry-after`` header.

Tokens and dollars are admitted by reservation. A request of a client with a tokens/min limit or a budget
reserves its worst case before it is sent (:class:`Need`): its prompt, counted with the teacher's tokenizer in a
worker thread, plus its ``max_completion_tokens`` (or ``max_tokens``; times ``n``), or, when it names none, the
most the teacher model can answer (``ratchet_core.pricing.max_output_tokens``: litellm's map, 16,384 for a model
it does not know); and that many tokens priced at the teacher's and the student's prices together (a cascade pays
both). An embeddings request reserves its input tokens, counted, at the embedding model's price
(:meth:`ClientLimiter.embeddings_need`): it has no completion. Its row settles it (:meth:`ClientLimiter.observe`): the tokens and dollars it used replace the reservation,
whatever way it ended (answered, failed, or a stream its client abandoned: ``ratchet_gateway.chat.relay``); a
request that ends without a row gives its reservation back (:meth:`ClientLimiter.release`).

- requests per minute: a token bucket of the replica's share of the limit (``rpm / live replicas``), refilled
  continuously, one token per request: ``type: requests``, ``code: rate_limit_exceeded``;
- tokens per minute: the same bucket of tokens, from which a request takes its reservation when it is admitted
  and to which its settlement returns what it did not use: ``type: tokens``, ``code: rate_limit_exceeded``. A
  request larger than the replica's bucket is let through only when the bucket is full, and empties it; one that
  needs more than the whole limit even at its stated ``max_tokens`` is a 400 (``request_too_large``): no wait
  would let it through. The bucket never goes below empty, so a refusal's ``retry-after`` is at most 60 s;
- budget: the client's spend in the window (the sum every replica flushed, plus what this one served since its
  last flush) plus what its requests in flight here hold, against the budget, in dollars at the ledger's prices
  (``actual_cost_usd``, litellm's price map): ``type: insufficient_quota``, ``code: insufficient_quota``, retry
  after the window ends. A request whose worst case exceeds what is left waits (``code: budget_in_flight``,
  retry in a second) while the client has requests in flight here, and is let through when it has none.

So what a client's admitted requests use exceeds a limit by at most one request per replica: the one let through
whole (a request larger than the replica's bucket, or one whose worst case passes the budget's rest), or a
request whose model reported more than its reservation (a tokenizer that counts the prompt differently). Across
replicas a budget adds what the others served since this replica last read their spend (about a second or two of
the client's traffic there, ``ratchet_core.client_limits``).

A refused request calls no model and writes no ledger row. The background poll (:meth:`poll`, about once a second
with the manifest's) reads the limits (a change takes effect within a poll), sends this replica's heartbeat and
counts the live ones, flushes its spend and reads everyone's, and gives back reservations older than
:data:`HOLD_S` whose request never settled. ``/metrics`` shows refusals and spend per client (never a key), to the
admin key only. Feedback, which calls no model, counts against requests per minute alone (:meth:`admit_request`).
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ratchet_core import client_limits as cl
from ratchet_core import pricing
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.hooks import RequestHook, RequestInfo

HOLD_S = 900.0  # a reservation whose request has not settled after this long is given back (poll)
_FULL = 1e-9  # a bucket this close to its capacity is full (float sums)


class Bucket:
    """A token bucket: `capacity` tokens, refilled at `rate` per second (the limiter never takes it below zero)."""

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


@dataclass(frozen=True, slots=True)
class Need:
    """A request's worst case, reserved before it is sent (module docstring)."""

    prompt: int  # its prompt, as the teacher's tokenizer counts it
    completion: int  # the most completion tokens it may get (its max_tokens times n, else the model's cap)
    stated: bool  # whether `completion` is the client's own max_tokens (else the model's cap)
    usd: float  # `prompt` and `completion` at the teacher's and the student's prices together
    # the caller's own names (its API's, ``Received.fields``) of the prompt and of the completion cap ('': none)
    prompt_field: str = "messages"
    completion_field: str = "max_tokens"

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    @property
    def least(self) -> int:
        """Tokens it needs at the least: its prompt, plus its stated max_tokens (a cap of the model's own is a
        worst case, not a need)."""
        return self.prompt + (self.completion if self.stated else 1)


@dataclass(slots=True)
class Reservation:
    """What one admitted request holds until it settles."""

    client: str
    tokens: float  # taken from the client's tokens/min bucket (0 without that limit)
    usd: float  # held against the client's budget (0 without one)
    at: float  # the limiter's clock when it was made


def _input_tokens(model: str, inputs: str | list) -> int:
    """An embeddings ``input``'s tokens: each text's as `model`'s tokenizer counts it, each token array's length."""
    if isinstance(inputs, str):
        return pricing.text_tokens(model, inputs)
    if inputs and isinstance(inputs[0], int):
        return len(inputs)
    return sum(len(x) if isinstance(x, list) else pricing.text_tokens(model, x) for x in inputs)


class ClientLimiter(RequestHook):
    """This replica's enforcement of every client's limits (module docstring). One per gateway."""

    def __init__(self, gw: Any):
        self.gw = gw  # the ratchet_gateway.state.Gateway that owns it (which imports this module)
        self.limits: dict[str, cl.ClientLimits] = {}
        self.live = 1
        self.clock = time.monotonic  # the buckets' clock (a test may stop it)
        self._buckets: dict[tuple[str, str], Bucket] = {}
        self._held: dict[str, Reservation] = {}  # request id -> what it holds until its row settles it
        self._held_usd: dict[str, float] = defaultdict(float)  # client -> dollars its requests in flight hold
        self._max_output: int | None = None  # the teacher model's most completion tokens (read once)
        self._served: dict[tuple[str, str], float] = defaultdict(
            float
        )  # (client, window) -> this replica's total
        self._flushed: dict[tuple[str, str], float] = {}  # what was flushed of it
        self._shared: dict[tuple[str, str], float] = {}  # everyone's total, as last read
        self._loaded: set[str] = set()  # windows whose stored totals of this replica were read back
        self.refused: dict[tuple[str, str], int] = defaultdict(int)  # (client, kind) -> refusals here

    # the request path ---------------------------------------------------------------------------------------
    async def validated(self, info: RequestInfo, received: Any) -> None:
        limits = self.limits.get(received.client)
        if limits is None:
            return
        need = None
        if limits.tpm is not None or limits.budget_usd is not None:
            need = await self.need(received)
        self.admit(received.client, received.day, need, received.request_id)

    async def need(self, received: Any) -> Need:
        """The worst case of a validated chat request (`received`: ``chat.context.Received``); its prompt is
        counted in a worker thread (the large-body lane for a large body)."""
        gw = self.gw
        body = received.body
        stated, cap_field = None, "max_tokens"
        for name in (
            "max_completion_tokens",
            "max_tokens",
        ):  # the first one stated (as the upstream reads them)
            value = body.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                stated, cap_field = value, name
                break
        n = body.get("n")
        n = n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1
        if stated is None and self._max_output is None:
            self._max_output = await asyncio.to_thread(pricing.max_output_tokens, gw.settings.teacher_model)
        completion = (stated or self._max_output or 0) * n
        count = gw.teacher_equivalent.count
        if received.large:
            prompt = await gw.offload.run(count, body)
        else:
            prompt = await asyncio.to_thread(count, body)
        usd = gw.teacher_prices.cost(prompt, completion) + gw.student_prices.cost(prompt, completion)
        names = received.fields
        return Need(
            prompt,
            completion,
            stated is not None,
            usd,
            names.get("messages", "messages"),
            names.get(cap_field, cap_field),
        )

    async def embeddings_need(self, client: str, inputs: str | list, large: bool = False) -> Need | None:
        """The worst case of a validated embeddings request of `client` (`inputs`: its ``input``), or None when
        the client has no tokens/min limit or budget: its input tokens (a text counted with the embedding
        model's tokenizer, in a worker thread, the large-body lane for a large body; a token array is its
        length) at the embedding model's prices. An embedding has no completion: that is the whole of it."""
        limits = self.limits.get(client)
        if limits is None or (limits.tpm is None and limits.budget_usd is None):
            return None
        gw = self.gw
        count = functools.partial(_input_tokens, gw.settings.embedding_model, inputs)
        prompt = await gw.offload.run(count) if large else await asyncio.to_thread(count)
        return Need(prompt, 0, True, gw.embedding_prices.cost(prompt, 0), "input", "")

    def admit(self, client: str, day: str, need: Need | None = None, request_id: str = "") -> None:
        """Admit one model request of `client` (on `day`), or raise its 429 (or 400) (GatewayError). With `need`
        (its worst case) it reserves that until its row settles it (:meth:`observe`) or :meth:`release`; without
        (no tokens/min or budget to reserve against) its row is charged when it comes. The chat pipeline's APIs
        reach it through the ``validated`` hook; a model route outside the pipeline (embeddings, with
        :meth:`embeddings_need`) calls it."""
        limits = self.limits.get(client)
        if limits is None:
            return
        self._raise(client, self.check(client, day, limits, self.clock(), need, request_id))

    def admit_request(self, client: str) -> None:
        """Count one request of `client` that calls no model (feedback) against its requests per minute only, or
        raise its 429: it spends no tokens or dollars, so neither of those limits refuses it."""
        limits = self.limits.get(client)
        if limits is None or limits.rpm is None:
            return
        self._raise(client, self._count_request(client, limits.rpm, self.clock()))

    def _raise(self, client: str, refusal: Refusal | None) -> None:
        """Count `refusal` (if any) in the refusals and their metric, and raise its error."""
        if refusal is not None:
            self.refused[(client, refusal.kind)] += 1
            self.gw.metrics.client_limited.labels(client, refusal.kind).inc()
            raise refusal.error

    def _count_request(self, client: str, rpm: int, now: float) -> Refusal | None:
        """Take one request from `client`'s requests/min bucket, or the 429 that says how long to wait."""
        bucket = self._bucket(client, "rpm", rpm, now)
        wait = bucket.wait(1, now)
        if wait > 0:
            return self._rate_refusal(client, "rpm", rpm, wait)
        bucket.tokens -= 1
        return None

    def check(
        self,
        client: str,
        day: str,
        limits: cl.ClientLimits,
        now: float,
        need: Need | None = None,
        request_id: str = "",
    ) -> Refusal | None:
        """The refusal of one more request of `client` now, or None (then it is counted, and `need` reserved
        under `request_id`)."""
        usd = 0.0
        if limits.budget_usd is not None and limits.budget_period is not None:
            win = cl.window(limits.budget_period, day)
            spent = self.spent(client, win)
            if spent >= limits.budget_usd:
                return self._over_budget(client, limits, spent)
            held = self._held_usd.get(client, 0.0)
            if need is not None:
                usd = need.usd
                # past the rest, it waits for the requests in flight here; with none, it alone may pass it
                if held > 0 and spent + held + usd > limits.budget_usd:
                    return self._budget_in_flight(client, limits, spent, held, need)
        take = 0.0
        tpm = None
        if limits.tpm is not None:
            tpm = self._bucket(client, "tpm", limits.tpm, now)
            level = tpm.level(now)
            if need is None:
                if level < 1:
                    return self._rate_refusal(client, "tpm", limits.tpm, tpm.wait(1, now))
            else:
                if need.least > limits.tpm:
                    return self._too_large(client, limits.tpm, need)
                if need.tokens <= level:
                    take = need.tokens
                elif need.tokens > tpm.capacity and level >= tpm.capacity - _FULL:
                    take = level  # larger than this replica's bucket: it takes the whole of it
                else:
                    wait = tpm.wait(min(need.tokens, tpm.capacity), now)
                    return self._rate_refusal(client, "tpm", limits.tpm, wait, need)
        if limits.rpm is not None and (refusal := self._count_request(client, limits.rpm, now)) is not None:
            return refusal
        if need is not None and (take or usd):
            if tpm is not None:
                tpm.tokens -= take
            self._held_usd[client] += usd
            self._held[request_id] = Reservation(client, take, usd, now)
        return None

    def observe(self, row: dict[str, Any]) -> None:
        """A request row this replica committed: its dollars count against the client's budget windows, its
        tokens against its tokens per minute; it settles its request's reservation, if any (module docstring)."""
        if row.get("kind", "request") != "request":
            return
        client = row["client"]
        usd = float(row.get("actual_cost_usd") or 0.0)
        if usd > 0:
            for period in cl.PERIODS:
                self._served[(client, cl.window(period, row["day"]))] += usd
        tokens = int(row.get("total_tokens") or 0)
        held = self._held.pop(row.get("request_id") or "", None)
        returned = 0.0
        if held is not None:
            self._unhold(held)
            returned = held.tokens
        bucket = self._buckets.get((client, "tpm"))
        if bucket is not None and (tokens or returned):
            bucket.level(self.clock())
            # what it used replaces what it took; never below empty (so no wait is longer than a minute)
            bucket.tokens = min(bucket.capacity, max(0.0, bucket.tokens + returned - tokens))

    def release(self, request_id: str) -> None:
        """Give back what `request_id` holds: it ended without a row to settle it (refused or failed before any
        model answered)."""
        held = self._held.pop(request_id, None)
        if held is None:
            return
        self._unhold(held)
        bucket = self._buckets.get((held.client, "tpm"))
        if bucket is not None and held.tokens:
            bucket.level(self.clock())
            bucket.tokens = min(bucket.capacity, bucket.tokens + held.tokens)

    def _unhold(self, held: Reservation) -> None:
        if held.usd:
            left = self._held_usd.get(held.client, 0.0) - held.usd
            if left > _FULL:
                self._held_usd[held.client] = left
            else:
                self._held_usd.pop(held.client, None)

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

    def _rate_refusal(
        self, client: str, kind: str, limit: int, wait: float, reserving: Need | None = None
    ) -> Refusal:
        unit = "requests" if kind == "rpm" else "tokens"
        seconds = max(1, math.ceil(wait))
        share = limit / self.live
        asked = ""
        if reserving is not None:
            what = f"its {reserving.prompt_field}"
            if reserving.completion_field:
                what += f" and its {reserving.completion_field}, or the model's most"
            asked = f" This request reserves {reserving.tokens} tokens ({what})."
        err = GatewayError(
            429,
            f"Rate limit reached for {unit} per minute: client {client} may use {limit} {unit}/min "
            f"({share:g} at each of {self.live} gateway replicas).{asked} Retry in {seconds} s, or ask the "
            f"operator to raise it (ratchet admin client set {client} --{kind} N).",
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

    def _too_large(self, client: str, tpm: int, need: Need) -> Refusal:
        """A request that needs more tokens than the whole limit: no wait would let it through (a 400 naming the
        caller's own field: its prompt's, or its completion cap's when the prompt alone fits)."""
        cap = need.completion_field
        parts = f"{need.prompt} of prompt in {need.prompt_field}"
        parts += f" and {cap} {need.completion}" if need.stated and cap else ""
        smaller = f"less in {need.prompt_field}" + (f" or a smaller {cap}" if cap else "")
        err = GatewayError(
            400,
            f"This request needs at least {need.least} tokens ({parts}) but client {client} may use {tpm} "
            f"tokens/min in all: send {smaller}, or ask the operator to raise it (ratchet admin client set "
            f"{client} --tpm N).",
            "request_too_large",
            param=cap if need.prompt <= tpm and cap else need.prompt_field,
        )
        return Refusal("tpm", err)

    def _budget_in_flight(
        self, client: str, limits: cl.ClientLimits, spent: float, held: float, need: Need
    ) -> Refusal:
        """The budget's rest is held by the client's requests in flight here: retry once they settle."""
        assert limits.budget_usd is not None
        smaller = f" (a smaller {need.completion_field} reserves less)" if need.completion_field else ""
        err = GatewayError(
            429,
            f"Client {client} has ${max(0.0, limits.budget_usd - spent):.4f} left of its ${limits.budget_usd:g} "
            f"budget this {limits.budget_period}, and its requests in flight hold ${held:.4f} of it; this request "
            f"may cost up to ${need.usd:.4f}{smaller}. Retry in 1 s.",
            "budget_in_flight",
            type_="insufficient_quota",
            headers={"retry-after": "1"},
        )
        return Refusal("budget", err)

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
        stale = [rid for rid, held in self._held.items() if self.clock() - held.at > HOLD_S]
        for rid in stale:  # a request that never settled (none should): its reservation is given back
            self.release(rid)
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
            held = self._held_usd.get(client, 0.0)
            out.update(
                window=win,
                spent_usd=spent,
                remaining_usd=max(0.0, limits.budget_usd - spent),
                in_flight_usd=held,
            )
        if limits.tpm is not None:  # this replica's bucket: what a request may reserve here now
            now = self.clock()
            out["tokens_available"] = self._bucket(client, "tpm", limits.tpm, now).level(now)
        out["refused"] = {kind: self.refused.get((client, kind), 0) for kind in ("rpm", "tpm", "budget")}
        return out
