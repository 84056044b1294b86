"""``ChatHandler``: the pipeline's orchestrator. It takes a request from its entry point, checks it, builds its
:class:`~ratchet_gateway.chat.context.ChatCall` and hands it to the non-streamed or the streamed path; every error
it answers in the caller's format (``ratchet_gateway.chat.formats``).

A large body (over ``request_body.LARGE_BODY_BYTES``) is parsed and validated by ``ApiFormat.parse`` (a pure
function of the bytes) in the large-body lane (``ratchet_gateway.offload``), and its redaction and ledger columns
are computed there before routing; its upstream and journal encodings are the lane's too (``Upstream``,
``chat.rows``). Per-key rate limits and spend budgets are a ``validated`` request hook
(``ratchet_gateway.hooks``), which runs after authentication and validation, before routing and any model call,
and refuses with a 429 and ``retry-after``; another request API is another ``ChatHandler`` for its ``ApiFormat``
(``ratchet_gateway.chat.formats``), made by :meth:`ChatHandler.for_api` so that every API shares one student (its
circuit breakers), one recorder and one pairs runner."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ratchet_core.routing import route
from ratchet_gateway.auth import invalid_key_error
from ratchet_gateway.chat.complete import CompletePath
from ratchet_gateway.chat.context import ChatCall, Decision, Received
from ratchet_gateway.chat.failures import failure
from ratchet_gateway.chat.formats import CHAT_COMPLETIONS, ApiFormat
from ratchet_gateway.chat.pairs import Pairs
from ratchet_gateway.chat.parts import Parts
from ratchet_gateway.chat.redaction import body_columns
from ratchet_gateway.chat.relay import StreamPath
from ratchet_gateway.chat.rows import Recorder
from ratchet_gateway.chat.student import Student
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.forwarded import refuse_tier
from ratchet_gateway.hooks import INFO, RequestHooks, RequestInfo
from ratchet_gateway.request_body import LARGE_BODY_BYTES, episode_of, read_body, receive_body, task_of
from ratchet_gateway.responses import new_request_id, ratchet_headers
from ratchet_gateway.serve_http import hold_head_of
from ratchet_gateway.upstream import teacher_timeouts

if TYPE_CHECKING:
    from ratchet_gateway.state import Gateway

_US_PER_DAY = 86_400_000_000
_day_cache: list = [-1, ""]  # [UTC day number, its "YYYY-MM-DD"]: strftime once a day, not per request


def arrival(clock_now) -> tuple[int, str]:
    """(microseconds since the epoch, its UTC day) now: a row's ``ts`` and ``day`` (`clock_now`: the
    accelerated clock's, or None for real time)."""
    if clock_now is None:
        us = time.time_ns() // 1000
        n = us // _US_PER_DAY
        if n != _day_cache[0]:
            _day_cache[1] = time.strftime("%Y-%m-%d", time.gmtime(n * 86_400))
            _day_cache[0] = n
        return us, _day_cache[1]
    dt = clock_now()
    return int(dt.timestamp() * 1e6), dt.strftime("%Y-%m-%d")


class ChatHandler:
    """One per app and API (``app.state.chat``): called with a request, answers it (errors in the API's shape)."""

    def __init__(
        self,
        gw: Gateway,
        api: ApiFormat = CHAT_COMPLETIONS,
        hooks: RequestHooks | None = None,
        shared: Parts | None = None,
        route: str = "/v1/chat/completions",
    ):
        self.gw = gw
        self.api = api
        self.route = route  # its path (a metrics label)
        self.hooks = hooks if hooks else None  # the app's request hooks (``validated`` runs here)
        if shared is None:
            timeouts = teacher_timeouts(gw.settings)
            student = Student(gw)
            recorder = Recorder(gw)
            shared = Parts(gw, api, student, recorder, Pairs(gw, student, recorder, timeouts), timeouts)
        self.student, self.recorder, self.pairs = shared.student, shared.recorder, shared.pairs
        self.parts = parts = replace(shared, api=api)
        self.complete = CompletePath(parts)
        self.stream = StreamPath(parts)

    def for_api(self, api: ApiFormat) -> ChatHandler:
        """A handler of the same pipeline for another request API (``ratchet_gateway.apis``): it shares this one's
        student and its circuit breakers, recorder and pairs, and runs the same hooks."""
        # its route is ``/v1/<api>`` (``/v1/responses``, ``/v1/messages``): a metrics label
        return ChatHandler(self.gw, api, self.hooks, shared=self.parts, route=f"/v1/{api.api}")

    # entry points ------------------------------------------------------------------------------------------
    async def __call__(self, request: Request) -> Response:
        """The answer to a Starlette request (the registered route, ``ratchet_gateway.routers.chat``)."""
        h = request.headers
        limit = self.gw.settings.max_body_bytes
        info = request.scope.get(INFO) if self.hooks else None
        authorization = h.get("authorization")
        if authorization is None and self.api.key_header:  # e.g. Anthropic's ``x-api-key: <key>``
            key = h.get(self.api.key_header)
            authorization = None if key is None else f"Bearer {key}"
        return await self._handle(
            authorization, h.get("x-ratchet-task"), lambda: read_body(request, limit), info
        )

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The same, as a raw ASGI call: the app sends ``POST /v1/chat/completions`` here before Starlette's
        middleware and router (``ratchet_gateway.app``; measured, about a fifth of the gateway's CPU per request).
        Reads the three headers it needs from one dict built in C (first occurrence wins, as
        ``Request.headers.get``)."""
        headers = dict(reversed(scope["headers"]))
        auth = headers.get(b"authorization")
        task = headers.get(b"x-ratchet-task")
        length = headers.get(b"content-length")
        limit = self.gw.settings.max_body_bytes
        info = scope.get(INFO) if self.hooks else None
        response = await self._handle(
            None if auth is None else auth.decode("latin-1"),
            None if task is None else task.decode("latin-1"),
            lambda: receive_body(receive, length, limit),
            info,
        )
        if not isinstance(response, StreamingResponse):
            hold_head = hold_head_of(scope)
            if hold_head is not None:  # ``ratchet gateway``'s server: head and body in one socket write
                hold_head()
        await response(scope, receive, send)

    # the pipeline ------------------------------------------------------------------------------------------
    async def _handle(
        self,
        authorization: str | None,
        task_header: str | None,
        read: Callable[[], Awaitable[bytes]],
        info: RequestInfo | None,
    ) -> Response:
        gw = self.gw
        t0 = time.perf_counter()
        rid = new_request_id()
        headers = ratchet_headers(rid)
        headers["x-ratchet-manifest"] = str(gw.manifest.sequence)  # routed by it, or refused under it
        try:
            # Authentication is the first thing, before the body is read (an unknown caller costs no parsing).
            client = gw.keys.authenticate(authorization)
            if client is None:
                raise invalid_key_error()
            if info is not None:
                info.client = client
            raw = await read()
            large = len(raw) > LARGE_BODY_BYTES
            # a large body is parsed and validated in the lane, in short calls (``ratchet_gateway.offload``)
            extras = gw.settings.provider_extras  # RATCHET_PROVIDER_EXTRA_FIELDS (ratchet_gateway.forwarded)
            body, req, origin = (
                await gw.offload.run(self.api.parse, raw, extras) if large else self.api.parse(raw, extras)
            )
            del raw
            refuse_tier(
                body, gw.settings.allowed_service_tiers
            )  # a pricier tier only if the operator allows it
            if req.model not in gw.model_names:
                raise GatewayError(
                    404,
                    f"model {req.model!r} is not served here; use one of: {', '.join(sorted(gw.model_names))} "
                    "(GET /v1/models lists them)",
                    "model_not_found",
                )
            task = task_of(req, task_header)
            episode = episode_of(req)
            ts, day = arrival(gw.clock_now)
            received = Received(
                rid,
                t0,
                ts,
                day,
                client,
                task,
                req,
                body,
                self.api.api,
                origin,
                large=large,
                episode=episode,
                fields=self.api.fields,
            )
            if info is not None:
                info.task = task
                await self.hooks.check_validated(info, received)  # type: ignore[union-attr]
            # the manifest the route is decided with (no await in between)
            decision = Decision(route(gw.manifest, gw.safety, task, rid), gw.manifest.sequence)
            call = ChatCall(received, decision, headers)
            if large:  # its redaction and ledger columns, in the lane before anything needs them
                await gw.offload.run(body_columns, call, gw.settings.redact_pii)
            if req.stream:
                return await self.stream(call)
            return await self.complete(call)
        except Exception as exc:
            gw.limits.release(rid)  # ended before any row settled what it reserved (a no-op once one did)
            return self._failed(exc, t0, headers)

    def _failed(self, exc: Exception, t0: float, headers: dict[str, str]) -> Response:
        """The answer to a request that failed before its answer started; logged and counted."""
        return self.api.error(failure(exc, t0, headers, self.gw.metrics, self.route), headers)
