"""Training-set proofs for clients, by request id only (``ratchet_gateway.proofs`` says how keys and proofs are made):

- ``GET /ratchet/proofs/{version}/{request_id}`` (or ``POST /ratchet/proofs/{version}`` with
  ``{"request_id": "..."}``): for a request the caller itself sent, found in this replica's ledger or in the lake's
  sealed segments (any replica's); another client's is a 404 exactly like a missing one. A request sent after the
  version's training data was collected (its BOM's training-set day) gets no proof: it cannot be in it, whatever
  else shares its text. A chat body is refused: it proves nothing about who sent it, and a client that replayed
  another's body would otherwise get a proof about that client's request.
- ``GET /ratchet/boms/{version}``: the signed BOM envelope the proof is checked against.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from ratchet_core.names import REQUEST_ID_PATTERN, is_valid
from ratchet_gateway.deps import ClientDep, GatewayDep
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.proofs import find_request_row, key_of_row, training_day, valid_version
from ratchet_gateway.request_body import read_body
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
    """The one 404 for a request the caller did not send: absent or another client's (the same answer for both,
    so it reveals nothing about other clients' requests)."""
    return GatewayError(
        404,
        f"no request of yours with this id in this gateway's ledger or the lake; ask for a proof about "
        f"{version} with an x-ratchet-request-id of yours",
        "request_not_found",
    )


class ProofRequest(BaseModel):
    """``POST /ratchet/proofs/{version}``: the request to prove, by its id."""

    model_config = ConfigDict(extra="forbid")
    request_id: str = Field(
        pattern=f"^{REQUEST_ID_PATTERN}$", description="An x-ratchet-request-id of yours."
    )


_PROOF_BODY_BYTES = 4096
_BY_ID = (
    'proofs are by request id: send {"request_id": "<the x-ratchet-request-id of your request>"} or GET '
    "/ratchet/proofs/{version}/{request_id}; a chat body proves nothing about who sent it"
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
    summary="Was my request (by request id) in adapter `version`'s training set? (membership or non-membership)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ProofRequest"}}},
        }
    },
    responses=error_docs(400, 401, 404, 413),
)
async def proof_by_body(version: Version, request: Request, gw: GatewayDep, client: ClientDep) -> Response:
    _check_version(version)
    raw = await read_body(request, _PROOF_BODY_BYTES)
    try:
        asked = ProofRequest.model_validate_json(raw)
    except ValidationError:
        raise GatewayError(400, _BY_ID, "proof_by_request_id", param="request_id") from None
    return await _proof(gw, version, asked.request_id, client)


@router.get(
    "/proofs/{version}/{request_id}",
    summary="Was my request `request_id` in adapter `version`'s training set? (membership or non-membership)",
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
    return await _proof(gw, version, request_id, client)


async def _proof(gw: Gateway, version: str, request_id: str, client: str) -> Response:
    _bom_files(gw, version)  # an unknown version says so before any search (it tells nothing about requests)
    cut = await asyncio.to_thread(training_day, gw.artifacts.bom(version))
    # the lake is searched only up to the cut: a later request is in no proof, so its day needs no scan
    row = await asyncio.to_thread(find_request_row, gw.ledger, request_id, cut)
    if row is None or row.client != client:
        raise _not_yours(version)
    if cut is not None and row.day > cut:
        raise GatewayError(
            404,
            f"request {request_id} was sent on {row.day}, after {version}'s training data was collected (through "
            f"{cut}): it is not in that training set, and no proof is made about what else shares its text",
            "request_after_training",
        )
    return await _prove(gw, version, key_of_row(row.task, row.messages, row.tools, row.response_format))


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
