"""``POST /v1/responses``, ``POST /v1/messages``, ``POST /v1/embeddings``: the model APIs besides chat completions
(``ratchet_gateway.apis``). Thin routes: each hands the raw request to its handler, built once by ``create_app``
(``app.state.apis``): the chat pipeline for Responses and Messages (``ChatHandler.for_api``), ``Embeddings`` for
embeddings. The handlers authenticate, read the body (size-limited), validate it and answer every error
themselves, in the API's own shape; their bodies are documented for ``/openapi.json`` from the models here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from fastapi import APIRouter
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from ratchet_gateway.apis.embeddings import EmbeddingsRequest
from ratchet_gateway.apis.messages_request import MessagesRequest
from ratchet_gateway.apis.responses_request import ResponsesRequest
from ratchet_gateway.request_body import CHAT_BODY_OPENAPI
from ratchet_gateway.responses import error_docs

router = APIRouter(tags=["model APIs"])
Handler = Callable[[Request], Awaitable[Response]]


class ModelApis(NamedTuple):
    """The handlers these routes call (``app.state.apis``, built by ``create_app``)."""

    responses: Handler
    messages: Handler
    embeddings: Handler


# Bodies read by the handlers, not by FastAPI: ``create_app`` adds them to the document's components.
BODY_MODELS: dict[str, type[BaseModel]] = {
    "ResponsesRequest": ResponsesRequest,
    "MessagesRequest": MessagesRequest,
    "EmbeddingsRequest": EmbeddingsRequest,
}
_TASK_HEADER = CHAT_BODY_OPENAPI["parameters"]
# ``x-api-key``, the header Anthropic's clients send their key in (the bearer scheme works on /v1/messages too)
ANTHROPIC_KEY_SCHEME = {
    "type": "apiKey",
    "in": "header",
    "name": "x-api-key",
    "description": "A client key from RATCHET_API_KEYS, as Anthropic's clients send it (POST /v1/messages).",
}


def _body(model: str, security: list[dict[str, list]]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model}"}}},
        },
        "parameters": _TASK_HEADER,
        "security": security,
    }


_ANSWER = {
    "description": "The answer, or with stream=true a text/event-stream of the API's typed events",
    "content": {"application/json": {}, "text/event-stream": {}},
}


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicError(BaseModel):
    """Anthropic's error shape: every non-2xx answer of ``POST /v1/messages`` has it."""

    type: str
    error: AnthropicErrorDetail
    request_id: str | None = None


@router.post(
    "/v1/responses",
    summary="Create a response (OpenAI Responses API, stateless; stream=true answers with its typed events)",
    openapi_extra=_body("ResponsesRequest", [{"clientKey": []}]),
    responses={200: _ANSWER, **error_docs(400, 401, 404, 413, 502, 503, 504)},
)
async def create_response(request: Request) -> Response:
    return await request.app.state.apis.responses(request)


@router.post(
    "/v1/messages",
    summary="Create a message (Anthropic Messages API; x-api-key or a bearer key; stream=true: its events)",
    openapi_extra=_body("MessagesRequest", [{"clientKey": []}, {"anthropicKey": []}]),
    responses={
        200: _ANSWER,
        **{
            status: {"model": AnthropicError, "description": doc["description"]}
            for status, doc in error_docs(400, 401, 404, 413, 502, 503, 504).items()
        },
    },
)
async def create_message(request: Request) -> Response:
    return await request.app.state.apis.messages(request)


@router.post(
    "/v1/embeddings",
    summary="Create embeddings (OpenAI format; answered by RATCHET_EMBEDDING_MODEL, logged and priced)",
    openapi_extra=_body("EmbeddingsRequest", [{"clientKey": []}]),
    responses={
        200: {"description": "OpenAI's embeddings list", "content": {"application/json": {}}},
        **error_docs(400, 401, 404, 413, 502, 503, 504),
    },
)
async def create_embeddings(request: Request) -> Response:
    return await request.app.state.apis.embeddings(request)
