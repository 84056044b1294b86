"""Example keys: the content hash that names one teacher-labelled example everywhere.

``key = SHA-256( canonical_json({"task", "messages", "tools", "response_format"}) )`` in hex, where
``messages`` are the REDACTED request messages (``ratchet_core.redact.redact_messages``) and a missing
``tools`` / ``response_format`` is JSON ``null``. The golden registry, the training set's sorted-key Merkle
tree, ``ratchet proof key`` and the gateway's proof route all use this one definition, so a client can
recompute the key of its own request and ask whether it was trained on.

Canonical JSON is RFC 8785 style (``ratchet_stats.canonical``): sorted keys, no whitespace, UTF-8.
"""

from __future__ import annotations

import json
from typing import Any

from ratchet_core.redact import redact_messages, redact_request
from ratchet_stats.canonical import canonical_json, sha256_hex


def example_key(
    task: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    response_format: dict[str, Any] | None = None,
) -> str:
    """SHA-256 hex of the canonical (task, redacted messages, tools, response_format) document."""
    return redacted_example_key(task, redact_messages(messages), tools, response_format)


def body_example_key(body: dict[str, Any], task: str, redact: bool = True) -> str:
    """The example key of an OpenAI chat request body, from exactly what the gateway stores for it.

    The whole body goes through the gateway's redaction (``ratchet_core.redact.redact_request``, as the chat
    route stores it): messages, tools and ``response_format`` are taken from the redacted body. ``redact=False``
    matches a gateway run with ``RATCHET_REDACT_PII=0``. The task is the caller's: ``metadata.ratchet_task``,
    else the ``X-Ratchet-Task`` header, else ``default`` (the chat route's order).
    """
    if redact:
        body = redact_request(body).body
    messages = body.get("messages") or []
    return redacted_example_key(
        task, messages, body.get("tools") or None, body.get("response_format") or None
    )


def redacted_example_key(
    task: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    response_format: dict[str, Any] | None = None,
) -> str:
    """``example_key`` for messages that are already redacted (the ledger stores them redacted)."""
    return sha256_hex(key_document(task, messages, tools, response_format))


def key_document(
    task: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    response_format: dict[str, Any] | None,
) -> bytes:
    """The canonical JSON bytes the key hashes (exposed so auditors can see exactly what was hashed)."""
    return canonical_json(
        {
            "task": task,
            "messages": messages,
            "tools": tools or None,
            "response_format": response_format or None,
        }
    )


def split_tools_column(text: str) -> tuple[list[dict[str, Any]] | None, Any]:
    """Parse the ledger's ``tools`` column (canonical JSON of tools + tool_choice, '' when none).

    Accepts a bare list of tools or an object ``{"tools": [...], "tool_choice": ...}``; returns
    ``(tools or None, tool_choice or None)``.
    """
    if not text:
        return None, None
    value = json.loads(text)
    if isinstance(value, dict):
        return value.get("tools") or None, value.get("tool_choice")
    return value or None, None
