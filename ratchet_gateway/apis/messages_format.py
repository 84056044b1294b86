"""``POST /v1/messages``: Anthropic's Messages API as a format of the chat pipeline (``ratchet_gateway.chat.formats``).

The client key comes as ``x-api-key`` (what the Anthropic SDKs and Claude Code send) or ``Authorization: Bearer``;
``anthropic-version`` and ``anthropic-beta`` are accepted whatever their value (the gateway speaks 2023-06-01). The
request is translated to the internal chat request (``ratchet_gateway.apis.messages_request``); the answer, a chat
completion from the teacher or the student, is written back as a ``message``:

- ``content``: a ``text`` block (when the answer has text), then one ``tool_use`` block per tool call (``id`` the
  chat tool call's id, ``input`` its arguments as a JSON object; arguments that are not one are a 502);
- ``stop_reason``: ``end_turn`` (finish ``stop``), ``max_tokens`` (``length``), ``tool_use`` (``tool_calls``),
  ``refusal`` (``content_filter``); ``usage``: ``input_tokens``, ``output_tokens``;
- ``id`` is ``msg_`` + the request id's hex (``x-ratchet-request-id``: the ledger row); ``model`` the model the
  client asked for.

``stream: true`` answers with Anthropic's events: ``message_start``, per block ``content_block_start``,
``content_block_delta`` (``text_delta`` or ``input_json_delta``) and ``content_block_stop``, then
``message_delta`` (stop reason and usage, input tokens included: they are known only once the model is done) and
``message_stop``, written once the row is committed. Errors are in Anthropic's shape
``{"type": "error", "error": {"type", "message"}}``, before the answer and as the ``error`` event that ends a
stream broken after it started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import Response

from ratchet_core.redact import redact_text
from ratchet_gateway.apis.messages_request import CALLER_FIELDS, MessagesRequest, parse_messages
from ratchet_gateway.apis.wire import TranslatedStream, answer_id, in_callers_fields, sse, tool_input
from ratchet_gateway.chat.completion import message_of, token_counts
from ratchet_gateway.chat.formats import validated_chat
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.request_body import ChatRequest, parse_chat_body

if TYPE_CHECKING:
    from ratchet_gateway.chat.context import Received

_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
# HTTP status -> Anthropic's error type
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}
KEY_HELP = (
    "invalid or missing API key: send 'x-api-key: <key>' (or 'Authorization: Bearer <key>') with a key from "
    "RATCHET_API_KEYS"
)


def error_document(err: GatewayError, request_id: str | None = None) -> dict:
    """`err` in Anthropic's error shape (the message redacted)."""
    message = KEY_HELP if err.code == "invalid_api_key" else err.message
    doc: dict[str, Any] = {
        "type": "error",
        "error": {"type": _ERROR_TYPES.get(err.status, "api_error"), "message": redact_text(message)},
    }
    if request_id:
        doc["request_id"] = request_id
    return doc


class MessagesApi:
    """Anthropic's Messages API on the chat pipeline (module docstring)."""

    api = "messages"
    key_header = "x-api-key"
    fields = CALLER_FIELDS  # the caller's names of chat fields (``ApiFormat.fields``)

    def parse(
        self, raw: bytes, extras: frozenset[str] = frozenset()
    ) -> tuple[dict, ChatRequest, MessagesRequest]:
        chat, req, where = parse_messages(
            parse_chat_body(raw, "'model', 'max_tokens' and 'messages'"), extras
        )
        return chat, in_callers_fields(validated_chat, chat, where, "Anthropic Messages"), req

    def answer(self, resp: dict, received: Received) -> bytes:
        msg, finish, usage = message_of(resp)
        content: list[dict[str, Any]] = []
        if msg.get("content"):
            content.append({"type": "text", "text": msg["content"]})
        for tc in msg.get("tool_calls") or []:
            fn = tc.get("function") or {}
            args = tool_input(fn.get("arguments"))
            if args is None:
                raise GatewayError(
                    502,
                    "the model called a tool with arguments that are not a JSON object; retry",
                    "upstream_bad_response",
                )
            content.append(
                {"type": "tool_use", "id": tc.get("id") or "", "name": fn.get("name") or "", "input": args}
            )
        p, c, _, _ = token_counts(usage)
        document = _message(
            received, content, _STOP.get(finish, "end_turn"), {"input_tokens": p, "output_tokens": c}
        )
        return orjson.dumps(document)

    def stream(self, received: Received) -> MessagesStream:
        return MessagesStream(received)

    def error(self, err: GatewayError, headers: dict[str, str]) -> Response:
        if err.headers:
            headers = {**headers, **err.headers}
        return Response(
            orjson.dumps(error_document(err, headers.get("x-ratchet-request-id"))),
            status_code=err.status,
            media_type="application/json",
            headers=headers,
        )


MESSAGES = MessagesApi()


def _message(received: Received, content: list, stop_reason: str | None, usage: dict) -> dict:
    return {
        "id": answer_id("msg_", received.request_id),
        "type": "message",
        "role": "assistant",
        "model": received.origin.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


class MessagesStream(TranslatedStream):
    """Anthropic's streamed message of one answer, written from its chat chunks (module docstring)."""

    def __init__(self, received: Received):
        super().__init__()
        self.received = received
        self.blocks = 0  # content blocks started so far
        self.open: str | None = None  # the kind of the block being written: "text" | "tool_use"
        self.calls: dict[int, int] = {}  # chat tool-call index -> its block index

    def end(self) -> bytes:
        out = self._opening() + self._stop_block()
        p, c, _, _ = token_counts(self.usage)
        delta = {"stop_reason": _STOP.get(self.finish, "end_turn"), "stop_sequence": None}
        out.append(
            sse(
                "message_delta",
                {"type": "message_delta", "delta": delta, "usage": {"input_tokens": p, "output_tokens": c}},
            )
        )
        out.append(sse("message_stop", {"type": "message_stop"}))
        return b"".join(out)

    def error(self, err: GatewayError) -> bytes:
        return sse("error", error_document(err, self.received.request_id))

    # events ------------------------------------------------------------------------------------------------------
    def _start(self) -> list[bytes]:
        message = _message(self.received, [], None, {"input_tokens": 0, "output_tokens": 0})
        return [sse("message_start", {"type": "message_start", "message": message})]

    def _text(self, piece: str, logprobs: list) -> list[bytes]:
        out = [] if self.open == "text" else self._begin({"type": "text", "text": ""}, "text")
        out.append(self._delta({"type": "text_delta", "text": piece}))
        return out

    def _begin(self, block: dict, kind: str) -> list[bytes]:
        out = self._stop_block()
        self.open = kind
        self.blocks += 1
        out.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": self.blocks - 1, "content_block": block},
            )
        )
        return out

    def _delta(self, delta: dict) -> bytes:
        return sse(
            "content_block_delta", {"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}
        )

    def _stop_block(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [sse("content_block_stop", {"type": "content_block_stop", "index": self.blocks - 1})]

    def _call(self, tc: dict) -> list[bytes]:
        k = int(tc.get("index") or 0)
        fn = tc.get("function") or {}
        out: list[bytes] = []
        if k not in self.calls:
            tool_id = tc.get("id") or answer_id("toolu_", self.received.request_id) + f"_{k}"
            block = {"type": "tool_use", "id": tool_id, "name": fn.get("name") or "", "input": {}}
            out += self._begin(block, "tool_use")
            self.calls[k] = self.blocks - 1
        # a block takes deltas only while it is open; chat streams (OpenAI's, vLLM's) send each call whole, in turn
        if fn.get("arguments") and self.calls[k] == self.blocks - 1:
            out.append(self._delta({"type": "input_json_delta", "partial_json": fn["arguments"]}))
        return out
