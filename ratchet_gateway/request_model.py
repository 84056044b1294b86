"""The chat-completions request as OpenAI's API accepts it: the pydantic models of the fields the gateway checks,
and the rules between fields that a model cannot state (:func:`check_request`).

What is refused, with a 400 whose ``param`` names the field (``messages.3.tool_call_id``), as OpenAI refuses it:

- ``response_format``: ``type`` is ``text``, ``json_object`` or ``json_schema``; ``json_schema`` needs
  ``json_schema.name`` (1-64 of ``A-Za-z0-9_-``) and a ``schema`` object;
- ``tools``: at most 128, each ``{"type": "function", "function": {"name", ...}}`` (or a ``custom`` tool with a
  ``custom.name``), names 1-64 of ``A-Za-z0-9_-`` and unique, ``parameters`` an object;
- ``tool_choice``: ``none``, ``auto``, ``required``, or ``{"type": "function", "function": {"name"}}`` naming a
  declared tool (``required`` and a named tool need ``tools``);
- ``stream_options``: only with ``stream: true``, and only ``include_usage`` (a boolean);
- ``service_tier``: a string; which tiers are served is the handler's check (``forwarded.refuse_tier``: ``auto``,
  ``default`` and the operator's ``RATCHET_SERVICE_TIERS``);
- ``stop``: a string or at most 4 strings; ``metadata``: at most 16 pairs, keys of at most 64 characters, values
  of at most 512;
- messages: ``content`` may be null only for an assistant message that makes tool calls (or a legacy
  ``function_call``); a ``tool`` message needs a ``tool_call_id`` answering a call of the assistant message
  just before it (or of one of its other answers), and every call of an assistant message is answered before the
  next message that is not a tool's; content parts are objects with a ``type`` (``text`` parts carry ``text``).

Content parts are OpenAI's per role (a user's ``text``, ``image_url``, ``input_audio``, ``file``; an assistant's
``text`` and ``refusal``; ``text`` in system, developer and tool messages) with OpenAI's keys only, and a ``file`` is sent as ``file_data`` (a ``file_id`` names a file stored on
the operator's provider account); tools (and the deprecated ``functions``) take OpenAI's keys only. litellm turns any other part or key into a
provider's block or header (a document fetched by URL, a code-execution container, a beta header), so each is a 400
naming it. A message's own unknown keys (an answer echoed back with ``annotations`` or ``provider_specific_fields``)
are taken and never reach litellm (``ratchet_gateway.forwarded.litellm_args``). An unknown
top-level field is refused before this model is used (``ratchet_gateway.forwarded``: the allow-list), so the model
keeps ``extra="allow"`` only for the operator's provider-specific extras. Types of the fields Ratchet reads are strict (``ratchet_gateway.input_rules``). The models are
validated in slices for a large body (``ratchet_gateway.request_body``), so no single pydantic call is long; the
rules between fields are a Python pass over the messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ratchet_core.redact import TASK_METADATA_KEY
from ratchet_gateway.forwarded import shown_name
from ratchet_gateway.input_rules import InputRuleError, Number, StrictBool, StrictInt, StrictStr

MAX_TOOLS = 128
MAX_STOP = 4
MAX_METADATA = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
FUNCTION_NAME = r"^[A-Za-z0-9_-]{1,64}$"

FunctionName = Annotated[StrictStr, Field(pattern=FUNCTION_NAME)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ToolCallFunction(_Open):
    name: StrictStr
    arguments: StrictStr


class ToolCall(_Open):
    id: StrictStr
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    # parts are checked by check_request (a Python pass: a message of 100k parts is no long pydantic call)
    content: StrictStr | list[Any] | None = None
    name: StrictStr | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: StrictStr | None = None
    function_call: dict[str, Any] | None = None


class _Closed(BaseModel):
    # a tool's keys are OpenAI's only: litellm reads keys of its own there (``cache_control``, ``defer_loading``,
    # ``allowed_callers``...) and turns them into a provider's options and beta headers
    model_config = ConfigDict(extra="forbid")


class FunctionSpec(_Closed):
    name: FunctionName
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class CustomSpec(_Closed):
    name: FunctionName
    description: StrictStr | None = None
    format: dict[str, Any] | None = None


class Tool(_Closed):
    """A tool the model may call: ``type`` names the member that describes it (one model, not a union, so an
    error's location is the field's own: ``tools.0.function.name``)."""

    type: Literal["function", "custom"]
    function: FunctionSpec | None = None
    custom: CustomSpec | None = None

    @model_validator(mode="after")
    def _described(self) -> Tool:
        if getattr(self, self.type) is None:
            raise ValueError(f"a {self.type} tool needs '{self.type}' with its 'name'")
        return self

    @property
    def name(self) -> str:
        spec = self.function if self.type == "function" else self.custom
        assert spec is not None
        return spec.name


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: StrictStr


class FunctionChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: NamedFunction


class CustomChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["custom"]
    custom: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | FunctionChoice | CustomChoice


class JsonSchemaSpec(_Open):
    name: FunctionName
    description: StrictStr | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: StrictBool | None = None


class ResponseFormat(BaseModel):
    """``text``, ``json_object``, or ``json_schema`` with its ``json_schema`` (one model, not a union: an error's
    location is the field's own, ``response_format.json_schema.name``)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError(
                "'json_schema' (with its 'name' and 'schema') goes with type json_schema, and only there"
            )
        return self


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: StrictBool | None = None


class ChatRequest(_Open):
    model: StrictStr = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    tools: list[Tool] | None = Field(None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice | None = None
    response_format: ResponseFormat | None = None
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)
    temperature: Number | None = Field(None, ge=0, le=2)
    top_p: Number | None = Field(None, ge=0, le=1)
    max_tokens: StrictInt | None = Field(None, ge=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    stop: StrictStr | Annotated[list[StrictStr], Field(max_length=MAX_STOP)] | None = None
    seed: StrictInt | None = None
    user: StrictStr | None = None
    n: StrictInt | None = Field(None, ge=1, le=1)
    parallel_tool_calls: StrictBool | None = None
    # the deprecated form of tools: OpenAI's keys only, as tools
    functions: list[FunctionSpec] | None = Field(None, max_length=MAX_TOOLS)
    service_tier: StrictStr | None = None
    metadata: Annotated[dict[StrictStr, StrictStr], Field(max_length=MAX_METADATA)] | None = None


# Rules between fields -----------------------------------------------------------------------------------------
def _refuse(message: str, param: str) -> InputRuleError:
    return InputRuleError(f"{param}: {message}", param, "invalid_request")


def _tool_names(tools: Sequence[Tool] | None) -> set[str]:
    names: set[str] = set()
    for i, tool in enumerate(tools or ()):
        name = tool.name
        if name in names:
            raise _refuse(
                f"the tool name {name!r} is declared twice; tool names must be unique", f"tools.{i}"
            )
        names.add(name)
    return names


def check_request(req: ChatRequest, stream_options_given: bool, messages: bool = True) -> None:
    """The rules between fields (module docstring); InputRuleError naming the field otherwise.
    `stream_options_given`: the body carried a ``stream_options`` key (``null`` included). `messages`: check
    ``req.messages`` too (a large body's are checked slice by slice, :class:`Conversation`)."""
    if stream_options_given and not req.stream:
        raise _refuse("stream_options is only allowed when stream is true", "stream_options")
    for key, value in (req.metadata or {}).items():
        if len(key) > MAX_METADATA_KEY:
            raise _refuse(f"keys are at most {MAX_METADATA_KEY} characters", "metadata")
        if len(value) > MAX_METADATA_VALUE and key != TASK_METADATA_KEY:  # the task has its own rule
            raise _refuse(
                f"values are at most {MAX_METADATA_VALUE} characters", f"metadata.{shown_name(key)}"
            )
    names = _tool_names(req.tools)
    choice = req.tool_choice
    if choice is not None and choice not in ("none", "auto"):
        if not req.tools:
            raise _refuse(
                "needs tools: declare the tools the model may call, or leave tool_choice out", "tool_choice"
            )
        if not isinstance(choice, str):
            named = choice.function.name if isinstance(choice, FunctionChoice) else choice.custom.name
            if named not in names:
                raise _refuse(
                    f"names {named!r}, which is not a declared tool (declare it in tools)", "tool_choice"
                )
    if messages:
        conversation = Conversation()
        for i, m in enumerate(req.messages):
            conversation.add(i, m)
        conversation.end()


class Conversation:
    """The rules between messages, checked one message at a time (so a large body's messages need not all be
    kept as models): null content, content parts, tool calls and their answers."""

    def __init__(self) -> None:
        self.pending: dict[
            str, int
        ] = {}  # tool call id -> the assistant message that made it, until answered
        self.answerable: set[str] = set()  # the ids the current run of tool messages may answer

    def add(self, i: int, m: ChatMessage) -> None:
        where = f"messages.{i}"
        if m.role != "tool" and self.pending:
            self._unanswered()
        if m.role != "tool":
            self.answerable = set()
        if m.content is None:
            if not (m.role == "assistant" and (m.tool_calls or m.function_call)):
                raise _refuse(
                    "content may be null only in an assistant message that makes tool calls",
                    f"{where}.content",
                )
        elif isinstance(m.content, list):
            _check_parts(m.content, f"{where}.content", m.role)
        if m.role == "assistant" and m.tool_calls:
            for j, call in enumerate(m.tool_calls):
                if call.id in self.pending or call.id in self.answerable:
                    raise _refuse(f"the tool call id {call.id!r} is used twice", f"{where}.tool_calls.{j}.id")
                self.pending[call.id] = i
            self.answerable = set(self.pending)
        elif m.role == "tool":
            if m.tool_call_id is None:
                raise _refuse("a tool message needs the tool_call_id it answers", f"{where}.tool_call_id")
            if m.tool_call_id not in self.answerable:
                raise _refuse(
                    "a tool message must answer a tool call of the assistant message before it",
                    f"{where}.tool_call_id",
                )
            self.pending.pop(m.tool_call_id, None)
        elif m.role == "function" and m.name is None:
            raise _refuse("a function message needs the name of the function", f"{where}.name")

    def end(self) -> None:
        if self.pending:
            self._unanswered()

    def _unanswered(self) -> None:
        first = min(self.pending.values())
        raise _refuse(
            "an assistant message with tool_calls must be followed by tool messages answering each "
            f"tool_call_id (message {first} has calls without an answer)",
            f"messages.{first}.tool_calls",
        )


# OpenAI's content parts, per role, with the keys each takes (and the keys of the object it names). Nothing else:
# litellm turns a part it does not know, or a key of its own (``cache_control``), into a provider's block (a
# document fetched by URL, a code-execution container) or header, so an unknown part or key is a 400 naming it.
_PARTS: dict[str, dict[str, frozenset[str]]] = {
    "text": {},
    "image_url": {"image_url": frozenset({"url", "detail"})},
    "input_audio": {"input_audio": frozenset({"data", "format"})},
    "file": {"file": frozenset({"file_data", "filename"})},
    "refusal": {},
}
_PART_KEYS = {"text": {"text"}, "refusal": {"refusal"}}
_ROLE_PARTS = {"user": ("text", "image_url", "input_audio", "file"), "assistant": ("text", "refusal")}
_TEXT_PARTS = ("text",)  # system, developer and tool messages


def _unknown(param: str) -> InputRuleError:
    return InputRuleError(
        f"{param}: unknown parameter; content parts here take only the keys OpenAI's API documents "
        '(README: "What a client can and cannot send"). Leave it out',
        param,
        "unknown_parameter",
    )


def _check_parts(parts: list[Any], where: str, role: str = "user") -> None:
    kinds = _ROLE_PARTS.get(role, _TEXT_PARTS)
    for j, part in enumerate(parts):
        at = f"{where}.{j}"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise _refuse("a content part is an object with a 'type'", at)
        kind = part["type"]
        if kind not in kinds:
            raise InputRuleError(
                f"{at}.type: {role} content parts are {', '.join(kinds)}",
                f"{at}.type",
                "unsupported_parameter",
            )
        if kind == "text" and not isinstance(part.get("text"), str):
            raise _refuse("a text content part needs 'text' (a string)", f"{at}.text")
        inner = _PARTS[kind]
        for key in part:
            if key != "type" and key not in inner and key not in _PART_KEYS.get(kind, ()):
                raise _unknown(f"{at}.{shown_name(key)}")
        for name, keys in inner.items():
            obj = part.get(name)
            if not isinstance(obj, dict):
                raise _refuse(f"a {kind} content part needs '{name}' (an object)", f"{at}.{name}")
            if kind == "file" and "file_id" in obj:
                raise InputRuleError(
                    f"{at}.file.file_id: a file stored on the provider's account is not served here (that "
                    "account is the operator's, and this gateway keeps no files): send the file as file_data",
                    f"{at}.file.file_id",
                    "unsupported_parameter",
                )
            for key in obj:
                if key not in keys:
                    raise _unknown(f"{at}.{name}.{shown_name(key)}")
