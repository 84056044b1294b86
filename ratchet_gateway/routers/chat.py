"""``POST /v1/chat/completions``: the OpenAI-compatible chat route (the pipeline is ``ratchet_gateway.chat``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ratchet_gateway.request_body import CHAT_BODY_OPENAPI
from ratchet_gateway.responses import error_docs

# The body is read by the handler, not by FastAPI (see below): its schema comes from CHAT_BODY_OPENAPI.
_OPENAPI = {**CHAT_BODY_OPENAPI, "security": [{"clientKey": []}]}


async def chat_completions(request: Request) -> Response:
    # Served by ``ratchet_gateway.app.GatewayApp`` before routing (``ChatHandler.asgi``, the same pipeline); this
    # route documents the operation and answers when the app runs under a root_path.
    # A raw Request on purpose (measured, benchmarks/bench_gateway.py): no dependency solving and no FastAPI body
    # model on the hot path. The handler authenticates first, then reads the body (size-limited), parses it with
    # orjson and validates it in one pydantic pass, keeping the dict it forwards upstream.
    return await request.app.state.chat(request)


# ``app.add_api_route(**ROUTE)``: the app registers the hot path in its own route table, matched first, rather than
# behind an included router (FastAPI 0.165 matches those through one more layer: ~10 us of CPU per request here).
ROUTE: dict = {
    "path": "/v1/chat/completions",
    "endpoint": chat_completions,
    "methods": ["POST"],
    "tags": ["chat"],
    "summary": "Chat completion (OpenAI-compatible; stream=true answers with server-sent events)",
    "openapi_extra": _OPENAPI,
    "responses": {
        200: {
            "description": "An OpenAI chat.completion, or with stream=true a text/event-stream of chunks",
            "content": {"application/json": {}, "text/event-stream": {}},
        },
        **error_docs(400, 401, 404, 413, 502, 503, 504),
    },
}
