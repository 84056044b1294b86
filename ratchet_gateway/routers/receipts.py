"""Receipts, receipt proofs and the public key, served to clients from the files the ``daily_receipt`` asset wrote.

Files read (written by ``ratchet_assets.night.receipts``; paths from ``ratchet_core.layout.ArtifactLayout``), under
``<artifacts>/receipts/<day>/``:

- ``receipt.dsse.json``: the signed receipt (DSSE envelope, canonical JSON);
- ``rows.parquet``: the Merkle leaves in tree order, columns ``index``, ``request_id``, ``client``, ``leaf`` (the
  canonical JSON text that is hashed, RFC 9162 leaf = SHA-256(0x00 || leaf)).

``GET /ratchet/receipts/{day}`` returns the calling client's view (``ratchet_gateway.receipt_views.client_view``):
the signed envelope, its own totals line with an inclusion proof against the signed client root and the estimate
lines of its tasks, never another client's name or totals (check it with ``ratchet verify receipt --client-proof
FILE``). For a v3 receipt it is read from the stored client and estimate lines alone (``clients.jsonl``,
``estimates.jsonl``), as the proof route reads the stored tree: milliseconds on a 1M-row day; ``?rows=true`` adds
the client's own request leaves and pair lines (a scan of the day's rows, so it grows with the day), which the
verifier then recomputes the line from. v1/v2 receipts always carry the rows; ``GET /ratchet/receipts/{day}/audit`` (admin key) the whole;
``GET /ratchet/receipts/{day}/proof/{request_id}`` returns an RFC 9162 inclusion proof in the shape of
``ratchet_stats.receipt`` (``_type`` = its PROOF_TYPE; verify with ``ratchet verify proof``), read from the
stored tree by ``ratchet_core.receipt_store.receipt_proof`` (the gateway never imports the control plane).
Another client's request is a 404 exactly like a missing one, so its existence is not revealed.
``GET /ratchet/public-key`` returns the signing public key(s).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi import Path as PathParam
from starlette.responses import Response

from ratchet_core.names import is_valid
from ratchet_gateway.deps import AdminDep, ClientDep, GatewayDep
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.responses import error_docs, json_response
from ratchet_gateway.state import Gateway, manifest_public_keys

router = APIRouter(prefix="/ratchet", tags=["receipts"])

Day = Annotated[str, PathParam(description="The UTC day, YYYY-MM-DD.")]
RequestId = Annotated[str, PathParam(description="An x-ratchet-request-id value.")]
WithRows = Annotated[
    bool,
    Query(
        description="Add your own request leaves and pair lines (a scan of the day's rows; slower on big days)."
    ),
]


def _check_day(day: str) -> None:
    """400 unless `day` is a calendar day YYYY-MM-DD (the one name rule, ``ratchet_core.names``: anchored at both
    ends, so a trailing newline fails)."""
    if not is_valid("day", day):
        raise GatewayError(400, "day must be a calendar day, YYYY-MM-DD", "invalid_day", param="day")


def build_proof(folder: Path, day: str, request_id: str, client: str) -> dict | None:
    """The inclusion proof of `request_id` if it is in the day's receipt and belongs to `client`, else None
    (one row group and O(log n) stored tree hashes read: ``ratchet_core.receipt_store``)."""
    from ratchet_core.receipt_store import receipt_proof

    return receipt_proof(folder, day, request_id, client=client)


def _receipt_folder(gw: Gateway, day: str) -> Path:
    """The day's receipt folder; 404 when the receipt is not signed yet."""
    layout = gw.artifacts
    if not layout.receipt_envelope(day).exists() or not layout.receipt_rows(day).exists():
        raise GatewayError(
            404, f"no receipt for {day} yet; receipts are signed after the day closes", "receipt_not_found"
        )
    return layout.receipt_dir(day)


@router.get(
    "/receipts/{day}",
    summary="The caller's view of the day's signed receipt: its own totals line, proven (and its leaves: ?rows=true)",
    responses=error_docs(400, 401, 404),
)
async def receipt(day: Day, gw: GatewayDep, client: ClientDep, rows: WithRows = False) -> Response:
    _check_day(day)
    folder = _receipt_folder(gw, day)
    from ratchet_gateway.receipt_views import client_view

    return json_response(await asyncio.to_thread(client_view, folder, day, client, rows))


@router.get(
    "/receipts/{day}/audit",
    summary="The auditor's view of the day's receipt: the envelope with every client and estimate line",
    responses=error_docs(400, 403, 404),
    dependencies=[AdminDep],
)
async def receipt_audit(day: Day, gw: GatewayDep) -> Response:
    _check_day(day)
    folder = _receipt_folder(gw, day)
    from ratchet_gateway.receipt_views import auditor_view

    return json_response(await asyncio.to_thread(auditor_view, folder, day))


@router.get(
    "/receipts/{day}/proof/{request_id}",
    summary="RFC 9162 inclusion proof of one of the caller's requests in the day's receipt",
    responses=error_docs(400, 401, 404),
)
async def receipt_proof(day: Day, request_id: RequestId, gw: GatewayDep, client: ClientDep) -> Response:
    _check_day(day)
    if not is_valid("request id", request_id):
        raise GatewayError(
            400, "request_id must be an x-ratchet-request-id value", "invalid_request_id", param="request_id"
        )
    folder = _receipt_folder(gw, day)
    data = await asyncio.to_thread(build_proof, folder, day, request_id, client)
    if data is None:  # another client's request answers exactly like a missing one
        raise GatewayError(
            404, f"no request {request_id} of yours in the receipt for {day}", "proof_not_found"
        )
    return json_response(data)


@router.get(
    "/public-key",
    summary="The public key(s) receipts, BOMs and manifests are signed with",
    responses=error_docs(404),
)
async def public_key(gw: GatewayDep) -> Response:
    roots = gw.public_keys or manifest_public_keys(gw.settings)
    if not roots:
        raise GatewayError(
            404, "no public key configured; run `ratchet init` or set RATCHET_SIGNING_KEY", "no_public_key"
        )
    from ratchet_core.key_history import public_key_listing

    # The keys trusted now (the control DB's signed key history carries the configured ones through rotations),
    # and the retired ones that still verify older receipts, certificates and BOMs.
    return json_response(await asyncio.to_thread(public_key_listing, gw.engine, roots))
