"""The caller's API on both ends of the pipeline: how a request body becomes the internal chat request, and how
the answer, the stream and the errors are written back in the caller's format.

The pipeline works on one internal request, OpenAI's chat completions body (a ``dict`` and its validated
:class:`~ratchet_gateway.request_body.ChatRequest`), and one internal answer, a chat completion (its chunks when
streamed). An :class:`ApiFormat` is the translation for one public API. :data:`CHAT_COMPLETIONS` is OpenAI's own
(``POST /v1/chat/completions``): the identity. Another request API (``POST /v1/responses``, Anthropic's
``POST /v1/messages``) is one more format object, served by a :class:`~ratchet_gateway.chat.ChatHandler` built with
it (``ChatHandler(gw, api=..., hooks=...)``) and called by that API's route: it goes through the same routing,
guard, redaction, ledger row and pairs, and the request hooks run for it as for every route.
"""

from __future__ import annotations

import time
from typing import Protocol

import orjson
from starlette.responses import Response

from ratchet_gateway.chat.completion import message_of
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.request_body import ChatRequest, parse_chat_body, validate_chat_body
from ratchet_gateway.responses import error_event, error_response

DONE = b"data: [DONE]\n\n"


class StreamFormat(Protocol):
    """One streamed answer written in the caller's format (a fresh object per request: it may keep state)."""

    media_type: str
    end: bytes  # the end of a complete stream

    def chunk(self, raw: bytes, obj: dict) -> bytes | None:
        """The bytes to send for one upstream chunk (`raw` its JSON as received, `obj` parsed), or None."""

    def replay(self, resp: dict, request_id: str) -> list[bytes]:
        """A complete answer (the student's) as the stream's events, the end marker excluded."""

    def error(self, err: GatewayError) -> bytes:
        """The event that ends a stream broken after its headers went out."""


class ApiFormat(Protocol):
    """A public request API translated to and from the internal chat request and answer."""

    api: str  # the API's name ("chat.completions"): what the ledger row will record as the request's origin

    def parse(self, raw: bytes) -> tuple[dict, ChatRequest]:
        """(internal body, its validated view) of a request body; GatewayError 400 naming what to fix.
        A pure function of the bytes (no event-loop state), so it may run in a worker thread."""

    def answer(self, resp: dict) -> bytes:
        """A complete answer's response body."""

    def stream(self, req: ChatRequest) -> StreamFormat:
        """The writer of this request's streamed answer."""

    def error(self, err: GatewayError, headers: dict[str, str]) -> Response:
        """An error answered before any byte of the answer went out."""


class ChatCompletions:
    """OpenAI's chat completions: the internal request and answer are the API's own."""

    api = "chat.completions"

    def parse(self, raw: bytes) -> tuple[dict, ChatRequest]:
        body = parse_chat_body(raw)
        req = validate_chat_body(body)
        meta = body.get("metadata")
        if isinstance(meta, dict):  # ``ratchet_task`` is Ratchet's (the task); the rest goes upstream
            rest = {k: v for k, v in meta.items() if k != "ratchet_task"}
            if rest:
                body["metadata"] = rest
            else:
                body.pop("metadata")
        return body, req

    def answer(self, resp: dict) -> bytes:
        return orjson.dumps(resp)

    def stream(self, req: ChatRequest) -> ChatCompletionsStream:
        return ChatCompletionsStream(bool(req.stream_options and req.stream_options.include_usage))

    def error(self, err: GatewayError, headers: dict[str, str]) -> Response:
        return error_response(err, headers)


class ChatCompletionsStream:
    """Server-sent events of ``chat.completion.chunk`` objects, ended by ``[DONE]``. The usage-only chunk (no
    choices) the gateway always asks upstream for is sent only when the client asked for it
    (``stream_options.include_usage``)."""

    media_type = "text/event-stream"
    end = DONE
    __slots__ = ("include_usage",)

    def __init__(self, include_usage: bool):
        self.include_usage = include_usage

    def chunk(self, raw: bytes, obj: dict) -> bytes | None:
        if self.include_usage or obj.get("choices"):
            return b"data: " + raw + b"\n\n"
        return None

    def replay(self, resp: dict, request_id: str) -> list[bytes]:
        base = {
            "id": resp.get("id", request_id),
            "object": "chat.completion.chunk",
            "created": resp.get("created", int(time.time())),
            "model": resp.get("model", ""),
        }
        msg, finish, usage = message_of(resp)
        choice0 = (resp.get("choices") or [{}])[0]

        def chunk(delta: dict, finish_reason=None, logprobs=None) -> bytes:
            c = {
                **base,
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": logprobs}
                ],
            }
            return b"data: " + orjson.dumps(c) + b"\n\n"

        events = [chunk({"role": "assistant", "content": ""})]
        if msg.get("content"):
            events.append(chunk({"content": msg["content"]}, logprobs=choice0.get("logprobs")))
        for i, tc in enumerate(msg.get("tool_calls") or []):
            events.append(chunk({"tool_calls": [{"index": i, **tc}]}))
        events.append(chunk({}, finish_reason=finish or "stop"))
        if self.include_usage:
            events.append(b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n")
        return events

    def error(self, err: GatewayError) -> bytes:
        return error_event(err)


CHAT_COMPLETIONS = ChatCompletions()
