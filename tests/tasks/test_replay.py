"""`ratchet replay` on a home the gateway really served: the real thresholds reproduce the served share request by
request, then a what-if at another threshold and audit rate (real gateway, real openai client, the demo teacher as
teacher and as a stand-in student with logprobs, signed manifest, sealed lake)."""

from __future__ import annotations

import json

import openai
from click.testing import CliRunner

from ratchet_assets.replay import ReplayScenario, load_rows, replay
from ratchet_core.routing import unit_hash
from tests.gateway.conftest import API_KEY, STUDENT_VERSION, running_gateway, sealed_rows
from tests.gateway.conftest import student_url as student_url  # noqa: F401 (fixture)
from tests.gateway.conftest import teacher_url as teacher_url  # noqa: F401 (fixture)

THRESHOLD = 0.93


def test_replay_reproduces_the_served_share_then_answers_a_what_if(
    tmp_path, teacher_url, student_url, monkeypatch
):
    from ratchet_core.workloads import get_workload

    with running_gateway(tmp_path, teacher_url, student_url) as g:
        g.publish(
            tickets={"stage": "live", "version": STUDENT_VERSION, "threshold": THRESHOLD},
            _flags={"audit_rate": 0.25},
        )
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0)
        for ex in get_workload("tickets").generate(80, seed=11):
            client.chat.completions.create(
                model="ratchet", messages=ex.messages, extra_headers={"X-Ratchet-Task": "tickets"}
            )
        g.drain()
        lake = g.settings.lake_root
        # the application's demonstrations on student answers: the right label for three, another for two
        student_rows = [
            r for r in sealed_rows(lake) if r["kind"] == "request" and r["served_by"] == "student"
        ]
        import httpx

        for i, r in enumerate(student_rows[:5]):
            label = r["answer"] if i < 3 else ("billing" if r["answer"] != "billing" else "shipping")
            item = {
                "feedback_id": f"fb-{i}",
                "request_id": r["request_id"],
                "metric": "demonstration",
                "value": label,
            }
            posted = httpx.post(
                g.url + "/ratchet/feedback",
                json=item,
                headers={"Authorization": f"Bearer {API_KEY}"},
                timeout=30,
            )
            assert posted.status_code == 200, posted.text
    rows = sealed_rows(lake)
    requests = [r for r in rows if r["kind"] == "request" and r["task"] == "tickets"]
    served = {r["request_id"] for r in requests if r["served_by"] == "student"}
    assert 0 < len(served) < len(requests)  # the threshold cascaded some answers to the teacher
    day = requests[0]["day"]

    result = replay(load_rows(lake, [day], "tickets"), "tickets", [day])
    assert result.reproduced and result.mismatches == []
    assert result.replayed.student_served == result.actual.student_served == len(served)
    assert result.answerable == len(requests) and result.unanswerable == 0
    assert abs(result.replayed.cost_usd - result.actual.cost_usd) < 1e-9

    # what-if: a looser threshold serves every answer whose stored confidence reaches it; audits at 0.5 exactly
    loose = replay(
        load_rows(lake, [day], "tickets"), "tickets", [day], ReplayScenario(threshold=0.8, audit_rate=0.5)
    )
    want = {r["request_id"] for r in requests if r["confidence"] >= 0.8}
    assert loose.what_if.student_served == len(want) > len(served)
    assert loose.what_if.audits == sum(unit_hash("audit", rid) < 0.5 for rid in want)
    assert loose.what_if.cost_usd < result.actual.cost_usd  # more answers from the cheaper student

    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    from ratchet_assets.replay.cli import replay_cmd

    out = CliRunner().invoke(
        replay_cmd, ["--task", "tickets", "--from", day, "--lake", str(lake), "--threshold", "0.8", "--json"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["reproduced"] and data["actual"]["student_served"] == len(served)
    # the student's agreement with the application's feedback: 3 of the 5 demonstrations agree with its answer
    assert (data["actual"]["student_feedback"], data["actual"]["student_feedback_bad"]) == (5, 2)
    assert data["actual"]["student_feedback_agreement"] == 0.6
    assert data["what_if"]["student_served"] == len(want)
    text = CliRunner().invoke(
        replay_cmd, ["--task", "tickets", "--from", day, "--lake", str(lake), "--audit-rate", "0.1"]
    )
    assert text.exit_code == 0 and "reproduced" in text.output and "never answered 0" in text.output
    assert "feedback: the student's answers 3 of 5 good (60.0%)" in text.output
