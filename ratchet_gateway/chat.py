"""The chat pipeline behind ``POST /v1/chat/completions`` (``ratchet_gateway.routers.chat``): route, call the
teacher and/or the student, record the row durably, answer.

The order per request: authenticate -> read the body (size-limited) -> validate -> route by the release manifest
-> call the model(s) -> build the ledger row (redacted) -> ``await ledger.append`` (journal group commit) ->
release the response. Streaming responses are recorded when the stream ends, before the final ``[DONE]``; a
stream that breaks is recorded with ``truncated=True``. Shadow and audit calls run off the request path and
write ``pair`` rows, as ``ratchet_core.routing.pairs`` decides (an audited request may also shadow a candidate,
compared with the teacher's audit answer).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ratchet_core.confidence import answer_confidence
from ratchet_core.redact import redact_request, redact_text, restore_text
from ratchet_core.routing import pairs, route
from ratchet_core.schema import pair_row, request_row
from ratchet_gateway import answer_guard
from ratchet_gateway.auth import invalid_key_error
from ratchet_gateway.breaker import STATE_VALUES, Breaker
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.request_body import (
    RATCHET_METADATA,
    episode_of,
    parse_chat_body,
    read_body,
    receive_body,
    task_of,
    validate_chat_body,
)
from ratchet_gateway.responses import error_event, error_response, new_request_id, ratchet_headers
from ratchet_gateway.serve_http import EXTENSION as HOLD_HEAD
from ratchet_gateway.upstream import student_timeouts, teacher_timeouts

if TYPE_CHECKING:
    from ratchet_gateway.state import Gateway

log = logging.getLogger("ratchet.gateway")
_SORTED = orjson.OPT_SORT_KEYS
_NO_EXTENSIONS: dict = {}
# request fields stored in columns of their own; every other one is stored (redacted) in ``params``
_OWN_COLUMNS = frozenset({"model", "messages", "tools", "tool_choice", "response_format", "stream"})


def _cj(obj: Any) -> str:
    """Compact JSON with sorted keys (the ledger's canonical text form of structured values)."""
    return orjson.dumps(obj, option=_SORTED).decode()


def _endpoint_label(base: str) -> str:
    """A base URL as a metrics label: scheme, host, port and path, never credentials in it."""
    scheme, sep, rest = base.partition("://")
    return scheme + sep + rest.rsplit("@", 1)[-1] if sep else base


_US_PER_DAY = 86_400_000_000
_day_cache: list = [-1, ""]  # [UTC day number, its "YYYY-MM-DD"]: strftime once a day, not per request


def _now_us_and_day(clock_now) -> tuple[int, str]:
    if clock_now is None:
        us = time.time_ns() // 1000
        n = us // _US_PER_DAY
        if n != _day_cache[0]:
            _day_cache[1] = time.strftime("%Y-%m-%d", time.gmtime(n * 86_400))
            _day_cache[0] = n
        return us, _day_cache[1]
    dt = clock_now()
    return int(dt.timestamp() * 1e6), dt.strftime("%Y-%m-%d")


def _message_of(resp: dict) -> tuple[dict, str, dict]:
    """(assistant message, finish_reason, usage) of choice 0."""
    choices = resp.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    msg = choice.get("message") or {}
    return msg, str(choice.get("finish_reason") or ""), resp.get("usage") or {}


def _tokens(usage: dict) -> tuple[int, int, int, int]:
    p = int(usage.get("prompt_tokens") or 0)
    c = int(usage.get("completion_tokens") or 0)
    details = usage.get("completion_tokens_details") or {}
    r = int(details.get("reasoning_tokens") or 0) if isinstance(details, dict) else 0
    return p, c, r, int(usage.get("total_tokens") or p + c)


def _confidence(resp: dict) -> float:
    choices = resp.get("choices") or [{}]
    lp = (choices[0] or {}).get("logprobs") or {}
    content = lp.get("content") or []
    return answer_confidence([float(t.get("logprob", 0.0)) for t in content if isinstance(t, dict)])


def _restore_answer(resp: dict, mapping: dict[str, str]) -> None:
    """Put the client's own text back into a student answer, in place: every placeholder of `mapping` in each
    choice's content and tool-call arguments becomes its original (JSON-escaped inside the arguments string).
    Logprobs are left as the student produced them."""
    if not mapping:
        return
    escaped: dict[str, str] | None = None
    for choice in resp.get("choices") or []:
        msg = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(msg, dict):
            continue
        if isinstance(msg.get("content"), str):
            msg["content"] = restore_text(msg["content"], mapping)
        for tc in msg.get("tool_calls") or []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                if escaped is None:
                    escaped = {k: orjson.dumps(v).decode()[1:-1] for k, v in mapping.items()}
                fn["arguments"] = restore_text(fn["arguments"], escaped)


def _unexpected(exc: Exception) -> GatewayError:
    """The 500 for a bug (``_log_5xx`` logs it with its traceback and the request id)."""
    err = GatewayError(
        500,
        "internal gateway error; retry, and report it with the request id if it persists",
        "internal_error",
    )
    err.__cause__ = exc
    return err


def _log_5xx(rid: str, err: GatewayError) -> None:
    """Every 5xx answer is logged with its request id and its cause (redacted), so the id a client reports
    finds the log line; a bug (``internal_error``) with its traceback."""
    cause = err.__cause__
    why = redact_text(f" (cause: {type(cause).__name__}: {cause})") if cause is not None else ""
    log.log(
        logging.ERROR if err.code == "internal_error" else logging.WARNING,
        "request %s: %d %s: %s%s",
        rid,
        err.status,
        err.code or err.type,
        redact_text(err.message),
        why,
        exc_info=cause if err.code == "internal_error" else None,
    )


class ChatHandler:
    """One per app (``app.state.chat``); called with the raw request, answers it (errors in OpenAI's shape)."""

    def __init__(self, gw: Gateway):
        self.gw = gw
        self.teacher_timeouts = teacher_timeouts(gw.settings)
        self.student_timeouts = student_timeouts(gw.settings)
        self._breakers: dict[str, Breaker] = {}

    # entry point -------------------------------------------------------------------------------------------
    async def __call__(self, request: Request) -> Response:
        """The answer to a Starlette request (the registered route, ``ratchet_gateway.routers.chat``)."""
        h = request.headers
        limit = self.gw.settings.max_body_bytes
        return await self._handle(
            h.get("authorization"), h.get("x-ratchet-task"), lambda: read_body(request, limit)
        )

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The same, as a raw ASGI call: the app sends ``POST /v1/chat/completions`` here before Starlette's
        middleware and router (``ratchet_gateway.app``; measured, about a fifth of the gateway's CPU per request).
        Reads the three headers it needs in one pass (first occurrence, as ``Request.headers.get``)."""
        auth = task = length = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                auth = value.decode("latin-1") if auth is None else auth
            elif name == b"content-length":
                length = value if length is None else length
            elif name == b"x-ratchet-task":
                task = value.decode("latin-1") if task is None else task
        limit = self.gw.settings.max_body_bytes
        response = await self._handle(auth, task, lambda: receive_body(receive, length, limit))
        if not isinstance(response, StreamingResponse):
            hold_head = scope.get("extensions", _NO_EXTENSIONS).get(HOLD_HEAD)
            if hold_head is not None:  # ``ratchet gateway``'s server: head and body in one socket write
                hold_head()
        await response(scope, receive, send)

    async def _handle(
        self, authorization: str | None, task_header: str | None, read: Callable[[], Awaitable[bytes]]
    ) -> Response:
        gw = self.gw
        t0 = time.perf_counter()
        rid = new_request_id()
        headers = ratchet_headers(rid)
        try:
            # Authentication is the first thing, before the body is read (an unknown caller costs no parsing).
            client = gw.keys.authenticate(authorization)
            if client is None:
                raise invalid_key_error()
            raw = await read()
            body = parse_chat_body(raw)
            req = validate_chat_body(body)
            if req.model not in gw.model_names:
                raise GatewayError(
                    404,
                    f"model {req.model!r} is not served here; use one of: {', '.join(sorted(gw.model_names))} "
                    "(GET /v1/models lists them)",
                    "model_not_found",
                )
            task = task_of(req, task_header)
            episode = episode_of(req)
            meta = body.get("metadata")
            if isinstance(meta, dict):
                rest = {k: v for k, v in meta.items() if k not in RATCHET_METADATA}
                if rest:
                    body["metadata"] = rest
                else:
                    body.pop("metadata")
            ts, day = _now_us_and_day(gw.clock_now)
            r = route(gw.manifest, gw.safety, task, rid)
            ctx = _Ctx(
                rid=rid,
                t0=t0,
                ts=ts,
                day=day,
                client=client,
                task=task,
                req=req,
                body=body,
                route=r,
                headers=headers,
            )
            ctx.manifest_seq = gw.manifest.sequence  # the manifest `r` was decided with (no await in between)
            ctx.episode = episode
            if req.stream:
                return await self._stream(ctx)
            return await self._complete(ctx)
        except Exception as exc:
            err = exc if isinstance(exc, GatewayError) else _unexpected(exc)
            if err.status >= 500:
                _log_5xx(rid, err)
                err.message = f"{err.message} (request id {rid})"
            gw.metrics.errors.labels(err.type).inc()
            gw.metrics.requests.labels(headers["x-ratchet-served-by"], str(err.status)).inc()
            headers["x-ratchet-overhead-ms"] = f"{(time.perf_counter() - t0) * 1000:.3f}"
            return error_response(err, headers)

    # non-streaming -----------------------------------------------------------------------------------------
    async def _complete(self, ctx: _Ctx) -> Response:
        student_resp = None
        if ctx.route.student_version:
            student_resp = await self._try_student(ctx)
        if student_resp is not None:
            ctx.served_by = "student"
            resp = student_resp
        else:
            resp = await self._call_teacher(ctx)
        out = self._finish_body(ctx, resp)
        row = self._row(ctx, resp)
        await self._commit(ctx, row)
        self._after(ctx, resp)
        return Response(out, media_type="application/json", headers=self._final_headers(ctx))

    async def _try_student(self, ctx: _Ctx) -> dict | None:
        """The student's answer if it came back in time with confidence >= threshold, else None (-> teacher)."""
        gw = self.gw
        if ctx.teacher_prompt is None:  # the teacher-equivalent's prompt count, while the student answers
            ctx.teacher_prompt = gw.teacher_equivalent.start_count(ctx.body)
        body = {**self._student_body(ctx), "logprobs": True}
        t = time.perf_counter()
        try:
            resp = await self._ask_student(body, ctx.route.student_version, ctx.task)
        except GatewayError as err:
            ctx.student_error = err.message
            ctx.upstream_ms += (time.perf_counter() - t) * 1000
            return None
        ctx.upstream_ms += (time.perf_counter() - t) * 1000
        ctx.confidence = _confidence(resp)
        ctx.threshold = ctx.route.threshold
        p, c, _, _ = _tokens(resp.get("usage") or {})
        ctx.student_cost = gw.student_prices.cost(p, c)
        ctx.version = ctx.route.student_version or ""
        if ctx.threshold is not None and ctx.confidence < ctx.threshold:
            return None  # cascade: not confident enough
        _restore_answer(resp, ctx.pii_map or {})
        msg, finish, _ = _message_of(resp)
        violation = await answer_guard.check(ctx.body, msg, finish)
        if violation is not None:  # cascade: the answer breaks the request's own contract
            ctx.contract_violation = violation.kind
            gw.metrics.contract_violations.labels(violation.kind).inc()
            return None
        if not ctx.req.logprobs:
            for choice in resp.get("choices") or []:
                if isinstance(choice, dict):
                    choice["logprobs"] = None
        return resp

    async def _call_teacher(self, ctx: _Ctx) -> dict:
        t = time.perf_counter()
        try:
            resp = await self.gw.teacher.complete(ctx.body, task=ctx.task, timeouts=self.teacher_timeouts)
        except GatewayError as err:
            ctx.upstream_ms += (time.perf_counter() - t) * 1000
            self.gw.metrics.upstream_faults.labels("teacher", err.code or "").inc()
            await self._record_failure(ctx, err)
            raise
        ctx.upstream_ms += (time.perf_counter() - t) * 1000
        return resp

    def _finish_body(self, ctx: _Ctx, resp: dict) -> bytes:
        return orjson.dumps(resp)

    # streaming ---------------------------------------------------------------------------------------------
    async def _stream(self, ctx: _Ctx) -> Response:
        include_usage = bool((ctx.req.stream_options or {}).get("include_usage"))
        if ctx.route.student_version:
            resp = await self._try_student(ctx)
            if resp is not None:
                ctx.served_by = "student"
                row = self._row(ctx, resp)
                return StreamingResponse(
                    self._replay_as_sse(ctx, resp, row, include_usage),
                    media_type="text/event-stream",
                    headers=self._final_headers(ctx, committed=False),
                )
        t = time.perf_counter()
        agen = self.gw.teacher.stream(ctx.body, task=ctx.task, timeouts=self.teacher_timeouts)
        try:
            first = await agen.__anext__()
        except StopAsyncIteration:
            first = None
        except GatewayError as err:  # nothing sent yet: the client gets an HTTP error
            ctx.upstream_ms += (time.perf_counter() - t) * 1000
            self.gw.metrics.upstream_faults.labels("teacher", err.code or "").inc()
            await self._record_failure(ctx, err)
            raise
        ctx.ttfb_upstream_ms = (time.perf_counter() - t) * 1000
        return StreamingResponse(
            self._relay(ctx, agen, first, t, include_usage),
            media_type="text/event-stream",
            headers=self._final_headers(ctx, committed=False),
        )

    async def _relay(
        self,
        ctx: _Ctx,
        agen: AsyncIterator[tuple[bytes, dict]],
        first: tuple[bytes, dict] | None,
        t: float,
        include_usage: bool,
    ) -> AsyncIterator[bytes]:
        """Relay the teacher's checked chunks (``Upstream.stream``), record the row, then ``[DONE]``. Any fault after
        the headers went out (an upstream error event, a malformed chunk, an early close, a timeout) ends the
        stream with one OpenAI-shaped error event and no ``[DONE]``; its row is stored failed and truncated."""
        acc = _StreamAccumulator()
        done = False
        try:
            item = first
            while item is not None:
                raw, obj = item
                acc.add(obj)
                if include_usage or obj.get("choices"):
                    yield b"data: " + raw + b"\n\n"
                try:
                    item = await agen.__anext__()
                except StopAsyncIteration:
                    item = None
            ctx.upstream_ms += (time.perf_counter() - t) * 1000
            resp = acc.response()
            # [DONE] without a finish_reason: the answer may be incomplete, so it is never a training example
            row = self._row(ctx, resp, truncated=not acc.finish)
            await self._commit(ctx, row)
            done = True
            self._after(ctx, resp)
            yield b"data: [DONE]\n\n"
        except Exception as exc:  # the stream broke after its headers: tell the client in the stream itself
            if isinstance(exc, GatewayError):
                err = exc
            else:
                if not isinstance(exc, aiohttp.ClientError | TimeoutError):
                    log.exception("request %s: the stream relay failed", ctx.rid)
                err = GatewayError(502, "the model stream broke; retry", "upstream_stream_broken")
                err.__cause__ = exc
            _log_5xx(ctx.rid, err)
            if not done:
                ctx.error = err
                self.gw.metrics.upstream_faults.labels("teacher", err.code or "").inc()
            self.gw.metrics.errors.labels(err.type).inc()
            yield error_event(err)
        finally:
            if not done:
                resp = acc.response()
                row = self._row(ctx, resp, truncated=True)
                self._commit_nowait(row)
            await agen.aclose()

    async def _replay_as_sse(
        self, ctx: _Ctx, resp: dict, row: dict, include_usage: bool
    ) -> AsyncIterator[bytes]:
        base = {
            "id": resp.get("id", ctx.rid),
            "object": "chat.completion.chunk",
            "created": resp.get("created", int(time.time())),
            "model": resp.get("model", ""),
        }
        msg, finish, usage = _message_of(resp)
        choice0 = (resp.get("choices") or [{}])[0]

        def chunk(delta: dict, finish_reason=None, logprobs=None) -> bytes:
            c = {
                **base,
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": logprobs}
                ],
            }
            return b"data: " + orjson.dumps(c) + b"\n\n"

        committed = False
        try:
            await self._commit(ctx, row)
            committed = True
            yield chunk({"role": "assistant", "content": ""})
            if msg.get("content"):
                yield chunk({"content": msg["content"]}, logprobs=choice0.get("logprobs"))
            for i, tc in enumerate(msg.get("tool_calls") or []):
                yield chunk({"tool_calls": [{"index": i, **tc}]})
            yield chunk({}, finish_reason=finish or "stop")
            if include_usage:
                yield b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n"
            self._after(ctx, resp)
            yield b"data: [DONE]\n\n"
        finally:
            if not committed:
                self._commit_nowait(self._row(ctx, resp, truncated=True))

    # the student endpoint and its breaker ---------------------------------------------------------------------
    def breaker(self) -> Breaker:
        """The circuit breaker of the student endpoint (one per base URL; ``ratchet_gateway.breaker``)."""
        gw = self.gw
        endpoint = gw.student.base
        b = self._breakers.get(endpoint)
        if b is None:
            label = _endpoint_label(endpoint)
            m = gw.metrics

            def changed(state: str) -> None:
                m.breaker_state.labels(label).set(STATE_VALUES[state])
                m.breaker_transitions.labels(label, state).inc()
                log.warning("student endpoint %s: circuit breaker %s", label, state.replace("_", "-"))

            s = gw.settings
            b = Breaker(s.student_breaker_failures, s.student_breaker_probe_s, on_change=changed)
            self._breakers[endpoint] = b
            m.breaker_state.labels(label).set(0)
        return b

    async def _ask_student(self, body: dict, version: str | None, task: str) -> dict:
        """The student's answer through its endpoint's breaker; GatewayError when it fails or the breaker is open
        (then nothing is sent: the caller turns to the teacher at once)."""
        gw = self.gw
        breaker = self.breaker()
        ticket = breaker.allow()
        if ticket is None:
            gw.metrics.breaker_bypassed.labels(_endpoint_label(gw.student.base)).inc()
            raise GatewayError(503, "the student endpoint's circuit breaker is open", "student_circuit_open")
        try:
            resp = await gw.student.complete(body, model=version, task=task, timeouts=self.student_timeouts)
        except GatewayError as err:
            gw.metrics.upstream_faults.labels("student", err.code or "").inc()
            # a 4xx is an answer (an adapter not loaded, a request it refuses): the endpoint itself is healthy
            (breaker.failure if err.status >= 500 else breaker.success)(ticket)
            raise
        except BaseException:  # cancelled (the client went away): no verdict on the endpoint
            breaker.abandon(ticket)
            raise
        breaker.success(ticket)
        return resp

    # PII and the student -------------------------------------------------------------------------------------
    def _student_body(self, ctx: _Ctx) -> dict:
        """The body the STUDENT gets and the ledger stores: with PII redaction on, the whole body through
        ``ratchet_core.redact.redact_request`` (messages, names, tools, response_format schemas, user, stop,
        metadata and every other parameter; the student was trained and certified on placeholders), computed once
        per request; ``ctx.pii_map`` keeps placeholder -> original for :func:`_restore_answer`. The teacher gets
        ``ctx.body``."""
        if ctx.student_body is None:
            if self.gw.settings.redact_pii:
                ctx.student_body, ctx.pii_map = redact_request(ctx.body)
            else:
                ctx.student_body = ctx.body
            ctx.red_messages = ctx.student_body.get("messages") or []
        return ctx.student_body

    def _red_messages(self, ctx: _Ctx) -> Any:
        """The messages as the ledger stores them (computed once per request)."""
        if ctx.red_messages is None:
            self._student_body(ctx)
        return ctx.red_messages

    def _red_fields(self, ctx: _Ctx) -> tuple[str, str, str]:
        """(tools, response_format, params) columns of a row: from the redacted body (``_student_body``); params
        are every request parameter without a column of its own."""
        rb = self._student_body(ctx)
        tools = _cj({"tools": rb.get("tools"), "tool_choice": rb.get("tool_choice")}) if ctx.req.tools else ""
        rf = _cj(rb["response_format"]) if ctx.req.response_format else ""
        return tools, rf, _cj({k: v for k, v in rb.items() if k not in _OWN_COLUMNS})

    # ledger ------------------------------------------------------------------------------------------------
    def _row(
        self, ctx: _Ctx, resp: dict | None, truncated: bool = False, err: GatewayError | None = None
    ) -> dict:
        gw = self.gw
        red = gw.redact
        msg, finish, usage = _message_of(resp or {})
        p, c, r, tot = _tokens(usage)
        teacher_cost = gw.teacher_prices.cost(p, c)
        # a cascade paid for both answers
        actual = ctx.student_cost if ctx.served_by == "student" else teacher_cost + (ctx.student_cost or 0.0)
        latency = (time.perf_counter() - ctx.t0) * 1000
        tools, response_format, params = self._red_fields(ctx)
        content = msg.get("content")
        tool_calls = msg.get("tool_calls")
        err = err or ctx.error
        return request_row(
            request_id=ctx.rid,
            ts=ctx.ts,
            day=ctx.day,
            client=ctx.client,
            task=ctx.task,
            model_requested=ctx.req.model,
            stage=ctx.route.stage,
            version=ctx.version or ctx.route.version,
            served_by=ctx.served_by,
            stream=ctx.req.stream,
            messages=_cj(self._red_messages(ctx)),
            tools=tools,
            response_format=response_format,
            params=params,
            answer=red(content) if isinstance(content, str) else "",
            tool_calls=_cj(red(tool_calls)) if tool_calls else "",
            finish_reason="error" if err else finish,
            prompt_tokens=p,
            completion_tokens=c,
            reasoning_tokens=r,
            total_tokens=tot,
            teacher_cost_usd=teacher_cost if resp else 0.0,
            actual_cost_usd=actual if resp else (ctx.student_cost or 0.0),
            latency_ms=latency,
            upstream_ms=ctx.upstream_ms,
            overhead_ms=max(0.0, latency - ctx.upstream_ms),
            confidence=ctx.confidence,
            threshold=ctx.threshold,
            pair_role=self._pair_role(ctx),
            truncated=truncated,
            status_code=err.status if err else 200,
            error_type=err.type if err else "",
            error=red(err.message) if err else "",
            contract_violation=ctx.contract_violation,
            episode=ctx.episode,
        )

    @staticmethod
    def _pair_role(ctx: _Ctx) -> str:
        return pairs(ctx.route, ctx.served_by).role

    async def _commit(self, ctx: _Ctx, row: dict) -> None:
        await self.gw.teacher_equivalent.settle(row, ctx.teacher_prompt)
        try:
            await self.gw.ledger.append(row)
        except OSError as exc:
            raise GatewayError(
                503,
                "the gateway cannot record requests right now (ledger unavailable); retry later",
                "ledger_unavailable",
            ) from exc
        ctx.committed = True

    def _commit_nowait(self, row: dict) -> None:
        try:
            self.gw.ledger.append_nowait(row)
        except OSError:
            self.gw.metrics.errors.labels("ledger_unavailable").inc()

    async def _record_failure(self, ctx: _Ctx, err: GatewayError) -> None:
        ctx.served_by = "teacher"
        row = self._row(ctx, None, err=err)
        try:
            await self.gw.ledger.append(row)
        except OSError:
            self.gw.metrics.errors.labels("ledger_unavailable").inc()

    def _final_headers(self, ctx: _Ctx, committed: bool = True) -> dict[str, str]:
        h = ctx.headers
        h["x-ratchet-served-by"] = ctx.served_by
        h["x-ratchet-version"] = ctx.version if ctx.served_by == "student" else "teacher"
        h["x-ratchet-manifest"] = str(ctx.manifest_seq)
        elapsed = (time.perf_counter() - ctx.t0) * 1000
        overhead = max(0.0, elapsed - ctx.upstream_ms)
        h["x-ratchet-overhead-ms"] = f"{overhead:.3f}"
        self.gw.metrics.served(ctx.served_by, elapsed / 1000, overhead / 1000)
        return h

    # off the request path ----------------------------------------------------------------------------------
    def _after(self, ctx: _Ctx, resp: dict) -> None:
        p = pairs(ctx.route, ctx.served_by)
        if p.audit:
            self.gw.spawn(self._audit(ctx, resp, p.shadow_version))
        elif p.shadow_version:
            self.gw.spawn(self._shadow(ctx, resp, p.shadow_version))

    async def _audit(self, ctx: _Ctx, served: dict, candidate: str | None) -> None:
        """Re-ask the teacher about a student-served request -> ``audit`` pair row; then, when a candidate is
        shadowed, have it answer too and compare it with the teacher's audit answer -> ``shadow`` pair row."""
        gw = self.gw
        t = time.perf_counter()
        try:
            teacher = await gw.teacher.complete(ctx.body, task=ctx.task, timeouts=self.teacher_timeouts)
            error = None
        except GatewayError as err:
            teacher, error = None, err
        served_msg, _, _ = _message_of(served)
        outcome = "error"
        if teacher is not None:
            teacher_msg, _, _ = _message_of(teacher)
            outcome = "agree" if gw.compare(ctx.task, teacher_msg, served_msg) else "disagree"
        await self._write_pair(ctx, "audit", ctx.version, teacher, error, outcome, None, ctx.threshold, t)
        if candidate and teacher is not None:  # no teacher answer: nothing to compare the candidate with
            await self._shadow(ctx, teacher, candidate)

    async def _shadow(self, ctx: _Ctx, teacher: dict, version: str) -> None:
        """Have candidate `version` answer off the path; compare it with the teacher's answer -> ``shadow`` row
        with the candidate's own threshold (``Route.shadow_threshold``)."""
        gw = self.gw
        t = time.perf_counter()
        confidence = None
        try:
            student = await self._ask_student(
                {**self._student_body(ctx), "logprobs": True}, version, ctx.task
            )
            confidence = _confidence(student)
            _restore_answer(student, ctx.pii_map or {})
            error = None
        except GatewayError as err:
            student, error = None, err
        outcome, violation = "error", None
        if student is not None:
            teacher_msg, _, _ = _message_of(teacher)
            student_msg, student_finish, _ = _message_of(student)
            outcome = "agree" if gw.compare(ctx.task, teacher_msg, student_msg) else "disagree"
            # what the guard would have done had this candidate served: the release evidence reads it
            violation = await answer_guard.check(ctx.body, student_msg, student_finish)
        await self._write_pair(
            ctx,
            "shadow",
            version,
            student,
            error,
            outcome,
            confidence,
            ctx.route.shadow_threshold,
            t,
            contract_violation=violation.kind if violation else "",
        )

    async def _write_pair(
        self,
        ctx: _Ctx,
        role: str,
        version: str,
        other: dict | None,
        error: GatewayError | None,
        outcome: str,
        confidence: float | None,
        threshold: float | None,
        t: float,
        contract_violation: str = "",
    ) -> None:
        """One ``pair`` row: `other` is the off-path answer (the teacher's for an audit, the candidate's for a
        shadow), `version` the student version it is evidence about."""
        gw = self.gw
        gw.metrics.pairs.labels(role, outcome).inc()
        msg, finish, usage = _message_of(other or {})
        p, c, rt, tot = _tokens(usage)
        teacher_cost = gw.teacher_prices.cost(p, c)
        red = gw.redact
        elapsed = (time.perf_counter() - t) * 1000
        row = pair_row(
            request_id=ctx.rid,
            ts=ctx.ts,
            day=ctx.day,
            client=ctx.client,
            task=ctx.task,
            model_requested=ctx.req.model,
            stage=ctx.route.stage,
            version=version,
            served_by="student" if role == "shadow" else "teacher",
            stream=ctx.req.stream,
            messages=_cj(self._red_messages(ctx)),
            response_format=self._red_fields(ctx)[1],
            answer=red(msg.get("content")) if isinstance(msg.get("content"), str) else "",
            tool_calls=_cj(red(msg.get("tool_calls"))) if msg.get("tool_calls") else "",
            finish_reason="error" if error else finish,
            prompt_tokens=p,
            completion_tokens=c,
            reasoning_tokens=rt,
            total_tokens=tot,
            teacher_cost_usd=teacher_cost,
            actual_cost_usd=gw.student_prices.cost(p, c) if role == "shadow" else teacher_cost,
            latency_ms=elapsed,
            upstream_ms=elapsed,
            overhead_ms=0.0,
            confidence=confidence,
            threshold=threshold,
            pair_role=role,
            pair_outcome=outcome,
            status_code=error.status if error else 200,
            error_type=error.type if error else "",
            error=red(error.message) if error else "",
            contract_violation=contract_violation,
        )
        if role == "audit":
            gw.teacher_equivalent.observe(row)
        try:
            await gw.ledger.append(row)
        except OSError:
            gw.metrics.errors.labels("ledger_unavailable").inc()


class _Ctx:
    __slots__ = (
        "rid",
        "t0",
        "ts",
        "day",
        "client",
        "task",
        "req",
        "body",
        "route",
        "headers",
        "served_by",
        "version",
        "upstream_ms",
        "confidence",
        "threshold",
        "student_cost",
        "student_error",
        "error",
        "committed",
        "ttfb_upstream_ms",
        "student_body",
        "pii_map",
        "red_messages",
        "teacher_prompt",
        "contract_violation",
        "manifest_seq",
        "episode",
    )

    def __init__(self, *, rid, t0, ts, day, client, task, req, body, route, headers):
        self.rid, self.t0, self.ts, self.day = rid, t0, ts, day
        self.client, self.task, self.req, self.body, self.route, self.headers = (
            client,
            task,
            req,
            body,
            route,
            headers,
        )
        self.served_by = "teacher"
        self.version = ""
        self.upstream_ms = 0.0
        self.confidence: float | None = None
        self.threshold: float | None = None
        self.student_cost: float | None = None
        self.student_error: str | None = None
        self.error: GatewayError | None = None
        self.committed = False
        self.ttfb_upstream_ms = 0.0
        self.student_body: dict | None = None
        self.pii_map: dict[str, str] | None = None
        self.red_messages: Any = None
        self.teacher_prompt: Any = None  # asyncio.Future[int] while counting
        self.contract_violation = ""  # kind (ratchet_core.contract) of a confident answer that broke it
        self.manifest_seq = 0
        self.episode = ""  # metadata.ratchet_episode (ratchet_core.feedback)


class _StreamAccumulator:
    """Rebuilds the assistant message, finish reason and usage from streamed chunks (for the ledger row)."""

    def __init__(self) -> None:
        self.id = ""
        self.model = ""
        self.content: list[str] = []
        self.tool_calls: dict[int, dict] = {}
        self.finish = ""
        self.usage: dict = {}

    def add(self, obj: dict) -> None:
        self.id = self.id or obj.get("id", "")
        self.model = self.model or obj.get("model", "")
        if obj.get("usage"):
            self.usage = obj["usage"]
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                slot = self.tool_calls.setdefault(
                    int(tc.get("index") or 0),
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    slot["function"]["arguments"] += fn["arguments"]
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def response(self) -> dict:
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.tool_calls:
            msg["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return {
            "id": self.id,
            "model": self.model,
            "choices": [{"index": 0, "message": msg, "finish_reason": self.finish}],
            "usage": self.usage,
        }
