"""Whole-request redaction: every stored field of a chat request, one mapping, structure kept, values restored."""

from __future__ import annotations

import copy

import jsonschema
import orjson
import pytest

from ratchet_core.redact import redact_request, redact_value, restore_text
from ratchet_core.workloads import get_workload

EMAIL = "jane.doe@example.com"
UNI_EMAIL = "josé.garcía@correo.es"
PHONE = "+44 20 7946 0958"
CARD = "4111.1111.1111.1111"
KEY = "sk-proj-Abcdefghijklmnop1234567890"
PLANTED = (EMAIL, UNI_EMAIL, PHONE, CARD, KEY)
LONG_PROPERTY = "customer_reference_number_field_v2"  # 35 chars, letters and digits: looks like a token


def _body() -> dict:
    return {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": f"Escalate to {EMAIL}."},
            {"role": "user", "name": EMAIL, "content": [{"type": "text", "text": f"I paid with {CARD}"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup_customer", "arguments": f'{{"phone": "{PHONE}"}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": f"customer {UNI_EMAIL}"},
        ],
        "user": UNI_EMAIL,
        "stop": [f"END {KEY}", "\n\n"],
        "metadata": {"ratchet_task": "support.tickets-v2", "customer": EMAIL},
        "temperature": 0.2,
        "max_tokens": 64,
        "prediction": {"type": "content", "content": f"Dear {EMAIL}"},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup_customer",
                    "description": f"Look a customer up; the admin is {EMAIL}.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "phone": {
                                "type": "string",
                                "description": f"like {PHONE}",
                                "pattern": r"^\+?[0-9 ]+$",
                            },
                            LONG_PROPERTY: {"type": "string", "default": KEY},
                        },
                        "required": ["phone", LONG_PROPERTY],
                        "additionalProperties": False,
                    },
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "lookup_customer"}},
        "functions": [
            {"name": "legacy_fn", "description": f"mail {EMAIL}", "parameters": {"type": "object"}}
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "reply",
                "description": f"A reply for {UNI_EMAIL}",
                "strict": True,
                "schema": {
                    "type": "object",
                    "title": f"Reply to {EMAIL}",
                    "properties": {
                        "to": {"type": "string", "enum": [EMAIL, "support"], "description": "recipient"},
                        "card": {"type": "string", "examples": [CARD]},
                        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
                    },
                    "required": ["to", "card", "items"],
                    "additionalProperties": False,
                    "$defs": {"item": {"type": "string", "description": f"ask {PHONE}"}},
                },
            },
        },
    }


def test_no_planted_value_survives_in_any_field():
    body = _body()
    original = copy.deepcopy(body)
    red = redact_request(body)
    dumped = orjson.dumps(red.body).decode()
    for value in PLANTED:
        assert value not in dumped, value
        assert orjson.dumps(value).decode()[1:-1] not in dumped, value  # not even JSON-escaped
    assert body == original  # the input is not modified
    # every placeholder in the redacted body is in the one mapping, and maps back to a planted value
    assert set(red.mapping.values()) == set(PLANTED)


def test_structure_is_kept():
    red = redact_request(_body()).body
    assert red["model"] == "gpt-4o-mini"
    assert red["metadata"]["ratchet_task"] == "support.tickets-v2"
    assert red["temperature"] == 0.2 and red["max_tokens"] == 64 and red["stop"][1] == "\n\n"
    assert red["messages"][1]["name"].startswith("<EMAIL_")  # a participant name is user text
    assert red["messages"][2]["tool_calls"][0]["id"] == "call_1"
    assert red["messages"][2]["tool_calls"][0]["function"]["name"] == "lookup_customer"
    assert red["messages"][3]["tool_call_id"] == "call_1"
    fn = red["tools"][0]["function"]
    assert fn["name"] == "lookup_customer"
    assert fn["parameters"]["required"] == ["phone", LONG_PROPERTY]
    assert fn["parameters"]["properties"]["phone"]["pattern"] == r"^\+?[0-9 ]+$"
    assert red["tool_choice"] == _body()["tool_choice"]
    assert red["functions"][0]["name"] == "legacy_fn"
    js = red["response_format"]["json_schema"]
    assert js["name"] == "reply" and js["strict"] is True and red["response_format"]["type"] == "json_schema"
    assert js["schema"]["required"] == ["to", "card", "items"]
    assert js["schema"]["properties"]["items"]["items"] == {"$ref": "#/$defs/item"}


def test_redacted_schemas_still_validate_what_the_originals_validate():
    body, red = _body(), redact_request(_body()).body
    pairs = [
        (body["response_format"]["json_schema"]["schema"], red["response_format"]["json_schema"]["schema"]),
        (body["tools"][0]["function"]["parameters"], red["tools"][0]["function"]["parameters"]),
    ]
    good = [{"to": "support", "card": "x", "items": ["a"]}, {"phone": "+1 555", LONG_PROPERTY: "r"}]
    bad = [{"to": "support", "card": "x"}, {"phone": "not a phone", LONG_PROPERTY: "r"}]
    for (orig, redacted), ok, ko in zip(pairs, good, bad, strict=True):
        jsonschema.Draft202012Validator.check_schema(redacted)
        assert jsonschema.Draft202012Validator(orig).is_valid(ok)
        assert jsonschema.Draft202012Validator(redacted).is_valid(ok)
        assert not jsonschema.Draft202012Validator(redacted).is_valid(ko)


def test_one_mapping_restores_the_clients_values_in_an_answer():
    red = redact_request(_body())
    schema = red.body["response_format"]["json_schema"]["schema"]
    to = schema["properties"]["to"]["enum"][0]  # the placeholder the model saw in the enum
    card = schema["properties"]["card"]["examples"][0]
    user = red.body["user"]
    answer = orjson.dumps({"to": to, "card": card, "items": [user]}).decode()
    restored = orjson.loads(restore_text(answer, red.mapping))
    assert restored == {"to": EMAIL, "card": CARD, "items": [UNI_EMAIL]}


@pytest.mark.parametrize("workload", ["tickets", "extract", "tools"])
def test_messages_and_tools_are_byte_identical_to_the_stored_redaction(workload):
    """Rows and example keys of workload traffic do not change: redact_request's messages and tools equal what
    the gateway has always stored (redact_value of messages, and of {tools, tool_choice})."""
    for ex in get_workload(workload).generate(60, seed=11, day=2, drift_day=1):
        body = {"model": "m", **ex.request_body()}
        red = redact_request(body).body
        assert red["messages"] == redact_value(body["messages"])
        if body.get("tools"):
            old = redact_value({"tools": body["tools"], "tool_choice": body.get("tool_choice")})
            assert red["tools"] == old["tools"] and red.get("tool_choice") == old["tool_choice"]
        if body.get("response_format"):
            assert red["response_format"] == body["response_format"]  # no PII in the workload's schema


def test_odd_shapes_do_not_raise():
    for body in (
        {"messages": "not a list", "tools": {"x": 1}, "response_format": "json", "metadata": ["a@b.co"]},
        {"tools": [None, 3, {"function": None}], "functions": None, "response_format": {"json_schema": [1]}},
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {"properties": [EMAIL]}}}},
    ):
        red = redact_request(body)
        assert EMAIL not in orjson.dumps(red.body).decode()
