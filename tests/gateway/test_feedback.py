"""Feedback routes on a running gateway (real demo teacher on loopback, the real openai client, the control DB):
what each answer means, idempotency, redaction, the contract check of demonstrations, episodes, the batch route,
and the pending state of a request another replica has not sealed yet."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import openai
import orjson
import pytest

from ratchet_core import feedback as fb
from ratchet_core.manifest import Manifest
from ratchet_core.task_policy import TaskPolicy

from .conftest import API_KEY, OTHER_KEY, running_gateway, sealed_rows

AUTH = {"Authorization": f"Bearer {API_KEY}"}
OTHER = {"Authorization": f"Bearer {OTHER_KEY}"}
POLICY = TaskPolicy(
    metrics={"thumbs_up": {"type": "boolean"}, "rating": {"type": "float", "direction": "higher"}},
    bad_when="thumbs_up=false",
)
TICKET = [
    {
        "role": "system",
        "content": "Classify the ticket: billing, shipping, account, other. Answer the label.",
    },
    {"role": "user", "content": "I was charged twice for my order, please refund."},
]
JSON_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "order",
        "schema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
            "additionalProperties": False,
        },
    },
}


def _publish(g) -> None:
    from tests.evidence.manifests import write_signed_manifest

    write_signed_manifest(g.engine, g.private_key, Manifest(policies={"tickets": POLICY}))
    g.poll()


def _ask(g, key: str = API_KEY, episode: str = "", **extra) -> str:
    client = openai.OpenAI(base_url=g.url + "/v1", api_key=key, max_retries=0)
    metadata = {"ratchet_task": "tickets", **({"ratchet_episode": episode} if episode else {})}
    raw = client.chat.completions.with_raw_response.create(
        model="ratchet", messages=TICKET, extra_body={"metadata": metadata}, **extra
    )
    return raw.headers["x-ratchet-request-id"]


def _post(g, body: dict, auth: dict = AUTH) -> httpx.Response:
    return httpx.post(g.url + "/ratchet/feedback", json=body, headers=auth, timeout=30)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, teacher_url):
    with running_gateway(tmp_path_factory.mktemp("fb"), teacher_url) as g:
        _publish(g)
        yield g


def test_feedback_on_own_request_is_recorded_once_and_a_reused_id_is_refused(gateway) -> None:
    rid = _ask(gateway)
    item = {"feedback_id": "f-1", "request_id": rid, "metric": "thumbs_up", "value": False}
    first = _post(gateway, item)
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "recorded" and first.json()["task"] == "tickets"
    again = _post(gateway, item)  # a retry: the same answer, one stored row
    assert again.status_code == 200 and again.json() == first.json()
    reused = _post(gateway, {**item, "value": True})
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "feedback_id_reused"
    [row] = fb.rows(gateway.engine, fb_table().c.feedback_id == "f-1")
    assert (row["client"], row["state"], row["served_by"], row["value"]) == (
        "app1",
        "recorded",
        "teacher",
        0.0,
    )
    assert len(row["example_key"]) == 64 and row["request_day"]
    assert fb.verdict(row, POLICY) is True  # thumbs_up=false is the policy's bad_when


def fb_table():
    from ratchet_core.control_db import feedback

    return feedback


def test_each_refusal_has_its_own_clear_4xx(gateway) -> None:
    rid = _ask(gateway)
    other = _post(
        gateway, {"feedback_id": "x-1", "request_id": rid, "metric": "thumbs_up", "value": True}, OTHER
    )
    # another client's request: answered as an id no request has (pending, then unknown), never a 403
    assert other.status_code == 202 and other.json()["status"] == "pending"
    undeclared = _post(gateway, {"feedback_id": "x-2", "request_id": rid, "metric": "stars", "value": 3})
    assert undeclared.status_code == 400 and undeclared.json()["error"]["code"] == "undeclared_metric"
    assert "--metric stars" in undeclared.json()["error"]["message"]
    wrong = _post(gateway, {"feedback_id": "x-3", "request_id": rid, "metric": "thumbs_up", "value": 1})
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "wrong_type"
    wrong = _post(gateway, {"feedback_id": "x-4", "request_id": rid, "metric": "rating", "value": "good"})
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "wrong_type"
    bad_id = _post(
        gateway, {"feedback_id": "x-5", "request_id": "../etc", "metric": "comment", "value": "hi"}
    )
    assert bad_id.status_code == 400
    both = _post(gateway, {"feedback_id": "x-6", "metric": "comment", "value": "hi"})
    assert both.status_code == 400 and both.json()["error"]["code"] == "invalid_target"
    nokey = httpx.post(gateway.url + "/ratchet/feedback", json={}, timeout=30)
    assert nokey.status_code == 401
    # nothing refused was stored (app2's item on app1's request waits as pending, as on an unknown id)
    stored = fb.rows(gateway.engine, fb_table().c.feedback_id.like("x-%"))
    assert [(r["client"], r["feedback_id"], r["state"]) for r in stored] == [("app2", "x-1", "pending")]


def test_comments_and_demonstrations_are_stored_redacted(gateway) -> None:
    rid = _ask(gateway)
    comment = _post(
        gateway,
        {
            "feedback_id": "c-1",
            "request_id": rid,
            "metric": "comment",
            "value": "wrong, mail jane.doe@example.com",
        },
    )
    assert comment.status_code == 200, comment.text
    demo = _post(
        gateway,
        {
            "feedback_id": "d-1",
            "request_id": rid,
            "metric": "demonstration",
            "value": "billing jane.doe@example.com",
        },
    )
    assert demo.status_code == 200, demo.text
    rows = {r["feedback_id"]: r for r in fb.rows(gateway.engine, fb_table().c.request_id == rid)}
    assert "jane.doe@example.com" not in rows["c-1"]["text"] and "<EMAIL_" in rows["c-1"]["text"]
    assert "jane.doe@example.com" not in rows["d-1"]["text"]
    assert fb.demonstration(rows["d-1"])["content"].startswith("billing <EMAIL_")
    assert rows["d-1"]["agrees"] is False  # the teacher answered 'billing', not the demonstrated text


def test_a_demonstration_must_keep_the_requests_contract(gateway) -> None:
    rid = _ask(gateway, response_format=JSON_SCHEMA)
    bad = _post(
        gateway, {"feedback_id": "j-1", "request_id": rid, "metric": "demonstration", "value": "A-17"}
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "contract_violation"
    extra = {"content": '{"order_id": "A-17", "note": 1}'}
    bad = _post(gateway, {"feedback_id": "j-2", "request_id": rid, "metric": "demonstration", "value": extra})
    assert bad.status_code == 400 and "schema" in bad.json()["error"]["message"]
    good = {"content": '{"order_id": "A-17"}'}
    ok = _post(gateway, {"feedback_id": "j-3", "request_id": rid, "metric": "demonstration", "value": good})
    assert ok.status_code == 200, ok.text


def test_episodes_are_the_clients_own_and_take_metrics_not_demonstrations(gateway) -> None:
    _ask(gateway, episode="conv-7")
    item = {
        "feedback_id": "e-1",
        "episode_id": "conv-7",
        "task": "tickets",
        "metric": "thumbs_up",
        "value": True,
    }
    assert _post(gateway, item).json()["status"] == "recorded"
    # another client's episode of the same name is its own (none of its requests carries it yet)
    assert _post(gateway, item, OTHER).status_code == 202
    demo = {**item, "feedback_id": "e-2", "metric": "demonstration", "value": "billing"}
    assert _post(gateway, demo).status_code == 400
    assert _post(gateway, {**item, "feedback_id": "e-3", "task": None}).status_code == 400
    bad = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "ratchet", "messages": TICKET, "metadata": {"ratchet_episode": "a b"}},
        headers=AUTH,
        timeout=30,
    )
    assert bad.status_code == 400 and "episode" in bad.json()["error"]["message"]
    gateway.drain()
    rows = [r for r in sealed_rows(gateway.settings.lake_root) if r["episode"] == "conv-7"]
    assert rows and all(r["client"] == "app1" for r in rows)
    assert all("ratchet_episode" not in (r["params"] or "") for r in rows)  # not forwarded, not stored


def test_batch_answers_each_item_in_order(gateway) -> None:
    rid, other_rid = _ask(gateway), _ask(gateway, OTHER_KEY)
    items = [
        {"feedback_id": "b-1", "request_id": rid, "metric": "rating", "value": 4.5},
        {"feedback_id": "b-2", "request_id": other_rid, "metric": "rating", "value": 1},
        {"feedback_id": "b-3", "request_id": rid, "metric": "nope", "value": 1},
        {"feedback_id": "b-4", "request_id": rid},
        {"feedback_id": "b-5", "request_id": "req_" + "0" * 24, "metric": "comment", "value": "later"},
        {"feedback_id": "b-1", "request_id": rid, "metric": "rating", "value": 4.5},  # sent twice: one row
        {"feedback_id": "b-1", "request_id": rid, "metric": "rating", "value": 2.0},  # the id reused: 409
    ]
    r = httpx.post(gateway.url + "/ratchet/feedback:batch", json={"items": items}, headers=AUTH, timeout=30)
    assert r.status_code == 200, r.text
    got = [(x["feedback_id"], x["status"], x["http_status"]) for x in r.json()["results"]]
    assert got[0] == ("b-1", "recorded", 200) and got[4] == ("b-5", "pending", 202)
    assert [s for _, _, s in got[1:4]] == [202, 400, 400] and [s for _, _, s in got[5:]] == [200, 409]
    assert len(fb.rows(gateway.engine, fb_table().c.feedback_id == "b-1")) == 1
    too_many = {"items": [items[0]] * (fb.MAX_BATCH + 1)}
    r = httpx.post(gateway.url + "/ratchet/feedback:batch", json=too_many, headers=AUTH, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "batch_too_large"


def test_a_request_no_row_holds_is_pending_then_unknown(gateway) -> None:
    item = {"feedback_id": "p-1", "request_id": "req_" + "1" * 24, "metric": "comment", "value": "?"}
    first = _post(gateway, item)
    assert first.status_code == 202 and first.json()["status"] == "pending"
    still = httpx.get(gateway.url + "/ratchet/feedback/p-1", headers=AUTH, timeout=30)
    assert still.json()["status"] == "pending"  # another replica may still hold it unsealed
    # received longer ago than two segment periods and a minute: every live replica has sealed what it held
    old = (
        datetime.now(UTC) - fb.unknown_after(gateway.settings.segment_seconds) - timedelta(seconds=1)
    ).isoformat()
    with gateway.engine.begin() as conn:
        conn.execute(fb_table().update().where(fb_table().c.feedback_id == "p-1").values(received_at=old))
    state = httpx.get(gateway.url + "/ratchet/feedback/p-1", headers=AUTH, timeout=30)
    assert state.status_code == 200 and state.json()["status"] == "rejected"
    assert state.json()["error"]["code"] == "unknown_request"
    again = _post(gateway, item)  # the retry now answers what is known
    assert again.status_code == 404 and again.json()["error"]["code"] == "unknown_request"


def test_another_replicas_unsealed_request_settles_when_it_is_sealed(tmp_path, teacher_url) -> None:
    from ratchet_core.settings import Settings
    from ratchet_gateway.app import GatewayOptions, create_app
    from tests.serve import serve_in_thread

    with running_gateway(tmp_path, teacher_url) as g:
        _publish(g)
        # a second replica on the same home (lake, control DB), its own ledger
        settings = Settings(**{**g.settings.model_dump(), "api_keys": g.settings.api_keys})
        app2 = create_app(settings, GatewayOptions(replica="gw2", public_keys=[g.private_key.public_key()]))
        with serve_in_thread(app2) as url2:
            client = openai.OpenAI(base_url=url2 + "/v1", api_key=API_KEY, max_retries=0)
            raw = client.chat.completions.with_raw_response.create(
                model="ratchet", messages=TICKET, extra_body={"metadata": {"ratchet_task": "tickets"}}
            )
            rid = raw.headers["x-ratchet-request-id"]
            item = {"feedback_id": "r-1", "request_id": rid, "metric": "thumbs_up", "value": True}
            assert _post(g, item).status_code == 202  # replica 1 cannot see replica 2's unsealed row
            app2.state.gateway.ledger.seal_now()
            state = httpx.get(g.url + "/ratchet/feedback/r-1", headers=AUTH, timeout=30).json()
            assert state["status"] == "recorded" and state["task"] == "tickets"
            other = {**item, "feedback_id": "r-2"}
            # sealed now (found through the sealed request-id index), and not app2's: app2 is told what an
            # unknown id gets
            assert _post(g, other, OTHER).status_code == 202


def test_the_dashboard_shows_the_callers_feedback_per_task_and_day(gateway) -> None:
    rid = _ask(gateway)
    assert _post(
        gateway, {"feedback_id": "dash-1", "request_id": rid, "metric": "thumbs_up", "value": False}
    ).is_success
    data = httpx.get(gateway.url + "/ratchet/dashboard/data", headers=AUTH, timeout=30).json()
    [tickets] = [t for t in data["tasks"] if t["task"] == "tickets"]
    rows = tickets["feedback"]
    assert rows and sum(r["items"] for r in rows) >= 1
    assert sum(r["teacher_bad"] for r in rows) >= 1 and all(r["student_rated"] == 0 for r in rows)
    other = httpx.get(gateway.url + "/ratchet/dashboard/data", headers=OTHER, timeout=30).json()
    # app2 rated nothing as bad: none of app1's items reach its page
    assert all(r["teacher_bad"] == 0 for t in other["tasks"] for r in t["feedback"])


# Feedback handled like a chat body (issue 34, point 4): caps, the large-body lane, requests/min, indexed lookups,
# ownership first --------------------------------------------------------------------------------------------------
def _age(engine, *feedback_ids: str) -> None:
    """Make items look received longer ago than ``unknown_after`` (every replica has sealed since)."""
    old = (datetime.now(UTC) - fb.unknown_after(3600) - timedelta(seconds=1)).isoformat()
    with engine.begin() as conn:
        conn.execute(
            fb_table().update().where(fb_table().c.feedback_id.in_(feedback_ids)).values(received_at=old)
        )


def _huge_demonstration(size: int) -> dict:
    """A demonstration whose tool_calls list alone is about `size` bytes of JSON."""
    note = "x" * 10_000
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "refund", "arguments": f'{{"note": "{note}"}}'},
    }
    one = len(orjson.dumps(call)) + 1
    return {"content": None, "tool_calls": [call] * (size // one)}


def test_another_clients_ids_are_answered_as_unknown_ones_embeddings_included(tmp_path, teacher_url) -> None:
    with running_gateway(
        tmp_path, teacher_url, embedding_model="openai/demo-teacher", embedding_api_base=teacher_url
    ) as g:
        _publish(g)
        theirs = _ask(g, OTHER_KEY)
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=OTHER_KEY, max_retries=0)
        raw = client.embeddings.with_raw_response.create(model="demo-teacher", input=["hello"])
        embedding = raw.headers["x-ratchet-request-id"]
        unknown = "req_" + "7" * 24

        def answers(tag: str) -> list[tuple[int, dict]]:
            out = []
            for n, rid in enumerate((theirs, embedding, unknown)):
                item = {"feedback_id": f"{tag}-{n}", "request_id": rid, "metric": "comment", "value": "hm"}
                r = _post(g, item)
                body = r.json()
                for k in ("feedback_id", "request_id", "received_at"):
                    body.pop(k, None)
                    body.get("error", {}).pop(k, None)
                out.append((r.status_code, body))
            return out

        # unsealed (this replica's ledger), then sealed (the index): the three answers are one answer
        first = answers("u")
        assert first[0] == first[1] == first[2] and first[0][0] == 202, first
        g.drain()
        sealed = answers("s")
        assert sealed[0] == sealed[1] == sealed[2] and sealed[0][0] == 202, sealed
        # once no row can still appear: the same 404 for all three, by GET and by a retry
        _age(g.engine, *(f"s-{n}" for n in range(3)))
        got = [
            httpx.get(f"{g.url}/ratchet/feedback/s-{n}", headers=AUTH, timeout=30).json() for n in range(3)
        ]
        assert {(x["status"], x["error"]["code"], x["error"]["message"]) for x in got} == {
            ("rejected", "unknown_request", got[0]["error"]["message"])
        }
        again = answers("s")
        assert again[0] == again[1] == again[2] and again[0][0] == 404, again
        assert "embeddings" not in again[0][1]["error"]["message"]


def test_resent_unknown_ids_are_settled_without_reading_the_lake(gateway, monkeypatch) -> None:
    from ratchet_core.lake import Lake

    gateway.drain()  # at least one sealed segment, so a scan would have something to read
    reads: list[str] = []
    for name in ("days", "segments", "read_table"):
        real = getattr(Lake, name)
        monkeypatch.setattr(
            Lake,
            name,
            lambda self, *a, _real=real, _name=name, **k: (reads.append(_name), _real(self, *a, **k))[1],
        )
    items = [
        {"feedback_id": f"unk-{i}", "request_id": f"req_{i:024d}", "metric": "comment", "value": "?"}
        for i in range(300)
    ]
    for _ in range(3):  # the first send, then two retries of the same pending items
        r = httpx.post(
            gateway.url + "/ratchet/feedback:batch", json={"items": items}, headers=AUTH, timeout=60
        )
        assert r.status_code == 200 and {x["http_status"] for x in r.json()["results"]} == {202}
    assert (
        httpx.get(gateway.url + "/ratchet/feedback/unk-7", headers=AUTH, timeout=30).json()["status"]
        == "pending"
    )
    assert reads == []  # one indexed lookup per batch: no listing or reading of the lake


def test_an_own_request_sealed_by_another_replica_is_found_through_the_index(tmp_path, teacher_url) -> None:
    from ratchet_core.control_db import sealed_requests, sealed_segments
    from ratchet_gateway.sealed_index import SealedIndex

    with running_gateway(tmp_path, teacher_url) as g:
        rid = _ask(g)
        g.drain()
        index = SealedIndex(str(g.settings.lake_root))
        index.engine = g.engine
        assert index.segments_of("app1", [rid]) and index.segments_of("app2", [rid]) == {}
        with g.engine.begin() as conn:  # a lake sealed before the index existed
            conn.execute(sealed_requests.delete())
            conn.execute(sealed_segments.delete())
        assert index.segments_of("app1", [rid]) == {}
        assert index.catch_up() >= 1 and index.catch_up() == 0  # every segment once
        [segment] = index.segments_of("app1", [rid]).values()
        assert segment.startswith("traffic/day=") and segment.endswith(".parquet")


def test_a_large_feedback_body_is_parsed_on_the_large_body_lane_and_capped(gateway, monkeypatch) -> None:
    import threading

    from ratchet_gateway.routers import feedback as route

    rid = _ask(gateway)
    entered, release, threads = threading.Event(), threading.Event(), []
    real = getattr(route, "_parse_items", None)

    def parse(raw, batch):
        threads.append(threading.current_thread().name)
        entered.set()
        assert release.wait(30)
        return real(raw, batch)

    monkeypatch.setattr(route, "_parse_items", parse, raising=False)
    huge = {
        "feedback_id": "big-1",
        "request_id": rid,
        "metric": "demonstration",
        "value": _huge_demonstration(3_800_000),
    }
    small = {"feedback_id": "big-2", "request_id": rid, "metric": "thumbs_up", "value": True}
    answer: list[httpx.Response] = []
    sender = threading.Thread(
        target=lambda: answer.append(
            httpx.post(
                gateway.url + "/ratchet/feedback:batch",
                json={"items": [huge, small]},
                headers=AUTH,
                timeout=60,
            )
        )
    )
    sender.start()
    try:
        assert entered.wait(30), "the large body was not handed to the large-body lane"
        # the body is being parsed, and the event loop still answers everyone else
        assert httpx.get(gateway.url + "/healthz", timeout=10).status_code == 200
    finally:
        release.set()
        sender.join(60)
    assert threads and all(t.startswith("ratchet-large") for t in threads)
    [r] = answer
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert results[0]["http_status"] == 400 and results[0]["error"]["code"] == "item_too_large"
    assert results[1]["http_status"] == 200 and results[1]["status"] == "recorded"
    # one item of that size on the single route: refused before it is read whole or parsed
    single = _post(gateway, huge)
    assert single.status_code == 413 and single.json()["error"]["code"] == "body_too_large"


def test_feedback_counts_against_the_clients_requests_per_minute(tmp_path, teacher_url) -> None:
    from ratchet_core import client_limits as cl

    with running_gateway(tmp_path, teacher_url) as g:
        with g.engine.begin() as conn:
            cl.set_limits(conn, "app1", {"rpm": 3}, (), "tests", "feedback counts as a request")
        import asyncio

        asyncio.run_coroutine_threadsafe(g.gw.limits.poll(), g._loop()).result(10)
        got = [
            _post(
                g,
                {"feedback_id": f"rpm-{i}", "request_id": f"req_{i:024d}", "metric": "comment", "value": "x"},
            )
            for i in range(5)
        ]
        assert [r.status_code for r in got] == [202, 202, 202, 429, 429]
        assert got[3].json()["error"]["code"] == "rate_limit_exceeded" and got[3].headers["retry-after"]
        batch = httpx.post(
            g.url + "/ratchet/feedback:batch",
            json={
                "items": [
                    {
                        "feedback_id": "rpm-b",
                        "request_id": "req_" + "9" * 24,
                        "metric": "comment",
                        "value": "x",
                    }
                ]
            },
            headers=AUTH,
            timeout=30,
        )
        assert batch.status_code == 429
        other = {"feedback_id": "rpm-o", "request_id": "req_" + "8" * 24, "metric": "comment", "value": "x"}
        assert _post(g, other, OTHER).status_code == 202  # another client's minute is its own


@pytest.mark.parametrize("metric", ["thumbs\u202eup", "rating\x00", "a b", "\u0645\u0642\u064a\u0627\u0633"])
def test_a_metric_name_outside_the_name_rule_is_refused_even_while_pending(gateway, metric: str) -> None:
    item = {"feedback_id": "name-1", "request_id": "req_" + "5" * 24, "metric": metric, "value": True}
    r = _post(gateway, item)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_metric", r.text
    assert fb.get(gateway.engine, "app1", "name-1") is None
