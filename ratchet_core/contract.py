"""The answer-contract guard: does an answer stay inside the contract its own request declared?

A student answer is served only when it does (ARCHITECTURE.md, "The path of a request": the student answers
only inside the request's contract); a violation cascades to the teacher, is counted, and is recorded on the
ledger row. A demonstration (``ratchet_core.feedback``: the correct answer an application sends) must keep its
request's contract too, checked by the gateway's feedback route and by the night: both layers use this module. The contract is what an OpenAI-compatible model promises a client:

- the answer was not cut short: ``finish_reason`` is not ``length``;
- ``response_format: {"type": "json_object"}``: the content is a JSON object (RFC 8259, no NaN/Infinity);
- ``response_format: {"type": "json_schema"}``: the content is JSON valid for that schema (JSON Schema
  2020-12 unless the schema's ``$schema`` names another draft; ``format`` is annotation only, as in the spec);
- tool calls name a declared function (``tools``, or legacy ``functions``) and their ``arguments`` are a JSON
  object valid for the function's ``parameters`` schema; ``tool_choice`` is honoured (``none``, ``required``,
  a named function) and so is ``parallel_tool_calls: false``.

:func:`check_answer` is pure and cheap: compiled validators are cached per distinct schema, remote ``$ref``\\s are
never fetched (an unresolvable reference is ``schema_unusable``: the guard cannot vouch for the answer, so the
teacher answers). A :class:`Violation`'s ``kind`` is a short stable string (a metrics label and the ledger's
value); its ``detail`` names schema paths and keywords only, never the answer's keys or values (it may be logged).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson
from jsonschema import Draft202012Validator, SchemaError, validators
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from referencing import Registry

from ratchet_core import json_pieces
from ratchet_core.schema_regex import bounded, too_costly
from ratchet_stats.canonical import loads_strict

FINISH_LENGTH = "finish_length"
JSON_INVALID = "json_invalid"
SCHEMA_MISMATCH = "schema_mismatch"
SCHEMA_UNUSABLE = "schema_unusable"
TOOL_UNDECLARED = "tool_undeclared"
TOOL_ARGUMENTS_INVALID = "tool_arguments_invalid"
TOOL_ARGUMENTS_MISMATCH = "tool_arguments_mismatch"
TOOL_CALL_MISSING = "tool_call_missing"
TOOL_CHOICE_MISMATCH = "tool_choice_mismatch"
TOOL_CALLS_PARALLEL = "tool_calls_parallel"

# Every kind check_answer can return (pre-register metric labels with these).
VIOLATION_KINDS = (
    FINISH_LENGTH,
    JSON_INVALID,
    SCHEMA_MISMATCH,
    SCHEMA_UNUSABLE,
    TOOL_UNDECLARED,
    TOOL_ARGUMENTS_INVALID,
    TOOL_ARGUMENTS_MISMATCH,
    TOOL_CALL_MISSING,
    TOOL_CHOICE_MISMATCH,
    TOOL_CALLS_PARALLEL,
)


@dataclass(frozen=True)
class Violation:
    """Why an answer breaks its request's contract: `kind` (one of VIOLATION_KINDS) and a short `detail`."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


_NOT_JSON = object()


def _parse_json(text: Any) -> Any:
    """The JSON value of `text`, or _NOT_JSON (orjson first; the stdlib for integers beyond 64 bits)."""
    if not isinstance(text, str | bytes):
        return _NOT_JSON
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return loads_strict(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


# A larger schema is not checked (the teacher answers): compiling and checking it against its metaschema is
# pure-Python work that grows with it, and 512 cached validators of 4 MiB schemas would hold gigabytes.
MAX_SCHEMA_BYTES = 64 * 1024


@lru_cache(maxsize=512)
def _compiled(schema_json: bytes) -> Validator | str:
    """A validator for the schema (canonical JSON bytes), or why it cannot be used."""
    schema = orjson.loads(schema_json)
    costly = next((p for p in _patterns(schema) if too_costly(p)), None)
    if costly is not None:  # checking the schema would compile it (its "regex" format), holding the GIL
        return "a pattern is too costly to compile (PatternTooCostly)"
    cls = validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        return f"the schema is invalid at {exc.json_path} ({exc.validator})"
    # The client's regular expressions run under a time limit. An empty registry that retrieves nothing: left to
    # its default, jsonschema fetches a remote $ref over HTTP (a URL the client chose) from the gateway.
    return bounded(cls)(schema, registry=Registry())


def _patterns(schema: Any) -> list[str]:
    """Every regular expression a schema holds: ``pattern`` values and ``patternProperties`` keys."""
    found: list[str] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.append(node["pattern"])
            if isinstance(node.get("patternProperties"), dict):
                found.extend(k for k in node["patternProperties"] if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _validator(schema: Any) -> Validator | str:
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, dict):
        return "the schema is not a JSON object"
    try:
        key = json_pieces.dumps(schema, orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return "the schema is not JSON"
    if len(key) > MAX_SCHEMA_BYTES:
        return f"the schema is larger than {MAX_SCHEMA_BYTES // 1024} KiB, more than the guard checks"
    return _compiled(key)


def _schema_violation(schema: Any, instance: Any, what: str, mismatch_kind: str) -> Violation | None:
    compiled = _validator(schema)
    if isinstance(compiled, str):
        return Violation(SCHEMA_UNUSABLE, f"{what}: {compiled}")
    try:
        error = best_match(compiled.iter_errors(instance))
    except RecursionError:
        return Violation(SCHEMA_UNUSABLE, f"{what}: the schema recurses without end")
    except Exception as exc:  # referencing.exceptions.Unresolvable and kin: a $ref the guard cannot follow
        return Violation(SCHEMA_UNUSABLE, f"{what}: {type(exc).__name__} while validating")
    if error is None:
        return None
    # the schema path names only the request's own schema (keywords, declared property names), never a key or
    # value the answer made up, so the detail is safe to log and store
    where = "/".join(str(p) for p in error.schema_path)[:160]
    return Violation(mismatch_kind, f"{what} fails '{error.validator}' at schema path /{where}")


def _declared_functions(body: Mapping[str, Any]) -> dict[str, Any]:
    """name -> parameters schema (None when not given) for every function the request declares."""
    declared: dict[str, Any] = {}
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping):
            continue
        kind = tool.get("type", "function")
        spec = tool.get(kind) if isinstance(tool.get(kind), Mapping) else None
        if spec is not None and isinstance(spec.get("name"), str):
            declared[spec["name"]] = spec.get("parameters") if kind == "function" else None
    for fn in body.get("functions") or []:  # legacy function calling
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            declared.setdefault(fn["name"], fn.get("parameters"))
    return declared


def _calls(message: Mapping[str, Any]) -> list[tuple[str, Any, bool]]:
    """(name, arguments, has_schema_arguments) of each call in the answer (tool calls and a legacy
    ``function_call``); custom tools carry free-form ``input`` that has no schema."""
    out: list[tuple[str, Any, bool]] = []
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        calls = [calls]
    for call in calls:
        call = call if isinstance(call, Mapping) else {}
        if isinstance(call.get("custom"), Mapping):
            out.append((str(call["custom"].get("name")), call["custom"].get("input"), False))
        else:
            fn = call.get("function") if isinstance(call.get("function"), Mapping) else {}
            out.append((str(fn.get("name")), fn.get("arguments"), True))
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping):
        out.append((str(legacy.get("name")), legacy.get("arguments"), True))
    return out


def _chosen(body: Mapping[str, Any]) -> tuple[str, str | None]:
    """(mode, function name) from ``tool_choice`` (or legacy ``function_call``): mode is auto|none|required|named."""
    choice = body.get("tool_choice", body.get("function_call"))
    if isinstance(choice, str):
        return (choice if choice in ("none", "required") else "auto"), None
    if isinstance(choice, Mapping):
        kind = choice.get("type", "function")
        spec = choice.get(kind) if isinstance(choice.get(kind), Mapping) else choice
        if isinstance(spec.get("name"), str):
            return "named", spec["name"]
    return "auto", None


def _check_calls(body: Mapping[str, Any], message: Mapping[str, Any]) -> Violation | None:
    calls = _calls(message)
    mode, chosen = _chosen(body)
    if not calls:
        if mode == "required" or mode == "named":
            return Violation(
                TOOL_CALL_MISSING, f"tool_choice is {chosen or mode} but the answer calls no tool"
            )
        return None
    if mode == "none":
        return Violation(TOOL_CHOICE_MISMATCH, "tool_choice is none but the answer calls a tool")
    if body.get("parallel_tool_calls") is False and len(calls) > 1:
        return Violation(
            TOOL_CALLS_PARALLEL, f"parallel_tool_calls is false but the answer makes {len(calls)} calls"
        )
    declared = _declared_functions(body)
    for i, (name, arguments, schema_args) in enumerate(calls):
        if name not in declared:
            return Violation(TOOL_UNDECLARED, f"call {i} names a function the request did not declare")
        if mode == "named" and name != chosen:
            return Violation(TOOL_CHOICE_MISMATCH, f"call {i} is not the function tool_choice names")
        if not schema_args:
            continue
        args = _parse_json(arguments)
        if not isinstance(args, dict):
            return Violation(TOOL_ARGUMENTS_INVALID, f"call {i}'s arguments are not a JSON object")
        if declared[name] is not None:
            violation = _schema_violation(
                declared[name], args, f"call {i}'s arguments", TOOL_ARGUMENTS_MISMATCH
            )
            if violation is not None:
                return violation
    return None


def _check_content(body: Mapping[str, Any], message: Mapping[str, Any], has_calls: bool) -> Violation | None:
    rf = body.get("response_format")
    kind = rf.get("type") if isinstance(rf, Mapping) else None
    if kind not in ("json_object", "json_schema"):
        return None
    content = message.get("content")
    if has_calls and not content:
        return None  # a tool-calling turn carries no content to check
    value = _parse_json(content)
    if value is _NOT_JSON:
        return Violation(JSON_INVALID, f"response_format is {kind} but the content is not JSON")
    if kind == "json_object":
        return (
            None
            if isinstance(value, dict)
            else Violation(JSON_INVALID, "the content is JSON but not an object")
        )
    spec = rf.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    if schema is None:
        return None  # a json_schema format without a schema constrains only to JSON
    return _schema_violation(schema, value, "the content", SCHEMA_MISMATCH)


def check_answer(
    request_body: Mapping[str, Any], answer_message: Mapping[str, Any], finish_reason: str | None
) -> Violation | None:
    """The first way `answer_message` (an assistant message: content, tool_calls) with `finish_reason` breaks
    the contract `request_body` (the client's chat-completions body, as sent) declares; None when it keeps it.

    Check the answer the client would receive (placeholders already restored) against the client's own body.
    """
    if finish_reason == "length":
        return Violation(FINISH_LENGTH, "the answer was cut at the token limit (finish_reason length)")
    if not isinstance(answer_message, Mapping):
        return Violation(JSON_INVALID, "the answer has no message")
    violation = _check_calls(request_body, answer_message)
    if violation is not None:
        return violation
    return _check_content(request_body, answer_message, bool(_calls(answer_message)))
