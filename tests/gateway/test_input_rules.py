"""Input rules: task names (charset, length, UTF-8 header), nesting depth without recursion, strict field types."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ratchet_core.workloads import get_workload
from ratchet_gateway.input_rules import (
    MAX_NESTING_DEPTH,
    InputRuleError,
    TaskName,
    check_nesting,
    json_too_deep,
    resolve_task,
    validate_task_name,
    value_too_deep,
)
from ratchet_gateway.request_body import ChatRequest  # the gateway's strict request model itself
from tests.cpu_time import cpu_seconds_at_most
from tests.serve import serve_in_thread

GOOD_NAMES = ["default", "tickets", "support.tickets-v2", "A_b-9.x", "x" * 64, "0day"]
BAD_NAMES = [
    "",
    "a b",
    "evil\r\nX-Admin: 1",
    "nul\x00",
    "tâche",
    "x" * 65,
    "..",
    ".hidden",
    "-rf",
    "a/b",
    "a:b",
]


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_valid_task_names(name):
    assert validate_task_name(name) == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_task_names_are_rejected_with_a_short_escaped_message(name):
    with pytest.raises(InputRuleError) as info:
        validate_task_name(name)
    msg = info.value.message
    assert info.value.param == "metadata.ratchet_task" and info.value.code == "invalid_task"
    assert "\r" not in msg and "\n" not in msg and "\x00" not in msg and "1-64 characters" in msg


def test_a_100kb_task_name_is_not_echoed():
    with pytest.raises(InputRuleError) as info:
        validate_task_name("t" * 100_000)
    assert len(info.value.message) < 300 and "100000 characters" in info.value.message
    with pytest.raises(InputRuleError):
        validate_task_name(42)


def test_resolve_task_order_and_fallthrough():
    assert resolve_task({"ratchet_task": "a"}, "b") == "a"
    assert resolve_task({"ratchet_task": ""}, "b") == "b"
    assert resolve_task({"other": "x"}, None) == "default"
    assert resolve_task(None, "") == "default"
    assert resolve_task({"ratchet_task": "ok"}, "bad name") == "ok"  # the header is not consulted
    with pytest.raises(InputRuleError) as info:
        resolve_task(None, "bad name")
    assert info.value.param == "X-Ratchet-Task"


def test_task_header_is_read_as_utf8_over_real_http():
    """Starlette decodes headers as Latin-1; task_from_header recovers the client's UTF-8 bytes."""

    async def echo(request: Request) -> JSONResponse:
        try:
            return JSONResponse({"task": resolve_task(None, request.headers.get("x-ratchet-task"))})
        except InputRuleError as err:
            return JSONResponse({"error": err.message, "param": err.param}, status_code=400)

    app = Starlette(routes=[Route("/", echo, methods=["POST"])])
    with serve_in_thread(app) as url, httpx.Client(base_url=url) as client:
        assert client.post("/", headers={"X-Ratchet-Task": "support.v2"}).json() == {"task": "support.v2"}
        assert client.post("/").json() == {"task": "default"}
        utf8 = client.post("/", headers={"X-Ratchet-Task": "tâche".encode()})
        assert utf8.status_code == 400 and "'t\\xe2che'" in utf8.json()["error"]  # read as UTF-8: one â
        latin = client.post("/", headers={"X-Ratchet-Task": b"t\xe2che"})  # Latin-1 bytes: not UTF-8
        assert latin.status_code == 400 and "not UTF-8" in latin.json()["error"]


def _nested(depth: int) -> bytes:
    return b'{"a":' * (depth - 1) + b"[1]" + b"}" * (depth - 1)


def test_nesting_limit_is_exact_and_ignores_brackets_in_strings():
    assert not json_too_deep(_nested(MAX_NESTING_DEPTH))
    assert json_too_deep(_nested(MAX_NESTING_DEPTH + 1))
    assert not value_too_deep(orjson.loads(_nested(MAX_NESTING_DEPTH)))
    assert value_too_deep(orjson.loads(_nested(MAX_NESTING_DEPTH + 1)))
    text_with_brackets = orjson.dumps({"messages": [{"role": "user", "content": "[{" * 5000 + '\\"]'}]})
    assert not json_too_deep(text_with_brackets)
    wide = orjson.dumps([[i] for i in range(50_000)])
    assert not json_too_deep(wide)
    with pytest.raises(InputRuleError) as info:
        check_nesting(b"[" * 300 + b"]" * 300)
    assert info.value.code == "nesting_too_deep" and "64" in info.value.message


def _hostile_depth() -> tuple[bytes, Any]:
    raw = b"[" * 1_000_000 + b"]" * 1_000_000  # deeper than orjson (1024) or Python (1000) would go
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    return raw, deep


def test_hostile_depth_never_recurses():
    raw, deep = _hostile_depth()
    assert json_too_deep(raw)  # a recursive reader would raise RecursionError here
    assert value_too_deep(deep)


@pytest.mark.timing
def test_hostile_depth_costs_little():
    """A CPU budget far above the linear cost and far below a super-linear one (a measurement: `timing`)."""
    raw, deep = _hostile_depth()
    with cpu_seconds_at_most(3.0):
        assert json_too_deep(raw)
        assert value_too_deep(deep)


@pytest.mark.parametrize(
    "raw,deep",
    [
        # an unterminated string full of escaped quotes: quadratic for the old regex (40 KB: seconds)
        (b"[" * 65 + b'"' + b'\\"' * 200_000, True),
        (b"[" * 64 + b'"' + b'\\"' * 200_000, False),
        (b"[" * 65 + b'"\\' * 200_000, True),
        (b"[" * 65 + b'""' * 200_000, True),
        # brackets after an even run of backslashes are outside the string; after an odd run, inside it
        (b'["\\\\"' + b"[" * 64 + b"]" * 64 + b"]", True),
        (b'["\\\\\\"' + b"[" * 64 + b'"]', False),
    ],
)
def test_pathological_strings_are_read_exactly(raw, deep):
    assert json_too_deep(raw) is deep


def _depth(v: Any) -> int:
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    return 0


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(alphabet='[]{}"\\ab', max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet="[]{}ab", max_size=3), inner, max_size=3)
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(value=_json, limit=st.integers(0, 8))
def test_raw_and_parsed_depth_checks_agree_with_a_recursive_oracle(value, limit):
    expected = _depth(value) > limit
    assert json_too_deep(orjson.dumps(value), limit) == expected
    assert value_too_deep(value, limit) == expected


@pytest.mark.parametrize(
    "field,value",
    [
        ("max_tokens", True),
        ("max_tokens", "16"),
        ("max_tokens", 16.0),
        ("stream", "yes"),
        ("stream", 1),
        ("seed", False),
        ("temperature", "0.5"),
        ("temperature", True),
        ("logprobs", "true"),
        ("n", 1.0),
        ("user", 7),
        ("stop", ["a", 1]),
        ("parallel_tool_calls", "false"),
        ("metadata", {"k": 1}),
    ],
)
def test_loose_types_are_rejected(field, value):
    with pytest.raises(ValidationError) as info:
        ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}], **{field: value})
    assert info.value.errors()[0]["loc"][0] == field


def test_real_bodies_still_pass():
    for ex in get_workload("mixed").generate(30, seed=2):
        ChatRequest(model="m", **ex.request_body())
    ok = ChatRequest(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        temperature=1,
        top_p=0.5,
        max_tokens=16,
        seed=0,
        stream=True,
        stop=["\n"],
        logprobs=True,
        top_logprobs=2,
        metadata={"ratchet_task": "tickets"},
    )
    assert ok.temperature == 1


def test_task_name_type_matches_the_function():
    class M(BaseModel):
        task: TaskName

    for name in GOOD_NAMES:
        assert M(task=name).task == name
    for name in BAD_NAMES:
        with pytest.raises(ValidationError):
            M(task=name)
