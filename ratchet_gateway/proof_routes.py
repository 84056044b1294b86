"""Training-set proofs for clients: was my request in adapter ``version``'s training set, provably, from its BOM?

Routes (bearer client key, like every route; errors in OpenAI's shape):

- ``POST /ratchet/proofs/{version}`` with the chat body the client sent to ``/v1/chat/completions`` (task from
  ``metadata.ratchet_task``, else the ``X-Ratchet-Task`` header, else ``default``, as the chat route decides);
- ``GET /ratchet/proofs/{version}/{request_id}``: the same for a request this replica's ledger holds, found by its
  ``x-ratchet-request-id``; only the calling client's own requests (another client's is a 404 exactly like a
  missing one). With several gateway workers a request lives in one worker's ledger: on a 404, POST the body;
- ``GET /ratchet/boms/{version}``: the signed BOM envelope the proof is checked against.

The answer is a proof in ``ratchet_stats.commitment``'s format (``_type`` = ``PROOF_TYPE``): ``membership``
(Merkle inclusion of the key in the sorted training-key tree) or ``non-membership`` (its two adjacent neighbours),
made with ``KeyTree`` from ``<artifacts>/boms/<version>/train-keys.txt`` (written by the ``bom`` asset). Save it
and check it offline against the BOM alone: ``ratchet verify proof --bom bom.dsse.json --proof proof.json --key
PUB [--expect member|absent]``; the verifier trusts only the root and size recorded in the signed BOM.

The example key is computed from exactly what the ledger stores for the request, so it equals the key the night
gives it (``ratchet_assets.night.examples``): ``key = SHA-256(canonical_json({task, messages, tools,
response_format}))`` (``ratchet_core.example_key.redacted_example_key``) over

- ``messages``: the body's messages through the gateway's redaction (``ratchet_core.redact.redact_value``, the
  identity when ``RATCHET_REDACT_PII`` is off, as for the ledger);
- ``tools``: the redacted ``tools`` list (the ledger stores ``{"tools", "tool_choice"}``; the night keeps
  ``tools`` only), ``null`` when absent or empty;
- ``response_format``: as sent, ``null`` when absent or empty.

For a ledger row the same document is rebuilt from its stored texts (``key_of_row``). Key trees are cached per
file (path, mtime, size): building one costs O(n log n) once per adapter, a proof O(log n).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from ratchet_core.example_key import body_example_key, redacted_example_key, split_tools_column
from ratchet_gateway.errors import GatewayError, error_response
from ratchet_gateway.models import ChatRequest

_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_RID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_CACHE_SIZE = 4


def task_of(req: ChatRequest, header: str | None) -> str:
    """The request's task exactly as the chat route decides it: metadata, then header, then ``default``."""
    return (req.metadata or {}).get("ratchet_task") or header or "default"


def key_of_request(body: dict[str, Any], task: str, redact: bool) -> str:
    """The example key of a chat body, from the values the chat route writes to the ledger (see module doc)."""
    return body_example_key(body, task, redact=redact)


def key_of_row(task: str, messages: str, tools: str, response_format: str) -> str:
    """The example key of a ledger row from its stored texts (messages already redacted)."""
    rf = json.loads(response_format) if response_format else None
    return redacted_example_key(task, json.loads(messages), split_tools_column(tools)[0], rf or None)


class KeyTreeCache:
    """``KeyTree`` per train-keys file, rebuilt when the file changes (path, mtime, size); a few kept."""

    def __init__(self, size: int = _CACHE_SIZE) -> None:
        self._size = size
        self._trees: OrderedDict[tuple[str, int, int], Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: Path) -> Any:
        from ratchet_stats.commitment import KeyTree

        st = path.stat()
        ident = (str(path), st.st_mtime_ns, st.st_size)
        with self._lock:
            if ident in self._trees:
                self._trees.move_to_end(ident)
                return self._trees[ident]
        keys = [ln.strip() for ln in path.read_text(encoding="ascii").splitlines() if ln.strip()]
        tree = KeyTree(keys)  # ValueError on a malformed key
        with self._lock:
            self._trees[ident] = tree
            while len(self._trees) > self._size:
                self._trees.popitem(last=False)
        return tree


def _find_row(gw, request_id: str) -> tuple[str, str, str, str, str] | None:
    """(client, task, messages, tools, response_format) of this replica's request row, or None."""
    con = gw.ledger._con
    if con is None:
        return None
    cur = con.cursor()  # a separate connection to the same database: safe beside the loader thread
    try:
        rows = cur.execute(
            "SELECT client, task, messages, tools, response_format FROM ledger "
            "WHERE request_id = ? AND kind = 'request' ORDER BY seq LIMIT 1",
            [request_id],
        ).fetchall()
    finally:
        cur.close()
    return tuple(rows[0]) if rows else None  # type: ignore[return-value]


def add_proof_routes(app: FastAPI, gw) -> None:
    from ratchet_gateway.app import _headers, json_response, openai_error
    from ratchet_gateway.chat import ChatHandler

    trees = KeyTreeCache()
    reader = ChatHandler(gw)

    def folder(version: str) -> Path:
        return Path(gw.settings.artifacts_root) / "boms" / version

    def client_of(request: Request) -> str | None:
        return gw.keys.authenticate(request.headers.get("authorization"))

    def unauthorized() -> Response:
        return openai_error(
            401, "invalid or missing API key: send 'Authorization: Bearer <key>'", "invalid_api_key"
        )

    def bad_version(version: str) -> Response | None:
        if _VERSION.match(version) and ".." not in version:
            return None
        return openai_error(
            400, "version must be an adapter version name like v3-1a2b3c4d (see the release manifest)"
        )

    def no_bom(version: str) -> Response:
        return openai_error(
            404,
            f"adapter version {version} has no BOM: it was never certified, or its night has not run yet; "
            "proofs exist only for versions with a signed BOM",
            "bom_not_found",
        )

    async def prove(version: str, key: str) -> Response:
        f = folder(version)
        if not (f / "bom.dsse.json").is_file() or not (f / "train-keys.txt").is_file():
            return no_bom(version)
        try:
            tree = await asyncio.to_thread(trees.get, f / "train-keys.txt")
        except (OSError, UnicodeDecodeError, ValueError):
            return openai_error(
                500,
                f"the training key list of {version} is unreadable or malformed; an operator must rematerialise "
                "its `bom` asset",
                "train_keys_invalid",
            )
        return json_response(tree.prove(key))

    @app.post("/ratchet/proofs/{version}")
    async def proof_for_body(version: str, request: Request) -> Response:
        if client_of(request) is None:
            return unauthorized()
        if (resp := bad_version(version)) is not None:
            return resp
        try:
            body = reader._parse(await reader._read_body(request))
            req = reader._validate(body)
        except GatewayError as err:
            err.message += " (send the same body you sent to /v1/chat/completions)"
            return error_response(err, _headers())
        task = task_of(req, request.headers.get("x-ratchet-task"))
        key = await asyncio.to_thread(key_of_request, body, task, gw.settings.redact_pii)
        return await prove(version, key)

    @app.get("/ratchet/proofs/{version}/{request_id}")
    async def proof_for_request(version: str, request_id: str, request: Request) -> Response:
        client = client_of(request)
        if client is None:
            return unauthorized()
        if (resp := bad_version(version)) is not None:
            return resp
        if not _RID.match(request_id):
            return openai_error(400, "request_id must be an x-ratchet-request-id value")
        row = await asyncio.to_thread(_find_row, gw, request_id)
        if row is None or row[0] != client:
            return openai_error(
                404,
                f"no request {request_id} of yours in this gateway replica's ledger; POST the request body to "
                f"/ratchet/proofs/{version} instead",
                "request_not_found",
            )
        key = key_of_row(*row[1:])
        return await prove(version, key)

    @app.get("/ratchet/boms/{version}")
    async def bom(version: str, request: Request) -> Response:
        if client_of(request) is None:
            return unauthorized()
        if (resp := bad_version(version)) is not None:
            return resp
        path = folder(version) / "bom.dsse.json"
        if not path.is_file():
            return no_bom(version)
        data = await asyncio.to_thread(path.read_bytes)
        return Response(data, media_type="application/json", headers=_headers())
