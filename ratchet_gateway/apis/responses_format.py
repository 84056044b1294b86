"""``POST /v1/responses``: OpenAI's Responses API as a format of the chat pipeline (``ratchet_gateway.chat.formats``).

The request is translated to the internal chat request (``ratchet_gateway.apis.responses_request``); the answer, a
chat completion from the teacher or the student, is written back as a ``response`` object:

- ``output``: a ``message`` item with one ``output_text`` part (its ``logprobs`` when the request included
  ``message.output_text.logprobs``), then one ``function_call`` item per tool call (``call_id`` is the chat tool
  call's id); an answer of tool calls only has no message item;
- ``status``: ``completed``, or ``incomplete`` with ``incomplete_details.reason`` ``max_output_tokens`` (finish
  ``length``) or ``content_filter``;
- ``usage``: ``input_tokens``, ``output_tokens``, ``total_tokens`` and their details, from the chat usage;
- ``id`` is ``resp_`` + the request id's hex (``x-ratchet-request-id``: the ledger row), ``created_at`` the
  arrival second, ``model`` the model the client asked for, ``store`` false; the request's parameters are echoed.

``stream: true`` answers with the typed event stream: ``response.created``, ``response.in_progress``, then per
output item ``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta`` ... or
``response.function_call_arguments.delta`` ..., their ``.done`` events and ``response.output_item.done``, and last
``response.completed`` (``response.incomplete`` when cut) with the whole response and its usage, written once the
row is committed. A stream that breaks after it started ends with an ``error`` event and ``response.failed``.
Errors before the answer have OpenAI's shape, as on the chat route.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import Response

from ratchet_core.redact import redact_text
from ratchet_gateway.apis.responses_request import CALLER_FIELDS, ResponsesRequest, parse_responses
from ratchet_gateway.apis.wire import TranslatedStream, answer_id, in_callers_fields, sse
from ratchet_gateway.chat.completion import message_of, token_counts
from ratchet_gateway.chat.formats import validated_chat
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.request_body import ChatRequest, parse_chat_body
from ratchet_gateway.responses import error_response

if TYPE_CHECKING:
    from ratchet_gateway.chat.context import Received

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


class ResponsesApi:
    """OpenAI's Responses API on the chat pipeline (module docstring)."""

    api = "responses"
    key_header = None
    fields = {
        **CALLER_FIELDS,
        "messages": "input",
    }  # the caller's names of chat fields (``ApiFormat.fields``)

    def parse(
        self, raw: bytes, extras: frozenset[str] = frozenset()
    ) -> tuple[dict, ChatRequest, ResponsesRequest]:
        chat, req, where = parse_responses(parse_chat_body(raw, "'model' and 'input'"), extras)
        return chat, in_callers_fields(validated_chat, chat, where, "OpenAI Responses"), req

    def answer(self, resp: dict, received: Received) -> bytes:
        msg, finish, usage = message_of(resp)
        echo = Echo(received)
        output: list[dict[str, Any]] = []
        status = "incomplete" if finish in _INCOMPLETE else "completed"
        content = msg.get("content")
        calls = msg.get("tool_calls") or []
        if content or msg.get("refusal") or not calls:
            logprobs = ((resp.get("choices") or [{}])[0].get("logprobs") or {}).get("content") or []
            part = text_part(content or "", logprobs)
            parts = [part] if content or not msg.get("refusal") else []
            if msg.get("refusal"):
                parts.append({"type": "refusal", "refusal": msg["refusal"]})
            output.append(message_item(echo.item_id("msg", 0), parts, status))
        for i, tc in enumerate(calls):
            fn = tc.get("function") or {}
            output.append(
                call_item(
                    echo.item_id("fc", i),
                    tc.get("id") or "",
                    fn.get("name") or "",
                    fn.get("arguments") or "",
                    "completed",
                )
            )
        return orjson.dumps(echo.response(status, output, usage_of(usage), finish))

    def stream(self, received: Received) -> ResponsesStream:
        return ResponsesStream(Echo(received))

    def error(self, err: GatewayError, headers: dict[str, str]) -> Response:
        return error_response(err, headers)


RESPONSES = ResponsesApi()


class Echo:
    """What every response object of one request carries: its ids, and the request's parameters echoed."""

    __slots__ = ("created", "origin", "rid")

    def __init__(self, received: Received):
        self.origin: ResponsesRequest = received.origin
        self.rid = received.request_id
        self.created = received.ts // 1_000_000

    def item_id(self, kind: str, n: int) -> str:
        return answer_id(f"{kind}_", self.rid) + (f"_{n}" if n else "")

    def response(
        self, status: str, output: list[dict], usage: dict | None, finish: str = "", error=None
    ) -> dict:
        o = self.origin
        text = dict(o.text or {})
        text.setdefault("format", {"type": "text"})
        reason = _INCOMPLETE.get(finish) if status == "incomplete" else None
        return {
            "id": answer_id("resp_", self.rid),
            "object": "response",
            "created_at": self.created,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": {"reason": reason} if reason else None,
            "instructions": o.instructions,
            "max_output_tokens": o.max_output_tokens,
            "metadata": o.metadata or {},
            "model": o.model,
            "output": output,
            "parallel_tool_calls": True if o.parallel_tool_calls is None else o.parallel_tool_calls,
            "previous_response_id": None,
            "reasoning": {"effort": (o.reasoning or {}).get("effort"), "summary": None},
            "store": False,
            "temperature": 1.0 if o.temperature is None else o.temperature,
            "text": text,
            "tool_choice": "auto" if o.tool_choice is None else o.tool_choice,
            "tools": o.tools or [],
            "top_p": 1.0 if o.top_p is None else o.top_p,
            "truncation": o.truncation or "disabled",
            "usage": usage,
            "user": o.user,
        }


def text_part(text: str, logprobs: list) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def message_item(item_id: str, content: list[dict], status: str) -> dict:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def usage_of(usage: dict) -> dict:
    """A chat ``usage`` as the Responses API reports it."""
    p, c, r, total = token_counts(usage)
    details = usage.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return {
        "input_tokens": p,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": c,
        "output_tokens_details": {"reasoning_tokens": r},
        "total_tokens": total,
    }


class ResponsesStream(TranslatedStream):
    """The typed Responses event stream of one answer, written from its chat chunks (module docstring)."""

    def __init__(self, echo: Echo):
        super().__init__()
        self.echo = echo
        self.seq = 0
        self.items: list[dict] = []  # the output items so far, in order
        self.text: dict | None = None  # the message item being written
        self.calls: dict[int, dict] = {}  # chat tool-call index -> its function_call item
        self.call: dict | None = None  # the function_call item being written

    # StreamFormat (chunk and replay: TranslatedStream) ------------------------------------------------------------
    def end(self) -> bytes:
        out = self._opening()
        if not self.items:  # an empty answer is still one (empty) message
            out += self._text("", [])
        out += self._close()
        status = "incomplete" if self.finish in _INCOMPLETE else "completed"
        response = self.echo.response(status, self.items, usage_of(self.usage), self.finish)
        return b"".join([*out, self._event(f"response.{status}", response=response)])

    def error(self, err: GatewayError) -> bytes:
        out = self._opening()
        message = redact_text(err.message)
        failed = self.echo.response(
            "failed", self.items, None, error={"code": err.code or "server_error", "message": message}
        )
        out.append(self._event("error", code=err.code, message=message, param=None))
        out.append(self._event("response.failed", response=failed))
        return b"".join(out)

    # events ------------------------------------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return sse(kind, data)

    def _start(self) -> list[bytes]:
        response = self.echo.response("in_progress", [], None)
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def _text(self, piece: str, logprobs: list) -> list[bytes]:
        out = self._close_call()
        item = self.text
        index = len(self.items) - 1
        if item is None:
            n = sum(1 for i in self.items if i["type"] == "message")
            item = self.text = message_item(self.echo.item_id("msg", n), [], "in_progress")
            self.items.append(item)
            index = len(self.items) - 1
            out.append(
                self._event("response.output_item.added", output_index=index, item=dict(item, content=[]))
            )
            part = text_part("", [])
            out.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=part,
                )
            )
            item["content"].append(text_part("", []))
        part = item["content"][0]
        part["text"] += piece
        part["logprobs"].extend(logprobs)
        if piece:
            out.append(
                self._event(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    delta=piece,
                    logprobs=logprobs,
                )
            )
        return out

    def _call(self, tc: dict) -> list[bytes]:
        k = int(tc.get("index") or 0)
        fn = tc.get("function") or {}
        item = self.calls.get(k)
        out: list[bytes] = []
        if item is None:
            out += self._close_text() + self._close_call()
            call_id = tc.get("id") or answer_id("call_", self.echo.rid) + f"_{k}"
            item = self.call = self.calls[k] = call_item(
                self.echo.item_id("fc", k), call_id, fn.get("name") or "", "", "in_progress"
            )
            self.items.append(item)
            out.append(
                self._event("response.output_item.added", output_index=len(self.items) - 1, item=dict(item))
            )
        elif fn.get("name"):
            item["name"] += fn["name"]
        piece = fn.get("arguments") or ""
        if piece:
            item["arguments"] += piece
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=self.items.index(item),
                    delta=piece,
                )
            )
        return out

    def _close_text(self) -> list[bytes]:
        item = self.text
        if item is None:
            return []
        self.text = None
        index = self.items.index(item)
        part = item["content"][0]
        item["status"] = "incomplete" if self.finish in _INCOMPLETE else "completed"
        common = {"item_id": item["id"], "output_index": index, "content_index": 0}
        return [
            self._event("response.output_text.done", **common, text=part["text"], logprobs=part["logprobs"]),
            self._event("response.content_part.done", **common, part=part),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def _close_call(self) -> list[bytes]:
        item = self.call
        if item is None:
            return []
        self.call = None
        index = self.items.index(item)
        item["status"] = "completed"
        return [
            self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            ),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def _close(self) -> list[bytes]:
        return self._close_text() + self._close_call()
