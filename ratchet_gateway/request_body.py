"""Request bodies: how a chat body is read (size-limited), parsed and validated against the request model
(``ratchet_gateway.request_model``: the fields OpenAI's API checks, and its rules between them).

A top-level field outside the chat allow-list (OpenAI's documented parameters, and the operator's
``RATCHET_PROVIDER_EXTRA_FIELDS``) is a 400 naming it before validation (``ratchet_gateway.forwarded``): a client
field never selects where or how a model is called. Types of the fields Ratchet reads are checked strictly, as OpenAI checks them (``ratchet_gateway.input_rules``: ``max_tokens: true``, ``stream: "yes"``,
``seed: false``, ``temperature: "0.5"`` are rejected), and a wrong one is a 400 that names the field.

Before parsing, a body nested deeper than ``input_rules.MAX_NESTING_DEPTH`` is a 400, and so is a large one
(over :data:`LARGE_BODY_BYTES`) holding more than ``input_rules.MAX_JSON_VALUES`` values; a large body is parsed
in pieces (``ratchet_core.json_pieces``) and its messages validated in slices, so the chat pipeline can do it
in a worker thread without long GIL holds (``ratchet_gateway.offload``). The task (``metadata.ratchet_task``, else
the ``X-Ratchet-Task`` header decoded as UTF-8, else ``default``) must be a valid task name
(``ratchet_core.names``: 1-64 of ``A-Za-z0-9._-``) or the request is a 400: it is never stored, logged or
forwarded upstream unvalidated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect, Request

from ratchet_core import json_pieces
from ratchet_core.names import MAX_TASK_NAME_LENGTH, TASK_NAME_PATTERN
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.forwarded import shown_name
from ratchet_gateway.input_rules import (
    MAX_JSON_VALUES,
    MAX_NESTING_DEPTH,
    InputRuleError,
    check_nesting,
    nesting_error,
    resolve_task,
)
from ratchet_gateway.request_model import ChatMessage, ChatRequest, Conversation, check_request

__all__ = ["ChatMessage", "ChatRequest", "parse_chat_body", "read_body", "receive_body", "validate_chat_body"]

# A body larger than this is "large": parsed in pieces (``json_pieces``) and validated in slices, and the chat
# pipeline does every step proportional to its size in a worker thread (``ratchet_gateway.chat.handler``).
LARGE_BODY_BYTES = json_pieces.PIECE
_SLICE = 256  # messages per pydantic call for a large body


def describe_validation_error(exc: ValidationError) -> str:
    """``field.path: problem; ...`` for the first few errors, with what to do next."""
    return describe_errors(exc.errors(), "Fix these fields (OpenAI chat format) and retry.")


def error_param(loc: Sequence[Any]) -> str | None:
    """OpenAI's ``param`` for a pydantic error location: the field path (``messages.3.content``), without the
    leading ``body`` and without the labels pydantic adds for the member of a union it tried (``str``,
    ``list[str]``, ``literal[...]``, a model's class name); a client's key that is not plain is shown escaped and
    cut (``forwarded.shown_name``)."""
    parts = [
        shown_name(str(p)) for i, p in enumerate(loc) if not (i == 0 and p == "body") and not _union_label(p)
    ]
    return ".".join(parts) or None


_TYPE_LABELS = frozenset({"str", "int", "float", "bool", "none", "dict", "list", "any"})


def _union_label(part: Any) -> bool:
    if not isinstance(part, str):
        return False
    return "[" in part or part in _TYPE_LABELS or (part[:1].isupper() and part.isalnum())


def describe_errors(errors: Sequence[Mapping[str, Any]], fix: str = "Fix these fields and retry.") -> str:
    """``field.path: problem; ...`` for the first few pydantic/FastAPI errors (:func:`error_param`), then
    `fix`."""
    parts = []
    for err in errors[:3]:
        parts.append(f"{error_param(err.get('loc') or ()) or 'body'}: {err.get('msg', 'invalid')}")
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
    """The body as a JSON object, or a 400 that says what is wrong with it (nesting depth first); `needs` names
    the fields the API's body must have (another request API's, ``ratchet_gateway.apis``).

    A large body (> LARGE_BODY_BYTES) is scanned once (``json_pieces.structure``) for its depth and its number of
    values (at most ``MAX_JSON_VALUES``), then parsed in pieces: call it in a worker thread."""
    try:
        if len(raw) <= LARGE_BODY_BYTES:
            check_nesting(raw)
            body = orjson.loads(raw)
        else:
            scanned = json_pieces.structure(raw)
            if scanned.max_depth > MAX_NESTING_DEPTH:
                raise nesting_error()
            if scanned.values > MAX_JSON_VALUES:
                raise InputRuleError(
                    f"the request body holds more than {MAX_JSON_VALUES} JSON values (array elements and object "
                    "members); send a shorter conversation",
                    None,
                    "too_many_values",
                )
            body = json_pieces.loads(raw, scanned=scanned)
    except InputRuleError as exc:
        raise input_rule_error(exc) from None
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


_MESSAGES = TypeAdapter(list[ChatMessage])


def validate_chat_body(body: dict) -> ChatRequest:
    """The validated request (``ratchet_gateway.request_model``), or a 400 naming the first bad field.

    A body of more than ``_SLICE`` messages is validated ``_SLICE`` messages at a time, the rules between messages
    checked as they go (``Conversation``), so no single pydantic call is long (between them a worker thread lets
    the event loop run); its validated view then keeps only the first message (thousands of message models would
    be freed on the event loop at the end of the request, all at once): the body holds them all, as sent."""
    messages = body.get("messages")
    try:
        if isinstance(messages, list) and len(messages) > _SLICE:
            req = ChatRequest.model_validate({**body, "messages": messages[:1]})
            check_request(req, "stream_options" in body, messages=False)
            conversation = Conversation()
            conversation.add(0, req.messages[0])
            for start in range(1, len(messages), _SLICE):
                try:
                    part = _MESSAGES.validate_python(messages[start : start + _SLICE])
                except ValidationError as exc:
                    raise _slice_error(exc, start) from exc
                for offset, m in enumerate(part):
                    conversation.add(start + offset, m)
            conversation.end()
        else:
            req = ChatRequest.model_validate(body)
            check_request(req, "stream_options" in body)
    except ValidationError as exc:
        param = error_param(exc.errors()[0].get("loc") or ())
        raise GatewayError(400, describe_validation_error(exc), "invalid_request", param=param) from exc
    except InputRuleError as exc:
        raise input_rule_error(exc) from None
    return req


def _slice_error(exc: ValidationError, start: int) -> GatewayError:
    """A slice's validation error, its locations shifted to the message's place in the body."""
    errors = [
        {**e, "loc": ("messages", start + int(e["loc"][0]), *e["loc"][1:])} if e.get("loc") else e
        for e in exc.errors()
    ]
    param = error_param(errors[0]["loc"])
    return GatewayError(
        400,
        describe_errors(errors, "Fix these fields (OpenAI chat format) and retry."),
        "invalid_request",
        param=param,
    )


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
