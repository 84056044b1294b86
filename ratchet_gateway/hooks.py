"""Request hooks: the one way to add behaviour that every API request goes through -- auth or limits before the
body is read, checks on a validated chat request, metrics and tracing once the answer is out.

The app (``ratchet_gateway.app.GatewayApp``) runs the hooks around every HTTP request it serves, before routing,
so no route can skip them: not the chat fast path (``POST /v1/chat/completions`` goes straight to
``ratchet_gateway.chat``, past Starlette's middleware and router), not the routers. Register them in one place,
``ratchet_gateway.app.create_app``: the gateway's own in ``HOOKS`` there, an embedding app's or a test's in
``GatewayOptions.hooks`` (ARCHITECTURE.md, "Where to add things"). Starlette middleware is refused
(``GatewayApp.add_middleware`` raises): it would run for every route but the chat one.

A hook subclasses :class:`RequestHook` and overrides any of its three stages:

- ``async before_body(info)``: the request line and headers are in (``info.method``, ``info.path``,
  ``info.header(name)``), nothing else is; the caller is not authenticated yet. Raise ``GatewayError`` to refuse
  the request: it is answered in OpenAI's shape, with the error's ``headers`` (e.g. ``retry-after`` on a 429),
  and the route never runs.
- ``async validated(info, received)``: requests the chat pipeline serves (every model API), once the caller is
  authenticated and the body validated, before routing and before any model is called: ``info.client`` and
  ``info.task`` are set and ``received`` is the request (``ratchet_gateway.chat.context.Received``; read it, do not
  change it). Raise ``GatewayError`` to refuse it (per-key rate limits and spend budgets: 429 with
  ``retry-after``); a refused request writes no ledger row, like a 401.
- ``completed(info)``: once per request, after its last byte went out or when it failed: ``info.status`` (499
  when the client left before its body was complete, 500 when the route raised before answering),
  ``info.seconds``, and ``info.request_id`` / ``info.served_by`` from the answer's ``x-ratchet-*`` headers.
  Synchronous and must not block (it runs on the event loop); an exception it raises is logged and dropped.

Stages run in registration order; ``info.notes`` is a dict for a hook's own state between its stages (key it by
the hook). Why hooks rather than ASGI middleware: a hook cannot forget to call the next app, buffer a stream or
answer twice, and it costs only what it uses. With no hook registered the app runs none of this (one test per
request); with hooks, a :class:`RequestInfo` and a wrapped ``send`` per request, and only the stages some hook
overrides are called; with only ``validated`` hooks (the gateway's own limits), a RequestInfo and nothing
else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ratchet_gateway.errors import GatewayError
from ratchet_gateway.responses import error_response, new_request_id, ratchet_headers

log = logging.getLogger("ratchet.gateway")

INFO = "ratchet.request"  # the scope key of the request's RequestInfo (while hooks are registered)


@dataclass(slots=True)
class RequestInfo:
    """One HTTP request as the hooks see it; the app and the chat pipeline fill it in as the request goes."""

    method: str
    path: str
    raw_headers: list[tuple[bytes, bytes]]  # the ASGI scope's (lower-case names)
    t0: float  # time.perf_counter() when the app got the request
    client: str = ""  # the authenticated client (set by the chat pipeline before ``validated``)
    task: str = ""  # the chat request's task (idem)
    request_id: str = ""  # the answer's x-ratchet-request-id
    served_by: str = ""  # the answer's x-ratchet-served-by
    status: int = 0  # the HTTP status answered (0 until the answer started)
    seconds: float = 0.0  # from arrival to the last byte (set before ``completed``)
    notes: dict[str, Any] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        """The first value of request header `name` (case-insensitive), or None."""
        key = name.lower().encode("latin-1")
        for k, v in self.raw_headers:
            if k == key:
                return v.decode("latin-1")
        return None


class RequestHook:
    """Base of every hook: override the stages you need (module docstring); the others are never called."""

    async def before_body(self, info: RequestInfo) -> None:
        """Before the body is read; raise ``GatewayError`` to refuse the request."""

    async def validated(self, info: RequestInfo, received: Any) -> None:
        """A chat request, authenticated and validated, before routing; raise ``GatewayError`` to refuse it.
        `received` is a ``ratchet_gateway.chat.context.Received`` (typed ``Any`` here: the chat pipeline imports
        this module, not the other way round)."""

    def completed(self, info: RequestInfo) -> None:
        """The request is over (``info.status``, ``info.seconds``); must not block."""


def _overrides(hook: RequestHook, stage: str) -> bool:
    if not isinstance(hook, RequestHook):
        raise TypeError(f"{hook!r} is not a RequestHook: subclass ratchet_gateway.hooks.RequestHook")
    return getattr(type(hook), stage) is not getattr(RequestHook, stage)


class RequestHooks:
    """The registered hooks, by stage (built once by ``create_app``)."""

    def __init__(
        self, hooks: Iterable[RequestHook] = (), headers: Callable[[], dict[str, str]] | None = None
    ):
        hooks = list(hooks)
        self._headers = headers or ratchet_headers  # a refusal's x-ratchet-* headers
        self.before_body: tuple[Callable[[RequestInfo], Awaitable[None]], ...] = tuple(
            h.before_body for h in hooks if _overrides(h, "before_body")
        )
        self.validated: tuple[Callable[[RequestInfo, Any], Awaitable[None]], ...] = tuple(
            h.validated for h in hooks if _overrides(h, "validated")
        )
        self.completed: tuple[Callable[[RequestInfo], None], ...] = tuple(
            h.completed for h in hooks if _overrides(h, "completed")
        )

    def __bool__(self) -> bool:
        return bool(self.before_body or self.validated or self.completed)

    async def run(self, scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
        """Serve one HTTP request with `app`, the hooks around it."""
        info = RequestInfo(scope["method"], scope["path"], scope["headers"], time.perf_counter())
        scope[INFO] = info
        if not self.before_body and not self.completed:  # only ``validated`` hooks: the pipeline calls them
            await app(scope, receive, send)
            return

        async def observed(message: Message) -> None:
            if message["type"] == "http.response.start":
                info.status = message["status"]
                for name, value in message.get("headers", ()):
                    if name == b"x-ratchet-request-id":
                        info.request_id = value.decode("latin-1")
                    elif name == b"x-ratchet-served-by":
                        info.served_by = value.decode("latin-1")
            await send(message)

        try:
            refusal = await self._before_body(info)
            if refusal is not None:
                await refusal(scope, receive, observed)
                return
            await app(scope, receive, observed)
        except BaseException:
            if info.status == 0:
                info.status = 500  # raised before answering: the server answers 500
            raise
        finally:
            info.seconds = time.perf_counter() - info.t0
            for stage in self.completed:
                try:
                    stage(info)
                except Exception:
                    log.exception("request hook %s failed in completed (ignored)", _name(stage))

    async def _before_body(self, info: RequestInfo) -> Any:
        """None, or the response refusing the request (a hook raised)."""
        try:
            for stage in self.before_body:
                await stage(info)
        except GatewayError as err:
            return error_response(err, self._headers())
        except Exception:
            rid = new_request_id()
            log.exception("request %s: request hook failed in before_body", rid)
            err = GatewayError(
                500,
                f"internal gateway error; retry, and report it with the request id {rid} if it persists",
                "internal_error",
            )
            return error_response(err, ratchet_headers(rid))
        return None

    async def check_validated(self, info: RequestInfo, received: Any) -> None:
        """Run the ``validated`` stage (the chat pipeline calls it); a hook's GatewayError propagates."""
        for stage in self.validated:
            await stage(info, received)


def _name(stage: Callable) -> str:
    owner = getattr(stage, "__self__", None)
    return type(owner).__name__ if owner is not None else repr(stage)
