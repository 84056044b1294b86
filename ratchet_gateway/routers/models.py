"""``GET /v1/models``: the model names this gateway answers to (``ratchet``, the teacher's, its aliases)."""

from __future__ import annotations

import time

from fastapi import APIRouter
from starlette.responses import Response

from ratchet_gateway.deps import ClientDep, GatewayDep
from ratchet_gateway.responses import error_docs, json_response

router = APIRouter(tags=["models"])


@router.get("/v1/models", summary="List the models (OpenAI format)", responses=error_docs(401))
async def list_models(gw: GatewayDep, client: ClientDep) -> Response:
    created = int(time.time())
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "ratchet"}
        for name in sorted(gw.model_names)
    ]
    return json_response({"object": "list", "data": data})
