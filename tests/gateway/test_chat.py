"""The real openai client against a running gateway, the demo teacher behind it, and the ledger rows it leaves."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from .conftest import API_KEY, running_gateway, sealed_rows


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, teacher_url):
    with running_gateway(tmp_path_factory.mktemp("gw"), teacher_url) as g:
        yield g


@pytest.fixture
def client(gateway):
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)


def _example(task: str):
    from ratchet_core.workloads import get_workload, solve

    ex = get_workload(task).generate(1, seed=11)[0]
    return ex, solve(ex.task, ex.messages, ex.tools, ex.response_format)


def test_chat_answers_like_the_teacher_and_sets_headers(client, gateway):
    ex, expected = _example("tickets")
    raw = client.chat.completions.with_raw_response.create(
        model="ratchet", messages=ex.messages, extra_body={"metadata": {"ratchet_task": "tickets"}}
    )
    resp = raw.parse()
    assert resp.choices[0].message.content == expected["content"]
    assert raw.headers["x-ratchet-served-by"] == "teacher"
    assert raw.headers["x-ratchet-request-id"].startswith("req_")
    assert "x-ratchet-version" in raw.headers
    assert float(raw.headers["x-ratchet-overhead-ms"]) >= 0
    gateway.drain()
    rows = [
        r
        for r in sealed_rows(gateway.settings.lake_root)
        if r["request_id"] == raw.headers["x-ratchet-request-id"]
    ]
    assert len(rows) == 1
    row = rows[0]
    assert (row["client"], row["task"], row["served_by"], row["kind"]) == (
        "app1",
        "tickets",
        "teacher",
        "request",
    )
    assert row["answer"] == expected["content"]
    assert (
        row["prompt_tokens"] == resp.usage.prompt_tokens
        and row["completion_tokens"] == resp.usage.completion_tokens
    )
    assert row["teacher_cost_usd"] > 0 and row["actual_cost_usd"] == row["teacher_cost_usd"]
    assert row["latency_ms"] >= row["upstream_ms"] >= 0


def test_streaming_with_usage_and_tools(client, gateway):
    ex, expected = _example("tools")
    stream = client.chat.completions.create(
        model="ratchet",
        messages=ex.messages,
        tools=ex.tools,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Ratchet-Task": "tools"},
    )
    name, args, usage, finish = "", "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                name += tc.function.name or ""
                args += tc.function.arguments or ""
            finish = choice.finish_reason or finish
    want = expected["tool_calls"][0]["function"]
    assert name == want["name"] and json.loads(args) == json.loads(want["arguments"])
    assert usage is not None and usage.completion_tokens > 0 and finish == "tool_calls"
    gateway.drain()
    rows = [r for r in sealed_rows(gateway.settings.lake_root) if r["stream"] and r["task"] == "tools"]
    assert (
        rows and rows[-1]["truncated"] is False and rows[-1]["completion_tokens"] == usage.completion_tokens
    )
    assert json.loads(rows[-1]["tool_calls"])[0]["function"]["name"] == want["name"]


def test_stream_without_usage_request_has_no_usage_chunk(client):
    ex, expected = _example("tickets")
    chunks = list(client.chat.completions.create(model="ratchet", messages=ex.messages, stream=True))
    assert all(c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected["content"]


def test_json_schema_and_logprobs(client):
    ex, expected = _example("extract")
    resp = client.chat.completions.create(
        model="demo-teacher",
        messages=ex.messages,
        response_format=ex.response_format,
        logprobs=True,
        top_logprobs=2,
        extra_headers={"X-Ratchet-Task": "extract"},
    )
    assert json.loads(resp.choices[0].message.content) == json.loads(expected["content"])
    assert resp.choices[0].logprobs.content and len(resp.choices[0].logprobs.content[0].top_logprobs) == 2


def test_models_lists_ratchet_and_teacher(client):
    ids = {m.id for m in client.models.list().data}
    assert {"ratchet", "demo-teacher", "openai/demo-teacher"} <= ids


def test_errors_have_openai_shape_and_headers(gateway, client):
    with pytest.raises(openai.NotFoundError) as e404:
        client.chat.completions.create(model="gpt-unknown", messages=[{"role": "user", "content": "hi"}])
    assert "GET /v1/models" in e404.value.message
    bad = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="ratchet", messages=[{"role": "user", "content": "hi"}])
    url = gateway.url + "/v1/chat/completions"
    auth = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    cases = [
        (b"{not json", 400, "not valid JSON"),
        (b'{"model": "ratchet", "messages": "\xff\xfe"}', 400, "UTF-8"),
        (b'{"model": "ratchet"}', 400, "messages"),
        (b'{"model": "ratchet", "messages": [{"role": "user", "content": 5}]}', 400, "messages.0"),
        (
            b'{"model": "ratchet", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
            400,
            "temperature",
        ),
    ]
    for body, status, needle in cases:
        r = httpx.post(url, content=body, headers=auth)
        assert r.status_code == status, body
        err = r.json()["error"]
        assert needle in err["message"] and err["type"] and "code" in err
        assert r.headers["x-ratchet-request-id"] and r.headers["x-ratchet-served-by"] == "teacher"
        assert "x-ratchet-overhead-ms" in r.headers and "x-ratchet-version" in r.headers
    big = (
        b'{"model": "ratchet", "messages": [{"role": "user", "content": "'
        + b"a" * (gateway.settings.max_body_bytes)
        + b'"}]}'
    )
    r = httpx.post(url, content=big, headers=auth)
    assert r.status_code == 413 and "RATCHET_MAX_BODY_BYTES" in r.json()["error"]["message"]

    def chunked():  # no Content-Length: the streamed body is counted
        yield b'{"model": "ratchet", "messages": [{"role": "user", "content": "'
        for _ in range(gateway.settings.max_body_bytes // 65536 + 2):
            yield b"a" * 65536
        yield b'"}]}'

    r = httpx.post(url, content=chunked(), headers=auth)
    assert r.status_code == 413
    r = httpx.get(gateway.url + "/nope")
    assert r.status_code == 404 and r.json()["error"]["message"] and r.headers["x-ratchet-request-id"]


def test_upstream_down_is_503_with_request_id_and_recorded(tmp_path):
    with running_gateway(tmp_path, "http://127.0.0.1:9/v1") as g:
        c = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0)
        with pytest.raises(openai.APIStatusError) as exc:
            c.chat.completions.create(model="ratchet", messages=[{"role": "user", "content": "hello"}])
        assert exc.value.status_code == 503
        rid = exc.value.response.headers["x-ratchet-request-id"]
        assert "sk-teacher-upstream" not in exc.value.response.text
        g.drain()
        rows = [r for r in sealed_rows(g.settings.lake_root) if r["request_id"] == rid]
        assert rows and rows[0]["status_code"] == 503 and rows[0]["error_type"]


def test_upstream_500_is_502(tmp_path):
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app
    from tests.serve import serve_in_thread

    teacher = create_app(DemoTeacherConfig(error_rate=1.0, error_status=500))
    with serve_in_thread(teacher) as turl, running_gateway(tmp_path, turl + "/v1") as g:
        r = httpx.post(
            g.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={"model": "ratchet", "messages": [{"role": "user", "content": "hello"}]},
        )
        assert r.status_code == 502
        assert r.headers["x-ratchet-request-id"] in r.json()["error"]["message"]


def test_health_ready_metrics(gateway, client):
    client.chat.completions.create(model="ratchet", messages=[{"role": "user", "content": "hello"}])
    assert httpx.get(gateway.url + "/healthz").status_code == 200
    ready = httpx.get(gateway.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {
        "ledger_writable": True,
        "manifest_loaded": True,
    }
    text = httpx.get(gateway.url + "/metrics").text
    for name in (
        "ratchet_requests_total",
        "ratchet_request_latency_seconds_bucket",
        "ratchet_ledger_commit_seconds",
        "ratchet_ledger_lag_rows",
        "ratchet_errors_total",
        "ratchet_manifest_rejected_total",
    ):
        assert name in text
