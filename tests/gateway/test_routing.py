"""Release stages as the ledger shows them: live, cascade, shadow, canary, audit, student down, safety switches."""

from __future__ import annotations

import hashlib
import json

import httpx
import openai
import pytest

from .conftest import ADMIN_KEY, API_KEY, OTHER_KEY, STUDENT_VERSION, running_gateway, sealed_rows


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, teacher_url, student_url):
    with running_gateway(tmp_path_factory.mktemp("route"), teacher_url, student_url) as g:
        yield g


@pytest.fixture
def client(gateway):
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)


def _ask(client, task: str, seed: int = 3, **kw):
    from ratchet_core.workloads import get_workload

    ex = get_workload(task).generate(1, seed=seed)[0]
    raw = client.chat.completions.with_raw_response.create(
        model="ratchet",
        messages=ex.messages,
        tools=ex.tools or openai.omit,
        response_format=ex.response_format or openai.omit,
        extra_headers={"X-Ratchet-Task": task},
        **kw,
    )
    return raw


def _rows(gateway, rid: str) -> list[dict]:
    gateway.drain()
    return [r for r in sealed_rows(gateway.settings.lake_root) if r["request_id"] == rid]


def _live(threshold, audit_rate=0.0):
    return {
        "tickets": {"stage": "live", "version": STUDENT_VERSION, "threshold": threshold},
        "_flags": {"audit_rate": audit_rate},
    }


def test_live_student_serves_and_audit_pairs_with_teacher(gateway, client):
    gateway.publish(**_live(0.0, audit_rate=1.0))
    raw = _ask(client, "tickets")
    assert raw.headers["x-ratchet-served-by"] == "student"
    assert raw.headers["x-ratchet-version"] == STUDENT_VERSION
    assert raw.parse().choices[0].logprobs is None  # the client did not ask for logprobs
    rows = _rows(gateway, raw.headers["x-ratchet-request-id"])
    req = next(r for r in rows if r["kind"] == "request")
    pair = next(r for r in rows if r["kind"] == "pair")
    assert req["served_by"] == "student" and req["stage"] == "live" and req["version"] == STUDENT_VERSION
    assert 0 < req["confidence"] <= 1 and req["threshold"] == 0.0 and req["pair_role"] == "audit"
    assert req["actual_cost_usd"] < req["teacher_cost_usd"]
    assert pair["served_by"] == "teacher" and pair["pair_role"] == "audit" and pair["pair_outcome"] == "agree"


def test_cascade_below_threshold_goes_to_teacher(gateway, client):
    gateway.publish(**_live(0.9999))
    raw = _ask(client, "tickets", seed=4)
    assert raw.headers["x-ratchet-served-by"] == "teacher"
    (row,) = _rows(gateway, raw.headers["x-ratchet-request-id"])
    assert row["served_by"] == "teacher" and row["threshold"] == 0.9999 and row["confidence"] < 0.9999
    assert row["actual_cost_usd"] > row["teacher_cost_usd"]  # paid for both answers


def test_streaming_from_student(gateway, client):
    from ratchet_core.workloads import get_workload, solve

    gateway.publish(**_live(0.0))
    ex = get_workload("tickets").generate(1, seed=5)[0]
    with client.chat.completions.with_streaming_response.create(
        model="ratchet",
        messages=ex.messages,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Ratchet-Task": "tickets"},
    ) as resp:
        assert resp.headers["x-ratchet-served-by"] == "student"
        chunks = list(resp.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == solve(ex.task, ex.messages, ex.tools, ex.response_format)["content"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_shadow_teacher_serves_and_student_pair_is_recorded(gateway, client):
    gateway.publish(extract={"stage": "shadow", "version": STUDENT_VERSION, "threshold": 0.5})
    raw = _ask(client, "extract")
    assert raw.headers["x-ratchet-served-by"] == "teacher"
    rows = _rows(gateway, raw.headers["x-ratchet-request-id"])
    req = next(r for r in rows if r["kind"] == "request")
    pair = next(r for r in rows if r["kind"] == "pair")
    assert req["stage"] == "shadow" and req["pair_role"] == "shadow" and req["served_by"] == "teacher"
    assert pair["served_by"] == "student" and pair["version"] == STUDENT_VERSION
    assert pair["pair_role"] == "shadow" and pair["pair_outcome"] == "agree" and pair["confidence"] > 0


def test_canary_split_follows_the_request_id_hash(gateway, client):
    gateway.publish(
        tickets={"stage": "canary", "version": STUDENT_VERSION, "threshold": 0.0, "canary_percent": 50}
    )
    seen = set()
    for i in range(16):
        raw = _ask(client, "tickets", seed=20 + i)
        rid = raw.headers["x-ratchet-request-id"]
        u = int.from_bytes(hashlib.sha256(f"canary:{rid}".encode()).digest()[:4], "big") / 2**32
        expected = "student" if u * 100 < 50 else "teacher"
        assert raw.headers["x-ratchet-served-by"] == expected
        seen.add(expected)
    assert seen == {"student", "teacher"}


def test_student_down_falls_back_to_teacher_invisibly(tmp_path, teacher_url):
    with running_gateway(tmp_path, teacher_url, "http://127.0.0.1:9/v1") as g:
        g.publish(**_live(0.0))
        c = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0)
        raw = _ask(c, "tickets")
        assert raw.status_code == 200 and raw.headers["x-ratchet-served-by"] == "teacher"
        (row,) = _rows(g, raw.headers["x-ratchet-request-id"])
        assert row["served_by"] == "teacher" and row["stage"] == "live" and row["confidence"] is None


def test_forged_manifest_is_ignored_and_counted(gateway, client):
    from ratchet_stats.keys import generate_private_key
    from tests.evidence.manifests import insert_raw_row, write_signed_manifest

    gateway.publish(**_live(0.0))
    before = gateway.gw.metrics.manifest_rejected._value.get()
    forged = {"tickets": {"stage": "teacher"}}
    write_signed_manifest(gateway.engine, generate_private_key(), tasks=forged)  # wrong key
    insert_raw_row(gateway.engine, 10_000, '{"payloadType": "x", "payload": "", "signatures": []}')
    gateway.poll()
    assert gateway.gw.metrics.manifest_rejected._value.get() - before == 2
    assert _ask(client, "tickets").headers["x-ratchet-served-by"] == "student"
    text = httpx.get(gateway.url + "/metrics").text
    assert "ratchet_manifest_rejected_total" in text


def test_admin_switches_only_narrow(gateway, client):
    gateway.publish(**_live(0.0))
    url = gateway.url + "/ratchet/admin"
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    assert (
        httpx.post(
            f"{url}/pin", json={"task": "tickets", "reason": "x"}, headers={"Authorization": "Bearer no"}
        ).status_code
        == 403
    )
    widen = httpx.post(
        f"{url}/student-disabled", json={"disabled": False, "reason": "try widen"}, headers=admin
    )
    assert widen.status_code == 403 and "signed manifest" in widen.json()["error"]["message"]
    assert httpx.post(f"{url}/promote", json={"reason": "nope"}, headers=admin).status_code == 403
    r = httpx.post(f"{url}/pin", json={"task": "tickets", "reason": "audits disagree"}, headers=admin)
    assert r.status_code == 200
    assert _ask(client, "tickets").headers["x-ratchet-served-by"] == "teacher"  # at once, no poll needed
    from ratchet_gateway.safety import active_state, clear_events

    assert "tickets" in active_state(gateway.engine).pins  # other replicas will pick it up
    clear_events(gateway.engine, "test cleanup")
    gateway.gw.local_safety.pins.clear()
    gateway.poll()


def test_no_stored_row_contains_planted_pii(gateway):
    gateway.publish(**_live(0.0, audit_rate=1.0))
    planted = [
        "jane.roe@example.org",
        "+44 20 7946 0958",
        "4111 1111 1111 1111",
        "GB82 WEST 1234 5698 7654 32",
        "sk-live-ABCDEFGHIJKLMNOPQRSTUV123456",
        "198.51.100.23",
    ]
    text = "Please help. " + " / ".join(planted)
    c = openai.OpenAI(base_url=gateway.url + "/v1", api_key=OTHER_KEY, max_retries=0)
    for task in ("tickets", "default"):
        raw = c.chat.completions.with_raw_response.create(
            model="ratchet",
            messages=[{"role": "user", "content": text}],
            extra_headers={"X-Ratchet-Task": task},
            stream=False,
        )
        assert raw.status_code == 200
    gateway.drain()
    dump = json.dumps(sealed_rows(gateway.settings.lake_root), default=str)
    for value in planted:
        assert value not in dump and value.replace(" ", "") not in dump
    assert "<EMAIL_" in dump and "<CARD_" in dump and "<IBAN_" in dump
