"""The student path against a misbehaving student server (tests/faults/upstream.py): the circuit breaker spares a hung
student's timeouts, the answer-contract guard sends a confident answer that breaks its request's contract to the
teacher, and every answer names who served it and under which manifest (x-ratchet-version, x-ratchet-manifest)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.faults.upstream import FaultyUpstream, faulty_upstream

from .conftest import API_KEY, running_gateway, sealed_rows

AUTH = {"Authorization": f"Bearer {API_KEY}", "X-Ratchet-Task": "tickets"}
VERSION = "v7-deadbeef"
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"order": {"type": "string", "pattern": "^[0-9]{4}$"}},
            "required": ["order"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def teacher() -> Iterator[FaultyUpstream]:
    with faulty_upstream() as server:
        yield server


@pytest.fixture(scope="module")
def student() -> Iterator[FaultyUpstream]:
    with faulty_upstream() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(teacher, student):
    teacher.set("ok", content='{"from": "teacher"}')
    student.set("ok", content="billing")
    yield
    student.release()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, teacher, student):
    with running_gateway(
        tmp_path_factory.mktemp("student-faults"),
        teacher.url,
        student.url,
        student_timeout_s=0.5,
        student_breaker_failures=2,
        student_breaker_probe_s=1.0,
    ) as g:
        g.publish(tickets={"stage": "live", "version": VERSION, "threshold": 0.5})
        yield g


def _ask(gateway, **body) -> httpx.Response:
    body = {"model": "ratchet", "messages": [{"role": "user", "content": "my parcel is late"}], **body}
    return httpx.post(gateway.url + "/v1/chat/completions", headers=AUTH, json=body, timeout=10)


def _metric(gateway, name: str) -> float:
    text = httpx.get(gateway.url + "/metrics").text
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _row(gateway, rid: str) -> dict:
    gateway.drain()
    return next(
        r
        for r in sealed_rows(gateway.settings.lake_root)
        if r["request_id"] == rid and r["kind"] == "request"
    )


def test_hung_student_costs_one_timeout_per_probe_interval(gateway, student):
    state = f'ratchet_student_breaker_state{{endpoint="{student.url}"}}'
    assert _ask(gateway).headers["x-ratchet-served-by"] == "student"
    assert _metric(gateway, state) == 0
    timeouts = 'ratchet_upstream_faults_total{code="upstream_timeout",upstream="student"}'
    timeouts_before = _metric(gateway, timeouts)
    student.set("hang")
    before = len(student.requests)
    for _ in range(2):  # two consecutive timeouts open the breaker
        r = _ask(gateway)
        assert r.headers["x-ratchet-served-by"] == "teacher"
    assert _metric(gateway, timeouts) == timeouts_before + 2  # each waited out the student's timeout
    assert _metric(gateway, state) == 2
    for _ in range(5):  # open: the teacher answers, the student is not asked (no timeout to wait out)
        assert _ask(gateway).status_code == 200
    assert len(student.requests) == before + 2 and _metric(gateway, timeouts) == timeouts_before + 2
    time.sleep(1.0)  # the probe interval
    r = _ask(gateway)  # the probe: still hung, one more timeout, open again
    assert r.headers["x-ratchet-served-by"] == "teacher" and len(student.requests) == before + 3
    assert _ask(gateway).status_code == 200 and len(student.requests) == before + 3
    student.release()
    student.set("ok", content="billing")
    time.sleep(1.0)
    r = _ask(gateway)  # the probe succeeds: closed again, the student serves
    assert r.headers["x-ratchet-served-by"] == "student" and r.headers["x-ratchet-version"] == VERSION
    assert _metric(gateway, state) == 0
    assert _metric(gateway, f'ratchet_student_breaker_bypassed_total{{endpoint="{student.url}"}}') >= 6


CASES = {
    "json_invalid": ({"response_format": {"type": "json_object"}}, {"content": "sure! {not json"}),
    "tool_undeclared": (
        {"tools": [LOOKUP]},
        {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "drop", "arguments": "{}"}}]},
    ),
    "tool_arguments_mismatch": (
        {"tools": [LOOKUP]},
        {
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"order": "12"}'},
                }
            ]
        },
    ),
    "finish_length": ({}, {"content": "billi", "finish_reason": "length"}),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_confident_answer_that_breaks_the_contract_goes_to_the_teacher(gateway, student, kind):
    body, answer = CASES[kind]
    student.set("ok", logprob=-0.001, **answer)
    counter = f'ratchet_contract_violations_total{{kind="{kind}"}}'
    before = _metric(gateway, counter)
    r = _ask(gateway, **body)
    assert r.status_code == 200 and r.headers["x-ratchet-served-by"] == "teacher"
    assert r.json()["choices"][0]["message"]["content"] == '{"from": "teacher"}'
    assert _metric(gateway, counter) == before + 1
    row = _row(gateway, r.headers["x-ratchet-request-id"])
    assert row["served_by"] == "teacher" and row["confidence"] > 0.5
    assert row["contract_violation"] == kind


def test_an_answer_inside_the_contract_is_served(gateway, student):
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"order": "1234"}'}}
    student.set("ok", tool_calls=[call])
    r = _ask(gateway, tools=[LOOKUP])
    assert r.headers["x-ratchet-served-by"] == "student"
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "lookup"
    assert _row(gateway, r.headers["x-ratchet-request-id"])["contract_violation"] == ""


def test_every_answer_names_its_server_and_manifest(gateway, student):
    seq = str(gateway.gw.manifest.sequence)
    r = _ask(gateway)
    assert (r.headers["x-ratchet-served-by"], r.headers["x-ratchet-version"]) == ("student", VERSION)
    assert r.headers["x-ratchet-manifest"] == seq
    r = _ask(gateway, metadata={"ratchet_task": "other"})  # not released: the teacher answers
    assert (r.headers["x-ratchet-version"], r.headers["x-ratchet-manifest"]) == ("teacher", seq)
    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        headers=AUTH,
        json={"model": "ratchet", "messages": [{"role": "user", "content": "hi"}], "stream": True},
    ) as s:
        assert s.headers["x-ratchet-version"] == VERSION and s.headers["x-ratchet-manifest"] == seq
