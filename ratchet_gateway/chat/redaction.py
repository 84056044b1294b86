"""PII redaction on the student's side of a request: the body the student gets and the ledger stores, and the
client's own text put back into a student's answer.

With ``RATCHET_REDACT_PII`` on, the student sees the whole body through ``ratchet_core.redact.redact_request``
(messages, names, tools, response_format schemas, user, stop, metadata and every other parameter): it was trained
and certified on placeholders. The teacher gets the body as sent (``Received.body``).
"""

from __future__ import annotations

from typing import Any

import orjson

from ratchet_core import json_pieces
from ratchet_core.redact import redact_request, restore_text
from ratchet_gateway.chat.context import BodyColumns, ChatCall

_SORTED = orjson.OPT_SORT_KEYS
# request fields stored in columns of their own; every other one is stored (redacted) in ``params``
_OWN_COLUMNS = frozenset({"model", "messages", "tools", "tool_choice", "response_format", "stream"})
# in ``params`` when the teacher got the request's json_schema in its system message (``chat.teacher``):
# {"sent_as": "json_object", "violation": "" or the guard's kind when its answer broke the schema}; written by the
# gateway only (``Recorder.request_row``): a client's own field of that name is never stored
TEACHER_SCHEMA_PARAM = "ratchet_teacher_schema"


def student_body(call: ChatCall, redact_pii: bool) -> dict:
    """The body the student gets and the ledger stores, computed once per request; ``call.redaction.pii_map``
    keeps placeholder -> original for :func:`restore_answer`."""
    red = call.redaction
    if red.student_body is None:
        if redact_pii:
            red.student_body, red.pii_map = redact_request(call.received.body)
        else:
            red.student_body = call.received.body
        red.messages = red.student_body.get("messages") or []
    return red.student_body


def stored_messages(call: ChatCall, redact_pii: bool) -> Any:
    """The messages as the ledger stores them (computed once per request)."""
    if call.redaction.messages is None:
        student_body(call, redact_pii)
    return call.redaction.messages


def _canonical(obj: Any, large: bool) -> str:
    """Compact JSON with sorted keys (the ledger's canonical text form of structured values); a large request's
    in pieces (``json_pieces``: the same bytes as one ``orjson.dumps``)."""
    return (json_pieces.dumps(obj, _SORTED) if large else orjson.dumps(obj, option=_SORTED)).decode()


def body_columns(call: ChatCall, redact_pii: bool) -> BodyColumns:
    """The row's request columns from the redacted body, computed once per request: messages; tools (with
    ``tool_choice``), response_format and params (every request parameter without a column of its own), each ''
    when absent."""
    red = call.redaction
    if red.columns is None:
        rb = student_body(call, redact_pii)
        req, large = call.received.req, call.received.large
        tools = {"tools": rb.get("tools"), "tool_choice": rb.get("tool_choice")}
        red.columns = BodyColumns(
            messages=_canonical(red.messages, large),
            tools=_canonical(tools, large) if req.tools else "",
            response_format=_canonical(rb["response_format"], large) if req.response_format else "",
            params=_canonical(
                {k: v for k, v in rb.items() if k not in _OWN_COLUMNS and k != TEACHER_SCHEMA_PARAM}, large
            ),
        )
    return red.columns


def restore_answer(resp: dict, mapping: dict[str, str]) -> None:
    """Put the client's own text back into a student answer, in place: every placeholder of `mapping` in each
    choice's content and tool-call arguments becomes its original (JSON-escaped inside the arguments string).
    Logprobs are left as the student produced them."""
    if not mapping:
        return
    escaped: dict[str, str] | None = None
    for choice in resp.get("choices") or []:
        msg = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(msg, dict):
            continue
        if isinstance(msg.get("content"), str):
            msg["content"] = restore_text(msg["content"], mapping)
        for tc in msg.get("tool_calls") or []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                if escaped is None:
                    escaped = {k: orjson.dumps(v).decode()[1:-1] for k, v in mapping.items()}
                fn["arguments"] = restore_text(fn["arguments"], escaped)
