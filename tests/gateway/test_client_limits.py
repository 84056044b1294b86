"""Per-client limits: requests and tokens per minute and a spend budget, set in the control DB, applied by every
gateway replica within a poll, refused with a 429 in OpenAI's shape (``retry-after``) before any model call, and
shown in ``/metrics`` and on the client's dashboard. Two gateway processes on one control DB hold a limit together."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from ratchet_core import client_limits as cl
from ratchet_core.control_db import ensure_schema, make_engine
from tests.serve import serve_in_thread

from .conftest import ADMIN_KEY, API_KEY, OTHER_KEY, gateway_process, running_gateway

AUTH = {"Authorization": f"Bearer {API_KEY}"}
OTHER = {"Authorization": f"Bearer {OTHER_KEY}"}
BODY = {"model": "ratchet", "messages": [{"role": "user", "content": "Where is my order?"}]}


def _set(engine, client: str, reason: str = "testing limits", clear=(), **changes) -> None:
    with engine.begin() as conn:
        cl.set_limits(conn, client, changes, clear, "tests", reason)


def _poll(gw) -> None:
    asyncio.run_coroutine_threadsafe(gw.gw.limits.poll(), gw._loop()).result(10)


def _chat(url: str, headers: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", headers=headers, json=BODY, timeout=30)


def _rows(gw, client: str) -> int:
    gw.drain()
    return gw.gw.ledger._sql("SELECT count(*) FROM ledger WHERE kind = 'request' AND client = ?", [client])[
        0
    ][0]


def _metric(url: str, name: str, **labels: str) -> float:
    want = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    # the per-client series are the admin key's (ratchet_gateway.routers.health)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    for line in httpx.get(url + "/metrics", headers=admin).text.splitlines():
        if line.startswith(want + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_requests_per_minute_are_refused_with_openais_429_before_any_model_call(tmp_path, teacher_url):
    with running_gateway(tmp_path, teacher_url) as gw:
        _set(gw.engine, "app1", rpm=3)
        _poll(gw)
        answers = [_chat(gw.url, AUTH) for _ in range(5)]
        assert [r.status_code for r in answers] == [200, 200, 200, 429, 429]
        refused = answers[-1]
        err = refused.json()["error"]
        assert err["type"] == "requests" and err["code"] == "rate_limit_exceeded" and err["param"] is None
        assert 1 <= int(refused.headers["retry-after"]) <= 20  # a token every 20 s at 3/min
        assert refused.headers["x-ratelimit-limit-requests"] == "3"
        assert "x-ratchet-request-id" in refused.headers and API_KEY not in refused.text
        assert _rows(gw, "app1") == 3  # a refused request is never recorded (nor sent to the teacher)
        assert _chat(gw.url, OTHER).status_code == 200  # another client is untouched
        assert _metric(gw.url, "ratchet_client_limited_total", client="app1", limit="rpm") == 2
        view = httpx.get(f"{gw.url}/ratchet/dashboard/data", headers=AUTH).json()["limits"]
        assert view["rpm"] == 3 and view["refused"]["rpm"] == 2
        # the admin clears it: applied at the next poll, no restart
        _set(gw.engine, "app1", clear=["rpm"])
        _poll(gw)
        assert _chat(gw.url, AUTH).status_code == 200


def _stop_clock(gw) -> None:
    """Stop the limiter's clock: its buckets do not refill, so a test reads exact levels."""
    gw.gw.limits.clock = lambda: 1_000.0


def test_tokens_per_minute_reserve_each_request_and_settle_on_its_answer(tmp_path, teacher_url):
    with running_gateway(tmp_path, teacher_url) as gw:
        _stop_clock(gw)
        _set(gw.engine, "app1", tpm=100)
        _poll(gw)
        ok = httpx.post(
            f"{gw.url}/v1/chat/completions", headers=AUTH, json={**BODY, "max_tokens": 20}, timeout=30
        )
        assert ok.status_code == 200, ok.text
        used = ok.json()["usage"]["total_tokens"]
        # the reservation (prompt + 20) was replaced by what the answer used
        assert _view(gw.url, AUTH)["tokens_available"] == pytest.approx(100 - used)
        # a request whose worst case is more than is left waits, at most a minute
        wait = {**BODY, "max_tokens": 100 - used}
        r = httpx.post(f"{gw.url}/v1/chat/completions", headers=AUTH, json=wait, timeout=30)
        assert r.status_code == 429 and r.json()["error"]["type"] == "tokens", r.text
        assert r.json()["error"]["code"] == "rate_limit_exceeded" and 1 <= int(r.headers["retry-after"]) <= 60
        # one that can never fit is a 400 that says what to change, not a wait
        big = httpx.post(
            f"{gw.url}/v1/chat/completions", headers=AUTH, json={**BODY, "max_tokens": 200}, timeout=30
        )
        err = big.json()["error"]
        assert big.status_code == 400 and err["code"] == "request_too_large" and err["param"] == "max_tokens"
        assert "max_tokens" in err["message"] and "100 tokens/min" in err["message"]
        assert _view(gw.url, AUTH)["tokens_available"] == pytest.approx(100 - used)  # refusals hold nothing
        assert "tokens_available" not in _view(gw.url, OTHER)  # another client sees only its own (no limits)
        assert _rows(gw, "app1") == 1


def test_a_limits_refusal_names_the_callers_own_fields_in_its_apis_shape(tmp_path, teacher_url):
    """A request a tokens/min limit refuses is told which of its own fields to change: ``max_output_tokens`` and
    ``input`` on /v1/responses, ``max_tokens`` in Anthropic's shape on /v1/messages, ``max_completion_tokens`` on
    chat when that is what it sent; never the chat translation's name. (On the old code every API was told
    ``max_tokens``, and a Responses prompt was ``messages``.)"""
    with running_gateway(tmp_path, teacher_url) as gw:
        _stop_clock(gw)
        _set(gw.engine, "app1", tpm=100)
        _poll(gw)

        def post(path: str, body: dict) -> httpx.Response:
            return httpx.post(gw.url + path, headers=AUTH, json=body, timeout=30)

        ask = {"model": "ratchet", "input": "Where is my order?"}
        big = post("/v1/responses", {**ask, "max_output_tokens": 200})
        err = big.json()["error"]
        assert big.status_code == 400 and err["code"] == "request_too_large", big.text
        assert err["param"] == "max_output_tokens" and "max_output_tokens 200" in err["message"]
        assert "max_tokens" not in err["message"] and "max_completion_tokens" not in err["message"]
        long = post("/v1/responses", {**ask, "input": "word " * 300, "max_output_tokens": 10})
        err = long.json()["error"]
        assert long.status_code == 400 and err["param"] == "input" and "messages" not in err["message"], (
            long.text
        )

        chat = post("/v1/chat/completions", {**BODY, "max_completion_tokens": 200})
        assert chat.status_code == 400 and chat.json()["error"]["param"] == "max_completion_tokens", chat.text

        anthropic = post(
            "/v1/messages", {"model": "ratchet", "max_tokens": 200, "messages": BODY["messages"]}
        )
        doc = anthropic.json()
        assert anthropic.status_code == 400 and doc["type"] == "error", anthropic.text
        assert doc["error"]["type"] == "invalid_request_error" and "max_tokens 200" in doc["error"]["message"]
        assert "max_completion_tokens" not in doc["error"]["message"]

        # a wait names them too (its reservation: the prompt and the caller's own cap)
        ok = post("/v1/responses", {**ask, "max_output_tokens": 20})
        assert ok.status_code == 200, ok.text
        used = ok.json()["usage"]["total_tokens"]
        wait = post("/v1/responses", {**ask, "max_output_tokens": 100 - used})
        err = wait.json()["error"]
        assert wait.status_code == 429 and err["type"] == "tokens", wait.text
        assert "its input and its max_output_tokens" in err["message"] and "max_tokens" not in err["message"]


def test_a_request_larger_than_a_replicas_share_goes_through_only_on_a_full_bucket(tmp_path, teacher_url):
    """Tokens/min 100 over two live replicas: this one's bucket holds 50. A request reserving more than that (but
    not more than the whole limit) goes through when the bucket is full, and takes all of it: that is the "one
    request per replica" a limit can be passed by. The next one waits, at most a minute."""
    with running_gateway(tmp_path, teacher_url) as gw:
        _stop_clock(gw)
        _set(gw.engine, "app1", tpm=100)
        cl.heartbeat(gw.engine, "gw-other", time.time())  # another replica, live for the next 10 s
        _poll(gw)
        assert gw.gw.limits.live == 2
        ask = {**BODY, "max_tokens": 45}  # ~13 prompt tokens + 45: more than 50, less than 100
        first = httpx.post(f"{gw.url}/v1/chat/completions", headers=AUTH, json=ask, timeout=30)
        assert first.status_code == 200, first.text
        used = first.json()["usage"]["total_tokens"]
        assert _view(gw.url, AUTH)["tokens_available"] == pytest.approx(50 - used)  # it took the whole bucket
        again = httpx.post(f"{gw.url}/v1/chat/completions", headers=AUTH, json=ask, timeout=30)
        assert again.status_code == 429 and 1 <= int(again.headers["retry-after"]) <= 60, again.text
        assert "(50 at each of 2 gateway replicas)" in again.json()["error"]["message"]


def test_a_budget_is_insufficient_quota_until_raised(tmp_path, teacher_url):
    with running_gateway(tmp_path, teacher_url) as gw:
        _set(gw.engine, "app1", budget_usd=1e-9, budget_period="day")
        _poll(gw)
        assert _chat(gw.url, AUTH).status_code == 200  # nothing spent yet
        r = _chat(gw.url, AUTH)
        assert r.status_code == 429, r.text
        err = r.json()["error"]
        assert err["type"] == "insufficient_quota" and err["code"] == "insufficient_quota"
        assert int(r.headers["retry-after"]) >= 1 and "budget" in err["message"]
        _poll(gw)  # flushed: the shared counter holds this replica's spend
        spent = cl.read_spend(gw.engine, [cl.window("day", gw.gw.limits.today())])[
            ("app1", cl.window("day", gw.gw.limits.today()))
        ]
        assert spent > 0
        assert _metric(gw.url, "ratchet_client_spend_usd", client="app1", period="day") == pytest.approx(
            spent
        )
        view = httpx.get(f"{gw.url}/ratchet/dashboard/data", headers=AUTH).json()["limits"]
        assert view["remaining_usd"] == 0 and view["spent_usd"] == pytest.approx(spent)
        _set(gw.engine, "app1", budget_usd=100.0, budget_period="day")
        _poll(gw)
        assert _chat(gw.url, AUTH).status_code == 200


# one request of each model API (the demo teacher answers them all, embeddings included)
API_BODIES = {
    "/v1/chat/completions": BODY,
    "/v1/responses": {"model": "ratchet", "input": "Where is my order?"},
    "/v1/messages": {"model": "ratchet", "max_tokens": 50, "messages": BODY["messages"]},
    "/v1/embeddings": {"model": "demo-teacher", "input": ["Where is my order?", "It is late."]},
}


def test_every_model_api_counts_against_the_limits_and_refuses_in_its_own_shape(tmp_path, teacher_url):
    embeddings = dict(
        embedding_model="openai/demo-teacher", embedding_api_base=teacher_url, embedding_api_key="sk-embed"
    )
    with running_gateway(tmp_path, teacher_url, **embeddings) as gw:

        def post(path: str, headers: dict) -> httpx.Response:
            return httpx.post(gw.url + path, headers=headers, json=API_BODIES[path], timeout=30)

        _set(gw.engine, "app1", rpm=3)
        _poll(gw)
        served = [post(path, AUTH) for path in ("/v1/embeddings", "/v1/responses", "/v1/messages")]
        assert [r.status_code for r in served] == [200, 200, 200], [r.text for r in served]
        refused = {path: post(path, AUTH) for path in API_BODIES}  # the fourth request, whatever its API
        for path, r in refused.items():
            assert r.status_code == 429, (path, r.text)
            assert 1 <= int(r.headers["retry-after"]) <= 20 and r.headers["x-ratchet-request-id"], path
        for path in ("/v1/chat/completions", "/v1/responses", "/v1/embeddings"):  # OpenAI's shape
            assert refused[path].json()["error"]["code"] == "rate_limit_exceeded", path
        anthropic = refused["/v1/messages"].json()  # Anthropic's shape, as its clients read a 429
        assert anthropic["type"] == "error" and anthropic["error"]["type"] == "rate_limit_error"
        assert anthropic["request_id"] == refused["/v1/messages"].headers["x-ratchet-request-id"]
        assert _rows(gw, "app1") == 3  # the refused ones never reached a model nor the ledger
        assert _metric(gw.url, "ratchet_client_limited_total", client="app1", limit="rpm") == 4

        # an embeddings answer's tokens count against the tokens per minute, as a chat answer's
        # (40 tokens/min: a chat without max_tokens reserves more than that, so it needs the bucket full)
        _set(gw.engine, "app2", tpm=40)
        _poll(gw)
        assert post("/v1/embeddings", OTHER).status_code == 200
        r = post("/v1/chat/completions", OTHER)
        assert r.status_code == 429 and r.json()["error"]["type"] == "tokens", r.text


def _ratchet(*args: str, control_db: str) -> None:
    env = {**os.environ, "RATCHET_CONTROL_DB": control_db}
    ratchet = Path(sys.executable).with_name("ratchet")
    subprocess.run([str(ratchet), *args], env=env, check=True, capture_output=True, timeout=120)


def _view(url: str, headers: dict) -> dict:
    return httpx.get(f"{url}/ratchet/dashboard/data", headers=headers, timeout=30).json()["limits"]


def _wait(predicate, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # other processes' state: nothing to await but asking again
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.slow
def test_two_gateway_processes_hold_one_limit_and_one_budget(tmp_path, teacher_url):
    control = f"sqlite:///{tmp_path / 'control.db'}"
    ensure_schema(make_engine(control))
    env = {"RATCHET_CONTROL_DB": control}
    with (
        gateway_process(tmp_path / "a", teacher_url, {**env, "RATCHET_REPLICA_ID": "gw-a"}) as a,
        gateway_process(tmp_path / "b", teacher_url, {**env, "RATCHET_REPLICA_ID": "gw-b"}) as b,
    ):
        engine = make_engine(control)
        _wait(lambda: cl.live_replicas(engine, time.time()) == 2, "both replicas beat")
        _ratchet(
            "admin", "client", "set", "app1", "--rpm", "6", "--reason", "two share it", control_db=control
        )
        for url in (a, b):  # applied by both within a poll, no restart
            _wait(lambda url=url: _view(url, AUTH).get("rpm") == 6, f"{url} applies the limit")
        # each replica holds half: spread over both, at most 6 a minute get through in all (one replica alone
        # would let 6 through, two 12)
        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(lambda i: _chat(a if i % 2 else b, AUTH).status_code, range(24)))
        assert 6 <= codes.count(200) <= 6 + 1, codes  # +1: a bucket refills one request in 10 s
        assert codes.count(429) == 24 - codes.count(200)
        assert _chat(a, OTHER).status_code == 200 and _chat(b, OTHER).status_code == 200

        # one budget over both: what a spent, b refuses once the shared counter has it
        _ratchet("admin", "client", "set", "app2", "--budget-usd", "0.000001", "--budget-period", "month",
                 "--reason", "a tiny budget", control_db=control)  # fmt: skip
        _wait(lambda: _chat(a, OTHER).status_code == 429, "a spends app2's budget")
        _wait(lambda: _chat(b, OTHER).status_code == 429, "b sees app2's spend at a within a flush")
        r = _chat(b, OTHER)
        assert r.json()["error"]["code"] == "insufficient_quota"


@contextmanager
def slow_embedder(delay_s: float) -> Iterator[str]:
    """The demo teacher, whose embeddings route answers after `delay_s` (so concurrent requests are all in flight
    together); its /v1 URL."""
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app

    app = create_app(DemoTeacherConfig(model="demo-teacher"))

    async def slow(scope, receive, send):
        if scope["type"] == "http" and scope["path"].endswith("/embeddings"):
            await asyncio.sleep(delay_s)
        await app(scope, receive, send)

    with serve_in_thread(slow) as url:
        yield url + "/v1"


def test_concurrent_embeddings_are_admitted_by_reservation_of_their_input_tokens(tmp_path, teacher_url):
    """Tokens/min 200 and 8 concurrent embeddings of ~50 input tokens each (answered after 1.5 s): each reserves
    its input tokens, counted with the embedding model's tokenizer, before it is sent, so only what the limit holds
    is admitted and the others wait (429, naming its ``input``); what they used settles it. One larger than the
    whole limit is a 400 naming ``input``. (On the old code embeddings reserved nothing: all 8 were admitted while
    the bucket was not empty, 2x the limit.)"""
    text = "word " * 49
    ask = {"model": "demo-teacher", "input": [text]}
    with slow_embedder(1.5) as embed_url:
        embeddings = dict(
            embedding_model="openai/demo-teacher", embedding_api_base=embed_url, embedding_api_key="sk-embed"
        )
        with running_gateway(tmp_path, teacher_url, **embeddings) as gw:
            _stop_clock(gw)
            _set(gw.engine, "app1", tpm=200)
            _poll(gw)

            def one(_: int) -> httpx.Response:
                return httpx.post(f"{gw.url}/v1/embeddings", headers=AUTH, json=ask, timeout=60)

            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(one, range(8)))
            admitted = [r for r in answers if r.status_code == 200]
            refused = [r for r in answers if r.status_code == 429]
            used = sum(r.json()["usage"]["total_tokens"] for r in admitted)
            print(f"tokens/min 200, 8 concurrent embeddings: {len(admitted)} admitted, {used} tokens used")
            assert len(admitted) + len(refused) == 8, [r.text for r in answers]
            per = admitted[0].json()["usage"]["prompt_tokens"]
            assert per >= 40 and len(admitted) == 200 // per and used <= 200, (per, len(admitted), used)
            err = refused[0].json()["error"]
            assert err["type"] == "tokens" and f"reserves {per} tokens (its input)" in err["message"], err
            assert 1 <= int(refused[0].headers["retry-after"]) <= 60
            # settled: the bucket holds the limit less what was used, no reservation left behind
            assert _view(gw.url, AUTH)["tokens_available"] == pytest.approx(200 - used)
            assert not gw.gw.limits._held
            big = httpx.post(
                f"{gw.url}/v1/embeddings", headers=AUTH, json={**ask, "input": [text] * 5}, timeout=30
            )
            err = big.json()["error"]
            assert big.status_code == 400 and err["code"] == "request_too_large" and err["param"] == "input"
            assert _rows(gw, "app1") == len(admitted)  # the refused ones never reached the model
