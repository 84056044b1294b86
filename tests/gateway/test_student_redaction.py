"""With PII redaction on, the student sees the placeholders it was trained on, and the client gets its own text back:
the student upstream records what it received, answers with the placeholder, and the client's answer (plain and
streamed, content and tool-call arguments) carries the original e-mail; the ledger keeps no e-mail."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager

import openai
import orjson

from ratchet_core.redact import redact_text, redact_value, redact_value_with_mapping, restore_text

from .conftest import API_KEY, STUDENT_VERSION, running_gateway, sealed_rows

EMAIL = "Jane.Doe@Example.com"
_ADDRESS = re.compile(r"<EMAIL_[0-9a-f]{8}>|[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


@contextmanager
def recording_upstream() -> Iterator[tuple[str, list[dict]]]:
    """A minimal OpenAI-shaped server that records every body and answers 'Write to X.' plus a send(to=X) tool
    call, X being the first address (or e-mail placeholder) in the last message it received."""
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    from tests.serve import serve_in_thread

    seen: list[dict] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        seen.append(body)
        m = _ADDRESS.search(str(body["messages"][-1]["content"]))
        x = m.group(0) if m else "nobody"
        content = f"Write to {x}."
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "send", "arguments": json.dumps({"to": x})},
        }
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if body.get("stream"):  # the teacher path streams
            chunks = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": content}}]},
                {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **call}]}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": usage},
            ]
            data = "".join(
                f"data: {json.dumps({'id': 'x', 'model': body['model'], **c})}\n\n" for c in chunks
            )
            return StreamingResponse(iter([data + "data: [DONE]\n\n"]), media_type="text/event-stream")
        lp = {
            "content": [
                {"token": w, "logprob": -0.01, "bytes": None, "top_logprobs": []} for w in content.split()
            ]
        }
        msg = {"role": "assistant", "content": content, "tool_calls": [call]}
        return {
            "id": "cmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls", "logprobs": lp}],
            "usage": usage,
        }

    with serve_in_thread(app) as url:
        yield url + "/v1", seen


def _ask(g, stream: bool) -> tuple[str, str, str]:
    """(served_by, content, tool-call arguments) of one request whose message holds EMAIL."""
    c = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=30)
    kw = dict(
        model="ratchet",
        messages=[{"role": "user", "content": f"Please reply to {EMAIL} about the refund."}],
        tools=[{"type": "function", "function": {"name": "send", "parameters": {"type": "object"}}}],
        extra_headers={"X-Ratchet-Task": "echo"},
    )
    if not stream:
        raw = c.chat.completions.with_raw_response.create(**kw)
        msg = raw.parse().choices[0].message
        return raw.headers["x-ratchet-served-by"], msg.content, msg.tool_calls[0].function.arguments
    with c.chat.completions.with_streaming_response.create(stream=True, **kw) as resp:
        served = resp.headers["x-ratchet-served-by"]
        content, args = "", ""
        for chunk in resp.parse():
            for ch in chunk.choices:
                content += ch.delta.content or ""
                for tc in ch.delta.tool_calls or []:
                    args += (tc.function.arguments or "") if tc.function else ""
    return served, content, args


def test_mapping_redaction_equals_the_ledger_redaction_and_restores():
    text = f"mail {EMAIL} or jane.doe@example.com; Bearer abcdefgh12345678; card 4111 1111 1111 1111; +44 20 7946 0958"
    value = [
        {"role": "user", "content": text},
        {"role": "tool", "tool_call_id": "c1", "content": "ok 10.0.0.1"},
    ]
    red, mapping = redact_value_with_mapping(value)
    assert red == redact_value(value)
    ph = redact_text(EMAIL)
    assert mapping[ph] == EMAIL  # the first spelling the client sent
    assert restore_text(red[0]["content"], mapping) == text.replace("jane.doe@example.com", EMAIL)
    assert restore_text(red[1]["content"], mapping) == "ok 10.0.0.1"
    assert restore_text("<EMAIL_00000000> stays", mapping) == "<EMAIL_00000000> stays"


def test_live_student_sees_placeholders_and_the_client_gets_its_email(tmp_path):
    ph = redact_text(EMAIL)
    assert ph != EMAIL and ph.startswith("<EMAIL_")
    with (
        recording_upstream() as (url, seen),
        running_gateway(tmp_path, url, url, teacher_model="openai/demo-teacher") as g,
    ):
        g.publish(echo={"stage": "live", "version": STUDENT_VERSION, "threshold": 0.0})
        for stream in (False, True):
            served, content, args = _ask(g, stream)
            assert served == "student"
            assert content == f"Write to {EMAIL}."
            assert json.loads(args) == {"to": EMAIL}
        student_bodies = [b for b in seen if b["model"] == STUDENT_VERSION]
        assert len(student_bodies) == 2
        for b in student_bodies:
            text = orjson.dumps(b).decode()
            assert ph in b["messages"][-1]["content"] and EMAIL.lower() not in text.lower()
        g.drain()
        rows = [r for r in sealed_rows(g.settings.lake_root) if r["kind"] == "request"]
        assert len(rows) == 2 and all(r["served_by"] == "student" for r in rows)
        for r in rows:
            assert "example.com" not in orjson.dumps(r, default=str).decode().lower()
            assert r["answer"] == f"Write to {ph}."


def test_shadow_candidate_is_compared_with_its_placeholders_restored(tmp_path):
    ph = redact_text(EMAIL)
    with (
        recording_upstream() as (url, seen),
        running_gateway(tmp_path, url, url, teacher_model="openai/demo-teacher") as g,
    ):
        g.publish(echo={"stage": "shadow", "version": STUDENT_VERSION, "threshold": 0.0})
        served, content, args = _ask(g, stream=False)
        assert served == "teacher" and content == f"Write to {EMAIL}."
        g.drain()
        teacher = [b for b in seen if b["model"] == "demo-teacher"]
        student = [b for b in seen if b["model"] == STUDENT_VERSION]
        assert len(teacher) == 1 and EMAIL in teacher[0]["messages"][-1]["content"]  # the teacher: real text
        assert len(student) == 1 and ph in student[0]["messages"][-1]["content"]
        (pair,) = [r for r in sealed_rows(g.settings.lake_root) if r["kind"] == "pair"]
        assert pair["pair_role"] == "shadow" and pair["pair_outcome"] == "agree"
        assert "example.com" not in orjson.dumps(pair, default=str).decode().lower()
