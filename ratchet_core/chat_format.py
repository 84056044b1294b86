"""The ONE text format of a chat request for the student: training renders with it, the student server too.

A request becomes a prompt, the teacher's answer a target; the student learns ``prompt -> target + EOS`` and
the server decodes ``prompt -> text`` then parses the text back into an assistant message. Training and
serving must agree byte for byte, so both call these functions and nothing else.

Prompt (each block ends with a newline; blocks absent when the request has no such part)::

    <|tools|>
    get_weather(city,unit)
    <|format|>
    json_schema:invoice
    <|system|>
    ...
    <|user|>
    ...
    <|assistant|>

Tools are rendered as compact signatures ``name(arg1,arg2)`` rather than their full JSON schema: the demo base
reads bytes, and every byte of prompt costs context on a 256-byte window (real bases would do well with the
full schema too, but a short prompt is never wrong). ``response_format`` is rendered as its type and, for a
JSON schema, the schema name and top-level property names.

Target: the assistant's content verbatim, or one line per tool call::

    <tool_call>{"name":"get_weather","arguments":{"city":"Oslo","unit":"c"}}

with ``arguments`` as canonical JSON (sorted keys, no whitespace; RFC 8785 style). The end of the answer is the
tokenizer's EOS token, appended by the trainer and awaited by the server; it is not part of the text.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

TOOL_CALL_PREFIX = "<tool_call>"
ASSISTANT_HEADER = "<|assistant|>\n"
# A model that runs on past its answer starts a new turn header; the server cuts the text there.
TURN_MARKER = "<|"


def _canonical(obj: Any) -> str:
    """Canonical JSON text: sorted keys, no insignificant whitespace, UTF-8 kept (RFC 8785 style)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _content_text(content: Any) -> str:
    """Message content as text; OpenAI content parts keep only their text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def _tool_signature(tool: dict) -> str:
    fn = tool.get("function", tool) if isinstance(tool, dict) else {}
    name = str(fn.get("name", ""))
    params = fn.get("parameters") or {}
    props = params.get("properties") or {} if isinstance(params, dict) else {}
    return f"{name}({','.join(str(k) for k in props)})"


def _format_line(response_format: dict) -> str:
    kind = str(response_format.get("type", ""))
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") or {}
        props = schema.get("properties") or {} if isinstance(schema, dict) else {}
        return f"json_schema:{spec.get('name', '')}({','.join(str(k) for k in props)})"
    return kind


def _arguments_obj(arguments: Any) -> Any:
    """Tool-call arguments as a JSON value (OpenAI sends them as a JSON string)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return arguments
    return {} if arguments is None else arguments


def _tool_call_line(call: dict) -> str:
    fn = call.get("function", call)
    name = json.dumps(str(fn.get("name", "")), ensure_ascii=False)
    # Name first: the model commits to the function before it writes the arguments.
    return (
        f'{TOOL_CALL_PREFIX}{{"name":{name},"arguments":{_canonical(_arguments_obj(fn.get("arguments")))}}}'
    )


def render_target(assistant_message: dict) -> str:
    """The text the student must produce for `assistant_message` (content, or one line per tool call)."""
    calls = assistant_message.get("tool_calls") or []
    if calls:
        return "\n".join(_tool_call_line(c) for c in calls)
    return _content_text(assistant_message.get("content"))


def _render_message(message: dict) -> str:
    role = str(message.get("role", "user"))
    if role == "developer":
        role = "system"
    text = render_target(message) if role == "assistant" else _content_text(message.get("content"))
    return f"<|{role}|>\n{text}\n"


def render_prompt(
    messages: list[dict], tools: list[dict] | None = None, response_format: dict | None = None
) -> str:
    """The prompt text for a chat request, ending with the assistant header the answer follows."""
    parts: list[str] = []
    if tools:
        parts.append("<|tools|>\n" + "\n".join(_tool_signature(t) for t in tools) + "\n")
    if response_format and response_format.get("type") not in (None, "text"):
        parts.append(f"<|format|>\n{_format_line(response_format)}\n")
    parts.extend(_render_message(m) for m in messages)
    parts.append(ASSISTANT_HEADER)
    return "".join(parts)


def _call_id(index: int, line: str) -> str:
    return "call_" + hashlib.sha256(f"{index}:{line}".encode()).hexdigest()[:24]


def parse_completion(text: str, tools: list[dict] | None = None) -> dict:
    """Parse the student's text back into an assistant message.

    The text becomes tool calls when every non-empty line is ``<tool_call>{"name", "arguments"}`` with valid
    JSON and, when `tools` is given, a declared function name; otherwise it is the content, verbatim.
    Tool-call ids are derived from the text, so the same text always yields the same ids.
    """
    cut = text.find("\n" + TURN_MARKER)
    if cut >= 0:
        text = text[:cut]
    message: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": None}
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if not lines or not all(ln.startswith(TOOL_CALL_PREFIX) for ln in lines):
        return message
    allowed = {_tool_signature(t).split("(", 1)[0] for t in tools} if tools else None
    calls = []
    for i, line in enumerate(lines):
        try:
            obj = json.loads(line[len(TOOL_CALL_PREFIX) :])
        except json.JSONDecodeError:
            return message
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return message
        if allowed is not None and obj["name"] not in allowed:
            return message
        calls.append(
            {
                "id": _call_id(i, line),
                "type": "function",
                "function": {"name": obj["name"], "arguments": _canonical(obj.get("arguments", {}))},
            }
        )
    return {"role": "assistant", "content": None, "tool_calls": calls}


def training_pair(row: dict) -> tuple[str, str]:
    """(prompt, target) of one train.jsonl row in OpenAI chat fine-tuning format (last message = answer)."""
    messages = row.get("messages") or []
    if not messages or messages[-1].get("role") != "assistant":
        raise ValueError(
            "a training row must end with the assistant's answer: add it as the last message "
            '{"role": "assistant", ...} (OpenAI chat fine-tuning format)'
        )
    return (
        render_prompt(messages[:-1], row.get("tools"), row.get("response_format")),
        render_target(messages[-1]),
    )
