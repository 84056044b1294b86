"""Tool calls in a model's own text, read as vLLM's ``hermes`` tool parser reads them.

A base whose chat template writes calls hermes-style (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``:
Qwen2.5, Hermes, the demo base's compact template) is served by vLLM with ``--enable-auto-tool-choice
--tool-call-parser hermes``; :func:`parse_hermes` is that parser's non-streaming reading
(``vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py``, ``extract_tool_calls``), so Ratchet's student
server answers a tools request as vLLM does, and the gateway and the night read calls an endpoint returned as
text (vLLM without the parser) the same way:

- no ``<tool_call>`` in the text: no calls, the text is the content;
- else every ``<tool_call>...</tool_call>`` (or a last unclosed ``<tool_call>...`` to the end) is a JSON object
  with ``name`` and ``arguments``; the content is the text before the first ``<tool_call>`` (None when empty);
  ``arguments`` become a JSON string (``json.dumps(..., ensure_ascii=False)``, as vLLM writes them);
- any block that is not such an object: no calls, the whole text is the content.

Call ids are derived from the text (vLLM draws random ones), so the same answer always gets the same ids.
:func:`tool_parser_of` says which vLLM parser a chat template needs (recorded in the adapter's base identity,
its BOM and certificate).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

HERMES = "hermes"
START, END = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


def tool_parser_of(template: str) -> str:
    """The vLLM tool parser a chat template's tool calls need: ``hermes`` when it writes ``<tool_call>`` blocks,
    else ``""`` (no parser Ratchet knows: the base's tool requests are answered as text, and the guard sends them
    to the teacher)."""
    return HERMES if START in template else ""


def _call_id(index: int, block: str) -> str:
    return "call_" + hashlib.sha256(f"{index}:{block}".encode()).hexdigest()[:24]


def parse_hermes(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool calls in OpenAI's shape) of a model's text, as vLLM's hermes parser reads it."""
    if START not in text:
        return text, []
    calls = []
    try:
        for i, (closed, open_) in enumerate(_BLOCK.findall(text)):
            block = closed or open_
            obj = json.loads(block)
            calls.append(
                {
                    "id": _call_id(i, block),
                    "type": "function",
                    "function": {
                        "name": obj["name"],
                        "arguments": json.dumps(obj["arguments"], ensure_ascii=False),
                    },
                }
            )
    except (ValueError, TypeError, KeyError):
        return text, []
    if not all(isinstance(c["function"]["name"], str) for c in calls):
        return text, []
    return text[: text.find(START)] or None, calls


def answer_message(text: str, tools: list[dict] | None, tool_choice: Any = None) -> dict[str, Any]:
    """The assistant message of a model's text for a request with `tools`: its hermes tool calls when it has
    tools and ``tool_choice`` is not ``none`` (vLLM runs its parser then), else the text as content."""
    if not tools or tool_choice == "none":
        return {"role": "assistant", "content": text, "tool_calls": None}
    content, calls = parse_hermes(text)
    return {"role": "assistant", "content": content, "tool_calls": calls or None}


def read_text_calls(message: dict[str, Any]) -> bool:
    """Read the hermes tool calls of a message that carries them as text into ``tool_calls``, in place (an
    endpoint without a tool parser answers so); True when it found some."""
    text = message.get("content")
    if message.get("tool_calls") or not isinstance(text, str) or START not in text:
        return False
    content, calls = parse_hermes(text)
    if calls:
        message.update(content=content, tool_calls=calls)
    return bool(calls)


def hermes_text(message: dict[str, Any]) -> str:
    """An assistant message as hermes-style text (its content, then one ``<tool_call>`` block per call): an
    estimate of what a student writes for it, whatever its template's exact spacing."""
    parts = [message.get("content") or ""] if isinstance(message.get("content"), str) else []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        parts.append(f'{START}{{"name": {json.dumps(fn.get("name"))}, "arguments": {args or "{}"}}}{END}')
    return "\n".join(p for p in parts if p)
