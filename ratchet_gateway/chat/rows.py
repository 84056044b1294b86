"""What the gateway records about a chat request: its ledger row (``request`` and ``pair`` kinds, built by
``ratchet_core.schema``), committed durably, and the answer's ``x-ratchet-*`` headers and served metrics.

A row stores the redacted body (``ratchet_gateway.chat.redaction``) and the answer redacted by ``Gateway.redact``;
structured values are compact JSON with sorted keys (:func:`canonical_json`, the ledger's text form). A served
answer's row is committed before the answer is released (:meth:`Recorder.commit`: ``await ledger.append``, the
journal's group commit); rows off the request path (pairs, failures, a stream cut short) are appended without
failing anyone when the ledger is down (counted as ``ratchet_errors{type="ledger_unavailable"}``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson

from ratchet_core import json_pieces
from ratchet_core.routing import pairs
from ratchet_core.schema import pair_row, request_row
from ratchet_gateway.chat.completion import message_of, token_counts
from ratchet_gateway.chat.context import ChatCall
from ratchet_gateway.chat.redaction import TEACHER_SCHEMA_PARAM, body_columns
from ratchet_gateway.errors import GatewayError

if TYPE_CHECKING:
    from ratchet_gateway.state import Gateway

_SORTED = orjson.OPT_SORT_KEYS


def canonical_json(obj: Any) -> str:
    """Compact JSON with sorted keys (the ledger's canonical text form of structured values)."""
    return orjson.dumps(obj, option=_SORTED).decode()


class Recorder:
    """Builds and commits a request's rows (one per app)."""

    def __init__(self, gw: Gateway):
        self.gw = gw

    def _columns(self, call: ChatCall, resp: dict | None, err: GatewayError | None) -> dict[str, Any]:
        """The columns a request row and its pair rows share: the request, and an answer (`resp`, None when there
        is none) or the error it ended with."""
        gw = self.gw
        red = gw.redact
        rec = call.received
        msg, finish, usage = message_of(resp or {})
        p, c, r, tot = token_counts(usage)
        content = msg.get("content")
        tool_calls = msg.get("tool_calls")
        return {
            "request_id": rec.request_id,
            "ts": rec.ts,
            "day": rec.day,
            "client": rec.client,
            "task": rec.task,
            "model_requested": rec.req.model,
            "stage": call.decision.route.stage,
            "stream": rec.req.stream,
            "messages": body_columns(call, gw.settings.redact_pii).messages,
            "answer": red(content) if isinstance(content, str) else "",
            "tool_calls": canonical_json(red(tool_calls)) if tool_calls else "",
            "finish_reason": "error" if err else finish,
            "prompt_tokens": p,
            "completion_tokens": c,
            "reasoning_tokens": r,
            "total_tokens": tot,
            "status_code": err.status if err else 200,
            "error_type": err.type if err else "",
            "error": red(err.message) if err else "",
            "api": rec.api,
        }

    def request_row(
        self,
        call: ChatCall,
        resp: dict | None,
        truncated: bool = False,
        err: GatewayError | None = None,
        usage_source: str | None = None,
    ) -> dict:
        """The ``request`` row of `call` answered by `resp` (None: no answer; `err` or ``call.outcome.error``:
        the request failed); `usage_source` (default ``call.outcome.usage_source``) says whether `resp`'s usage is
        the model's report or Ratchet's count (``ratchet_core.schema.USAGE_SOURCES``)."""
        gw = self.gw
        attempt, outcome, route = call.student, call.outcome, call.decision.route
        cols = self._columns(call, resp, err or outcome.error)
        teacher_cost = gw.teacher_prices.cost(cols["prompt_tokens"], cols["completion_tokens"])
        # a cascade paid for both answers
        served_by = outcome.served_by
        actual = attempt.cost if served_by == "student" else teacher_cost + (attempt.cost or 0.0)
        latency = (time.perf_counter() - call.received.t0) * 1000
        body = body_columns(call, gw.settings.redact_pii)
        return request_row(
            **cols,
            version=attempt.version or route.version,
            served_by=served_by,
            tools=body.tools,
            response_format=body.response_format,
            params=body.params
            if not call.outcome.teacher_schema
            else _with_teacher_schema(body.params, call),
            teacher_cost_usd=teacher_cost if resp else 0.0,
            actual_cost_usd=actual if resp else (attempt.cost or 0.0),
            latency_ms=latency,
            upstream_ms=outcome.upstream_ms,
            overhead_ms=max(0.0, latency - outcome.upstream_ms),
            confidence=attempt.confidence,
            threshold=attempt.threshold,
            pair_role=pairs(route, served_by).role,
            truncated=truncated,
            contract_violation=attempt.violation,
            episode=call.received.episode,
            usage_source=usage_source or call.outcome.usage_source,
        )

    def pair_row(
        self,
        call: ChatCall,
        role: str,
        version: str,
        other: dict | None,
        error: GatewayError | None,
        outcome: str,
        confidence: float | None,
        threshold: float | None,
        elapsed_ms: float,
        contract_violation: str = "",
    ) -> dict:
        """One ``pair`` row: `other` is the off-path answer (the teacher's for an audit, the candidate's for a
        shadow), `version` the student version it is evidence about, `outcome` agree|disagree|error."""
        gw = self.gw
        cols = self._columns(call, other, error)
        p, c = cols["prompt_tokens"], cols["completion_tokens"]
        teacher_cost = gw.teacher_prices.cost(p, c)
        return pair_row(
            **cols,
            version=version,
            served_by="teacher" if role in ("audit", "targeted") else "student",
            response_format=body_columns(call, gw.settings.redact_pii).response_format,
            teacher_cost_usd=teacher_cost,
            actual_cost_usd=teacher_cost if role in ("audit", "targeted") else gw.student_prices.cost(p, c),
            latency_ms=elapsed_ms,
            upstream_ms=elapsed_ms,
            overhead_ms=0.0,
            confidence=confidence,
            threshold=threshold,
            pair_role=role,
            pair_outcome=outcome,
            contract_violation=contract_violation,
        )

    async def commit(self, call: ChatCall, row: dict) -> None:
        """Settle the row's teacher-equivalent columns and append it durably; a 503 when the ledger cannot take it
        (the answer is not released unrecorded)."""
        await self.gw.teacher_equivalent.settle(row, call.student.teacher_prompt)
        await self.append(row, await self._encoded(call, row))

    async def append(self, row: dict, encoded: bytes | None = None) -> None:
        """Append a request row durably (the journal's group commit; `encoded`: its JSON, written in the lane for
        a large request) and count it against its client's limits; a 503 when the ledger cannot take it."""
        try:
            await self.gw.ledger.append(row, encoded)
            self.gw.limits.observe(row)  # its spend and tokens against the client's limits
        except OSError as exc:
            raise GatewayError(
                503,
                "the gateway cannot record requests right now (ledger unavailable); retry later",
                "ledger_unavailable",
            ) from exc

    def commit_nowait(self, call: ChatCall, row: dict) -> None:
        """Queue a row without waiting for its journal sync (a stream that ended without its answer); a large
        request's row is encoded in the lane first (a background task)."""
        self.gw.limits.observe(row)  # the tokens and dollars an unfinished answer used
        if call.received.large:
            self.gw.spawn(self.append_quietly(row, call, observed=True))
            return
        try:
            self.gw.ledger.append_nowait(row)
        except OSError:
            self.gw.metrics.errors.labels("ledger_unavailable").inc()

    async def append_quietly(self, row: dict, call: ChatCall | None = None, observed: bool = False) -> None:
        """Append a row durably off the answer's path (`call`: the request it belongs to, so a large one's row is
        encoded in the lane): a ledger failure is counted, never raised. A request row settles its client's
        limits (``ClientLimiter.observe``; pair rows are never charged) unless that was `observed` already."""
        if not observed:
            self.gw.limits.observe(row)
        try:
            await self.gw.ledger.append(row, None if call is None else await self._encoded(call, row))
        except OSError:
            self.gw.metrics.errors.labels("ledger_unavailable").inc()

    async def _encoded(self, call: ChatCall, row: dict) -> bytes | None:
        """A large request's row as journal JSON, written in the lane (None: the ledger encodes it itself)."""
        if not call.received.large:
            return None
        return await self.gw.offload.run(json_pieces.dumps, row)

    async def teacher_failed(self, call: ChatCall, err: GatewayError) -> None:
        """The teacher failed before sending any answer: count the fault and record the failed row (the client
        gets `err` as an HTTP error)."""
        self.gw.metrics.upstream_faults.labels("teacher", err.code or "").inc()
        call.outcome.served_by = "teacher"
        await self.append_quietly(self.request_row(call, None, err=err), call)

    def answer_headers(self, call: ChatCall) -> dict[str, str]:
        """The answer's ``x-ratchet-*`` headers, now that it is known who served; counts the request as served
        (``Metrics.served``)."""
        h = call.headers
        served_by = call.outcome.served_by
        h["x-ratchet-served-by"] = served_by
        h["x-ratchet-version"] = call.student.version if served_by == "student" else "teacher"
        h["x-ratchet-manifest"] = str(call.decision.manifest_seq)
        elapsed = (time.perf_counter() - call.received.t0) * 1000
        overhead = max(0.0, elapsed - call.outcome.upstream_ms)
        h["x-ratchet-overhead-ms"] = f"{overhead:.3f}"
        self.gw.metrics.served(served_by, elapsed / 1000, overhead / 1000)
        return h


def _with_teacher_schema(params: str, call: ChatCall) -> str:
    """The params column with the gateway's note that the teacher got the schema as text (``chat.teacher``)."""
    note = {"sent_as": call.outcome.teacher_schema, "violation": call.outcome.teacher_schema_violation}
    return canonical_json({**orjson.loads(params), TEACHER_SCHEMA_PARAM: note})
