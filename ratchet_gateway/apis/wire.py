"""What the API formats share: server-sent events, answer ids, message content in chat's shape, and the 400 a
translation answers for a field it cannot carry."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from ratchet_gateway.errors import GatewayError
from ratchet_gateway.request_body import describe_errors

Model = TypeVar("Model", bound=BaseModel)


def sse(event: str, data: dict) -> bytes:
    """One server-sent event with its ``event:`` name (both Responses and Messages clients dispatch on it)."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def answer_id(prefix: str, request_id: str) -> str:
    """The answer's id in the API's style (``resp_``, ``msg_``...), made of the gateway's request id
    (``req_<hex>``), so an answer's id names its ledger row."""
    return prefix + request_id.removeprefix("req_")


def invalid(param: str, message: str, code: str = "invalid_request") -> GatewayError:
    """The 400 for a request field the gateway cannot take: `param` names it, the message says what to send."""
    return GatewayError(400, f"{param}: {message}", code, param=param)


def validated(model: type[Model], body: dict, api: str) -> Model:
    """One pydantic pass of `model` over a parsed body; a 400 naming the bad fields (``param``: the first one's
    top-level field: these bodies are flat, and a deeper location names pydantic's union members, not fields)."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        loc = exc.errors()[0].get("loc") or ()
        raise GatewayError(
            400,
            describe_errors(exc.errors(), f"Fix these fields ({api} format) and retry."),
            "invalid_request",
            param=str(loc[0]) if loc else None,
        ) from exc


def chat_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Chat message content from chat content parts: one text part is plain text (what a chat client sends, so the
    same prompt has the same example key whichever API carried it); anything else stays a list of parts."""
    if len(parts) == 1 and parts[0].get("type") == "text":
        return parts[0]["text"]
    return parts


def text_of(parts: list[dict[str, Any]]) -> str:
    """The text of chat text parts, joined (an assistant message's content is text)."""
    return "".join(p["text"] for p in parts if p.get("type") == "text")


def json_text(value: Any) -> str:
    """Compact JSON text of a value (a tool call's arguments as chat carries them)."""
    return orjson.dumps(value).decode()


def tool_input(arguments: Any) -> dict | None:
    """A chat tool call's ``arguments`` text as a JSON object, or None when it is not one."""
    if not isinstance(arguments, str):
        return None
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
