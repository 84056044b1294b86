"""The effect gate as a service: ``ratchet effects serve``, an HTTP API over :class:`~ratchet_assets.effects.EffectLedger`.

Why a separate app in ``ratchet_assets`` and not a gateway router: the ledger (and its rules) is control-plane
state that lives in ``ratchet_assets``, and the gateway must never import ``ratchet_assets`` (ARCHITECTURE.md,
"Layers"). Moving the ledger into ``ratchet_core`` only to mount it in the gateway would put the control
plane's decision logic on the data plane's request path and on every replica; the gate is small, low-traffic
and shares nothing with chat serving but the control DB. So it is its own FastAPI app on the same control DB
that the night and the admin CLI use: one state machine, three doors (Python, CLI, HTTP).

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
``ratchet_assets.effects_models``; ``/openapi.json`` documents every route, body and both schemes.
"""

from __future__ import annotations

import logging
import math
import secrets
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.engine import Engine
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ratchet_assets.effects import (
    ALL_TYPES,
    EffectError,
    EffectLedger,
    ForeignType,
    StaleToken,
    client_cap_type,
    client_effect_type,
    namespace_of,
)
from ratchet_assets.effects_models import (
    Approval,
    BeginAnswer,
    BeginBody,
    DecisionBody,
    EffectRecord,
    ErrorBody,
    ErrorDetail,
    FailBody,
    Finished,
    Forgotten,
    ReportBody,
    ResolveBody,
    RulesBody,
    RulesView,
    SpendView,
)
from ratchet_core.api_keys import KeyStore
from ratchet_stats.canonical import loads_strict

log = logging.getLogger(__name__)

ADMIN = ""  # the admin caller; no client can be named "" (name:secret needs a name)
MAX_BODY_BYTES = 64 * 1024
# HTTP status -> OpenAI's error type
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
}


def error_response(status: int, message: str, code: str, param: str | None = None) -> JSONResponse:
    """OpenAI's error document: ``{"error": {"message", "type", "param", "code"}}``."""
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    body = ErrorBody(error=ErrorDetail(message=message, type=kind, param=param, code=code))
    return JSONResponse(body.model_dump(), status_code=status)


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


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


def _json_problem(body: bytes) -> str | None:
    """Why `body` is not strict JSON (NaN, Infinity and numbers past a float's range are not), or None."""
    try:
        value = loads_strict(body)
    except (ValueError, RecursionError) as exc:
        return f"the request body is not JSON ({str(exc)[:120]}); send a JSON object"
    stack = [value]
    while stack:  # `1e999` parses as infinity: no cost or result a client can mean
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return "the request body holds a number too large for a float; send finite numbers"
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


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


def _namespace(who: str) -> str | None:
    """The caller's namespace (None: the admin, who names every type in full)."""
    return None if who == ADMIN else who


def _type(who: str, name: str) -> str:
    """The effect type `who` means by `name`: a client's own ``<client>/<name>``, the admin's as given."""
    if who == ADMIN:
        return name
    try:
        return client_effect_type(who, name)
    except ForeignType as exc:
        raise ApiError(403, str(exc), "forbidden_effect_type", "effect_type") from None
    except EffectError as exc:
        raise ApiError(400, str(exc), "invalid_effect_type", "effect_type") from None


def _spend(gate: EffectLedger, effect_type: str) -> SpendView:
    return SpendView(**gate.spend(effect_type))


def create_app(engine: Engine, clients: list[tuple[str, str]], admin_key: str) -> FastAPI:
    """The effect gate's app over the control DB behind ``engine``."""
    app = FastAPI(
        title="Ratchet effect gate",
        summary="Irreversible effects at most once: begin/report/fail/resolve, approvals, max_attempts, spend caps.",
        version="1",
        responses=ERROR_DOCS,
    )
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.add_middleware(BodyGuard)
    app.state.ledger = EffectLedger(engine)
    # The admin key last: a client secret equal to it still authenticates as the admin.
    app.state.keys = KeyStore(
        [*clients, (ADMIN, admin_key)] if admin_key else clients, secrets.token_bytes(32)
    )

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.code, exc.param)

    @app.exception_handler(EffectError)
    async def _effect_error(request: Request, exc: EffectError) -> JSONResponse:
        if isinstance(exc, StaleToken):
            return error_response(409, str(exc), "stale_token", "token")
        return error_response(400, str(exc), "effect_error")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()

        def where(err: Any) -> str:
            return ".".join(str(p) for p in err.get("loc", ())[1:]) or str(err.get("loc", ("body",))[0])

        parts = [f"{where(e)}: {e.get('msg', 'invalid')}" for e in errors[:3]]
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        message = "invalid request: " + "; ".join(parts) + more + ". Fix these fields and retry."
        return error_response(400, message, "invalid_request", where(errors[0]) if errors else None)

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
    def begin(body: BeginBody, who: Caller, gate: Ledger) -> BeginAnswer:
        """Ask before acting; act only on ``execute`` (then report or fail with its token)."""
        effect_type = _type(who, body.effect_type)
        if gate.rules(effect_type).policy == "probe":
            raise ApiError(
                400, f"{effect_type} has policy 'probe', which only in-process callers can use", "probe"
            )
        decided = gate.begin(
            effect_type,
            body.key,
            body.fingerprint,
            lease_seconds=body.lease_seconds,
            cost_usd=body.cost_usd,
            summary=body.summary,
            requested_by=who or "admin",
        )
        return BeginAnswer(**decided.to_dict(), effect_type=effect_type, key=body.key)

    @app.post("/effects/report", tags=["effects"])
    def report(body: ReportBody, who: Caller, gate: Ledger) -> Finished:
        """The effect holding ``token`` (one the caller began) happened; ``result`` is what duplicates receive."""
        gate.report(body.token, body.result, cost_usd=body.cost_usd, namespace=_namespace(who))
        return Finished(status="done")

    @app.post("/effects/fail", tags=["effects"])
    def fail(body: FailBody, who: Caller, gate: Ledger) -> Finished:
        """The effect holding ``token`` (one the caller began) did not happen (may run again per its rules)."""
        gate.fail(body.token, body.error, cost_usd=body.cost_usd, namespace=_namespace(who))
        return Finished(status="failed")

    @app.post("/effects/resolve", tags=["admin"])
    def resolve(body: ResolveBody, who: Admin, gate: Ledger) -> EffectRecord | Forgotten:
        """Operator decision on a stuck effect (same rules as `ratchet admin effects resolve`)."""
        record = gate.resolve(body.effect_type, body.key, body.resolution, body.reason, force=body.force)
        if record is None:
            return Forgotten(effect_type=body.effect_type, key=body.key)
        return record

    @app.get("/effects", tags=["effects"])
    def list_effects(
        who: Caller,
        gate: Ledger,
        effect_type: str | None = None,
        status: Literal["in_flight", "done", "failed", "indeterminate"] | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[EffectRecord]:
        """Newest first; a client sees only its own effects."""
        rows = gate.list_effects(
            effect_type=_type(who, effect_type) if effect_type else None,
            status=status,
            limit=limit,
            namespace=_namespace(who),
        )
        return rows

    @app.get("/effects/{effect_type}/{key:path}", tags=["effects"])
    def show(effect_type: str, key: str, who: Caller, gate: Ledger) -> EffectRecord:
        """One effect of the caller's (the admin reads a client's with ``GET /effects?effect_type=<client>/<type>``)."""
        record = gate.lookup(_type(who, effect_type), key)
        if record is None:
            raise ApiError(
                404, f"no effect {effect_type} {key[:80]!r}; list them with GET /effects", "not_found"
            )
        return record

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
    def get_rules(effect_type: str, who: Caller, gate: Ledger) -> RulesView:
        """The type's rules and its spend in the current window; for a client's type also the client's own cap
        (``client_spend``). A client reads only its own types (``*``: its own cap)."""
        if who != ADMIN and effect_type in (ALL_TYPES, client_cap_type(who)):
            full = client_cap_type(who)
        else:
            full = _type(who, effect_type)
        client = namespace_of(full)
        whole = client_cap_type(client) if client is not None else None
        return RulesView(
            **gate.rules(full).to_dict(),
            spend=_spend(gate, full),
            client_spend=_spend(gate, whole) if whole is not None and whole != full else None,
        )

    @app.put("/rules/{effect_type:path}", tags=["admin"])
    def put_rules(effect_type: str, body: RulesBody, who: Admin, gate: Ledger) -> RulesView:
        """Replace the type's rules (approval, max_attempts, spend cap per window), with the reason;
        ``<client>/*`` takes a client's own cap over all its types."""
        fields = body.model_dump(exclude={"reason"})
        rules = gate.set_rules(effect_type, reason=body.reason, actor="admin-api", **fields)
        return RulesView(**rules.to_dict(), spend=_spend(gate, effect_type))

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def app_from_settings() -> FastAPI:
    """The app for ``ratchet effects serve``: control DB, client keys and admin key from RATCHET_* settings."""
    from ratchet_core.api_keys import parse_api_keys
    from ratchet_core.control_db import make_engine
    from ratchet_core.settings import load_settings

    settings = load_settings()
    return create_app(
        make_engine(settings.control_db_url), parse_api_keys(settings.api_keys), settings.admin_key
    )
