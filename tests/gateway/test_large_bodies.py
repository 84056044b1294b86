"""Large bodies (over 64 KiB) take the large-body lane: parsed in pieces, validated in slices, redacted and encoded
off the event loop. What a client and the ledger see is exactly what the inline path gives a small body."""

from __future__ import annotations

import json

import httpx
import orjson
import pytest

from ratchet_core.redact import redact_request
from ratchet_gateway.input_rules import MAX_JSON_VALUES
from ratchet_gateway.request_body import LARGE_BODY_BYTES

from .conftest import API_KEY, running_gateway, sealed_rows

AUTH = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory, teacher_url):
    with running_gateway(tmp_path_factory.mktemp("large"), teacher_url) as g:
        yield g


def _post(gw, raw: bytes) -> httpx.Response:
    return httpx.post(f"{gw.url}/v1/chat/completions", headers=AUTH, content=raw, timeout=60)


def _conversation(n: int, tag: str) -> list[dict]:
    msgs = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append(
            {"role": role, "content": f"{tag} turn {i}: mail me at user{i}@example.com, ok? " + "x" * 200}
        )
    msgs.append({"role": "user", "content": f"{tag}: where is my order?"})
    return msgs


def _row(gw, rid: str) -> dict:
    gw.drain()
    [row] = [r for r in sealed_rows(gw.settings.lake_root) if r["request_id"] == rid]
    return row


@pytest.mark.parametrize("n", [20, 3000])
def test_a_large_body_is_stored_as_a_small_one_is(gw, n: int):
    """The row's messages, params and tools are the same text whichever path built them."""
    body = {
        "model": "ratchet",
        "messages": _conversation(n, f"t{n}"),
        "temperature": 0,
        "user": "someone@example.com",
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
    }
    raw = orjson.dumps(body)
    assert (len(raw) > LARGE_BODY_BYTES) == (n > 100)
    r = _post(gw, raw)
    assert r.status_code == 200, r.text
    row = _row(gw, r.headers["x-ratchet-request-id"])
    redacted = redact_request(body).body
    assert row["messages"] == orjson.dumps(redacted["messages"], option=orjson.OPT_SORT_KEYS).decode()
    assert json.loads(row["params"]) == {"temperature": 0, "user": redacted["user"]}
    assert json.loads(row["tools"])["tools"] == redacted["tools"]
    assert "user7@example.com" not in row["messages"] and row["status_code"] == 200


def test_a_bad_message_deep_in_a_large_body_is_named(gw):
    msgs = _conversation(1500, "bad")
    msgs[1201] = {"role": "wizard", "content": "hi"}
    r = _post(gw, orjson.dumps({"model": "ratchet", "messages": msgs}))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "messages.1201.role"
    msgs[1201] = {"role": "tool", "content": "no call to answer", "tool_call_id": "call_1"}
    r = _post(gw, orjson.dumps({"model": "ratchet", "messages": msgs}))
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages.1201.tool_call_id", r.text


def test_a_large_flood_of_values_is_400(gw):
    flood = b"[" + b"0," * MAX_JSON_VALUES + b"0]"
    raw = b'{"model":"ratchet","messages":[{"role":"user","content":"hi"}],"x":' + flood + b"}"
    r = _post(gw, raw)
    assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_values", r.text
    # nesting and broken JSON are refused on the large path as on the small one
    deep = (
        b'{"model":"ratchet","messages":[],"x":'
        + b"[" * 65
        + b"]" * 65
        + b',"pad":"'
        + b"y" * LARGE_BODY_BYTES
        + b'"}'
    )
    assert _post(gw, deep).json()["error"]["code"] == "nesting_too_deep"
    broken = b'{"model":"ratchet","messages":[' + b'{"role":"user","content":"x"},' * 5000 + b"]}"
    assert _post(gw, broken).json()["error"]["code"] == "invalid_json"
