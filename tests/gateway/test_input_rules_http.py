"""Input rules over HTTP (issue 13 item 5): a running gateway in front of the real demo teacher rejects bad task
names, bodies nested too deep and loosely typed fields with a 400 in OpenAI's shape (``param`` names the field),
stores no row for them, never forwards an invalid task upstream, and logs every 5xx with its request id."""

from __future__ import annotations

import json
import logging
import socket

import httpx
import pytest

from .conftest import API_KEY, running_gateway

AUTH = {"Authorization": f"Bearer {API_KEY}"}
MSG = [{"role": "user", "content": "Where is my order?"}]


@pytest.fixture(scope="module")
def gw(tmp_path_factory, teacher_url):
    with running_gateway(tmp_path_factory.mktemp("input"), teacher_url) as g:
        yield g


def _post(gw, body: dict | bytes, headers: dict | None = None) -> httpx.Response:
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={**AUTH, "Content-Type": "application/json", **(headers or {})},
        timeout=20,
        **kw,
    )


def _tasks(gw) -> list[str]:
    gw.drain()
    return [r[0] for r in gw.gw.ledger._sql("SELECT task FROM ledger")]


def _bad(r: httpx.Response, param: str | None, code: str) -> dict:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == code and err["param"] == param, err
    return err


@pytest.mark.parametrize("name", ["a\r\nX-Admin: 1", "nul\x00byte", "tâche", "a b", "..", "t" * 100_000])
def test_invalid_task_names_in_metadata_are_400(gw, name):
    r = _post(gw, {"model": "ratchet", "messages": MSG, "metadata": {"ratchet_task": name}})
    err = _bad(r, "metadata.ratchet_task", "invalid_task")
    assert len(err["message"]) < 400 and "1-64 characters" in err["message"]
    assert name not in _tasks(gw)


def test_the_task_header_is_utf8_and_validated(gw):
    body = {"model": "ratchet", "messages": MSG}
    # UTF-8 bytes (once mis-read as Latin-1 as another task): now read as UTF-8 and refused by the charset
    _bad(_post(gw, body, {"X-Ratchet-Task": "tâche".encode()}), "X-Ratchet-Task", "invalid_task")
    _bad(_post(gw, body, {"X-Ratchet-Task": b"\xff\xfe"}), "X-Ratchet-Task", "invalid_task")  # not UTF-8
    _bad(_post(gw, body, {"X-Ratchet-Task": "x" * 65}), "X-Ratchet-Task", "invalid_task")
    ok = _post(gw, body, {"X-Ratchet-Task": "support.tickets-v2"})
    assert ok.status_code == 200, ok.text
    tasks = _tasks(gw)
    assert "support.tickets-v2" in tasks
    assert all(t == "default" or t == "support.tickets-v2" for t in tasks), tasks


def test_deep_nesting_is_400_not_500(gw):
    deep: object = "x"
    for _ in range(300):
        deep = [deep]
    for body in (
        {"model": "ratchet", "messages": MSG, "extra": deep},
        {"model": "ratchet", "messages": [{"role": "user", "content": deep}]},
    ):
        _bad(_post(gw, json.dumps(body).encode()), None, "nesting_too_deep")
    nested = {"type": "function", "function": {"name": "f", "parameters": {"x": [[[[[1]]]]]}}}
    ok = {"model": "ratchet", "messages": MSG, "tools": [nested]}
    assert _post(gw, ok).status_code == 200


@pytest.mark.parametrize(
    "field,value",
    [
        ("max_tokens", True),
        ("stream", "yes"),
        ("seed", False),
        ("temperature", "0.5"),
        ("n", 1.0),
        ("user", 7),
        ("stop", ["a", 1]),
        ("logprobs", "true"),
        ("parallel_tool_calls", "false"),
        ("metadata", {"ratchet_task": 5}),
        ("model", 3),
    ],
)
def test_loose_types_are_400_naming_the_field(gw, field, value):
    r = _post(gw, {"model": "ratchet", "messages": MSG, field: value})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"].split(".")[0] == field, err


def test_proof_route_takes_a_request_id_not_a_body(gw):
    r = httpx.post(
        f"{gw.url}/ratchet/proofs/v1-0123abcd",
        json={"model": "ratchet", "messages": MSG, "metadata": {"ratchet_task": "bad\nname"}},
        headers=AUTH,
        timeout=20,
    )
    _bad(r, "request_id", "proof_by_request_id")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_5xx_logs_its_request_id_with_the_cause(tmp_path, caplog):
    with (
        running_gateway(tmp_path, f"http://127.0.0.1:{_closed_port()}/v1") as g,
        caplog.at_level(logging.WARNING, logger="ratchet.gateway"),
    ):
        r = _post(g, {"model": "ratchet", "messages": MSG})
    assert r.status_code >= 500
    rid = r.headers["x-ratchet-request-id"]
    assert rid in r.json()["error"]["message"]
    lines = [rec.getMessage() for rec in caplog.records if rid in rec.getMessage()]
    assert lines and str(r.status_code) in lines[0] and "cause" in lines[0], lines


def test_a_5xx_outside_the_chat_route_is_logged_with_its_request_id(gw, caplog):
    """A proof route 500 (a malformed training key list) carries a request id that its log line holds."""
    from pathlib import Path

    body = {"model": "ratchet", "messages": [{"role": "user", "content": "Proof me, please."}]}
    sent = _post(gw, body)
    assert sent.status_code == 200
    gw.drain()
    bom = Path(gw.settings.artifacts_root) / "boms" / "v1-badkeys"
    bom.mkdir(parents=True)
    (bom / "bom.dsse.json").write_text("{}")
    (bom / "train-keys.txt").write_text("not-a-key\n")
    with caplog.at_level(logging.WARNING, logger="ratchet.gateway"):
        rid = sent.headers["x-ratchet-request-id"]
        r = httpx.post(
            f"{gw.url}/ratchet/proofs/v1-badkeys", json={"request_id": rid}, headers=AUTH, timeout=20
        )
    assert r.status_code == 500 and r.json()["error"]["code"] == "train_keys_invalid"
    rid = r.headers["x-ratchet-request-id"]
    assert rid in r.json()["error"]["message"]
    assert any(rid in rec.getMessage() and "cause" in rec.getMessage() for rec in caplog.records)
