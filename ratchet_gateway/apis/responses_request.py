"""OpenAI's Responses API request (``POST /v1/responses``) as the internal chat request.

The gateway is stateless: a request carries its whole conversation. ``previous_response_id``, ``conversation``,
item references, ``prompt`` templates, ``background`` and ``store: true`` need responses kept on the server and
are refused with a 400 that says so; every request is still recorded in the ledger, as every chat request is.

The translation (what the teacher and the student get, and what the ledger row stores):

- ``instructions`` -> a first ``system`` message; ``input`` as a string -> one ``user`` message;
- input items: messages (``user``/``system``/``developer``/``assistant``; ``input_text``/``output_text`` ->
  text, ``input_image`` -> ``image_url``, ``input_file`` -> ``file`` (``file_data`` only: a
  ``file_id`` names a file on the operator's provider account, a 400); one text part becomes plain text, as a chat
  client sends it), ``function_call`` -> the assistant message's ``tool_calls`` (merged into the assistant
  message before it, as chat carries a turn), ``function_call_output`` -> a ``tool`` message; ``reasoning``
  items are dropped (no chat equivalent; the student does not reason aloud); any other item type is a 400;
- ``tools``: function tools -> chat function tools (built-in tools are a 400: the gateway does not run them);
  ``tool_choice`` ``auto``/``none``/``required`` or a named function;
- ``text.format``: ``json_schema`` -> ``response_format`` ``json_schema``, ``json_object`` likewise;
  ``text.verbosity`` -> ``verbosity``; ``reasoning.effort`` -> ``reasoning_effort``;
- ``max_output_tokens`` -> ``max_completion_tokens``; ``include: ["message.output_text.logprobs"]`` with
  ``top_logprobs`` -> ``logprobs``/``top_logprobs``; ``temperature``, ``top_p``, ``parallel_tool_calls``,
  ``metadata``, ``user``, ``service_tier``, ``safety_identifier``, ``prompt_cache_key`` pass as they are.

``truncation``, ``stream_options``, ``max_tool_calls`` and ``include`` entries other than the logprobs are accepted
and not forwarded (:data:`IGNORED`: no chat equivalent, and nothing an answer's contract depends on); the
operator's ``RATCHET_PROVIDER_EXTRA_FIELDS`` are passed on as sent. Any other field (``mcp_servers``,
``container``, a litellm argument such as ``api_base`` or ``mock_response``...) is a 400 naming it
(``ratchet_gateway.forwarded``): what reaches a provider is only what this translation writes. Types of the fields
read are strict (``ratchet_gateway.input_rules``), and every 400 names the caller's own field (``input[2].call_id``,
also for a rule the chat translation breaks: ``apis.wire.Origins``) and what to send instead.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ratchet_gateway.apis.wire import Origins, chat_content, invalid, text_of, validated
from ratchet_gateway.forwarded import unknown_field
from ratchet_gateway.input_rules import Number, StrictBool, StrictInt, StrictStr

STATELESS = (
    "this gateway keeps no responses for later requests (it is stateless): send the whole conversation in "
    "`input` and leave `{field}` out"
)
_LOGPROBS = "message.output_text.logprobs"
# Responses parameters chat has with the same meaning, passed on as they are.
_SAME = ("temperature", "top_p", "parallel_tool_calls", "user", "service_tier", "safety_identifier")
_SAME_TEXT = ("prompt_cache_key",)


class ResponsesRequest(BaseModel):
    """The Responses API body as the gateway reads it (the other fields it takes: :data:`FIELDS`)."""

    model_config = ConfigDict(extra="allow")

    model: StrictStr = Field(min_length=1)
    input: StrictStr | list[dict[str, Any]] = Field(
        description="A user message as text, or the conversation as input items."
    )
    instructions: StrictStr | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    stream: StrictBool = False
    max_output_tokens: StrictInt | None = Field(None, ge=1)
    metadata: dict[StrictStr, StrictStr] | None = None
    user: StrictStr | None = None
    temperature: Number | None = Field(None, ge=0, le=2)
    top_p: Number | None = Field(None, ge=0, le=1)
    parallel_tool_calls: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)
    include: list[StrictStr] | None = None
    reasoning: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    store: StrictBool | None = Field(None, description="Only false: this gateway keeps no responses.")
    background: StrictBool | None = Field(None, description="Only false.")
    previous_response_id: StrictStr | None = Field(None, description="Refused: the gateway is stateless.")
    service_tier: StrictStr | None = None
    safety_identifier: StrictStr | None = None
    prompt_cache_key: StrictStr | None = None


# accepted and not forwarded (module docstring); refused with a message of their own (the gateway is stateless)
IGNORED = frozenset({"truncation", "stream_options", "max_tool_calls"})
STATEFUL = frozenset({"previous_response_id", "conversation", "prompt"})
TRANSLATED = frozenset(ResponsesRequest.model_fields) - IGNORED  # the fields the translation reads
FIELDS = frozenset(ResponsesRequest.model_fields) | IGNORED | STATEFUL
# the chat translation's names for the caller's (errors name the caller's own fields)
CALLER_FIELDS = {
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "logprobs": "include",
    "reasoning_effort": "reasoning.effort",
    "verbosity": "text.verbosity",
}
_CHAT_KEYS = {"tool_call_id": "call_id"}
_CHAT_WORDS = {
    "tool_calls": "function_call items",
    "tool messages": "function_call_output items",
    "tool message": "function_call_output item",
}


def parse_responses(
    body: dict, extras: frozenset[str] = frozenset()
) -> tuple[dict, ResponsesRequest, Origins]:
    """(the internal chat body, the validated Responses request, where the chat body's parts came from) of a parsed
    body; GatewayError 400 otherwise, a field neither the API's, this translation's nor one of `extras` (the
    operator's, forwarded as sent) first."""
    for name in body:
        if name not in FIELDS and name not in extras:
            raise unknown_field(name, "Responses")
    req = validated(ResponsesRequest, body, "OpenAI Responses")
    _refuse_state(req, body)
    origins = Origins(fields=dict(CALLER_FIELDS), keys=dict(_CHAT_KEYS), words=dict(_CHAT_WORDS))
    chat = to_chat(req, origins)
    for (
        name
    ) in extras:  # the operator's, as sent (an ignored field of the API's own too); never one translated
        if name in body and name not in TRANSLATED:
            chat[name] = body[name]
    return chat, req, origins


def _refuse_state(req: ResponsesRequest, body: dict) -> None:
    for field in ("previous_response_id", "conversation", "prompt"):
        if body.get(field) is not None:
            raise invalid(field, STATELESS.format(field=field), "unsupported_parameter")
    if req.store:
        raise invalid(
            "store", STATELESS.format(field="store") + " (or send store: false)", "unsupported_parameter"
        )
    if req.background:
        raise invalid(
            "background", "background responses are not served here; leave it out", "unsupported_parameter"
        )


def to_chat(req: ResponsesRequest, origins: Origins | None = None) -> dict:
    """The internal chat body of a validated Responses request (`origins`: noted where each message came from)."""
    messages: list[dict[str, Any]] = []
    where = origins.messages if origins is not None else []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
        where.append("instructions")
    if isinstance(req.input, str):
        messages.append({"role": "user", "content": req.input})
        where.append("input")
    else:
        for i, item in enumerate(req.input):
            before = len(messages)
            _add_item(messages, item, f"input[{i}]")
            where.extend([f"input[{i}]"] * (len(messages) - before))
    if not messages:
        raise invalid("input", "the conversation is empty: send at least one message")
    body: dict[str, Any] = {"model": req.model, "messages": messages, "stream": req.stream}
    if req.tools:
        body["tools"] = [_tool(t, f"tools[{i}]") for i, t in enumerate(req.tools)]
    if req.tool_choice is not None:
        body["tool_choice"] = _tool_choice(req.tool_choice)
    if req.text:
        _text(body, req.text)
    if req.max_output_tokens is not None:
        body["max_completion_tokens"] = req.max_output_tokens
    if _LOGPROBS in (req.include or ()) or req.top_logprobs is not None:
        body["logprobs"] = True
        if req.top_logprobs:
            body["top_logprobs"] = req.top_logprobs
    effort = (req.reasoning or {}).get("effort")
    if isinstance(effort, str):
        body["reasoning_effort"] = effort
    for name in _SAME + _SAME_TEXT:
        value = getattr(req, name)
        if value is not None:
            body[name] = value
    if req.metadata:
        body["metadata"] = dict(req.metadata)
    return body


# input items ---------------------------------------------------------------------------------------------------
def _add_item(messages: list[dict[str, Any]], item: dict[str, Any], where: str) -> None:
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        messages.append(_message(item, where))
    elif kind == "function_call":
        call = {
            "id": _text_field(item, "call_id", where),
            "type": "function",
            "function": {
                "name": _text_field(item, "name", where),
                "arguments": _text_field(item, "arguments", where, ""),
            },
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        if isinstance(output, list):
            output = text_of(_parts(output, f"{where}.output", "user"))
        elif not isinstance(output, str):
            raise invalid(f"{where}.output", "must be text or a list of input_text parts")
        messages.append(
            {"role": "tool", "tool_call_id": _text_field(item, "call_id", where), "content": output}
        )
    elif kind == "reasoning":
        return  # no chat equivalent: the model's own reasoning is not sent back to a chat model
    elif kind == "item_reference":
        raise invalid(where, STATELESS.format(field="item_reference items"), "unsupported_parameter")
    else:
        raise invalid(
            f"{where}.type",
            f"input items of type {kind!r} are not served here: send messages, function_call and "
            "function_call_output items",
            "unsupported_parameter",
        )


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise invalid(f"{where}.role", "must be one of user, system, developer, assistant")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise invalid(f"{where}.content", "must be text or a list of content parts")
    parts = _parts(content, f"{where}.content", role)
    if role == "assistant":
        return {"role": role, "content": text_of(parts)}
    return {"role": role, "content": chat_content(parts)}


def _parts(content: list[Any], where: str, role: str) -> list[dict[str, Any]]:
    parts = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": _text_field(part, "text", at)})
        elif kind == "refusal" and role == "assistant":
            parts.append({"type": "text", "text": _text_field(part, "refusal", at)})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise invalid(
                    f"{at}.image_url", "send the image as a URL or a data: URL (file ids need stored files)"
                )
            image = {"url": url}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_file":
            if part.get("file_id") is not None:
                raise invalid(
                    f"{at}.file_id",
                    "a file stored on the provider's account is not served here (that account is the operator's, "
                    "and this gateway keeps no files): send the file as file_data",
                    "unsupported_parameter",
                )
            file = {k: part[k] for k in ("file_data", "filename") if isinstance(part.get(k), str)}
            if "file_data" not in file:
                raise invalid(at, "an input_file needs file_data")
            parts.append({"type": "file", "file": file})
        else:
            raise invalid(
                f"{at}.type", "content parts are input_text, output_text, input_image or input_file"
            )
    return parts


def _text_field(obj: dict[str, Any], name: str, where: str, default: str | None = None) -> str:
    value = obj.get(name, default)
    if not isinstance(value, str):
        raise invalid(f"{where}.{name}", "must be text")
    return value


# tools and formats ---------------------------------------------------------------------------------------------
def _tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    if tool.get("type") != "function":
        raise invalid(
            f"{where}.type",
            f"only function tools are served here (got {tool.get('type')!r}): the gateway runs no built-in tools",
            "unsupported_parameter",
        )
    fn: dict[str, Any] = {"name": _text_field(tool, "name", where)}
    if isinstance(tool.get("description"), str):
        fn["description"] = tool["description"]
    params = tool.get("parameters")
    if params is not None:
        if not isinstance(params, dict):
            raise invalid(f"{where}.parameters", "must be a JSON schema object")
        fn["parameters"] = params
    if isinstance(tool.get("strict"), bool):
        fn["strict"] = tool["strict"]
    return {"type": "function", "function": fn}


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise invalid("tool_choice", "must be auto, none, required or {type: function, name}")
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise invalid(
        "tool_choice", "must be auto, none, required or {type: function, name}", "unsupported_parameter"
    )


def _text(body: dict[str, Any], text: dict[str, Any]) -> None:
    fmt = text.get("format")
    if isinstance(fmt, dict):
        kind = fmt.get("type")
        if kind == "json_schema":
            schema = fmt.get("schema")
            if not isinstance(schema, dict):
                raise invalid("text.format.schema", "must be a JSON schema object")
            spec: dict[str, Any] = {"name": _text_field(fmt, "name", "text.format"), "schema": schema}
            for key in ("strict", "description"):
                if fmt.get(key) is not None:
                    spec[key] = fmt[key]
            body["response_format"] = {"type": "json_schema", "json_schema": spec}
        elif kind == "json_object":
            body["response_format"] = {"type": "json_object"}
        elif kind != "text":
            raise invalid("text.format.type", "must be text, json_object or json_schema")
    elif fmt is not None:
        raise invalid("text.format", "must be an object: {type: text | json_object | json_schema, ...}")
    if isinstance(text.get("verbosity"), str):
        body["verbosity"] = text["verbosity"]
