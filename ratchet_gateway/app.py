"""The gateway's app factory: ``create_app(settings)`` -> FastAPI app serving the OpenAI-compatible data plane.

The app is assembled from parts that each have one home:

- ``ratchet_gateway.state``: :class:`Gateway`, everything one app instance holds (``app.state.gateway``), and its
  lifecycle (the lifespan below starts and stops it);
- ``ratchet_gateway.routers``: one module per concern (chat, models, model APIs, health, admin, receipts, proofs),
  each an ``APIRouter`` but the chat route, which the app registers directly (the hot path, see there);
- ``ratchet_gateway.apis``: ``POST /v1/responses`` and ``/v1/messages`` (formats of the chat pipeline, handlers
  made by ``ChatHandler.for_api``) and ``/v1/embeddings``, built here (``app.state.apis``);
- ``ratchet_gateway.deps``: the state and the caller as dependencies (``Depends``);
- ``ratchet_gateway.responses``: the ``x-ratchet-*`` headers and OpenAI's error shape; the exception handlers
  here answer every ``GatewayError`` and framework error with them;
- ``ratchet_gateway.hooks``: cross-cutting behaviour (auth or limits before the body, checks on a validated chat
  request, metrics and tracing on completion) for every route, the chat fast path included: registered here,
  ``HOOKS`` and ``GatewayOptions.hooks``, and run by :class:`GatewayApp` around every request. Starlette
  middleware is refused (it would skip the chat route).

``GET /openapi.json`` documents every route, its bodies and the two bearer schemes (``clientKey``,
``adminKey``); it answers without authentication, like ``/healthz``.

Hot-path choices (measured, see ``benchmarks/bench_gateway.py``): no ASGI middleware (every response sets its
own ``x-ratchet-*`` headers; the error handlers do it for framework errors; request hooks cost nothing while none
is registered), the chat route is a raw ASGI call (no router, no dependency solving, orjson parse + one pydantic
validation), kept-alive connections of the gateway's own HTTP/1.1 client per upstream (``ratchet_gateway.http1``),
FastAPI's native telemetry off, the durable ledger write is a shared journal group commit. litellm is imported
once at startup for provider resolution and prices, never per request on OpenAI-compatible upstreams.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ratchet_core.redact import redact_text
from ratchet_core.settings import Settings, load_settings
from ratchet_gateway.apis.embeddings import Embeddings
from ratchet_gateway.apis.messages_format import MESSAGES
from ratchet_gateway.apis.responses_format import RESPONSES
from ratchet_gateway.chat import ChatHandler
from ratchet_gateway.errors import GatewayError, client_closed_error
from ratchet_gateway.hooks import RequestHook, RequestHooks
from ratchet_gateway.request_body import ChatRequest, describe_errors, error_param
from ratchet_gateway.responses import (
    default_headers,
    error_response,
    json_response,
    new_request_id,
    openai_error,
    ratchet_headers,
)
from ratchet_gateway.routers import CHAT_ROUTE, ROUTERS, model_apis
from ratchet_gateway.routers.proofs import ProofRequest
from ratchet_gateway.state import DEFAULT_STUDENT_PRICES, Gateway, GatewayOptions

__all__ = ["DEFAULT_STUDENT_PRICES", "Gateway", "GatewayApp", "GatewayOptions", "app_from_env", "create_app"]

log = logging.getLogger("ratchet.gateway")

_DESCRIPTION = (
    "OpenAI-compatible chat completions answered by a teacher model or a certified student, every request "
    "recorded durably; Ratchet's own routes (receipts, proofs, BOMs, public key, safety switches) under /ratchet. "
    "Every response carries x-ratchet-request-id, x-ratchet-served-by and x-ratchet-version; errors have "
    'OpenAI\'s shape {"error": {"message", "type", "param", "code"}}.'
)


_ERROR_400 = {
    "description": "Invalid request (the message names the field and what to fix)",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}},
}


def _version() -> str:
    try:
        return version("ratchet")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        return "0"


def _openapi_document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document, with ``ChatRequest``, the other model APIs' bodies and ``ProofRequest`` (and their
    nested models) among the components: the routes read those bodies themselves, so FastAPI does not see them
    (see ``ratchet_gateway.routers.chat`` and ``routers.model_apis``)."""
    if app.openapi_schema is None:
        doc = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        for operations in doc.get("paths", {}).values():
            for op in operations.values():
                # FastAPI documents its own 422 validation body; this gateway answers validation errors with
                # 400 in OpenAI's shape (the validation_error handler below).
                if op.get("responses", {}).pop("422", None) is not None:
                    op["responses"].setdefault("400", _ERROR_400)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        bodies = {"ChatRequest": ChatRequest, **model_apis.BODY_MODELS, "ProofRequest": ProofRequest}
        for name, model in bodies.items():
            schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(schema.pop("$defs", {}))
            schemas[name] = schema
        doc["components"].setdefault("securitySchemes", {})["anthropicKey"] = model_apis.ANTHROPIC_KEY_SCHEME
        app.openapi_schema = doc
    return app.openapi_schema


class GatewayApp(FastAPI):
    """FastAPI, except that ``POST /v1/chat/completions`` goes straight to ``ChatHandler.asgi``: the hot path skips
    Starlette's middleware stack, the router and the endpoint wrapper (about a fifth of the gateway's CPU per
    request at c=16, measured with ``benchmarks/bench_gateway.py``). The handler authenticates, limits the body and
    answers every error in OpenAI's shape itself, as it does behind the registered route, which stays for
    ``/openapi.json`` and for an app mounted under a ``root_path``.

    Every HTTP request, the fast path's and the routers', runs inside the request hooks (``hooks``,
    ``ratchet_gateway.hooks``) when any is registered; Starlette middleware is refused, since the fast path would
    skip it."""

    _chat_asgi: Any = None
    hooks: RequestHooks | None = None  # None while no hook is registered: nothing to run

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            if self.hooks is not None:
                await self.hooks.run(scope, receive, send, self._serve_http)
                return
            if (  # _is_chat, inlined: this is every request's first step
                scope["path"] == _CHAT_PATH
                and scope["method"] == "POST"
                and self._chat_asgi is not None
                and not scope.get("root_path")
            ):
                scope["app"] = self
                await self._chat_asgi(scope, receive, send)
                return
            await super().__call__(scope, receive, self._stamped(send))
            return
        await super().__call__(scope, receive, send)

    async def _serve_http(self, scope, receive, send) -> None:
        if self._is_chat(scope):
            scope["app"] = self
            await self._chat_asgi(scope, receive, send)
        else:
            await super().__call__(scope, receive, self._stamped(send))

    def _stamped(self, send):
        """`send`, adding to a response's head every x-ratchet-* header (and nosniff) its route left out: every
        response carries them, a framework error's too (``ratchet_gateway.responses``). Not on the chat route,
        which sets its own."""
        gw = self.state.gateway

        async def stamped(message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                have = {name.lower() for name, _ in headers}
                headers.extend(h for h in default_headers(gw.manifest.sequence) if h[0] not in have)
                message = {**message, "headers": headers}
            await send(message)

        return stamped

    def _is_chat(self, scope) -> bool:
        return (
            self._chat_asgi is not None
            and scope["path"] == _CHAT_PATH
            and scope["method"] == "POST"
            and not scope.get("root_path")
        )

    def add_middleware(self, middleware_class: Any, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "the gateway takes no Starlette middleware: POST /v1/chat/completions bypasses it, so it would "
            "silently skip the chat route. Add a ratchet_gateway.hooks.RequestHook to HOOKS in create_app "
            "(or GatewayOptions.hooks) instead: hooks run for every route."
        )


_CHAT_PATH = CHAT_ROUTE["path"]
_GIL_SWITCH_S = 0.001
# The gateway's own request hooks, in the order they run (``ratchet_gateway.hooks``); GatewayOptions.hooks follow.
HOOKS: tuple[RequestHook, ...] = ()


def create_app(settings: Settings | None = None, options: GatewayOptions | None = None) -> FastAPI:
    """The gateway app. Starting it (lifespan) opens this replica's ledger and follows the manifest."""
    gw = Gateway(settings or load_settings(), options or GatewayOptions())
    tracing = None
    if gw.settings.otel_endpoint:  # the OpenTelemetry SDK is imported only then (ratchet_gateway.tracing)
        from ratchet_gateway.tracing import GatewayTracing

        tracing = GatewayTracing(gw.settings.otel_endpoint, gw.options.span_exporter)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await gw.start()
        if tracing is not None:
            tracing.instrument(gw)
        if getattr(app.state, "freeze_gc", False):
            # Everything imported and built so far (litellm alone is ~400k objects) lives as long as the process:
            # out of the collector's sight, a full collection no longer walks it (it took 0.2-1 s, the c=64 tail).
            gc.freeze()
        try:
            yield
        finally:
            await gw.stop()
            if tracing is not None:  # after the off-path calls drained: their spans are flushed too
                await asyncio.to_thread(tracing.shutdown)

    app = GatewayApp(
        title="Ratchet gateway",
        version=_version(),
        description=_DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # served below, with the x-ratchet-* headers every response carries
        # FastAPI's native OpenTelemetry asks the global providers on every request (~10 us here); Ratchet's
        # metrics are its own (/metrics)
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.gateway = gw
    app.state.tracing = tracing
    # the one place hooks are registered: tracing first (its span covers the other hooks' refusals), then the
    # gateway's own per-client limits (``ratchet_gateway.limits``)
    traced = (tracing.hook,) if tracing is not None else ()
    hooks = RequestHooks([*traced, gw.limits, *HOOKS, *gw.options.hooks], headers=gw.headers)
    app.hooks = hooks if hooks else None
    app.state.chat = chat = ChatHandler(gw, hooks=hooks)
    app._chat_asgi = chat.asgi
    # the other model APIs: two more formats of the same pipeline, and embeddings (``ratchet_gateway.apis``)
    app.state.apis = model_apis.ModelApis(chat.for_api(RESPONSES), chat.for_api(MESSAGES), Embeddings(gw))
    app.add_api_route(**CHAT_ROUTE)  # first, and in the app's own table (ratchet_gateway.routers.chat)
    for router in ROUTERS:
        app.include_router(router)
    app.openapi = lambda: _openapi_document(app)  # type: ignore[method-assign]

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi() -> Response:
        return json_response(app.openapi())

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError) -> Response:
        if exc.status < 500:
            return error_response(exc)
        rid = new_request_id()  # every 5xx is logged with its request id and cause (the chat route: its own)
        cause = f" (cause: {type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
        log.warning(
            "request %s: %d %s: %s", rid, exc.status, exc.code or exc.type, redact_text(exc.message + cause)
        )
        exc.message = f"{exc.message} (request id {rid})"
        return error_response(exc, ratchet_headers(rid))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if isinstance(exc.__cause__, ClientDisconnect):  # FastAPI's "error parsing the body" for a hang-up
            return await client_closed(request, exc.__cause__)
        msg = {
            404: f"no route {request.url.path}; the API is under /v1 (see GET /v1/models)",
            405: f"method {request.method} is not allowed on {request.url.path}",
        }.get(exc.status_code, str(exc.detail))
        return openai_error(exc.status_code, msg)

    @app.exception_handler(ClientDisconnect)
    async def client_closed(request: Request, exc: ClientDisconnect) -> Response:
        route = request.scope.get("route")
        template = getattr(route, "path", "unmatched")  # the route's template: a bounded label
        log.info(
            "%s %s: 499: the client closed the connection before sending its whole body",
            request.method,
            template,
        )
        gw.metrics.client_closed.labels(template).inc()
        return error_response(client_closed_error(), gw.headers())

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        param = error_param(errors[0].get("loc") or ()) if errors else None
        return error_response(
            GatewayError(400, describe_errors(errors), "invalid_request", param=param), gw.headers()
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        rid = new_request_id()  # logged with the cause, and the id the client is told to report
        log.error("request %s: unexpected error: %s", rid, redact_text(f"{type(exc).__name__}: {exc}"))
        err = GatewayError(
            500, f"internal gateway error; retry, and report it with the request id {rid} if it persists"
        )
        return error_response(err, ratchet_headers(rid))

    return app


def app_from_env() -> FastAPI:
    """uvicorn factory for ``ratchet gateway --workers N`` (each worker process builds its own app).

    The served process switches threads every 1 ms instead of Python's 5 ms: the event loop shares the GIL with
    the ledger's loader thread, and a request waiting on the loop should not wait up to 5 ms for it. Once started
    it freezes the objects it has (``gc.freeze``, see the lifespan). It also sets umask 077, so a gateway started
    as ``uvicorn ratchet_gateway.app:app_from_env --factory`` (not by ``ratchet``) writes its ledger, journal and
    segments private to the user, as ``ratchet`` does (``ratchet_core.home_files``)."""
    os.umask(0o077)
    sys.setswitchinterval(_GIL_SWITCH_S)
    app = create_app(load_settings())
    app.state.freeze_gc = True
    return app
