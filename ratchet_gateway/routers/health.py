"""``GET /healthz`` (the process answers), ``GET /readyz`` (ledger writable and a manifest loaded: 503 until
then) and ``GET /metrics`` (Prometheus text). No authentication: load balancers and scrapers call them."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from ratchet_core.redact import redact_text
from ratchet_gateway.deps import GatewayDep
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
    summary="Prometheus metrics of this replica",
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format 0.0.4"}},
)
async def metrics(gw: GatewayDep) -> Response:
    gw.metrics.ledger_lag.set(gw.ledger.lag_rows)
    return Response(gw.metrics.render(), media_type="text/plain; version=0.0.4", headers=ratchet_headers())
