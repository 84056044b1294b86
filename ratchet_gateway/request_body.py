"""Request bodies: the subset of OpenAI's chat-completions body the gateway checks before forwarding, and how a
chat body is read (size-limited), parsed and validated -- the same for the chat route and the proof route.

Unknown top-level fields are passed through to the upstream unchanged (``extra="allow"``): OpenAI adds
parameters often and a gateway that rejects them breaks clients. Types of the fields Ratchet reads are checked
strictly, as OpenAI checks them (``ratchet_gateway.input_rules``: ``max_tokens: true``, ``stream: "yes"``,
``seed: false``, ``temperature: "0.5"`` are rejected), and a wrong one is a 400 that names the field.

Before parsing, a body nested deeper than ``input_rules.MAX_NESTING_DEPTH`` is a 400; the task
(``metadata.ratchet_task``, else the ``X-Ratchet-Task`` header decoded as UTF-8, else ``default``) must be a
valid task name (``ratchet_core.names.TASK_NAME_PATTERN``: 1-64 of ``A-Za-z0-9._-``) or the request is a 400:
it is never stored, logged or forwarded upstream unvalidated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import ClientDisconnect, Request

from ratchet_core.names import MAX_TASK_NAME_LENGTH, TASK_NAME_PATTERN
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.input_rules import (
    InputRuleError,
    Number,
    StrictBool,
    StrictInt,
    StrictStr,
    check_nesting,
    resolve_task,
)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: StrictStr | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: StrictStr = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)
    temperature: Number | None = Field(None, ge=0, le=2)
    top_p: Number | None = Field(None, ge=0, le=1)
    max_tokens: StrictInt | None = Field(None, ge=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    stop: StrictStr | list[StrictStr] | None = None
    seed: StrictInt | None = None
    user: StrictStr | None = None
    n: StrictInt | None = Field(None, ge=1, le=1)
    parallel_tool_calls: StrictBool | None = None
    metadata: dict[StrictStr, StrictStr] | None = None


def describe_validation_error(exc: ValidationError) -> str:
    """``field.path: problem; ...`` for the first few errors, with what to do next."""
    return describe_errors(exc.errors(), "Fix these fields (OpenAI chat format) and retry.")


def describe_errors(errors: Sequence[Mapping[str, Any]], fix: str = "Fix these fields and retry.") -> str:
    """``field.path: problem; ...`` for the first few pydantic/FastAPI errors (``loc`` without its leading
    ``body``), then `fix`."""
    parts = []
    for err in errors[:3]:
        loc = list(err.get("loc") or ())
        if loc and loc[0] == "body":
            loc = loc[1:]
        parts.append(f"{'.'.join(str(p) for p in loc) or 'body'}: {err.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return "invalid request body: " + "; ".join(parts) + more + ". " + fix


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, at most `limit` bytes (``RATCHET_MAX_BODY_BYTES``): 413 past it, read or declared."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_big(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_big(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def receive_body(receive: Callable[[], Awaitable[dict]], declared: bytes | None, limit: int) -> bytes:
    """:func:`read_body` on the raw ASGI ``receive`` (the chat route's fast path, ``ChatHandler.asgi``):
    `declared` is the raw ``content-length`` header; 413 past `limit`; a client gone mid-body raises
    ``ClientDisconnect`` as Starlette's ``Request.stream`` does."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_big(limit)
    chunks, size = [], 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise _too_big(limit)
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        elif kind == "http.disconnect":
            raise ClientDisconnect()


def _too_big(limit: int) -> GatewayError:
    return GatewayError(
        413,
        f"request body is larger than {limit} bytes (RATCHET_MAX_BODY_BYTES); send a shorter conversation",
        "body_too_large",
    )


def parse_chat_body(raw: bytes, needs: str = "'model' and 'messages'") -> dict:
    """The body as a JSON object (orjson), or a 400 that says what is wrong with it (nesting depth first);
    `needs` names the fields the API's body must have (another request API's, ``ratchet_gateway.apis``)."""
    try:
        check_nesting(raw)
    except InputRuleError as exc:
        raise input_rule_error(exc) from None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        why = "is not valid UTF-8" if "utf-8" in str(exc).lower() else "is not valid JSON"
        raise GatewayError(
            400,
            f"request body {why}; send a UTF-8 JSON object with {needs}",
            "invalid_json",
        ) from exc
    if not isinstance(body, dict):
        raise GatewayError(400, f"request body must be a JSON object with {needs}", "invalid_body")
    return body


def validate_chat_body(body: dict) -> ChatRequest:
    """One pydantic pass over the parsed body; a 400 naming the bad fields otherwise."""
    try:
        return ChatRequest.model_validate(body)
    except ValidationError as exc:
        loc = exc.errors()[0].get("loc") or ()
        param = ".".join(str(p) for p in loc) or None
        raise GatewayError(400, describe_validation_error(exc), "invalid_request", param=param) from exc


def input_rule_error(exc: InputRuleError) -> GatewayError:
    """The 400 (OpenAI's shape, with ``param``) for a broken input rule."""
    return GatewayError(400, exc.message, exc.code, param=exc.param)


# metadata keys that are Ratchet's, not the model's: read here and taken out before the body goes upstream
RATCHET_METADATA = ("ratchet_task", "ratchet_episode")


def episode_of(req: ChatRequest) -> str:
    """``metadata.ratchet_episode`` (the client's own id grouping requests for feedback; '' when absent), a 400
    when it breaks the name rule (``ratchet_core.names``: 1-128 of ``A-Z a-z 0-9 . _ -``)."""
    from ratchet_core.names import NameRuleError, check

    episode = (req.metadata or {}).get("ratchet_episode") or ""
    if episode:
        try:
            check("episode", episode, "metadata.ratchet_episode")
        except NameRuleError as exc:
            raise GatewayError(
                400, exc.message, "invalid_episode", param="metadata.ratchet_episode"
            ) from None
    return episode


def task_of(req: ChatRequest, header: str | None) -> str:
    """The request's task: ``metadata.ratchet_task``, else the ``X-Ratchet-Task`` header (UTF-8), else
    ``default``; a 400 when the one used is not a valid task name (``ratchet_gateway.input_rules``)."""
    try:
        return resolve_task(req.metadata, header)
    except InputRuleError as exc:
        raise input_rule_error(exc) from None


# The chat body is read by the handler, not by FastAPI, so a route that takes one gives its schema (and the task
# header) to /openapi.json with this; ``ChatRequest`` is added to the document's components by ratchet_gateway.app.
CHAT_BODY_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}},
    },
    "parameters": [
        {
            "name": "X-Ratchet-Task",
            "in": "header",
            "required": False,
            "schema": {
                "type": "string",
                "pattern": f"^{TASK_NAME_PATTERN}$",
                "maxLength": MAX_TASK_NAME_LENGTH,
            },
            "description": "The request's task when metadata.ratchet_task is absent (default 'default'): 1-64 "
            "characters of A-Za-z0-9._- (UTF-8; anything else is a 400).",
        }
    ],
}
