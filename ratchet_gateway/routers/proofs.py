"""Training-set proofs for clients (``ratchet_gateway.proofs`` says how keys and proofs are made):

- ``POST /ratchet/proofs/{version}`` with the chat body the client sent to ``/v1/chat/completions``: only for a
  body the caller itself sent (a 404 like an unknown request otherwise);
- ``GET /ratchet/proofs/{version}/{request_id}``: for a request this replica's ledger holds, the caller's own only
  (another client's is a 404 exactly like a missing one);
- ``GET /ratchet/boms/{version}``: the signed BOM envelope the proof is checked against.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam
from starlette.requests import Request
from starlette.responses import Response

from ratchet_core.names import is_valid
from ratchet_gateway.deps import ClientDep, GatewayDep
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.proofs import (
    client_sent,
    find_request_row,
    key_of_request,
    key_of_row,
    stored_messages,
    valid_version,
)
from ratchet_gateway.request_body import (
    CHAT_BODY_OPENAPI,
    parse_chat_body,
    read_body,
    task_of,
    validate_chat_body,
)
from ratchet_gateway.responses import error_docs, json_response, ratchet_headers
from ratchet_gateway.state import Gateway

router = APIRouter(prefix="/ratchet", tags=["proofs"])

Version = Annotated[str, PathParam(description="An adapter version name, e.g. v3-1a2b3c4d.")]
RequestId = Annotated[str, PathParam(description="An x-ratchet-request-id value.")]


def _check_version(version: str) -> None:
    """400 for a name that is not an adapter version (checked before any path is built from it)."""
    if not valid_version(version):
        raise GatewayError(
            400,
            "version must be an adapter version name like v3-1a2b3c4d (see the release manifest)",
            "invalid_version",
            param="version",
        )


def _no_bom(version: str) -> GatewayError:
    return GatewayError(
        404,
        f"adapter version {version} has no BOM: it was never certified, or its night has not run yet; "
        "proofs exist only for versions with a signed BOM",
        "bom_not_found",
    )


def _not_yours(version: str) -> GatewayError:
    """The one 404 for a request the caller did not send: absent, another client's, or a body never sent (the
    same answer for all, so it reveals nothing about other clients' requests)."""
    return GatewayError(
        404,
        "no request of yours with this id or body in this gateway's ledger; send the exact body you sent to "
        f"/v1/chat/completions (POST /ratchet/proofs/{version}) or an x-ratchet-request-id of yours",
        "request_not_found",
    )


def _bom_files(gw: Gateway, version: str):
    train_keys = gw.artifacts.bom_train_keys(version)
    if not gw.artifacts.bom(version).is_file() or not train_keys.is_file():
        raise _no_bom(version)
    return train_keys


async def _prove(gw: Gateway, version: str, key: str) -> Response:
    train_keys = _bom_files(gw, version)
    try:
        tree = await asyncio.to_thread(gw.key_trees.get, train_keys)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise GatewayError(
            500,
            f"the training key list of {version} is unreadable or malformed; an operator must rematerialise "
            "its `bom` asset",
            "train_keys_invalid",
        ) from exc
    return json_response(tree.prove(key))


@router.post(
    "/proofs/{version}",
    summary="Was this chat body in adapter `version`'s training set? (membership or non-membership proof)",
    openapi_extra=CHAT_BODY_OPENAPI,  # the body is read like the chat route's
    responses=error_docs(400, 401, 404, 413),
)
async def proof_for_body(version: Version, request: Request, gw: GatewayDep, client: ClientDep) -> Response:
    _check_version(version)
    try:
        body = parse_chat_body(await read_body(request, gw.settings.max_body_bytes))
        req = validate_chat_body(body)
    except GatewayError as err:
        err.message += " (send the same body you sent to /v1/chat/completions)"
        raise
    task = task_of(req, request.headers.get("x-ratchet-task"))
    redact = gw.settings.redact_pii
    key = await asyncio.to_thread(key_of_request, body, task, redact)
    _bom_files(
        gw, version
    )  # a version without a BOM says so whatever the body (it tells nothing about requests)
    messages = await asyncio.to_thread(stored_messages, body, redact)
    if not await asyncio.to_thread(client_sent, gw.ledger, client, task, messages, key):
        raise _not_yours(version)
    return await _prove(gw, version, key)


@router.get(
    "/proofs/{version}/{request_id}",
    summary="Was my request `request_id` (in this replica's ledger) in adapter `version`'s training set?",
    responses=error_docs(400, 401, 404),
)
async def proof_for_request(
    version: Version, request_id: RequestId, gw: GatewayDep, client: ClientDep
) -> Response:
    _check_version(version)
    if not is_valid("request id", request_id):
        raise GatewayError(
            400, "request_id must be an x-ratchet-request-id value", "invalid_request_id", param="request_id"
        )
    row = await asyncio.to_thread(find_request_row, gw.ledger, request_id)
    if row is None or row[0] != client:
        raise _not_yours(version)
    return await _prove(gw, version, key_of_row(*row[1:]))


@router.get(
    "/boms/{version}",
    summary="The signed BOM (DSSE envelope) of adapter `version`",
    responses=error_docs(400, 401, 404),
)
async def bom(version: Version, gw: GatewayDep, client: ClientDep) -> Response:
    _check_version(version)
    path = gw.artifacts.bom(version)
    if not path.is_file():
        raise _no_bom(version)
    data = await asyncio.to_thread(path.read_bytes)
    return Response(data, media_type="application/json", headers=ratchet_headers())
