"""PII redaction on the student's side of a request: the body the student gets and the ledger stores, and the
client's own text put back into a student's answer.

With ``RATCHET_REDACT_PII`` on, the student sees the whole body through ``ratchet_core.redact.redact_request``
(messages, names, tools, response_format schemas, user, stop, metadata and every other parameter): it was trained
and certified on placeholders. The teacher gets the body as sent (``Received.body``).
"""

from __future__ import annotations

from typing import Any

import orjson

from ratchet_core.redact import redact_request, restore_text
from ratchet_gateway.chat.context import ChatCall


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
