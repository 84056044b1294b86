"""The answer-contract guard: correct answers pass, each way of breaking the request's contract is named."""

from __future__ import annotations

import socket

import orjson
import pytest

from ratchet_core.contract import VIOLATION_KINDS, Violation, check_answer
from ratchet_core.workloads import get_workload, solve
from ratchet_gateway.demo_teacher.answers import answer as demo_answer

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "amount": {"type": "number", "minimum": 0},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}},
    },
    "required": ["name", "amount"],
    "additionalProperties": False,
    "$defs": {"tag": {"type": "string", "enum": ["a", "b"]}},
}
JSON_SCHEMA_BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": SCHEMA, "strict": True},
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TOOLS_BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "weather?"}],
    "tools": [WEATHER, {"type": "function", "function": {"name": "ping"}}],
}


def _content(text):
    return {"role": "assistant", "content": text}


def _call(name, arguments, *more):
    calls = [(name, arguments), *more]
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ],
    }


def _kind(body, message, finish="stop"):
    v = check_answer(body, message, finish)
    assert v is None or (isinstance(v, Violation) and v.kind in VIOLATION_KINDS)
    return v and v.kind


@pytest.mark.parametrize("workload", ["tickets", "extract", "tools"])
def test_correct_and_wrong_but_well_formed_workload_answers_keep_the_contract(workload):
    for ex in get_workload(workload).generate(30, seed=4, day=1, drift_day=0):
        body = {"model": "m", **ex.request_body()}
        right = solve(ex.task, ex.messages, ex.tools, ex.response_format)
        finish = "tool_calls" if right.get("tool_calls") else "stop"
        assert check_answer(body, right, finish) is None
        # a wrong answer of the right shape is the comparator's business, not the contract's
        assert check_answer(body, demo_answer(body, ex.task, wrong=True), finish) is None


def test_finish_length_is_a_violation_even_when_the_text_is_fine():
    assert _kind({"model": "m", "messages": []}, _content("fine"), "length") == "finish_length"
    assert _kind({"model": "m", "messages": []}, _content("fine"), "stop") is None


def test_json_object_mode():
    body = {"model": "m", "messages": [], "response_format": {"type": "json_object"}}
    assert _kind(body, _content('{"a": 1}')) is None
    assert _kind(body, _content('{"big": 123456789012345678901234567890}')) is None
    for bad in ("not json", '{"a": 1', "[1, 2]", '"text"', '{"a": NaN}', "", None):
        assert _kind(body, _content(bad)) == "json_invalid", bad


def test_json_schema_mode_names_the_path_and_keyword_not_the_value():
    assert _kind(JSON_SCHEMA_BODY, _content('{"name": "x", "amount": 2, "tags": ["a"]}')) is None
    cases = {
        '{"name": "x"}': "required",
        '{"name": "x", "amount": "secret-42"}': "type",
        '{"name": "x", "amount": -1}': "minimum",
        '{"name": "x", "amount": 1, "extra": true}': "additionalProperties",
        '{"name": "x", "amount": 1, "tags": ["zzz"]}': "enum",
    }
    for text, keyword in cases.items():
        v = check_answer(JSON_SCHEMA_BODY, _content(text), "stop")
        assert v is not None and v.kind == "schema_mismatch" and keyword in v.detail, (text, v)
        assert "secret-42" not in str(v) and "zzz" not in str(v)
    extra = {**SCHEMA, "additionalProperties": {"type": "integer"}}
    body = {**JSON_SCHEMA_BODY, "response_format": {"type": "json_schema", "json_schema": {"schema": extra}}}
    v = check_answer(body, _content('{"name": "x", "amount": 1, "jane@example.com": "s"}'), "stop")
    assert v.kind == "schema_mismatch" and "jane" not in v.detail  # a key the answer made up is not echoed
    assert v.detail == "the content fails 'type' at schema path /additionalProperties/type"
    assert _kind(JSON_SCHEMA_BODY, _content("nope")) == "json_invalid"


def test_unusable_schemas_fail_closed_without_network(monkeypatch):
    tried: list[object] = []

    def no_network(*args, **kwargs):  # a remote $ref must not even be looked up
        tried.append(args)
        raise OSError("the network is off in this test")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    for schema in ({"type": 12}, {"$ref": "https://schemas.example.invalid/x.json"}, "not a schema"):
        body = {
            **JSON_SCHEMA_BODY,
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}},
        }
        assert _kind(body, _content("{}")) == "schema_unusable", schema
    assert tried == []
    loop = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
    body = {**JSON_SCHEMA_BODY, "response_format": {"type": "json_schema", "json_schema": {"schema": loop}}}
    assert _kind(body, _content("{}")) == "schema_unusable"


def test_declared_tools_and_their_parameter_schemas():
    assert _kind(TOOLS_BODY, _call("get_weather", '{"city": "Oslo", "days": 2}'), "tool_calls") is None
    assert _kind(TOOLS_BODY, _call("ping", "{}"), "tool_calls") is None
    assert _kind(TOOLS_BODY, _content("It is sunny.")) is None  # tool_choice auto: text is allowed
    assert _kind(TOOLS_BODY, _call("get_stock", "{}")) == "tool_undeclared"
    assert _kind({"model": "m", "messages": []}, _call("ping", "{}")) == "tool_undeclared"
    assert _kind(TOOLS_BODY, _call("get_weather", '{"city": ')) == "tool_arguments_invalid"
    assert _kind(TOOLS_BODY, _call("get_weather", '["Oslo"]')) == "tool_arguments_invalid"
    assert _kind(TOOLS_BODY, _call("get_weather", '{"days": 2}')) == "tool_arguments_mismatch"
    assert _kind(TOOLS_BODY, _call("get_weather", '{"city": "Oslo", "days": 0}')) == "tool_arguments_mismatch"
    assert (
        _kind(TOOLS_BODY, _call("get_weather", '{"city": "Oslo", "when": "now"}'))
        == "tool_arguments_mismatch"
    )
    # the second call is checked too
    assert _kind(TOOLS_BODY, _call("ping", "{}", ("get_weather", "{}"))) == "tool_arguments_mismatch"


def test_tool_choice_and_parallel_tool_calls():
    ok = _call("get_weather", '{"city": "Oslo"}')
    required = {**TOOLS_BODY, "tool_choice": "required"}
    assert _kind(required, ok) is None
    assert _kind(required, _content("sunny")) == "tool_call_missing"
    named = {**TOOLS_BODY, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    assert _kind(named, ok) is None
    assert _kind(named, _call("ping", "{}")) == "tool_choice_mismatch"
    assert _kind(named, _content("sunny")) == "tool_call_missing"
    assert _kind({**TOOLS_BODY, "tool_choice": "none"}, ok) == "tool_choice_mismatch"
    assert _kind({**TOOLS_BODY, "tool_choice": "none"}, _content("sunny")) is None
    two = _call("ping", "{}", ("get_weather", '{"city": "Oslo"}'))
    assert _kind(TOOLS_BODY, two) is None
    assert _kind({**TOOLS_BODY, "parallel_tool_calls": False}, two) == "tool_calls_parallel"


def test_legacy_functions_and_custom_tools():
    body = {"model": "m", "messages": [], "functions": [WEATHER["function"]], "function_call": "auto"}
    call = {"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": "{}"}}
    assert _kind(body, call) == "tool_arguments_mismatch"
    call["function_call"]["arguments"] = '{"city": "Oslo"}'
    assert _kind(body, call) is None
    custom = {"model": "m", "messages": [], "tools": [{"type": "custom", "custom": {"name": "grep"}}]}
    msg = {
        "role": "assistant",
        "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "grep", "input": "x"}}],
    }
    assert _kind(custom, msg) is None


def test_json_content_next_to_tool_calls_and_text_requests():
    body = {**TOOLS_BODY, "response_format": {"type": "json_object"}}
    assert _kind(body, _call("ping", "{}")) is None  # a tool-calling turn has no content to check
    assert _kind(body, {**_call("ping", "{}"), "content": "not json"}) == "json_invalid"
    assert _kind({"model": "m", "messages": []}, _content("anything at all")) is None
    assert _kind({"model": "m", "messages": [], "response_format": {"type": "text"}}, _content("x")) is None


def test_a_schema_is_compiled_once_then_cached():
    from ratchet_core.contract import _compiled

    answer = _content(orjson.dumps({"name": "x", "amount": 2, "tags": ["a", "b"]}).decode())
    check_answer(JSON_SCHEMA_BODY, answer, "stop")
    before = _compiled.cache_info()
    for _ in range(50):
        assert check_answer(JSON_SCHEMA_BODY, answer, "stop") is None
    after = _compiled.cache_info()
    assert after.misses == before.misses and after.hits >= before.hits + 50
