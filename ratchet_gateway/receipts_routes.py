"""Receipts, proofs and the public key, served to clients from the files the ``daily_receipt`` asset wrote.

Layout read (``ratchet_assets.night.receipts``), under ``<artifacts>/receipts/<day>/``:

- ``receipt.dsse.json``: the signed receipt (DSSE envelope, canonical JSON);
- ``rows.parquet``: the Merkle leaves in tree order, columns ``index``, ``request_id``, ``client``, ``leaf`` (the
  canonical JSON text that is hashed, RFC 9162 leaf = SHA-256(0x00 || leaf)).

``GET /ratchet/receipts/{day}`` returns the envelope plus the calling client's own leaves;
``GET /ratchet/receipts/{day}/proof/{request_id}`` returns an RFC 9162 inclusion proof in the shape of
``ratchet_stats.receipt`` (``_type`` = its PROOF_TYPE; verify with ``ratchet verify proof``), read from the
stored tree by ``ratchet_core.receipt_store.receipt_proof`` (the gateway never imports the control plane).
Another client's request is a 404 exactly like a missing one, so its existence is not revealed.
``GET /ratchet/public-key`` returns the signing public key(s).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_RID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def _read_rows(path: Path) -> dict[str, list]:
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["request_id", "client", "leaf"])
    return {name: t.column(name).to_pylist() for name in ("request_id", "client", "leaf")}


def build_proof(folder: Path, day: str, request_id: str, client: str) -> dict | None:
    """The inclusion proof of `request_id` if it is in the day's receipt and belongs to `client`, else None
    (one row group and O(log n) stored tree hashes read: ``ratchet_core.receipt_store``)."""
    from ratchet_core.receipt_store import receipt_proof

    return receipt_proof(folder, day, request_id, client=client)


def add_receipt_routes(app: FastAPI, gw) -> None:
    from ratchet_gateway.app import json_response, openai_error

    def folder(day: str) -> Path:
        return Path(gw.settings.artifacts_root) / "receipts" / day

    def client_of(request: Request) -> str | None:
        return gw.keys.authenticate(request.headers.get("authorization"))

    def no_receipt(day: str) -> Response:
        return openai_error(
            404, f"no receipt for {day} yet; receipts are signed after the day closes", "receipt_not_found"
        )

    @app.get("/ratchet/receipts/{day}")
    async def receipt(day: str, request: Request) -> Response:
        client = client_of(request)
        if client is None:
            return openai_error(401, "invalid or missing API key", "invalid_api_key")
        if not _DAY.match(day):
            return openai_error(400, "day must be YYYY-MM-DD")
        f = folder(day)
        if not (f / "receipt.dsse.json").exists() or not (f / "rows.parquet").exists():
            return no_receipt(day)
        rows = await asyncio.to_thread(_read_rows, f / "rows.parquet")
        mine = [
            {"index": i, "request_id": rid, "leaf": leaf}
            for i, (rid, c, leaf) in enumerate(
                zip(rows["request_id"], rows["client"], rows["leaf"], strict=True)
            )
            if c == client
        ]
        envelope = json.loads((f / "receipt.dsse.json").read_bytes())
        return json_response({"day": day, "client": client, "envelope": envelope, "rows": mine})

    @app.get("/ratchet/receipts/{day}/proof/{request_id}")
    async def proof(day: str, request_id: str, request: Request) -> Response:
        client = client_of(request)
        if client is None:
            return openai_error(401, "invalid or missing API key", "invalid_api_key")
        if not _DAY.match(day) or not _RID.match(request_id):
            return openai_error(400, "day must be YYYY-MM-DD and request_id an x-ratchet-request-id value")
        f = folder(day)
        if not (f / "receipt.dsse.json").exists() or not (f / "rows.parquet").exists():
            return no_receipt(day)
        data = await asyncio.to_thread(build_proof, f, day, request_id, client)
        if data is None:
            return openai_error(
                404, f"no request {request_id} of yours in the receipt for {day}", "proof_not_found"
            )
        return json_response(data)

    @app.get("/ratchet/public-key")
    async def public_key() -> Response:
        from ratchet_gateway.app import _public_keys

        keys = gw.public_keys or _public_keys(gw.settings)
        if not keys:
            return openai_error(
                404,
                "no public key configured; run `ratchet init` or set RATCHET_SIGNING_KEY",
                "no_public_key",
            )
        from ratchet_stats.keys import key_id, public_key_pem

        return json_response({"keys": [{"key_id": key_id(k), "pem": public_key_pem(k)} for k in keys]})
