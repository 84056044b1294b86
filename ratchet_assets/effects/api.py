"""The effect gate as a service: ``ratchet effects serve``, an HTTP API over :class:`~ratchet_assets.effects.ledger.EffectLedger`.

Why a separate app in ``ratchet_assets`` and not a gateway router: the ledger (and its rules) is control-plane
state that lives in ``ratchet_assets``, and the gateway must never import ``ratchet_assets`` (ARCHITECTURE.md,
"Layers"). Moving the ledger into ``ratchet_core`` only to mount it in the gateway would put the control
plane's decision logic on the data plane's request path and on every replica; the gate is small, low-traffic
and shares nothing with chat serving but the control DB. So it is its own FastAPI app on the same control DB
that the night and the admin CLI use: one state machine, four doors (Python, CLI, REST, MCP).

Authentication, per caller (``Authorization: Bearer <key>``):

- a client key from ``RATCHET_API_KEYS`` (``clientKey``): begin / report / fail / list / show and read the rules
  and spend of its own types. A client's effect types live in its namespace: the type it calls ``report.file``
  is ``<client>/report.file`` (``ratchet_assets.effects``, "Tenancy"), so it can never begin, report, read or
  exhaust the cap of the control plane's types (``training.launch``...) or another client's; ``report``/``fail``
  settle only effects the caller began; the rules it reads show only its own spend (its type's and its own cap's);
- the admin key ``RATCHET_ADMIN_KEY`` (``adminKey``): everything, with types named in full (``scout/report.file``),
  plus resolve, grant/deny approvals and set rules (``PUT /rules/<client>/*`` sets a client's own cap).

A hostile client cannot hurt the others: a body is at most :data:`MAX_BODY_BYTES` (413), strict JSON (no NaN,
Infinity or a number too large for a float: 400), and every error, validation included, has OpenAI's shape
``{"error": {"message", "type", "param", "code"}}`` like the gateway's. The bodies are the pydantic models of
``ratchet_assets.effects.models``; ``/openapi.json`` documents every route, body and both schemes.

The routes are thin: each authenticates its caller and calls one
:class:`~ratchet_assets.effects.caller.CallerGate` method, the same one the MCP tool of that route runs. The same
app serves the MCP door ``/mcp`` (``ratchet_assets.effects.mcp_door``: the caller's bearer key, the same body limit),
and ``/.well-known/agent-manifest.json`` and ``/llms.txt`` (``ratchet_assets.effects.manifest``), which say what
the gate does and does not do.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from sqlalchemy.engine import Engine
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ratchet_assets.effects.caller import (
    ADMIN,
    MAX_BODY_BYTES,
    ApiError,
    CallerGate,
    api_error,
    error_body,
    invalid_request,
    key_store,
    non_finite,
)
from ratchet_assets.effects.ledger import EffectLedger
from ratchet_assets.effects.manifest import agent_manifest, llms_txt
from ratchet_assets.effects.mcp_door import McpHttpDoor
from ratchet_assets.effects.models import (
    Approval,
    BeginAnswer,
    BeginBody,
    DecisionBody,
    EffectRecord,
    EffectRef,
    ErrorBody,
    FailBody,
    Finished,
    Forgotten,
    ListQuery,
    ReportBody,
    ResolveBody,
    RulesBody,
    RulesView,
    SpendView,
    TypeRef,
    UsageQuery,
)
from ratchet_assets.effects.records import MAX_COST_USD, EffectError
from ratchet_stats.canonical import loads_strict

log = logging.getLogger(__name__)


def error_response(status: int, message: str, code: str, param: str | None = None) -> JSONResponse:
    """OpenAI's error document: ``{"error": {"message", "type", "param", "code"}}``."""
    return JSONResponse(error_body(status, message, code, param).model_dump(), status_code=status)


ERROR_DOCS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": what}
    for status, what in {
        400: "Invalid request: the message names the field (param) and what to fix",
        401: "Missing or unknown key",
        403: "The admin key is needed, or the effect type is outside the caller's namespace",
        409: "The token holds no effect of the caller's in flight (stale_token)",
        413: "The body is larger than 64 KiB",
    }.items()
}


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document without its ``422 {"detail": ...}`` validation body: the gate answers those with 400 in
    OpenAI's shape (``ERROR_DOCS``)."""
    if app.openapi_schema is None:
        doc = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        for operations in doc.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            doc.get("components", {}).get("schemas", {}).pop(name, None)
        app.openapi_schema = doc
    return app.openapi_schema


def _json_problem(body: bytes) -> str | None:
    """Why `body` is not strict JSON (NaN, Infinity and numbers past a float's range are not), or None."""
    try:
        value = loads_strict(body)
    except (ValueError, RecursionError) as exc:
        return f"the request body is not JSON ({str(exc)[:120]}); send a JSON object"
    return non_finite(value)  # `1e999` parses as infinity: no cost or result a client can mean


class BodyGuard:
    """Reads every request body before a route does: at most `limit` bytes (413, declared or sent) and strict
    JSON (400); the route then reads the same bytes."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    def _too_big(self) -> JSONResponse:
        return error_response(
            413, f"the request body is larger than {self.limit} bytes; send a smaller result or summary",
            "body_too_large",
        )  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await self._too_big()(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away: nobody to answer
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await self._too_big()(scope, receive, send)
                return
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body and (problem := _json_problem(body)) is not None:
            await error_response(400, problem, "invalid_json")(scope, receive, send)
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


bearer = HTTPBearer(
    scheme_name="clientKey",
    description="A client key from RATCHET_API_KEYS (send the secret) or the admin key RATCHET_ADMIN_KEY.",
    auto_error=False,
)


def caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]
) -> str:
    name = request.app.state.keys.authenticate_token(credentials.credentials if credentials else None)
    if name is None:
        raise ApiError(401, "send 'Authorization: Bearer <client key or admin key>'", "invalid_api_key")
    return name


Caller = Annotated[str, Depends(caller)]


def admin_only(who: Caller) -> str:
    if who != ADMIN:
        raise ApiError(403, "this route needs 'Authorization: Bearer <RATCHET_ADMIN_KEY>'", "forbidden")
    return who


Admin = Annotated[str, Depends(admin_only)]


def ledger(request: Request) -> EffectLedger:
    return request.app.state.ledger


Ledger = Annotated[EffectLedger, Depends(ledger)]


def caller_gate(who: Caller, gate: Ledger) -> CallerGate:
    return CallerGate(gate, who)


Gate = Annotated[CallerGate, Depends(caller_gate)]


def create_app(
    engine: Engine, clients: list[tuple[str, str]], admin_key: str, *, max_cost_usd: float = MAX_COST_USD
) -> FastAPI:
    """The effect gate's app over the control DB behind ``engine``: REST, ``/mcp`` and the agent manifest.

    ``max_cost_usd`` is the most one effect may cost (RATCHET_EFFECTS_MAX_COST_USD). No ``/docs`` or ``/redoc``
    page: FastAPI's load Swagger UI and ReDoc from a CDN with inline script, on the page where an operator would
    type the admin key; ``/openapi.json`` documents the API for any viewer the operator trusts."""
    ledger = EffectLedger(engine, max_cost_usd=max_cost_usd)
    keys = key_store(clients, admin_key)
    mcp_door = McpHttpDoor(ledger, keys)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with mcp_door.running():
            yield

    app = FastAPI(
        title="Ratchet effect gate",
        summary="Irreversible effects at most once: begin/report/fail/resolve, approvals, max_attempts, spend caps.",
        version="1",
        responses=ERROR_DOCS,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.add_middleware(BodyGuard)
    app.state.ledger = ledger
    app.state.keys = keys
    # POST only: stateless, the server has nothing to push, so no GET stream held open per client (405)
    app.add_route("/mcp", mcp_door, methods=["POST"], include_in_schema=False)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.code, exc.param)

    @app.exception_handler(EffectError)
    async def _effect_error(request: Request, exc: EffectError) -> JSONResponse:
        return await _api_error(request, api_error(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's locations start with where the field was sent (body, query, path): the field is the rest
        errors = [{**e, "loc": tuple(e.get("loc", ()))[1:] or tuple(e.get("loc", ()))} for e in exc.errors()]
        return await _api_error(request, invalid_request(errors))

    @app.exception_handler(ValidationError)
    async def _invalid_parameters(request: Request, exc: ValidationError) -> JSONResponse:
        return await _api_error(request, invalid_request(exc.errors()))  # a path's parameters (EffectRef)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = {
            404: f"no route {request.url.path}; the routes are listed at /openapi.json",
            405: f"method {request.method} is not allowed on {request.url.path}",
        }.get(exc.status_code, str(exc.detail))
        return error_response(
            exc.status_code, message, "not_found" if exc.status_code == 404 else "http_error"
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("effect gate: %s %s failed: %s", request.method, request.url.path, type(exc).__name__)
        return error_response(
            500, "internal error of the effect gate; retry, and report it if it persists", "internal"
        )

    @app.post("/effects/begin", tags=["effects"])
    def begin(body: BeginBody, gate: Gate) -> BeginAnswer:
        """Ask before acting; act only on ``execute`` (then report or fail with its token)."""
        return gate.begin(body)

    @app.post("/effects/report", tags=["effects"])
    def report(body: ReportBody, gate: Gate) -> Finished:
        """The effect holding ``token`` (one the caller began) happened; ``result`` is what duplicates receive."""
        return gate.report(body)

    @app.post("/effects/fail", tags=["effects"])
    def fail(body: FailBody, gate: Gate) -> Finished:
        """The effect holding ``token`` (one the caller began) did not happen (may run again per its rules)."""
        return gate.fail(body)

    @app.post("/effects/resolve", tags=["admin"])
    def resolve(body: ResolveBody, who: Admin, gate: Gate) -> EffectRecord | Forgotten:
        """Operator decision on a stuck effect (same rules as `ratchet admin effects resolve`)."""
        return gate.resolve(body)

    @app.get("/effects", tags=["effects"])
    def list_effects(query: Annotated[ListQuery, Query()], gate: Gate) -> list[EffectRecord]:
        """The caller's effects, newest first (a client sees only its own)."""
        return gate.list(query)

    @app.get("/effects/{effect_type}/{key:path}", tags=["effects"])
    def show(effect_type: str, key: str, gate: Gate) -> EffectRecord:
        """One effect of the caller's (the admin reads a client's with ``GET /effects?effect_type=<client>/<type>``)."""
        return gate.get(EffectRef(effect_type=effect_type, key=key))

    @app.get("/approvals", tags=["admin"])
    def approvals(
        who: Admin, gate: Ledger, state: Literal["pending", "granted", "denied"] | None = "pending"
    ) -> list[Approval]:
        """Approvals in a state (pending by default), newest first."""
        return gate.approvals(state)

    @app.post("/approvals/grant", tags=["admin"])
    def grant(body: DecisionBody, who: Admin, gate: Ledger) -> Approval:
        """Grant a requested approval, with the reason (3-500 characters)."""
        return gate.decide(body.effect_type, body.key, True, body.reason, actor="admin-api")

    @app.post("/approvals/deny", tags=["admin"])
    def deny(body: DecisionBody, who: Admin, gate: Ledger) -> Approval:
        """Deny a requested approval, with the reason; the effect's next begin is ``denied`` with it."""
        return gate.decide(body.effect_type, body.key, False, body.reason, actor="admin-api")

    @app.get("/rules/{effect_type:path}", tags=["effects"])
    def get_rules(effect_type: str, gate: Gate) -> RulesView:
        """The type's rules and its spend in the current window; for a client's type also the client's own cap
        (``client_spend``). A client reads only its own types (``*``: its own cap)."""
        return gate.rules(TypeRef(effect_type=effect_type))

    @app.put("/rules/{effect_type:path}", tags=["admin"])
    def put_rules(effect_type: str, body: RulesBody, who: Admin, gate: Ledger) -> RulesView:
        """Replace the type's rules (approval, max_attempts, spend cap per window), with the reason;
        ``<client>/*`` takes a client's own cap over all its types."""
        fields = body.model_dump(exclude={"reason"})
        rules = gate.set_rules(effect_type, reason=body.reason, actor="admin-api", **fields)
        return RulesView(**rules.to_dict(), spend=SpendView(**gate.spend(effect_type)))

    @app.get("/usage", tags=["effects"])
    def usage(query: Annotated[UsageQuery, Query()], gate: Gate) -> SpendView:
        """The caller's spend over all its types in its own cap's current window, the cap and what remains (the
        admin names the client: ``?client=<name>``)."""
        return gate.usage(query)

    @app.get("/.well-known/agent-manifest.json", tags=["discovery"])
    def manifest() -> dict[str, Any]:
        """What the gate does and does not do, its tools, routes, authentication and limits, for agents."""
        return agent_manifest(app.openapi())

    @app.get("/llms.txt", tags=["discovery"], response_class=PlainTextResponse)
    def llms() -> str:
        """The agent manifest as Markdown (llms.txt)."""
        return llms_txt(app.openapi())

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: 200 while the gate serves."""
        return {"status": "ok"}

    return app


def app_from_settings() -> FastAPI:
    """The app for ``ratchet effects serve``: control DB, client keys and admin key from RATCHET_* settings."""
    from ratchet_core.api_keys import parse_api_keys
    from ratchet_core.control_db import make_engine
    from ratchet_core.settings import load_settings

    settings = load_settings()
    return create_app(
        make_engine(settings.control_db_url),
        parse_api_keys(settings.api_keys),
        settings.admin_key,
        max_cost_usd=settings.effects_max_cost_usd,
    )
