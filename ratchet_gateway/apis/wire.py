"""What the API formats share: server-sent events, answer ids, message content in chat's shape, the 400 a
translation answers for a field it cannot carry, the caller's own field names in the chat request's errors
(:class:`Origins`), and :class:`TranslatedStream`, the reading of chat chunks every
other API's stream is written from."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from ratchet_gateway.chat.formats import replay_chunks
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.request_body import describe_errors

Model = TypeVar("Model", bound=BaseModel)
T = TypeVar("T")


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


SLICE = 256  # list items per pydantic call for a long list (as ``request_body`` slices chat messages)


def validated(model: type[Model], body: dict, api: str) -> Model:
    """One pydantic pass of `model` over a parsed body; a 400 naming the bad fields (``param``: the first one's
    top-level field: these bodies are flat, and a deeper location names pydantic's union members, not fields).

    A top-level list longer than ``SLICE`` items (a large body's ``messages``, ``input``, ``tools``) is validated
    ``SLICE`` items at a time, so no single pydantic call, which holds the GIL, is long (one pass over a 4 MiB
    body's 30,000 messages: ~4 ms of CPU; a slice: ~0.3 ms): in the large-body lane (``ratchet_gateway.offload``)
    the event loop runs between them. The model then holds those lists as sent."""
    long = {k: v for k, v in body.items() if isinstance(v, list) and len(v) > SLICE}
    try:
        if not long:
            return model.model_validate(body)
        req = model.model_validate({**body, **{k: v[:1] for k, v in long.items()}})
        for name, items in long.items():
            field = model.model_fields.get(name)
            if field is None:  # an extra field: passed on as it is, never read
                continue
            adapter = _adapter(field.annotation)
            for start in range(1, len(items), SLICE):
                try:  # with the first item, so a union type takes the same member for every slice
                    adapter.validate_python([items[0], *items[start : start + SLICE]])
                except ValidationError as exc:
                    raise _invalid(_shifted(exc.errors(), name, start - 1), api) from exc
        return req.model_copy(update=long)
    except ValidationError as exc:
        raise _invalid(exc.errors(), api) from exc


@functools.cache
def _adapter(annotation: Any) -> TypeAdapter:
    return TypeAdapter(annotation)


def _shifted(errors: list, name: str, offset: int) -> list[dict]:
    """A slice's errors at the items' places in the body's list `name` (a union's member tag dropped)."""
    out = []
    for err in errors:
        loc = list(err.get("loc") or ())
        while loc and not isinstance(loc[0], int):  # the union member pydantic tried: not a field
            loc.pop(0)
        if loc:  # the slice's item 0 is the list's first item; item i > 0 is the list's offset + i
            loc[0] = loc[0] and offset + loc[0]
        out.append({**err, "loc": (name, *loc)})
    return out


def _invalid(errors: list, api: str) -> GatewayError:
    loc = errors[0].get("loc") or ()
    return GatewayError(
        400,
        describe_errors(errors, f"Fix these fields ({api} format) and retry."),
        "invalid_request",
        param=str(loc[0]) if loc else None,
    )


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


class TranslatedStream:
    """A streamed answer in another API, written from the chat stream chunk by chunk (a student's complete answer:
    from the chunks :func:`~ratchet_gateway.chat.formats.replay_chunks` makes of it, so both are one code path).
    Subclasses say what the opening, a piece of text and a tool-call delta become; the finish reason and the usage
    are kept for their ``end``."""

    media_type = "text/event-stream"

    def __init__(self) -> None:
        self.started = False
        self.finish = ""
        self.usage: dict = {}

    def chunk(self, raw: bytes, obj: dict) -> bytes | None:
        out = self._opening()
        if obj.get("usage"):
            self.usage = obj["usage"]
        for choice in obj.get("choices") or ():
            if choice.get("index", 0):
                continue  # n > 1 is refused on the way in: only choice 0 is an answer
            delta = choice.get("delta") or {}
            if delta.get("content"):
                out += self._text(delta["content"], (choice.get("logprobs") or {}).get("content") or [])
            for tc in delta.get("tool_calls") or ():
                out += self._call(tc)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return b"".join(out) or None

    def replay(self, resp: dict, request_id: str) -> list[bytes]:
        events = (self.chunk(b"", c) for c in replay_chunks(resp, request_id))
        return [e for e in events if e is not None]

    def _opening(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        return self._start()

    def _start(self) -> list[bytes]:
        """The events that open the stream (sent once, before anything else)."""
        raise NotImplementedError

    def _text(self, piece: str, logprobs: list) -> list[bytes]:
        """The events of a piece of the answer's text (and its token logprobs)."""
        raise NotImplementedError

    def _call(self, tc: dict) -> list[bytes]:
        """The events of one chat tool-call delta (``index``, ``id`` and ``name`` first, then ``arguments``)."""
        raise NotImplementedError


# the caller's own fields in errors ----------------------------------------------------------------------------
@dataclass
class Origins:
    """Where a translated chat body came from in the caller's request, so a rule the chat request breaks is named
    in the caller's own terms: chat message ``i`` came from ``messages[i]`` (``input[2]``, ``messages[1].content[0]``),
    a chat field from the caller's (``max_completion_tokens`` <- ``max_output_tokens``), a chat message's keys
    (``tool_call_id`` -> ``call_id``) and the chat words in a message (``tool message`` -> ``tool_result block``)."""

    messages: list[str] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    words: dict[str, str] = field(default_factory=dict)

    def param(self, chat_param: str) -> str:
        """The caller's path of a chat error's ``param`` (``messages.4.tool_call_id`` -> ``input[3].call_id``)."""
        head, *tail = chat_param.split(".")
        if head == "messages" and tail and tail[0].isdigit():
            i = int(tail[0])
            where = self.messages[i] if i < len(self.messages) else "messages"
            return where + (f".{self.keys[tail[1]]}" if len(tail) > 1 and tail[1] in self.keys else "")
        if head == "tools" and tail and tail[0].isdigit():
            return f"tools[{tail[0]}]" + (".name" if tail[-1] == "name" else "")
        rest = [t for t in tail if t not in ("function", "json_schema")]
        return ".".join([self.fields.get(head, head), *rest])

    def text(self, message: str, chat_param: str, param: str, api: str) -> str:
        """A chat error's message in the caller's terms."""
        message = message.replace(chat_param, param).replace("OpenAI chat format", f"{api} format")
        for chat_word, word in {**self.keys, **self.words}.items():
            message = re.sub(rf"\b{re.escape(chat_word)}\b", word, message)
        return re.sub(
            r"\bmessage (\d+)\b",
            lambda m: self.messages[int(m[1])] if int(m[1]) < len(self.messages) else m[0],
            message,
        )


def in_callers_fields(check: Callable[[dict], T], chat: dict, origins: Origins, api: str) -> T:
    """``check(chat)`` (the chat request's own rules), a 400 it raises naming the caller's field instead of the
    chat translation's (:class:`Origins`)."""
    try:
        return check(chat)
    except GatewayError as err:
        if err.param is None:
            raise
        param = origins.param(err.param)
        text = origins.text(err.message, err.param, param, api).removeprefix("invalid request body: ")
        if not text.startswith(param):
            text = f"{param}: {text}"
        raise GatewayError(err.status, text, err.code, param=param) from None
