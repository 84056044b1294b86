"""The misbehaving upstream delivers each fault as specified, seen by real clients (openai, httpx, aiohttp)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import httpx
import openai
import orjson
import pytest

from tests.faults.upstream import MODES, Behaviour, FaultyUpstream, faulty_upstream

ASK = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture(scope="module")
def up() -> Iterator[FaultyUpstream]:
    with faulty_upstream() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(up):
    up.set("ok")
    yield
    up.set("ok")


def _client(up, timeout: float = 5.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=up.url, api_key="sk-test", max_retries=0, timeout=timeout)


def _sse_lines(up, **body) -> list[str]:
    with (
        httpx.Client(timeout=5) as c,
        c.stream("POST", up.url + "/chat/completions", json={**ASK, **body}) as r,
    ):
        return [line for line in r.iter_lines() if line] if r.status_code == 200 else []


def test_ok_json_and_stream_with_student_logprobs(up):
    up.set("ok", content="positive sentiment", logprob=-0.25)
    resp = _client(up).chat.completions.create(**ASK, logprobs=True)
    choice = resp.choices[0]
    assert choice.message.content == "positive sentiment" and choice.finish_reason == "stop"
    assert [e.token for e in choice.logprobs.content] == ["positive", " sentiment"]
    assert all(e.logprob == -0.25 for e in choice.logprobs.content)
    chunks = list(
        _client(up).chat.completions.create(**ASK, stream=True, stream_options={"include_usage": True})
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "positive sentiment"
    assert chunks[-1].usage.completion_tokens == 5
    assert up.requests[-1].headers["authorization"] == "Bearer sk-test"


def test_student_mode_tool_calls_and_finish_reason(up):
    call = {"id": "call_1", "type": "function", "function": {"name": "undeclared", "arguments": '{"x": 1}'}}
    up.set("ok", tool_calls=[call])
    msg = _client(up).chat.completions.create(**ASK).choices[0]
    assert msg.finish_reason == "tool_calls" and msg.message.tool_calls[0].function.name == "undeclared"
    streamed = list(_client(up).chat.completions.create(**ASK, stream=True))
    args = "".join(
        tc.function.arguments or ""
        for c in streamed
        for tc in (c.choices[0].delta.tool_calls or [])
        if tc.function
    )
    assert args == '{"x": 1}'
    up.set("ok", content='{"label": "x"', finish_reason="length")
    assert _client(up).chat.completions.create(**ASK).choices[0].finish_reason == "length"


def test_sse_error_event_then_done(up):
    up.set("sse_error", chunks_before=1)
    lines = _sse_lines(up, stream=True)
    assert '"error"' in lines[-2] and lines[-1] == "data: [DONE]"
    assert len([line for line in lines if '"delta"' in line]) == 2  # role chunk + one content chunk
    with pytest.raises(openai.APIError, match="failed mid-stream"):
        list(_client(up).chat.completions.create(**ASK, stream=True))


@pytest.mark.parametrize("mode", ["malformed_chunk", "list_chunk"])
def test_bad_chunks_then_the_rest_of_the_stream(up, mode):
    up.set(mode)
    lines = _sse_lines(up, stream=True)
    payloads = [line.removeprefix("data: ") for line in lines]
    bad = []
    for p in payloads[:-1]:
        try:
            value = orjson.loads(p)
        except orjson.JSONDecodeError:
            bad.append("not json")
            continue
        if not isinstance(value, dict):
            bad.append("list")
    assert bad == (["not json"] if mode == "malformed_chunk" else ["list"])
    assert payloads[-1] == "[DONE]"


def test_early_close_and_cut_body_break_the_connection(up):
    up.set("early_close", chunks_before=2)
    with pytest.raises(httpx.RemoteProtocolError):
        _sse_lines(up, stream=True)
    up.set("cut_body")
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(up.url + "/chat/completions", json=ASK, timeout=5)


def test_aiohttp_sees_the_same_faults():
    async def run(up: FaultyUpstream) -> tuple[str, str]:
        async with aiohttp.ClientSession() as s:
            up.set("ok")
            async with s.post(up.url + "/chat/completions", json={**ASK, "stream": True}) as r:
                ok = (await r.read()).decode()
            up.set("early_close")
            try:
                async with s.post(up.url + "/chat/completions", json={**ASK, "stream": True}) as r:
                    await r.read()
                broke = "no error"
            except aiohttp.ClientPayloadError:
                broke = "payload error"
            return ok, broke

    with faulty_upstream() as server:
        ok, broke = asyncio.run(run(server))
    assert ok.endswith("data: [DONE]\n\n") and broke == "payload error"


def test_bodies_that_are_not_completions(up):
    up.set("bad_usage")
    assert httpx.post(up.url + "/chat/completions", json=ASK).json()["usage"]["prompt_tokens"] == "many"
    up.set("string_choices")
    assert httpx.post(up.url + "/chat/completions", json=ASK).json()["choices"] == "oops"
    up.set("not_json")
    r = httpx.post(up.url + "/chat/completions", json=ASK)
    assert r.status_code == 200 and r.text.startswith("<html>")
    up.set("empty_body")
    r = httpx.post(up.url + "/chat/completions", json=ASK)
    assert r.status_code == 200 and r.content == b""
    up.set("status", status=503)
    with pytest.raises(openai.InternalServerError) as info:
        _client(up).chat.completions.create(**ASK)
    assert info.value.status_code == 503


def test_hang_accepts_and_never_answers_until_released(up):
    up.set("hang")
    before = up.counts["hang"]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(up.url + "/chat/completions", json=ASK, timeout=httpx.Timeout(5, read=0.3))
    assert up.counts["hang"] == before + 1
    up.release()
    up.set("ok")
    assert httpx.post(up.url + "/chat/completions", json=ASK, timeout=5).status_code == 200


def test_slow_stream_keeps_producing_past_a_total_budget(up):
    up.set("slow_stream", tokens=8, interval_ms=40)
    pauses_before = len(up.pauses)
    tokens = [line for line in _sse_lines(up, stream=True) if '" t' in line]
    # one pause of the interval between consecutive tokens: 0.28 s in all, never more than 0.04 s at once
    assert len(tokens) == 8 and up.pauses[pauses_before:] == [0.04] * 7


def test_delay_queue_marker_and_waiting(up):
    up.queue(Behaviour("status", status=429), "ok")
    up.set("ok", delay_ms=150)
    n = len(up.requests)
    with httpx.Client(base_url=up.url, timeout=5) as c:  # one keep-alive connection for all of them
        assert c.post("/chat/completions", json=ASK).status_code == 429
        assert c.post("/chat/completions", json=ASK).status_code == 200
        pauses_before = len(up.pauses)
        assert c.post("/chat/completions", json=ASK).status_code == 200
        assert up.pauses[pauses_before:] == [0.15]  # before the response's first byte
        marked = {**ASK, "messages": [{"role": "user", "content": "x [[fault:string_choices]]"}]}
        assert c.post("/chat/completions", json=marked).json()["choices"] == "oops"
    assert up.wait_for_requests(n + 4, timeout=1)
    assert [r.mode for r in up.requests[n:]] == ["status", "ok", "ok", "string_choices"]
    assert not up.wait_for_requests(n + 5, timeout=0.05)
    with pytest.raises(ValueError, match="unknown fault mode"):
        up.set("explode")
    assert len(MODES) == 13


def test_stopping_with_a_hung_request_outstanding_ends_its_thread():
    with faulty_upstream() as server:
        server.set("hang")
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.url + "/chat/completions", json=ASK, timeout=httpx.Timeout(5, read=0.2))
        assert server.wait_for_requests(1, timeout=1)
    assert server.stopped  # its thread ended: the hung handler did not hold the server open
