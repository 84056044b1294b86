"""Receipts, proofs and the public key, served to clients from the artifacts the control plane wrote.

File layout read (written by the daily_receipt asset):

- ``<artifacts>/receipts/<day>/receipt.dsse.json``: the signed receipt of that day (DSSE envelope).
- ``<artifacts>/receipts/<day>/proofs/<request_id>.json``: one Merkle inclusion proof per request row, a JSON
  object with at least ``client`` (who made the request); the proof is returned as is.

A client sees only its own rows: a proof of another client's request is a 404, exactly like a missing one, so
its existence is not revealed. ``GET /ratchet/public-key`` returns the PEM of the manifest/receipt key(s).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_RID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def add_receipt_routes(app: FastAPI, gw) -> None:
    from ratchet_gateway.app import json_response, openai_error

    def root() -> Path:
        return Path(gw.settings.artifacts_root) / "receipts"

    def client_of(request: Request) -> str | None:
        return gw.keys.authenticate(request.headers.get("authorization"))

    @app.get("/ratchet/receipts/{day}")
    async def receipt(day: str, request: Request) -> Response:
        if client_of(request) is None:
            return openai_error(401, "invalid or missing API key", "invalid_api_key")
        if not _DAY.match(day):
            return openai_error(400, "day must be YYYY-MM-DD")
        path = root() / day / "receipt.dsse.json"
        if not path.exists():
            return openai_error(
                404,
                f"no receipt for {day} yet; receipts are signed after the day closes",
                "receipt_not_found",
            )
        return json_response(json.loads(path.read_text()))

    @app.get("/ratchet/receipts/{day}/proof/{request_id}")
    async def proof(day: str, request_id: str, request: Request) -> Response:
        client = client_of(request)
        if client is None:
            return openai_error(401, "invalid or missing API key", "invalid_api_key")
        if not _DAY.match(day) or not _RID.match(request_id):
            return openai_error(400, "day must be YYYY-MM-DD and request_id an x-ratchet-request-id value")
        path = root() / day / "proofs" / f"{request_id}.json"
        missing = openai_error(
            404,
            f"no proof for request {request_id} on {day} (not yours, or not receipted yet)",
            "proof_not_found",
        )
        if not path.exists():
            return missing
        data = json.loads(path.read_text())
        if data.get("client") != client:
            return missing
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
