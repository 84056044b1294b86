"""OpenTelemetry traces of a running gateway (``ratchet_gateway.tracing``): with RATCHET_OTEL_ENDPOINT set, one
span per model request with the GenAI attributes and a child per upstream call (teacher, student, audit), streamed
or not, through every model API; never a prompt's or an answer's text; nothing at all with the endpoint unset; and
the spans reach a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.otlp import otlp_receiver

from .conftest import API_KEY, STUDENT_VERSION, running_gateway

SECRET_PROMPT = "My name is Zebedee Quartermaine and my card is 4111 1111 1111 1111; say hello"


def _ask(client, **kw):
    return client.chat.completions.with_raw_response.create(
        model="ratchet",
        messages=[{"role": "user", "content": SECRET_PROMPT}],
        extra_headers={"X-Ratchet-Task": "echo"},
        **kw,
    )


def _spans(g, exporter: InMemorySpanExporter, rid: str, want: int) -> tuple[object, list]:
    """The request span of request `rid` and its children, once `want` children have ended."""
    g.drain()
    assert g.app.state.tracing.flush()
    spans = exporter.get_finished_spans()
    (root,) = [s for s in spans if s.attributes.get("ratchet.request_id") == rid]
    children = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
    assert len(children) == want, [(s.name, dict(s.attributes)) for s in children]
    assert all(s.context.trace_id == root.context.trace_id for s in children)
    return root, sorted(children, key=lambda s: s.start_time)


def _no_text(spans, answer: str) -> None:
    """No span holds the prompt's words or the answer (nor any long piece of either)."""
    for s in spans:
        values = [str(v) for v in s.attributes.values()] + [s.name]
        joined = " ".join(values)
        for marker in ("Zebedee", "Quartermaine", "4111", answer):
            assert marker not in joined, f"{marker!r} in span {s.name}: {dict(s.attributes)}"
        for v in values:
            assert len(v) < 12 or (v not in SECRET_PROMPT and v not in answer), v


@pytest.fixture
def traced(tmp_path, teacher_url, student_url):
    exporter = InMemorySpanExporter()
    with running_gateway(
        tmp_path,
        teacher_url,
        student_url,
        options={"span_exporter": exporter},
        otel_endpoint="http://127.0.0.1:9",  # never reached: the exporter above replaces the collector
        embedding_model="openai/demo-teacher",
        embedding_api_base=teacher_url,
    ) as g:
        yield g, exporter, openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)


def test_a_teacher_request_is_a_span_with_a_teacher_child(traced, teacher_url):
    g, exporter, client = traced
    raw = _ask(client, max_tokens=64, temperature=0.2)
    answer = raw.parse().choices[0].message.content
    rid = raw.headers["x-ratchet-request-id"]
    root, (teacher,) = _spans(g, exporter, rid, 1)

    assert root.kind == SpanKind.SERVER and root.name == "chat ratchet"
    a = root.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "ratchet"
    assert a["gen_ai.provider.name"] == "openai" and a["gen_ai.response.model"] == "demo-teacher"
    assert a["gen_ai.request.max_tokens"] == 64 and a["gen_ai.request.temperature"] == 0.2
    usage = raw.parse().usage
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
        usage.prompt_tokens,
        usage.completion_tokens,
    )
    assert a["ratchet.served_by"] == "teacher" and a["ratchet.cascade"] == "teacher"
    assert (a["ratchet.client"], a["ratchet.task"], a["http.response.status_code"]) == ("app1", "echo", 200)
    assert "error.type" not in a

    assert teacher.kind == SpanKind.CLIENT and teacher.name == "chat demo-teacher"
    t = teacher.attributes
    host = urlsplit(teacher_url)
    assert (t["server.address"], t["server.port"]) == (host.hostname, host.port)
    assert t["ratchet.role"] == "teacher" and t["http.response.status_code"] == 200
    assert t["gen_ai.usage.output_tokens"] == usage.completion_tokens
    assert t["gen_ai.response.finish_reasons"] == ("stop",)
    _no_text([root, teacher], answer)


def test_a_student_request_has_student_and_audit_children(traced):
    g, exporter, client = traced
    g.publish(
        echo={"stage": "live", "version": STUDENT_VERSION, "threshold": 0.0}, _flags={"audit_rate": 1.0}
    )
    raw = _ask(client)
    assert raw.headers["x-ratchet-served-by"] == "student"
    rid = raw.headers["x-ratchet-request-id"]
    root, (student, audit) = _spans(g, exporter, rid, 2)

    a = root.attributes
    assert a["ratchet.served_by"] == "student" and a["ratchet.cascade"] == "student"
    assert a["ratchet.version"] == STUDENT_VERSION and a["gen_ai.provider.name"] == "ratchet.student"
    assert a["gen_ai.response.model"] == STUDENT_VERSION and a["gen_ai.usage.output_tokens"] > 0
    s = student.attributes
    assert s["ratchet.role"] == "student" and s["ratchet.version"] == STUDENT_VERSION
    assert 0.0 < s["ratchet.student.confidence"] <= 1.0 and s["http.response.status_code"] == 200
    u = audit.attributes
    assert u["ratchet.role"] == "audit" and u["gen_ai.provider.name"] == "openai"
    assert u["gen_ai.response.model"] == "demo-teacher"
    _no_text([root, student, audit], raw.parse().choices[0].message.content)


def test_a_streamed_request_records_the_streams_usage(traced):
    g, exporter, client = traced
    with client.chat.completions.with_streaming_response.create(
        model="ratchet",
        messages=[{"role": "user", "content": SECRET_PROMPT}],
        stream=True,
        extra_headers={"X-Ratchet-Task": "echo"},
    ) as resp:
        rid = resp.headers["x-ratchet-request-id"]
        text = "".join(c.choices[0].delta.content or "" for c in resp.parse() if c.choices)
    root, (teacher,) = _spans(g, exporter, rid, 1)
    assert root.attributes["ratchet.served_by"] == "teacher"
    assert root.attributes["gen_ai.usage.output_tokens"] > 0
    t = teacher.attributes
    assert t["ratchet.role"] == "teacher" and t["http.response.status_code"] == 200
    assert t["gen_ai.usage.output_tokens"] == root.attributes["gen_ai.usage.output_tokens"]
    assert t["gen_ai.response.finish_reasons"] == ("stop",)
    _no_text([root, teacher], text)


def test_the_other_model_apis_and_a_failed_request(traced):
    g, exporter, client = traced
    headers = {"authorization": f"Bearer {API_KEY}", "x-ratchet-task": "echo"}
    r = httpx.post(
        g.url + "/v1/responses",
        json={"model": "ratchet", "input": SECRET_PROMPT},
        headers=headers,
        timeout=20,
    )
    assert r.status_code == 200
    root, (teacher,) = _spans(g, exporter, r.headers["x-ratchet-request-id"], 1)
    assert (
        root.attributes["ratchet.api"] == "responses" and root.attributes["gen_ai.operation.name"] == "chat"
    )

    r = httpx.post(
        g.url + "/v1/embeddings",
        json={"model": "demo-teacher", "input": ["a b c"]},
        headers=headers,
        timeout=20,
    )
    assert r.status_code == 200
    root, (embed,) = _spans(g, exporter, r.headers["x-ratchet-request-id"], 1)
    assert root.name == "embeddings demo-teacher" and root.attributes["gen_ai.operation.name"] == "embeddings"
    assert embed.attributes["gen_ai.usage.input_tokens"] == r.json()["usage"]["prompt_tokens"]

    r = httpx.post(g.url + "/v1/chat/completions", json={"model": "nope", "messages": []}, headers=headers)
    assert r.status_code == 400
    root, _ = _spans(g, exporter, r.headers["x-ratchet-request-id"], 0)
    assert root.attributes["error.type"] == "400" and root.attributes["ratchet.client"] == "app1"
    assert httpx.get(g.url + "/healthz").status_code == 200  # not a model request: no span
    g.app.state.tracing.flush()
    assert not [s for s in exporter.get_finished_spans() if s.attributes.get("url.path") == "/healthz"]


def test_a_student_that_fails_falls_back_to_the_teacher_in_the_trace(tmp_path, teacher_url):
    exporter = InMemorySpanExporter()
    # the default student endpoint of running_gateway refuses connections
    with running_gateway(
        tmp_path, teacher_url, options={"span_exporter": exporter}, otel_endpoint="http://127.0.0.1:9"
    ) as g:
        g.publish(echo={"stage": "live", "version": STUDENT_VERSION, "threshold": 0.0})
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)
        raw = _ask(client)
        assert raw.headers["x-ratchet-served-by"] == "teacher"
        root, (student, teacher) = _spans(g, exporter, raw.headers["x-ratchet-request-id"], 2)
    assert root.attributes["ratchet.cascade"] == "fallback" and "error.type" not in root.attributes
    assert student.attributes["ratchet.role"] == "student" and student.attributes["server.port"] == 9
    assert student.attributes["error.type"] == "upstream_unavailable"
    assert student.status.status_code == StatusCode.ERROR
    assert teacher.attributes["ratchet.role"] == "teacher" and teacher.status.status_code == StatusCode.UNSET


def test_no_span_and_no_sdk_with_the_endpoint_unset(tmp_path, teacher_url):
    exporter = InMemorySpanExporter()
    with running_gateway(tmp_path, teacher_url, options={"span_exporter": exporter}) as g:
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)
        assert _ask(client).status_code == 200
        # the request path runs no tracing hook: only the per-client limits' check after validation
        hooks = g.app.hooks
        assert g.app.state.tracing is None and not hooks.before_body and not hooks.completed
        assert hooks.validated == (g.app.state.gateway.limits.validated,)
    assert exporter.get_finished_spans() == ()
    code = (
        "import sys; from ratchet_core.settings import Settings; from ratchet_gateway.app import create_app; "
        f"create_app(Settings(home={str(tmp_path / 'h2')!r})); "
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'ratchet_gateway.tracing'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_spans_reach_an_otlp_receiver_on_loopback(tmp_path, teacher_url, monkeypatch):
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    with (
        otlp_receiver() as collector,
        running_gateway(tmp_path, teacher_url, otel_endpoint=collector.url) as g,
    ):
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)
        rid = _ask(client).headers["x-ratchet-request-id"]
    # leaving the block stopped the app (its shutdown flushed the batch to the receiver), then the receiver
    assert collector.posts and all(p == ("/v1/traces", "application/x-protobuf") for p in collector.posts)
    (root,) = [s for s in collector.spans if s.attributes.get("ratchet.request_id") == rid]
    assert root.resource["service.name"] == "ratchet-gateway"
    assert root.resource["deployment.environment"] == "test"
    assert (
        root.attributes["gen_ai.operation.name"] == "chat"
        and root.attributes["gen_ai.usage.output_tokens"] > 0
    )
    children = [s for s in collector.spans if s.parent_span_id == root.span_id]
    assert [s.attributes["ratchet.role"] for s in children] == ["teacher"]
    assert children[0].trace_id == root.trace_id
