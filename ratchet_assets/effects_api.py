"""The effect gate as a service: ``ratchet effects serve``, an HTTP API over :class:`~ratchet_assets.effects.EffectLedger`.

Why a separate app in ``ratchet_assets`` and not a gateway router: the ledger (and its rules) is control-plane
state that lives in ``ratchet_assets``, and the gateway must never import ``ratchet_assets`` (ARCHITECTURE.md,
"Layers"). Moving the ledger into ``ratchet_core`` only to mount it in the gateway would put the control
plane's decision logic on the data plane's request path and on every replica; the gate is small, low-traffic
and shares nothing with chat serving but the control DB. So it is its own FastAPI app on the same control DB
that the night and the admin CLI use: one state machine, three doors (Python, CLI, HTTP).

Authentication, per caller (``Authorization: Bearer <key>``):

- a client key from ``RATCHET_API_KEYS`` (``clientKey``): begin / report / fail / list / show and read the rules
  and spend of a type. A client's keys are namespaced as ``<client>/<key>``, so two clients never share an
  effect and each lists and shows only its own;
- the admin key ``RATCHET_ADMIN_KEY`` (``adminKey``): everything, plus resolve, grant/deny approvals and set rules.

Errors have OpenAI's shape ``{"error": {"message", "type", "code"}}`` like the gateway's. ``/openapi.json``
documents every route, body and both schemes.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.engine import Engine
from starlette.requests import Request

from ratchet_assets.effects import EffectError, EffectLedger, StaleToken
from ratchet_core.api_keys import KeyStore

ADMIN = ""  # the admin caller; no client can be named "" (name:secret needs a name)


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


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


def _scoped(who: str, key: str) -> str:
    """A client's keys live under ``<client>/``; the admin names full keys."""
    return key if who == ADMIN else f"{who}/{key}"


class BeginBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    effect_type: str = Field(min_length=1, max_length=64, examples=["report.file"])
    key: str = Field(
        min_length=1, max_length=400, description="Derived from the effect's content, not a run id."
    )
    fingerprint: str = Field(
        min_length=1, max_length=128, description="Hash of the payload the effect acts on."
    )
    lease_seconds: float = Field(600.0, gt=0, le=86400)
    cost_usd: float | None = Field(
        None, ge=0, description="Estimated cost; required where a spend cap is set."
    )
    summary: str = Field("", max_length=2000, description="Shown to the operator who approves.")


class ReportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=64)
    result: dict[str, Any] = Field(default_factory=dict)
    cost_usd: float | None = Field(None, ge=0, description="What the effect actually cost.")


class FailBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=64)
    error: str = Field(min_length=1, max_length=2000)
    cost_usd: float | None = Field(
        None, ge=0, description="What was spent anyway (0 releases the reservation)."
    )


class ResolveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    effect_type: str
    key: str
    resolution: Literal["done", "failed", "forget"]
    reason: str
    force: bool = False


class DecisionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    effect_type: str
    key: str
    reason: str


class RulesBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str
    policy: Literal["block", "retry", "probe"] | None = None
    approval_required: bool = False
    max_attempts: int | None = Field(None, ge=1)
    cap_usd: float | None = Field(None, ge=0)
    cap_window_seconds: int | None = Field(None, ge=1)


def create_app(engine: Engine, clients: list[tuple[str, str]], admin_key: str) -> FastAPI:
    """The effect gate's app over the control DB behind ``engine``."""
    app = FastAPI(
        title="Ratchet effect gate",
        summary="Irreversible effects at most once: begin/report/fail/resolve, approvals, max_attempts, spend caps.",
        version="1",
    )
    app.state.ledger = EffectLedger(engine)
    # The admin key last: a client secret equal to it still authenticates as the admin.
    app.state.keys = KeyStore(
        [*clients, (ADMIN, admin_key)] if admin_key else clients, secrets.token_bytes(32)
    )

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        kind = "authentication_error" if exc.status in (401, 403) else "invalid_request_error"
        return JSONResponse(
            {"error": {"message": exc.message, "type": kind, "code": exc.code}}, status_code=exc.status
        )

    @app.exception_handler(EffectError)
    async def _effect_error(request: Request, exc: EffectError) -> JSONResponse:
        status, code = (409, "stale_token") if isinstance(exc, StaleToken) else (400, "effect_error")
        return JSONResponse(
            {"error": {"message": str(exc), "type": "invalid_request_error", "code": code}},
            status_code=status,
        )

    @app.post("/effects/begin", tags=["effects"])
    def begin(body: BeginBody, who: Caller, gate: Ledger) -> dict[str, Any]:
        """Ask before acting; act only on ``execute`` (then report or fail with its token)."""
        if gate.rules(body.effect_type).policy == "probe":
            raise ApiError(
                400, f"{body.effect_type} has policy 'probe', which only in-process callers can use", "probe"
            )
        decided = gate.begin(
            body.effect_type,
            _scoped(who, body.key),
            body.fingerprint,
            lease_seconds=body.lease_seconds,
            cost_usd=body.cost_usd,
            summary=body.summary,
            requested_by=who,
        )
        return {**decided.to_dict(), "key": _scoped(who, body.key)}

    @app.post("/effects/report", tags=["effects"])
    def report(body: ReportBody, who: Caller, gate: Ledger) -> dict[str, str]:
        """The effect holding ``token`` happened; ``result`` is what later duplicates receive."""
        gate.report(body.token, body.result, cost_usd=body.cost_usd)
        return {"status": "done"}

    @app.post("/effects/fail", tags=["effects"])
    def fail(body: FailBody, who: Caller, gate: Ledger) -> dict[str, str]:
        """The effect holding ``token`` did not happen (may run again per policy and max_attempts)."""
        gate.fail(body.token, body.error, cost_usd=body.cost_usd)
        return {"status": "failed"}

    @app.post("/effects/resolve", tags=["admin"])
    def resolve(body: ResolveBody, who: Admin, gate: Ledger) -> dict[str, Any]:
        """Operator decision on a stuck effect (same rules as `ratchet admin effects resolve`)."""
        record = gate.resolve(body.effect_type, body.key, body.resolution, body.reason, force=body.force)
        return (
            record.to_dict()
            if record
            else {"effect_type": body.effect_type, "key": body.key, "forgotten": True}
        )

    @app.get("/effects", tags=["effects"])
    def list_effects(
        who: Caller,
        gate: Ledger,
        effect_type: str | None = None,
        status: str | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        """Newest first; a client sees only its own effects."""
        prefix = None if who == ADMIN else f"{who}/"
        rows = gate.list_effects(effect_type=effect_type, status=status, limit=limit, key_prefix=prefix)
        return [r.to_dict() for r in rows]

    @app.get("/effects/{effect_type}/{key:path}", tags=["effects"])
    def show(effect_type: str, key: str, who: Caller, gate: Ledger) -> dict[str, Any]:
        """One effect (a client names its key without its ``<client>/`` prefix)."""
        record = gate.lookup(effect_type, _scoped(who, key))
        if record is None:
            raise ApiError(404, f"no effect {effect_type} {key!r}; list them with GET /effects", "not_found")
        return record.to_dict()

    @app.get("/approvals", tags=["admin"])
    def approvals(
        who: Admin, gate: Ledger, state: Literal["pending", "granted", "denied"] | None = "pending"
    ) -> list[dict[str, Any]]:
        """Approvals in a state (pending by default), newest first."""
        return [a.to_dict() for a in gate.approvals(state)]

    @app.post("/approvals/grant", tags=["admin"])
    def grant(body: DecisionBody, who: Admin, gate: Ledger) -> dict[str, Any]:
        """Grant a requested approval, with the reason (3-500 characters)."""
        return gate.decide(body.effect_type, body.key, True, body.reason, actor="admin-api").to_dict()

    @app.post("/approvals/deny", tags=["admin"])
    def deny(body: DecisionBody, who: Admin, gate: Ledger) -> dict[str, Any]:
        """Deny a requested approval, with the reason; the effect's next begin is ``denied`` with it."""
        return gate.decide(body.effect_type, body.key, False, body.reason, actor="admin-api").to_dict()

    @app.get("/rules/{effect_type}", tags=["effects"])
    def get_rules(effect_type: str, who: Caller, gate: Ledger) -> dict[str, Any]:
        """The type's rules and its spend in the current window (cap, used, remaining)."""
        return {**gate.rules(effect_type).to_dict(), "spend": gate.spend(effect_type)}

    @app.put("/rules/{effect_type}", tags=["admin"])
    def put_rules(effect_type: str, body: RulesBody, who: Admin, gate: Ledger) -> dict[str, Any]:
        """Replace the type's rules (approval, max_attempts, spend cap per window), with the reason."""
        fields = body.model_dump(exclude={"reason"})
        return gate.set_rules(effect_type, reason=body.reason, actor="admin-api", **fields).to_dict()

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
