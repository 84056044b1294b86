"""The gateway against a misbehaving upstream (tests/faults/upstream.py) as its teacher: every stream fault reaches the
client as an OpenAI-shaped error event that ends the stream, every bad body is a 502, and each leaves a failed ledger
row that the night never turns into an example. Timeouts per phase: a producing stream is never cut."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest

from tests.faults.upstream import FaultyUpstream, faulty_upstream

from .conftest import API_KEY, running_gateway, sealed_rows

ASK = {"model": "ratchet", "messages": [{"role": "user", "content": "hello there"}]}
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def up() -> Iterator[FaultyUpstream]:
    with faulty_upstream() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(up):
    up.set("ok")
    yield
    up.set("ok")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, up):
    with running_gateway(
        tmp_path_factory.mktemp("faults"),
        up.url,
        upstream_timeout_s=1.0,
        upstream_idle_timeout_s=0.6,
    ) as g:
        yield g


def _rows(gateway, rid: str) -> list[dict]:
    gateway.drain()
    return [r for r in sealed_rows(gateway.settings.lake_root) if r["request_id"] == rid]


def _sse(gateway, **body) -> tuple[httpx.Response, list[bytes]]:
    """The gateway's raw stream: the response and each event's data payload, in order."""
    with (
        httpx.Client(timeout=10) as c,
        c.stream(
            "POST", gateway.url + "/v1/chat/completions", headers=AUTH, json={**ASK, "stream": True, **body}
        ) as r,
    ):
        raw = r.read()
    events = [e[len(b"data: ") :] for e in raw.split(b"\n\n") if e.startswith(b"data: ")]
    return r, events


@pytest.mark.parametrize("mode", ["sse_error", "malformed_chunk", "list_chunk", "early_close"])
def test_stream_fault_ends_with_an_error_event_and_a_failed_row(gateway, up, mode):
    up.set(mode, content="one two three four five six", chunks_before=2)
    r, events = _sse(gateway)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    *relayed, last = events
    assert b"[DONE]" not in events  # the stream ends with the error, never as a clean answer
    err = orjson.loads(last)["error"]
    assert err["type"] == "upstream_error" and err["code"] and err["message"]
    assert [orjson.loads(e)["choices"][0]["delta"].get("content") for e in relayed] == ["", "one", " two"]
    (row,) = _rows(gateway, r.headers["x-ratchet-request-id"])
    assert row["status_code"] == 502 and row["truncated"] and row["finish_reason"] == "error"
    assert row["error_type"] == "upstream_error" and row["answer"] == "one two"


def test_openai_client_raises_on_the_error_event(gateway, up):
    up.set("sse_error", chunks_before=1)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=API_KEY, max_retries=0, timeout=10)
    seen = []
    with pytest.raises(openai.APIError, match="mid-answer"):
        for chunk in client.chat.completions.create(**ASK, stream=True):
            seen.append(chunk)
    assert seen  # the partial answer arrived before the error


def test_list_chunk_right_after_the_role_chunk_and_an_upstream_status(gateway, up):
    up.set("list_chunk", chunks_before=0)
    r, events = _sse(gateway)
    assert orjson.loads(events[-1])["error"]["code"] == "upstream_bad_response"
    up.set("status", status=500)  # nothing streamed yet: the client gets an HTTP error, not a stream
    r, _ = _sse(gateway)
    assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_error"
    (row,) = _rows(gateway, r.headers["x-ratchet-request-id"])
    assert row["status_code"] == 502 and row["error_type"] == "upstream_error"


@pytest.mark.parametrize("mode", ["cut_body", "bad_usage", "string_choices", "not_json", "empty_body"])
def test_body_that_is_not_a_completion_is_502_with_a_row(gateway, up, mode):
    up.set(mode)
    r = httpx.post(gateway.url + "/v1/chat/completions", headers=AUTH, json=ASK, timeout=10)
    assert r.status_code == 502, r.text
    err = r.json()["error"]
    assert err["type"] == "upstream_error" and r.headers["x-ratchet-request-id"] in err["message"]
    (row,) = _rows(gateway, r.headers["x-ratchet-request-id"])
    assert row["status_code"] == 502 and row["finish_reason"] == "error" and row["answer"] == ""


def test_a_stream_that_keeps_producing_is_never_cut(gateway, up):
    # 12 chunks 0.25 s apart: 2.75 s of pauses at least, nearly three times the first-byte timeout (1 s) and
    # over four times the idle timeout (0.6 s), yet never idle for long
    up.set("slow_stream", tokens=12, interval_ms=250)
    pauses_before = len(up.pauses)
    r, events = _sse(gateway)
    assert up.pauses[pauses_before:] == [0.25] * 11
    assert events[-1] == b"[DONE]"
    (row,) = _rows(gateway, r.headers["x-ratchet-request-id"])
    assert row["status_code"] == 200 and not row["truncated"] and row["answer"].count(" t") == 12


def test_idle_and_first_byte_timeouts(gateway, up):
    up.set("slow_stream", tokens=3, interval_ms=1500)  # silent for 1.5 s > idle 0.6 s
    r, events = _sse(gateway)
    err = orjson.loads(events[-1])["error"]
    assert err["code"] == "upstream_timeout" and "stopped sending for 0.6 s" in err["message"]
    (row,) = _rows(gateway, r.headers["x-ratchet-request-id"])
    assert row["status_code"] == 504 and row["truncated"]
    up.set("hang")  # never sends headers: only the first-byte timeout (1 s) answers before the client's 10 s
    for stream in (False, True):
        r = httpx.post(
            gateway.url + "/v1/chat/completions", headers=AUTH, json={**ASK, "stream": stream}, timeout=10
        )
        assert r.status_code == 504 and "did not" in r.json()["error"]["message"]
    up.release()


def test_total_timeout_caps_a_stream_when_set(tmp_path):
    with faulty_upstream() as up, running_gateway(tmp_path, up.url, upstream_total_timeout_s=1.0) as g:
        up.set("slow_stream", tokens=50, interval_ms=100)  # 4.9 s of pauses: cut at 1 s, well before its end
        r, events = _sse(g)
        assert "1 s total limit" in orjson.loads(events[-1])["error"]["message"]
        tokens = [e for e in events if b'" t' in e]
        assert len(tokens) < 50  # the total limit cut it


def test_faulted_rows_never_become_examples(gateway, up, tmp_path):
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_core.workloads import get_workload

    ex = get_workload("tickets").generate(3, seed=11)
    rids = {}
    for mode, e in zip(("ok", "sse_error", "early_close"), ex, strict=True):
        up.set(mode, content="billing", chunks_before=1)
        r, _ = _sse(gateway, messages=e.messages, metadata={"ratchet_task": "tickets"})
        rids[mode] = r.headers["x-ratchet-request-id"]
    gateway.drain()
    day = next(r["day"] for r in sealed_rows(gateway.settings.lake_root) if r["request_id"] == rids["ok"])
    consolidate_traffic(gateway.settings.lake_root, tmp_path / "art", day)
    build_examples(tmp_path / "art", day)
    import pyarrow.parquet as pq

    from ratchet_core.layout import ArtifactLayout

    examples = pq.read_table(ArtifactLayout(tmp_path / "art").examples_file(day)).to_pylist()
    ids = {e["request_id"] for e in examples}
    assert rids["ok"] in ids
    assert not ids & {rids["sse_error"], rids["early_close"]}


def test_counts_written_as_numbers_with_a_fraction_part_are_accepted(gateway, up):
    up.set("ok", usage={"prompt_tokens": 5.0, "completion_tokens": 2.0, "total_tokens": 7.0})
    r = httpx.post(gateway.url + "/v1/chat/completions", headers=AUTH, json=ASK, timeout=10)
    assert r.status_code == 200
    (row,) = _rows(gateway, r.headers["x-ratchet-request-id"])
    assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"]) == (5, 2, 7)
