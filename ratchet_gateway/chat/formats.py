"""The caller's API on both ends of the pipeline: how a request body becomes the internal chat request, and how
the answer, the stream and the errors are written back in the caller's format.

The pipeline works on one internal request, OpenAI's chat completions body (a ``dict`` and its validated
:class:`~ratchet_gateway.request_body.ChatRequest`), and one internal answer, a chat completion (its chunks when
streamed). An :class:`ApiFormat` is the translation for one public API. :data:`CHAT_COMPLETIONS` is OpenAI's own
(``POST /v1/chat/completions``): the identity. The other request APIs are format objects of
``ratchet_gateway.apis`` (OpenAI's ``POST /v1/responses``, Anthropic's ``POST /v1/messages``), each served by a
:class:`~ratchet_gateway.chat.ChatHandler` built for it (``ChatHandler.for_api``) and called by that API's route:
they go through the same routing, guard, redaction, ledger row and pairs, and the request hooks run for them as
for every route. A format's ``api`` name is recorded on the row (the ledger's ``api`` column).

A stream in any format is the chat stream translated chunk by chunk (:meth:`StreamFormat.chunk`); a complete
answer (the student's) is replayed through the same translation as the chunks :func:`replay_chunks` makes of it,
so a replayed stream and a relayed one are written by one code path.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from starlette.responses import Response

from ratchet_gateway.chat.completion import message_of
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.forwarded import CHAT_FIELDS, refuse_unknown
from ratchet_gateway.request_body import RATCHET_METADATA, ChatRequest, parse_chat_body, validate_chat_body
from ratchet_gateway.responses import error_event, error_response

if TYPE_CHECKING:
    from ratchet_gateway.chat.context import Received

DONE = b"data: [DONE]\n\n"


class StreamFormat(Protocol):
    """One streamed answer written in the caller's format (a fresh object per request: it may keep state)."""

    media_type: str

    def chunk(self, raw: bytes, obj: dict) -> bytes | None:
        """The bytes to send for one upstream chunk (`raw` its JSON as received, `obj` parsed), or None."""

    def replay(self, resp: dict, request_id: str) -> list[bytes]:
        """A complete answer (the student's) as the stream's events, the end excluded."""

    def end(self) -> bytes:
        """What completes the stream, sent once its row is committed (``[DONE]``; a format that reports the whole
        answer or its usage at the end writes those events here)."""

    def error(self, err: GatewayError) -> bytes:
        """The event that ends a stream broken after its headers went out."""


class ApiFormat(Protocol):
    """A public request API translated to and from the internal chat request and answer."""

    api: str  # the API's name ("chat.completions"): the ledger row's ``api`` (``ratchet_core.schema.API_NAMES``)
    key_header: str | None  # a header that may carry the client key instead of ``Authorization: Bearer``
    # the caller's name of each chat field the translation writes that it names otherwise (``max_completion_tokens``
    # -> ``max_output_tokens``; ``messages`` -> ``input``): what an error raised after parsing names (limits)
    fields: Mapping[str, str]

    def parse(self, raw: bytes, extras: frozenset[str] = frozenset()) -> tuple[dict, ChatRequest, Any]:
        """(internal body, its validated view, the request as the caller's API wrote it: what the answer echoes,
        None when nothing) of a request body; GatewayError 400 naming what to fix, the caller's own field (a field
        the API's allow-list does not hold, ``ratchet_gateway.forwarded``, first). `extras`: the operator's
        provider-specific fields (``RATCHET_PROVIDER_EXTRA_FIELDS``), taken and forwarded as sent. A pure function
        of the bytes (no event-loop state), so it may run in a worker thread."""

    def answer(self, resp: dict, received: Received) -> bytes:
        """A complete answer's response body; GatewayError 502 when the answer cannot be written in this API."""

    def stream(self, received: Received) -> StreamFormat:
        """The writer of this request's streamed answer."""

    def error(self, err: GatewayError, headers: dict[str, str]) -> Response:
        """An error answered before any byte of the answer went out."""


class ChatCompletions:
    """OpenAI's chat completions: the internal request and answer are the API's own."""

    api = "chat.completions"
    key_header = None
    fields: Mapping[str, str] = {}

    def parse(self, raw: bytes, extras: frozenset[str] = frozenset()) -> tuple[dict, ChatRequest, None]:
        body = parse_chat_body(raw)
        refuse_unknown(body, CHAT_FIELDS, extras, "chat completions")
        return body, validated_chat(body), None

    def answer(self, resp: dict, received: Received) -> bytes:
        return orjson.dumps(resp)

    def stream(self, received: Received) -> ChatCompletionsStream:
        opts = received.req.stream_options
        return ChatCompletionsStream(bool(opts and opts.include_usage))

    def error(self, err: GatewayError, headers: dict[str, str]) -> Response:
        return error_response(err, headers)


class ChatCompletionsStream:
    """Server-sent events of ``chat.completion.chunk`` objects, ended by ``[DONE]``. The usage-only chunk (no
    choices) the gateway always asks upstream for is sent only when the client asked for it
    (``stream_options.include_usage``)."""

    media_type = "text/event-stream"
    __slots__ = ("include_usage",)

    def __init__(self, include_usage: bool):
        self.include_usage = include_usage

    def chunk(self, raw: bytes, obj: dict) -> bytes | None:
        if self.include_usage or obj.get("choices"):
            return b"data: " + raw + b"\n\n"
        return None

    def replay(self, resp: dict, request_id: str) -> list[bytes]:
        events = (self.chunk(orjson.dumps(c), c) for c in replay_chunks(resp, request_id))
        return [e for e in events if e is not None]

    def end(self) -> bytes:
        return DONE

    def error(self, err: GatewayError) -> bytes:
        return error_event(err)


def validated_chat(body: dict) -> ChatRequest:
    """The validated view of an internal chat body; ``metadata.ratchet_task`` and ``metadata.ratchet_episode`` are
    Ratchet's (read from the view by ``task_of`` and ``episode_of``), so they are taken out of the body that goes
    upstream (the rest of the metadata stays)."""
    req = validate_chat_body(body)
    meta = body.get("metadata")
    if isinstance(meta, dict):
        rest = {k: v for k, v in meta.items() if k not in RATCHET_METADATA}
        if rest:
            body["metadata"] = rest
        else:
            body.pop("metadata")
    return req


def replay_chunks(resp: dict, request_id: str) -> list[dict]:
    """A complete chat completion as the chunks a model would have streamed: the role, the content (with its
    logprobs), each tool call, the finish reason, then the usage-only chunk (no choices)."""
    base = {
        "id": resp.get("id", request_id),
        "object": "chat.completion.chunk",
        "created": resp.get("created", int(time.time())),
        "model": resp.get("model", ""),
    }
    msg, finish, usage = message_of(resp)
    choice0 = (resp.get("choices") or [{}])[0]

    def chunk(delta: dict, finish_reason=None, logprobs=None) -> dict:
        return {
            **base,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": logprobs}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    if msg.get("content"):
        chunks.append(chunk({"content": msg["content"]}, logprobs=choice0.get("logprobs")))
    for i, tc in enumerate(msg.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": i, **tc}]}))
    chunks.append(chunk({}, finish_reason=finish or "stop"))
    chunks.append({**base, "choices": [], "usage": usage})
    return chunks


CHAT_COMPLETIONS = ChatCompletions()
