"""Evidence for a candidate in shadow/canary, as ledger rows and as release evidence reads them:
the canary's rest is shadowed by the canary version, and a request served by the previous live version and
audited is also answered by the candidate, compared with the TEACHER's audit answer; and every request the previous
live version served is mirrored: the candidate answers it and is compared with LIVE's served answer (free evidence
for the carried bound, ``ratchet_assets.release.decision``)."""

from __future__ import annotations

import hashlib

import openai
import pytest

from ratchet_assets.release.evidence import Watermark, pending_segments, read_pairs
from ratchet_core.manifest import Manifest, TaskRelease
from ratchet_core.routing import SafetyState, pairs, route, unit_hash

from .conftest import API_KEY, OTHER_KEY, STUDENT_VERSION, running_gateway, sealed_rows, two_version_student

OLD, NEW = "v1-old0001", "v2-new0002"  # previous live (wrong on every request), candidate (right)


def _in_canary(rid: str, percent: float) -> bool:
    u = int.from_bytes(hashlib.sha256(f"canary:{rid}".encode()).digest()[:4], "big") / 2**32
    return u * 100 < percent


def _ask(client, seed: int):
    from ratchet_core.workloads import get_workload

    ex = get_workload("tickets").generate(1, seed=seed)[0]
    raw = client.chat.completions.with_raw_response.create(
        model="ratchet", messages=ex.messages, extra_headers={"X-Ratchet-Task": "tickets"}
    )
    assert raw.status_code == 200
    return raw.headers


def _rows(g, rid: str) -> dict[str, list[dict]]:
    g.drain()
    out: dict[str, list[dict]] = {"request": [], "audit": [], "shadow": [], "mirror": [], "targeted": []}
    for r in sealed_rows(g.settings.lake_root):
        if r["request_id"] == rid:
            out["request" if r["kind"] == "request" else r["pair_role"]].append(r)
    return out


def _candidate_beside_live(**extra) -> dict:
    """The tickets release under test: candidate NEW in shadow, the previous live OLD serving the rest."""
    return {
        "stage": "shadow",
        "version": NEW,
        "threshold": 0.3,
        "previous_live": OLD,
        "previous_threshold": 0.0,
        **extra,
    }


def _each_tenant_asks(g, seed: int, headers: dict, metadata: dict):
    """(client id, raw response) for one tickets request from each of two tenants, each sending `headers` and
    `metadata` (what a hostile client tries)."""
    from ratchet_core.workloads import get_workload

    ex = get_workload("tickets").generate(1, seed=seed)[0]
    for key, client in ((API_KEY, "app1"), (OTHER_KEY, "app2")):
        c = openai.OpenAI(base_url=g.url + "/v1", api_key=key, max_retries=0, timeout=20)
        raw = c.chat.completions.with_raw_response.create(
            model="ratchet", messages=ex.messages, extra_headers=headers, metadata=metadata
        )
        yield client, raw


def _evidence(lake) -> list[tuple[str, str, bool | None]]:
    """(version, role, error) of every sealed pair row, as the release sensor reads them (a mirror row's third
    value is whether the candidate differs from live, ``PairRow.disagrees``; a targeted row's whether it differs
    and is wrong, ``PairRow.differs_wrong``)."""
    segs, _ = pending_segments(lake, Watermark())
    return [
        (
            p.version,
            p.role,
            p.disagrees if p.role == "mirror" else p.differs_wrong if p.role == "targeted" else p.error,
        )
        for _, rows in read_pairs(lake, segs, Watermark())
        for p in rows
    ]


def test_route_and_pairs_decide_who_answers_off_the_path():
    m = Manifest.default()
    m.flags.audit_rate = 1.0
    m.tasks["t"] = TaskRelease(
        stage="canary",
        version=NEW,
        canary_percent=50,
        threshold=0.3,
        previous_live=OLD,
        previous_threshold=0.1,
    )
    rids = [f"r{i}" for i in range(64)]
    out = next(r for r in rids if not _in_canary(r, 50))
    inside = next(r for r in rids if _in_canary(r, 50))
    r = route(m, SafetyState(), "t", out)
    assert (r.student_version, r.threshold, r.shadow_version, r.shadow_threshold) == (OLD, 0.1, NEW, 0.3)
    # audited: the candidate answers too, compared with the teacher (shadow) and with live's answer (mirror)
    assert pairs(r, "student") == pairs(r, "student").__class__(True, NEW, NEW)
    assert pairs(r, "teacher").shadow_version == NEW and not pairs(r, "teacher").audit  # cascaded: shadow
    assert pairs(r, "teacher").mirror is None  # live did not serve it: nothing to mirror
    r_in = route(m, SafetyState(), "t", inside)
    assert (r_in.student_version, r_in.shadow_version) == (NEW, None)
    assert pairs(r_in, "student").mirror is None  # the candidate served it itself
    m.flags.audit_rate = 0.0
    r = route(m, SafetyState(), "t", out)
    assert pairs(r, "student").role == "" and pairs(r, "student").shadow_version is None  # no teacher answer
    assert pairs(r, "student").mirror == NEW  # ... but live's answer: the candidate is compared with it


def test_canary_rest_is_shadowed_by_the_canary_version(tmp_path, teacher_url, student_url):
    with running_gateway(tmp_path, teacher_url, student_url) as g:
        g.publish(
            tickets={"stage": "canary", "version": STUDENT_VERSION, "threshold": 0.25, "canary_percent": 50},
            _flags={"audit_rate": 0.0},
        )
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)
        seen = {True: 0, False: 0}
        for seed in range(40, 56):
            h = _ask(client, seed)
            rid = h["x-ratchet-request-id"]
            rows = _rows(g, rid)
            (req,) = rows["request"]
            if _in_canary(rid, 50):
                assert h["x-ratchet-served-by"] == "student" and not rows["shadow"] and not rows["audit"]
                assert req["pair_role"] == ""
            else:
                assert h["x-ratchet-served-by"] == "teacher" and req["pair_role"] == "shadow"
                (pair,) = rows["shadow"]
                assert pair["version"] == STUDENT_VERSION and pair["served_by"] == "student"
                assert pair["threshold"] == 0.25 and pair["confidence"] > 0.25
                assert pair["pair_outcome"] == "agree" and pair["stage"] == "canary"
            seen[_in_canary(rid, 50)] += 1
        assert seen[True] and seen[False]
        ev = _evidence(g.settings.lake_root)
        assert len(ev) == seen[False] and all(e == (STUDENT_VERSION, "shadow", False) for e in ev)


@pytest.mark.parametrize("stage", ["shadow", "canary"])
def test_audited_previous_live_request_is_evidence_for_the_candidate(tmp_path, teacher_url, stage):
    release = {
        "stage": stage,
        "version": NEW,
        "threshold": 0.3,
        "canary_percent": 0.0,  # every request outside the canary: served by the previous live version
        "previous_live": OLD,
        "previous_threshold": 0.0,
    }
    with (
        two_version_student(good=NEW, bad=OLD) as student,
        running_gateway(tmp_path, teacher_url, student) as g,
    ):
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)
        g.publish(tickets=release, _flags={"audit_rate": 1.0})
        h = _ask(client, 7)
        assert h["x-ratchet-served-by"] == "student" and h["x-ratchet-version"] == OLD
        rows = _rows(g, h["x-ratchet-request-id"])
        (req,), (audit,), (shadow,), (mirror,) = (
            rows["request"],
            rows["audit"],
            rows["shadow"],
            rows["mirror"],
        )
        assert req["version"] == OLD and req["pair_role"] == "audit"
        assert (
            audit["version"] == OLD
            and audit["served_by"] == "teacher"
            and audit["pair_outcome"] == "disagree"
        )
        # the candidate was compared with the teacher's audit answer (it disagrees with OLD's served answer)
        assert (
            shadow["version"] == NEW
            and shadow["served_by"] == "student"
            and shadow["pair_outcome"] == "agree"
        )
        assert shadow["threshold"] == 0.3 and shadow["confidence"] > 0.3 and shadow["stage"] == stage
        # the same answer of the candidate, compared with the answer OLD served: they differ; billed once
        assert (mirror["version"], mirror["served_by"], mirror["pair_outcome"]) == (
            NEW,
            "student",
            "disagree",
        )
        assert mirror["answer"] == shadow["answer"] and mirror["threshold"] == 0.3
        assert mirror["actual_cost_usd"] == 0.0 and shadow["actual_cost_usd"] > 0.0
        assert sorted(_evidence(g.settings.lake_root)) == [
            (OLD, "audit", True),
            (NEW, "mirror", True),
            (NEW, "shadow", False),
        ]

        g.publish(tickets=release, _flags={"audit_rate": 0.0})  # not audited: no teacher answer ...
        h = _ask(client, 8)
        assert h["x-ratchet-version"] == OLD
        rows = _rows(g, h["x-ratchet-request-id"])
        assert len(rows["request"]) == 1 and not rows["audit"] and not rows["shadow"]
        assert rows["request"][0]["pair_role"] == ""
        # ... but live's answer: the candidate answers at student cost only and is compared with it
        (mirror,) = rows["mirror"]
        assert (mirror["version"], mirror["pair_outcome"]) == (NEW, "disagree")
        assert mirror["actual_cost_usd"] > 0.0 and mirror["teacher_cost_usd"] >= 0.0


def test_shadow_calls_are_capped_queued_and_beyond_the_backlog_skipped(tmp_path, teacher_url):
    """A slow candidate: at most RATCHET_SHADOW_MAX_IN_FLIGHT shadow calls reach it at once, the next ones wait
    their turn (no timeout, no error pair), and beyond the backlog a request is not shadowed (counted skipped)."""
    import threading

    from fastapi import FastAPI

    from tests.serve import serve_in_thread

    release = threading.Event()
    lock = threading.Lock()
    state = {"now": 0, "most": 0, "calls": 0}
    app = FastAPI()

    @app.post("/v1/chat/completions")
    def complete(body: dict) -> dict:  # a sync route: each call holds a worker thread until released
        with lock:
            state["now"] += 1
            state["calls"] += 1
            state["most"] = max(state["most"], state["now"])
        release.wait(30)
        with lock:
            state["now"] -= 1
        token = {"token": "billing", "logprob": -0.01, "bytes": list(b"billing"), "top_logprobs": []}
        return {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "billing"},
                    "logprobs": {"content": [token]},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        }

    with (
        serve_in_thread(app) as surl,
        running_gateway(
            tmp_path, teacher_url, surl + "/v1", shadow_max_in_flight=2, student_timeout_s=30
        ) as g,
    ):
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)
        g.publish(tickets={"stage": "shadow", "version": NEW, "threshold": 0.0})
        g.app.state.chat.pairs.backlog = 2
        # teacher-served, each to be shadowed: two calls held by the student, two waiting, two skipped
        ids = [_ask(client, seed)["x-ratchet-request-id"] for seed in range(6)]
        assert state["calls"] == 2
        release.set()
        g.drain()
        rows = [r for r in sealed_rows(g.settings.lake_root) if r["request_id"] in ids]
        metrics = httpx_get(g.url + "/metrics")
    shadows = [r for r in rows if r["kind"] == "pair" and r["pair_role"] == "shadow"]
    assert state["most"] == 2 and state["calls"] == 4  # the two waiting ran once the first two were answered
    assert len(shadows) == 4 and all(r["pair_outcome"] in ("agree", "disagree") for r in shadows)
    assert 'ratchet_pairs_total{outcome="skipped",role="shadow"} 2.0' in metrics


def httpx_get(url: str) -> str:
    import httpx

    return httpx.get(url, timeout=10).text


def test_a_client_can_neither_see_nor_steer_the_mirror_and_its_rows_are_its_own(tmp_path, teacher_url):
    """Hostile: headers and metadata that name the candidate, a pair role or "no shadow" change nothing; the
    client gets live's answer and nothing in the response names the candidate or its answer; the mirror row is
    written anyway, under the requesting client's id (per-client views, such as the receipt's own pair lines, show
    a client only its own), and another tenant's request is mirrored under its own id."""
    release = _candidate_beside_live()
    with (
        two_version_student(good=NEW, bad=OLD) as student,
        running_gateway(tmp_path, teacher_url, student) as g,
    ):
        g.publish(tickets=release, _flags={"audit_rate": 0.0})
        seen = {}
        headers = {
            "X-Ratchet-Task": "tickets",
            "X-Ratchet-Version": NEW,
            "X-Ratchet-Pair-Role": "none",
            "X-Ratchet-Shadow": "off",
            "X-Ratchet-Mirror": "off",
        }
        metadata = {"ratchet_version": NEW, "pair_role": "mirror"}
        for client, raw in _each_tenant_asks(g, 11, headers, metadata):
            assert raw.status_code == 200
            body = raw.parse()
            assert raw.headers["x-ratchet-version"] == OLD  # live served, whatever the client named
            assert all(NEW not in v for v in raw.headers.values()) and NEW not in raw.text
            rows = _rows(g, raw.headers["x-ratchet-request-id"])
            (mirror,) = rows["mirror"]  # written anyway: a client cannot turn it off
            assert (mirror["version"], mirror["client"]) == (NEW, client)
            assert mirror["answer"] != body.choices[0].message.content  # the candidate's answer stayed inside
            seen[client] = mirror["request_id"]
        assert seen["app1"] != seen["app2"]


def test_where_the_candidate_differs_from_live_the_targeted_stream_has_the_teacher_judge_it(
    tmp_path, teacher_url
):
    """The previous live version is wrong on every request and the candidate right: their answers differ, so with a
    targeted stream at 1.0 each such request is judged by the teacher (a targeted row after its mirror row: the
    teacher's answer, the candidate's confidence and threshold): a new call when the request was not audited, the
    audit's answer (billed once) when it was."""
    release = _candidate_beside_live(target_audit_rate=1.0)
    with (
        two_version_student(good=NEW, bad=OLD) as student,
        running_gateway(tmp_path, teacher_url, student) as g,
    ):
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)
        g.publish(tickets=release, _flags={"audit_rate": 0.0})
        h = _ask(client, 7)
        assert h["x-ratchet-version"] == OLD
        rows = _rows(g, h["x-ratchet-request-id"])
        assert not rows["audit"] and not rows["shadow"]
        (mirror,), (targeted,) = rows["mirror"], rows["targeted"]
        assert (
            mirror["pair_outcome"] == "disagree" and mirror["seq"] < targeted["seq"]
        )  # the mirror row first
        assert (targeted["version"], targeted["served_by"], targeted["pair_outcome"]) == (
            NEW,
            "teacher",
            "agree",
        )
        assert targeted["threshold"] == 0.3 and targeted["confidence"] > 0.3
        assert targeted["actual_cost_usd"] > 0.0  # a teacher call the evidence paid for
        # differs from live, and the teacher says it is right
        assert _evidence(g.settings.lake_root) == [(NEW, "mirror", True), (NEW, "targeted", False)]

        g.publish(tickets=release, _flags={"audit_rate": 1.0})  # audited: the audit's answer judges it
        h = _ask(client, 8)
        rows = _rows(g, h["x-ratchet-request-id"])
        (audit,), (shadow,), (targeted,) = rows["audit"], rows["shadow"], rows["targeted"]
        assert len(rows["mirror"]) == 1 and targeted["pair_outcome"] == shadow["pair_outcome"] == "agree"
        assert targeted["answer"] == audit["answer"] and targeted["actual_cost_usd"] == 0.0

        g.publish(tickets={**release, "target_audit_rate": None}, _flags={"audit_rate": 0.0})
        h = _ask(client, 9)  # no targeted stream signed: the mirror row, no teacher call
        rows = _rows(g, h["x-ratchet-request-id"])
        assert not rows["targeted"] and rows["mirror"][0]["pair_outcome"] == "disagree"


def test_a_client_can_neither_steer_nor_read_the_targeted_stream(tmp_path, teacher_url):
    """Hostile: a client with a valid key names a targeted rate of 0, "no audit" or another pair role in headers
    and metadata; the targeted row is written anyway under its own client id, nothing in the response carries the
    inclusion probability or the candidate, and another tenant's request is judged under that tenant's id."""
    release = _candidate_beside_live(target_audit_rate=0.999)
    with (
        two_version_student(good=NEW, bad=OLD) as student,
        running_gateway(tmp_path, teacher_url, student) as g,
    ):
        g.publish(tickets=release, _flags={"audit_rate": 0.0})
        seen = {}
        headers = {
            "X-Ratchet-Task": "tickets",
            "X-Ratchet-Target-Audit-Rate": "0",
            "X-Ratchet-Audit": "off",
            "X-Ratchet-Pair-Role": "mirror",
        }
        metadata = {"target_audit_rate": "0", "pair_role": "mirror", "ratchet_audit": "off"}
        for client, raw in _each_tenant_asks(g, 12, headers, metadata):
            assert raw.status_code == 200
            assert raw.headers["x-ratchet-version"] == OLD
            text = raw.text + " ".join(f"{k}: {v}" for k, v in raw.headers.items())
            assert "0.999" not in text and "target" not in text.lower() and NEW not in text
            rid = raw.headers["x-ratchet-request-id"]
            if unit_hash("audit", rid) >= 0.999:
                continue  # outside the stream by its id (one in a thousand)
            rows = _rows(g, rid)
            (targeted,) = rows["targeted"]  # written anyway: a client cannot turn it off
            assert (targeted["version"], targeted["client"]) == (NEW, client) and len(rows["mirror"]) == 1
            seen[client] = targeted["request_id"]
        assert len(seen) == 2 and seen["app1"] != seen["app2"]
