"""Outside its workloads the demo teacher answers inside the request's contract: declared tools with valid
arguments, tool_choice honoured, JSON instances valid for the json_schema (checked with jsonschema itself)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from ratchet_core.contract import check_answer
from ratchet_gateway.demo_teacher.instances import instance_for

MODEL = "demo-teacher"

SCHEMAS = {
    "order": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,5}$"},
            "qty": {"type": "integer", "minimum": 3, "maximum": 7},
            "share": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "pack": {"type": "integer", "multipleOf": 7, "minimum": 50},
            "status": {"type": "string", "enum": ["open", "closed"]},
            "note": {"type": ["string", "null"], "maxLength": 5},
        },
        "required": ["id", "qty", "share", "pack", "status", "note"],
        "additionalProperties": False,
    },
    "people": {
        "$defs": {
            "person": {
                "type": "object",
                "properties": {"name": {"type": "string", "minLength": 12}, "born": {"format": "date"}},
                "required": ["name", "born"],
            }
        },
        "type": "object",
        "properties": {"people": {"type": "array", "items": {"$ref": "#/$defs/person"}, "minItems": 2}},
        "required": ["people"],
    },
    "shape": {
        "oneOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                "required": ["kind", "r"],
            },
            {
                "type": "object",
                "properties": {"kind": {"const": "square"}, "a": {"type": "number"}},
                "required": ["kind", "a"],
            },
        ]
    },
    "tuple": {
        "type": "object",
        "properties": {
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "boolean"}],
                "items": False,
            }
        },
        "required": ["pair"],
    },
    "ids": {
        "type": "array",
        "items": {"type": "string", "format": "uuid"},
        "minItems": 3,
        "uniqueItems": True,
    },
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "minLength": 2},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 14},
                },
                "required": ["city", "unit", "days"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "book_flight",
            "parameters": {
                "type": "object",
                "properties": {
                    "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
                    "to": {"type": "string", "pattern": "^[A-Z]{3}$"},
                },
                "required": ["from", "to"],
            },
        },
    },
    {"type": "function", "function": {"name": "ping"}},  # no parameters: any object
]


def _ask(client, **body):
    body.setdefault("messages", [{"role": "user", "content": "Please help me with this."}])
    resp = client.chat.completions.create(model=MODEL, **body)
    msg = resp.choices[0].message.model_dump(exclude_none=False)
    return {"model": MODEL, **body}, msg, resp.choices[0].finish_reason


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_answers_are_valid_instances(teacher_server, name):
    schema = SCHEMAS[name]
    rf = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    body, msg, finish = _ask(teacher_server(), response_format=rf)
    jsonschema.validate(json.loads(msg["content"]), schema, cls=jsonschema.Draft202012Validator)
    assert check_answer(body, msg, finish) is None
    # deterministic: the same request gets the same answer
    assert _ask(teacher_server(), response_format=rf)[1]["content"] == msg["content"]


def test_tool_choice_is_honoured_and_arguments_fit_the_schema(teacher_server):
    client = teacher_server()
    by_name = {t["function"]["name"]: t["function"] for t in TOOLS}

    def called(**kw):
        body, msg, finish = _ask(client, tools=TOOLS, **kw)
        assert check_answer(body, msg, finish) is None, msg
        if not msg["tool_calls"]:
            return None
        assert finish == "tool_calls"
        fn = msg["tool_calls"][0]["function"]
        schema = by_name[fn["name"]].get("parameters", {"type": "object"})
        jsonschema.validate(json.loads(fn["arguments"]), schema, cls=jsonschema.Draft202012Validator)
        return fn["name"]

    assert called() == "get_weather"  # auto, nothing named: the first declared function
    ask_flight = [{"role": "user", "content": "Can you book flight tickets for me?"}]
    assert called(messages=ask_flight) == "book_flight"  # the user's words name it
    assert called(tool_choice={"type": "function", "function": {"name": "ping"}}) == "ping"
    assert called(tool_choice="required", messages=ask_flight) == "book_flight"
    assert called(tool_choice="none") is None
    after_result = [
        *ask_flight,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "book_flight", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "booked"},
    ]
    assert called(messages=after_result) is None  # after a tool result the model answers in text
    assert called(messages=after_result, tool_choice="required") is not None


def test_streamed_tool_call_reassembles_to_a_valid_call(teacher_server):
    client = teacher_server()
    name, args, finish = "", "", None
    for chunk in client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "weather?"}], tools=TOOLS, stream=True
    ):
        finish = chunk.choices[0].finish_reason or finish
        for tc in chunk.choices[0].delta.tool_calls or []:
            name += (tc.function.name or "") if tc.function else ""
            args += (tc.function.arguments or "") if tc.function else ""
    assert name == "get_weather" and finish == "tool_calls"
    jsonschema.validate(json.loads(args), TOOLS[0]["function"]["parameters"])


def test_wrong_answers_stay_inside_the_contract_and_json_object_still_works(teacher_server):
    rf = {"type": "json_schema", "json_schema": {"name": "order", "schema": SCHEMAS["order"]}}
    right = _ask(teacher_server(), response_format=rf)
    body, wrong, finish = _ask(teacher_server(wrong_rate=1.0), response_format=rf)
    assert wrong["content"] != right[1]["content"] and check_answer(body, wrong, finish) is None
    body, msg, finish = _ask(teacher_server(), response_format={"type": "json_object"})
    assert isinstance(json.loads(msg["content"]), dict) and check_answer(body, msg, finish) is None
    plain = _ask(teacher_server())[1]["content"]
    assert (
        plain.startswith("Demo teacher reply")
        and "(wrong)" in _ask(teacher_server(wrong_rate=1.0))[1]["content"]
    )


def test_max_tokens_cut_reports_length(teacher_server):
    rf = {"type": "json_schema", "json_schema": {"name": "people", "schema": SCHEMAS["people"]}}
    body, msg, finish = _ask(teacher_server(), response_format=rf, max_tokens=3)
    assert finish == "length" and check_answer(body, msg, finish).kind == "finish_length"


def test_instances_for_unsatisfiable_or_odd_schemas_do_not_raise():
    assert instance_for({"type": "integer", "minimum": 5, "maximum": 1}) is not None  # best effort
    assert instance_for({"not": {}}, "x") == instance_for({"not": {}}, "x")  # unsatisfiable: first candidate
    assert instance_for({"$ref": "https://example.invalid/s.json"}) is not None
    assert instance_for("nonsense") == {}
    assert jsonschema.Draft202012Validator(
        {"type": "string", "pattern": "^(foo|bar)[0-9a-f]{4}\\.json$"}
    ).is_valid(instance_for({"type": "string", "pattern": "^(foo|bar)[0-9a-f]{4}\\.json$"}))


def _workload_request(task: str) -> dict:
    from ratchet_core.workloads import get_workload

    return get_workload(task).generate(1, seed=5)[0].request_body()


def test_a_workloads_own_tool_call_only_when_the_request_declares_that_tool(teacher_server):
    client = teacher_server()
    own = _workload_request("tools")
    own_names = {t["function"]["name"] for t in own["tools"]}
    body, msg, finish = _ask(client, **own)  # its own tools: the workload's call
    assert {c["function"]["name"] for c in msg["tool_calls"]} <= own_names
    for tools, hint in ((TOOLS, {}), (TOOLS, {"metadata": {"ratchet_task": "tools"}})):
        body, msg, finish = _ask(client, **{**own, "tools": tools, **hint})
        names = {c["function"]["name"] for c in msg["tool_calls"] or []}
        assert names and not names & own_names and check_answer(body, msg, finish) is None, msg
    no_tools = {k: v for k, v in own.items() if k not in ("tools", "tool_choice")}
    body, msg, finish = _ask(client, **no_tools)
    assert not msg["tool_calls"] and msg["content"] and check_answer(body, msg, finish) is None
    body, msg, finish = _ask(client, **{**own, "tool_choice": "none"})
    assert not msg["tool_calls"] and check_answer(body, msg, finish) is None


def test_a_workloads_own_schema_only_when_the_request_declares_that_schema(teacher_server):
    client = teacher_server()
    own = _workload_request("extract")
    _, mine, _ = _ask(client, **own)
    rf = {"type": "json_schema", "json_schema": {"name": "order", "schema": SCHEMAS["order"], "strict": True}}
    body, msg, finish = _ask(client, **{**own, "response_format": rf})
    jsonschema.validate(json.loads(msg["content"]), SCHEMAS["order"], cls=jsonschema.Draft202012Validator)
    assert check_answer(body, msg, finish) is None and msg["content"] != mine["content"]
    plain = {k: v for k, v in own.items() if k != "response_format"}
    body, msg, finish = _ask(client, **plain)
    assert msg["content"].startswith("Demo teacher reply")  # no schema asked: text, not the workload's JSON
