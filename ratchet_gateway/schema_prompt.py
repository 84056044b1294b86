"""A ``json_schema`` request for a teacher without strict ``json_schema``: ``json_object`` with the schema in the
system message.

Some providers refuse ``response_format: {"type": "json_schema"}`` or ignore its schema, while they honour
``json_object`` (any JSON object). For such a teacher (``RATCHET_TEACHER_JSON_SCHEMA=json_object``, which
``ratchet doctor teacher --apply`` records per teacher: ``ratchet_core.teacher_capabilities``) the gateway sends
the request on as ``json_object`` and states the schema in the system message (:func:`schema_in_system`). Only the
teacher's copy changes: the ledger row keeps the client's ``json_schema`` (the night trains and the student answers
against the real schema), and the teacher's answer is checked against it by the answer-contract guard
(``ratchet_core.contract``), since the provider no longer enforces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

JSON_OBJECT = "json_object"


def json_schema_of(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``json_schema`` object of a request whose ``response_format`` is ``json_schema``, else None."""
    rf = body.get("response_format")
    if not isinstance(rf, Mapping) or rf.get("type") != "json_schema":
        return None
    spec = rf.get("json_schema")
    return spec if isinstance(spec, Mapping) else {}


def instruction(spec: Mapping[str, Any]) -> str:
    """The system-message text that carries the schema (its name and description when the request gave them)."""
    name = spec.get("name")
    described = f' named "{name}"' if isinstance(name, str) and name else ""
    about = spec.get("description")
    about_line = f"\nWhat it holds: {about}" if isinstance(about, str) and about else ""
    schema = orjson.dumps(spec.get("schema") or {}, option=orjson.OPT_SORT_KEYS).decode()
    return (
        f"Answer with one JSON object{described} that is valid for this JSON Schema, and nothing else: no prose, "
        f"no code fence.{about_line}\nJSON Schema: {schema}"
    )


def schema_in_system(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """`body` with its ``json_schema`` response format sent as ``json_object`` and the schema in the system
    message (appended to a leading system or developer message with text content, else a new first message);
    None when `body` asks for no ``json_schema``. `body` itself is not changed."""
    spec = json_schema_of(body)
    if spec is None:
        return None
    text = instruction(spec)
    messages = list(body.get("messages") or [])
    first = messages[0] if messages else None
    if (
        isinstance(first, Mapping)
        and first.get("role") in ("system", "developer")
        and isinstance(first.get("content"), str)
    ):
        messages[0] = {**first, "content": f"{first['content']}\n\n{text}" if first["content"] else text}
    else:
        messages.insert(0, {"role": "system", "content": text})
    return {**body, "messages": messages, "response_format": {"type": JSON_OBJECT}}


def for_teacher(body: dict[str, Any], mode: str | None) -> tuple[dict[str, Any], bool]:
    """(the body the teacher gets, whether its ``json_schema`` went into the system message): `mode` is the
    setting ``RATCHET_TEACHER_JSON_SCHEMA`` (``strict``: `body` as it is)."""
    if mode == JSON_OBJECT:
        moved = schema_in_system(body)
        if moved is not None:
            return moved, True
    return body, False
