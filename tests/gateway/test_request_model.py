"""The request model refuses what OpenAI's API refuses, with a 400 whose ``param`` names the field (never a 500),
and still accepts every real body (the built-in workloads', tool conversations)."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet_core.workloads import get_workload
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.request_body import validate_chat_body

from .conftest import API_KEY, running_gateway

MSG = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}

BAD = [
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
        "response_format.json_schema.name",
    ),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        "response_format.json_schema.schema",
    ),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 3}}},
        "response_format.json_schema.schema",
    ),
    ({"response_format": {"type": "json_schema"}}, "response_format"),
    ({"tool_choice": "sometimes", "tools": TOOLS}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "other"}}, "tools": TOOLS}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "retrieval"}]}, "tools.0.type"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools.0.function.name"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools.0.function.name"),
    (
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
        "tools.0.function.parameters",
    ),
    ({"tools": TOOLS * 2}, "tools.1"),
    ({"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]}, "tools"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ({"stream": True, "stream_options": {"include_usage": True, "other": 1}}, "stream_options.other"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"metadata": {"k": "v" * 513}}, "metadata.k"),
    ({"messages": [{"role": "user", "content": None}]}, "messages.0.content"),
    ({"messages": [{"role": "assistant", "content": None}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0.text"),
    ({"messages": [{"role": "user", "content": ["text"]}]}, "messages.0.content.0"),
    ({"messages": [*MSG, {"role": "tool", "content": "42"}]}, "messages.1.tool_call_id"),
    (
        {"messages": [*MSG, {"role": "tool", "content": "42", "tool_call_id": "call_9"}]},
        "messages.1.tool_call_id",
    ),
    (
        {"messages": [*MSG, {"role": "assistant", "content": None, "tool_calls": [CALL]}, *MSG]},
        "messages.1.tool_calls",
    ),
    (
        {"messages": [*MSG, {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}]},
        "messages.1.tool_calls.0.function.arguments",
    ),
    ({"messages": [{"role": "function", "content": "x"}]}, "messages.0.name"),
]


@pytest.mark.parametrize(("fields", "param"), BAD, ids=[p for _, p in BAD])
def test_what_openai_refuses_is_a_400_naming_the_field(fields: dict, param: str) -> None:
    with pytest.raises(GatewayError) as info:
        validate_chat_body({"model": "m", "messages": MSG, **fields})
    assert info.value.status == 400 and info.value.param == param, info.value.message


GOOD = [
    {"response_format": {"type": "text"}},
    {"response_format": {"type": "json_object"}},
    {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "order", "schema": {}, "strict": True},
        }
    },
    {"tools": TOOLS, "tool_choice": "required"},
    {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "lookup"}}},
    {"tool_choice": "none"},
    {"stream": True, "stream_options": {"include_usage": True}},
    {"stop": ["a", "b", "c", "d"]},
    {
        "tools": TOOLS,
        "messages": [
            *MSG,
            {"role": "assistant", "content": None, "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
            {"role": "tool", "tool_call_id": "call_2", "content": "2"},
            {"role": "tool", "tool_call_id": "call_1", "content": "1"},
            {"role": "assistant", "content": "done"},
            *MSG,
        ],
    },
    {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "x"}}],
            }
        ]
    },
    {"some_new_openai_field": {"anything": [1, 2]}},
]


@pytest.mark.parametrize("fields", GOOD)
def test_what_openai_accepts_passes(fields: dict) -> None:
    validate_chat_body({"model": "m", "messages": MSG, **fields})


def test_every_workload_body_passes() -> None:
    for name in ("mixed", "tickets", "extract", "research"):
        for ex in get_workload(name).generate(20, seed=3):
            validate_chat_body({"model": "m", **ex.request_body()})


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
_FIELDS = [
    "response_format",
    "tool_choice",
    "tools",
    "stream_options",
    "stop",
    "messages",
    "metadata",
    "n",
    "user",
]


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(_FIELDS), value=_JSON, stream=st.booleans())
def test_any_value_is_accepted_or_a_400_never_a_crash(field: str, value, stream: bool) -> None:
    try:
        validate_chat_body({"model": "m", "messages": MSG, "stream": stream, field: value})
    except GatewayError as err:
        assert err.status == 400 and err.param, err.message


def test_over_http_a_bad_field_is_a_400_and_nothing_is_stored(tmp_path, teacher_url) -> None:
    with running_gateway(tmp_path, teacher_url) as gw:
        r = httpx.post(
            f"{gw.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={"model": "ratchet", "messages": MSG, "tool_choice": "required"},
            timeout=20,
        )
        assert r.status_code == 400, r.text
        assert (
            r.json()["error"]["param"] == "tool_choice"
            and r.json()["error"]["type"] == "invalid_request_error"
        )
        gw.drain()
        assert gw.gw.ledger._sql("SELECT count(*) FROM ledger")[0][0] == 0
