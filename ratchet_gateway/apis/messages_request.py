"""Anthropic's Messages API request (``POST /v1/messages``) as the internal chat request.

The translation (what the teacher and the student get, and what the ledger row stores):

- ``system`` (text, or text blocks) -> a first ``system`` message;
- user messages: ``text`` blocks -> text (one text block is plain text, as a chat client sends it), ``image``
  blocks (base64 or URL source) -> ``image_url`` parts, ``tool_result`` blocks -> one ``tool`` message each
  (their text; ``is_error`` is not carried), before the rest of the turn;
- assistant messages: ``text`` blocks -> content, ``tool_use`` blocks -> ``tool_calls`` (``input`` as JSON
  ``arguments``), ``thinking`` blocks dropped (no chat equivalent);
- ``tools`` (client tools: ``name``, ``description``, ``input_schema``) -> chat function tools; server tools
  (``web_search_...``, ``bash_...``) are a 400: the gateway runs no tools. ``tool_choice`` ``auto``/``any``/
  ``tool``/``none`` -> ``auto``/``required``/the named function/``none``; ``disable_parallel_tool_use`` ->
  ``parallel_tool_calls: false``;
- ``max_tokens`` -> ``max_completion_tokens``; ``stop_sequences`` -> ``stop``; ``temperature``, ``top_p`` as they
  are; ``metadata.user_id`` -> ``user``; ``metadata.ratchet_task`` names the task and ``metadata.ratchet_episode``
  the episode (as on every route); any other ``metadata`` key is a 400, as Anthropic answers it.

Accepted and not forwarded (:data:`IGNORED`: no chat equivalent, nothing an answer's contract depends on):
``top_k``, ``service_tier``, ``cache_control`` on blocks, ``thinking`` when it is ``{"type": "disabled"}``
(extended thinking is not served: the student does not reason aloud, so ``thinking`` enabled is a 400). The
operator's ``RATCHET_PROVIDER_EXTRA_FIELDS`` are passed on as sent. Any other field (``container``,
``mcp_servers``, ``context_management``, a litellm argument such as ``api_base`` or ``mock_response``...) is a 400
naming it (``ratchet_gateway.forwarded``): what reaches a provider is only what this translation writes. Documents,
search results and other block types are a 400 naming the block. Every 400 names the caller's own field, also for a
rule the chat translation breaks (``apis.wire.Origins``: ``messages[2].content[0].tool_use_id``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ratchet_gateway.apis.wire import Origins, chat_content, invalid, json_text, text_of, validated
from ratchet_gateway.forwarded import unknown_field
from ratchet_gateway.input_rules import Number, StrictBool, StrictInt, StrictStr


class MessagesRequest(BaseModel):
    """The Messages API body as the gateway reads it (the other fields it takes: :data:`FIELDS`)."""

    model_config = ConfigDict(extra="allow")

    model: StrictStr = Field(min_length=1)
    max_tokens: StrictInt = Field(ge=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: StrictStr | list[dict[str, Any]] | None = None
    metadata: dict[StrictStr, Any] | None = None
    stop_sequences: list[StrictStr] | None = None
    stream: StrictBool = False
    temperature: Number | None = Field(None, ge=0, le=1)
    top_p: Number | None = Field(None, ge=0, le=1)
    top_k: StrictInt | None = Field(None, ge=0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = Field(
        None, description='Only {"type": "disabled"}: no extended thinking.'
    )


# accepted and not forwarded (module docstring)
IGNORED = frozenset({"top_k", "service_tier"})
TRANSLATED = frozenset(MessagesRequest.model_fields) - IGNORED  # the fields the translation reads
FIELDS = frozenset(MessagesRequest.model_fields) | IGNORED
METADATA = ("user_id", "ratchet_task", "ratchet_episode")
# the chat translation's names for the caller's (errors name the caller's own fields)
CALLER_FIELDS = {
    "max_completion_tokens": "max_tokens",
    "stop": "stop_sequences",
    "user": "metadata.user_id",
    "parallel_tool_calls": "tool_choice.disable_parallel_tool_use",
}
_CHAT_KEYS = {"tool_call_id": "tool_use_id"}
_CHAT_WORDS = {
    "tool_calls": "tool_use blocks",
    "tool messages": "tool_result blocks",
    "tool message": "tool_result block",
}


def parse_messages(body: dict, extras: frozenset[str] = frozenset()) -> tuple[dict, MessagesRequest, Origins]:
    """(the internal chat body, the validated Messages request, where the chat body's parts came from) of a parsed
    body; GatewayError 400 otherwise, a field neither the API's, this translation's nor one of `extras` (the
    operator's, forwarded as sent) first."""
    for name in body:
        if name not in FIELDS and name not in extras:
            raise unknown_field(name, "Messages")
    req = validated(MessagesRequest, body, "Anthropic Messages")
    if req.thinking is not None and req.thinking.get("type") != "disabled":
        raise invalid(
            "thinking",
            "extended thinking is not served here (the answer carries no thinking blocks); leave it out or send "
            '{"type": "disabled"}',
            "unsupported_parameter",
        )
    for key in req.metadata or {}:
        if key not in METADATA:
            raise unknown_field(key, "Messages", "metadata")
    origins = Origins(fields=dict(CALLER_FIELDS), keys=dict(_CHAT_KEYS), words=dict(_CHAT_WORDS))
    chat = to_chat(req, origins)
    for (
        name
    ) in extras:  # the operator's, as sent (an ignored field of the API's own too); never one translated
        if name in body and name not in TRANSLATED:
            chat[name] = body[name]
    return chat, req, origins


def to_chat(req: MessagesRequest, origins: Origins | None = None) -> dict:
    """The internal chat body of a validated Messages request (`origins`: noted where each message came from)."""
    messages: list[dict[str, Any]] = []
    where = origins.messages if origins is not None else []
    if isinstance(req.system, str):
        if req.system:
            messages.append({"role": "system", "content": req.system})
            where.append("system")
    elif req.system:
        parts = [_text_block(b, f"system[{i}]") for i, b in enumerate(req.system)]
        messages.append({"role": "system", "content": chat_content(parts)})
        where.append("system")
    for i, msg in enumerate(req.messages):
        for translated, at in _message(msg, f"messages[{i}]"):
            messages.append(translated)
            where.append(at)
    body: dict[str, Any] = {
        "model": req.model,
        "messages": messages,
        "stream": req.stream,
        "max_completion_tokens": req.max_tokens,
    }
    if req.stop_sequences:
        body["stop"] = list(req.stop_sequences)
    for name in ("temperature", "top_p"):
        if getattr(req, name) is not None:
            body[name] = getattr(req, name)
    if req.tools:
        body["tools"] = [_tool(t, f"tools[{i}]") for i, t in enumerate(req.tools)]
    if req.tool_choice is not None:
        _tool_choice(body, req.tool_choice)
    meta = req.metadata or {}
    user = meta.get("user_id")
    if user is not None:
        if not isinstance(user, str):
            raise invalid("metadata.user_id", "must be text")
        body["user"] = user
    # read by the pipeline (the task, the episode), never sent upstream
    ratchet = {k: meta[k] for k in ("ratchet_task", "ratchet_episode") if k in meta}
    if ratchet:
        body["metadata"] = ratchet
    return body


def _message(msg: dict[str, Any], where: str) -> list[tuple[dict[str, Any], str]]:
    """The chat messages of one Messages message, each with the caller's location it came from."""
    role = msg.get("role")
    if role not in ("user", "assistant"):
        raise invalid(f"{where}.role", "must be user or assistant (the system prompt goes in `system`)")
    content = msg.get("content")
    if isinstance(content, str):
        return [({"role": role, "content": content}, where)]
    if not isinstance(content, list):
        raise invalid(f"{where}.content", "must be text or a list of content blocks")
    return [(_assistant(content, where), where)] if role == "assistant" else _user(content, where)


def _user(blocks: list[Any], where: str) -> list[tuple[dict[str, Any], str]]:
    tool_messages: list[tuple[dict[str, Any], str]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append(_text_block(block, at))
        elif kind == "image":
            parts.append(_image(block, at))
        elif kind == "tool_result":
            tool_messages.append((_tool_result(block, at), at))
        else:
            raise invalid(
                f"{at}.type", "user content blocks are text, image or tool_result", "unsupported_parameter"
            )
    out = tool_messages
    if parts:
        out.append(({"role": "user", "content": chat_content(parts)}, where))
    return out


def _assistant(blocks: list[Any], where: str) -> dict[str, Any]:
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_text_block(block, at))
        elif kind == "tool_use":
            tool_input = block.get("input", {})
            if not isinstance(tool_input, dict):
                raise invalid(f"{at}.input", "must be a JSON object")
            calls.append(
                {
                    "id": _text(block, "id", at),
                    "type": "function",
                    "function": {"name": _text(block, "name", at), "arguments": json_text(tool_input)},
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            raise invalid(
                f"{at}.type", "assistant content blocks are text or tool_use", "unsupported_parameter"
            )
    msg: dict[str, Any] = {"role": "assistant", "content": text_of(texts) if texts or not calls else None}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _text_block(block: Any, where: str) -> dict[str, Any]:
    if not isinstance(block, dict) or block.get("type") != "text":
        raise invalid(f"{where}.type", "must be a text block")
    return {"type": "text", "text": _text(block, "text", where)}


def _image(block: dict[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64":
        url = f"data:{_text(source, 'media_type', where + '.source')};base64,{_text(source, 'data', where + '.source')}"
    elif kind == "url":
        url = _text(source, "url", where + ".source")
    else:
        raise invalid(
            f"{where}.source", "an image source is {type: base64, media_type, data} or {type: url, url}"
        )
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    content = block.get("content", "")
    if isinstance(content, list):
        content = text_of([_text_block(b, f"{where}.content[{k}]") for k, b in enumerate(content)])
    elif not isinstance(content, str):
        raise invalid(f"{where}.content", "must be text or a list of text blocks")
    return {"role": "tool", "tool_call_id": _text(block, "tool_use_id", where), "content": content}


def _text(obj: dict[str, Any], name: str, where: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise invalid(f"{where}.{name}", "must be text")
    return value


def _tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    if tool.get("type") not in (None, "custom"):
        raise invalid(
            f"{where}.type",
            f"only client tools (name, input_schema) are served here, not {tool.get('type')!r}: the gateway runs no "
            "tools",
            "unsupported_parameter",
        )
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise invalid(f"{where}.input_schema", "must be a JSON schema object")
    fn: dict[str, Any] = {"name": _text(tool, "name", where), "parameters": schema}
    if isinstance(tool.get("description"), str):
        fn["description"] = tool["description"]
    return {"type": "function", "function": fn}


_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def _tool_choice(body: dict[str, Any], choice: dict[str, Any]) -> None:
    kind = choice.get("type")
    if kind in _CHOICES:
        body["tool_choice"] = _CHOICES[kind]
    elif kind == "tool":
        body["tool_choice"] = {"type": "function", "function": {"name": _text(choice, "name", "tool_choice")}}
    else:
        raise invalid("tool_choice.type", "must be auto, any, tool or none")
    if choice.get("disable_parallel_tool_use") is True:
        body["parallel_tool_calls"] = False
