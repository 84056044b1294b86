"""``GET /healthz`` (the process answers), ``GET /readyz`` (ledger writable and a manifest loaded: 503 until
then) and ``GET /metrics`` (Prometheus text). No authentication for the first two: load balancers call them.

``/metrics`` without an ``Authorization`` header answers the replica's own series, which name no client; with
``Authorization: Bearer <RATCHET_ADMIN_KEY>`` it adds the per-client series (``ratchet_client_limited``,
``ratchet_client_spend_usd``), which is how a Prometheus scraper gets everything (``authorization`` in its scrape
config). Any other key is a 403, so a scraper configured wrongly notices instead of silently losing series."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Security
from starlette.responses import Response

from ratchet_core.redact import redact_text
from ratchet_gateway.deps import Credentials, GatewayDep, admin_bearer, require_admin
from ratchet_gateway.responses import json_response, ratchet_headers

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness")
async def healthz(gw: GatewayDep) -> Response:
    return json_response({"status": "ok", "replica": gw.ledger.replica})


@router.get(
    "/readyz",
    summary="Readiness: the ledger is writable and a release manifest was loaded",
    responses={503: {"description": "Not ready (the body's checks say which)"}},
)
async def readyz(gw: GatewayDep) -> Response:
    checks = {"ledger_writable": gw.ledger.writable, "manifest_loaded": gw.manifest_loaded}
    ok = all(checks.values())
    body = {
        "status": "ready" if ok else "not ready",
        "checks": checks,
        "manifest_sequence": gw.manifest.sequence,
        "replica": gw.ledger.replica,
    }
    if gw.ledger.error:
        body["ledger_error"] = redact_text(gw.ledger.error)
    return json_response(body, 200 if ok else 503)


@router.get(
    "/metrics",
    summary="Prometheus metrics of this replica (per-client series only with the admin key)",
    responses={
        200: {"content": {"text/plain": {}}, "description": "Prometheus text format 0.0.4"},
        403: {"description": "An Authorization header that is not the admin key"},
    },
)
async def metrics(gw: GatewayDep, credentials: Annotated[Credentials, Security(admin_bearer)]) -> Response:
    per_client = credentials is not None
    if per_client:
        require_admin(gw, credentials)  # 403 unless it is the admin key (constant-time compare)
    gw.metrics.ledger_lag.set(gw.ledger.lag_rows)
    return Response(
        gw.metrics.render(per_client), media_type="text/plain; version=0.0.4", headers=ratchet_headers()
    )
