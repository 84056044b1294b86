"""A day of Responses and Messages traffic becomes a certified student that then answers through ``/v1/responses``.

Real components end to end: the gateway in front of the demo teacher takes a day of ``tickets`` requests sent by
the real ``openai`` client (``responses.create``/``responses.stream``) and the real Anthropic SDK
(``messages.create``/``messages.stream``), plus embeddings calls; the rows are sealed into the lake; ``ratchet admin
task set`` signs the task's policy; the night's Dagster assets (traffic -> examples -> golden_split ->
training_set -> lora_adapter -> evaluation_certificate) train a real LoRA adapter on the demo base and certify it
through the real student server; a signed manifest puts the version live and the same gateway serves the task from
the student, in the Responses format. The gateway's clock is Ratchet's accelerated one, frozen on one day, so the
night's partition is that day.
"""

from __future__ import annotations

import base64
import json

import pytest

from tests.gateway.conftest import API_KEY, running_gateway, sealed_rows
from tests.night.nights import ONE_TRAINING, materialize_night, set_task_policy
from tests.serve import serve_in_thread

# one real training and ~100 golden answers from the demo base: ~2-5 min on the shared 2 cores
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

DAY = "2026-03-05"
REQUESTS = 320  # tickets requests, half through /v1/responses, half through /v1/messages
TASK = {"X-Ratchet-Task": "tickets"}


def _send_day(g, examples) -> None:
    """The day's traffic, through the real clients (streamed and not), all answered by the teacher."""
    import anthropic
    import openai

    oa = openai.OpenAI(
        base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60, default_headers=TASK
    )
    an = anthropic.Anthropic(base_url=g.url, api_key=API_KEY, max_retries=0, timeout=60, default_headers=TASK)
    for i, ex in enumerate(examples):
        system, user = ex.messages[0]["content"], ex.messages[1]["content"]
        if i % 4 == 0:
            oa.responses.create(model="ratchet", instructions=system, input=user)
        elif i % 4 == 1:
            with oa.responses.stream(model="ratchet", instructions=system, input=user) as s:
                s.get_final_response()
        elif i % 4 == 2:
            an.messages.create(
                model="ratchet", max_tokens=32, system=system, messages=[{"role": "user", "content": user}]
            )
        else:
            with an.messages.stream(
                model="ratchet", max_tokens=32, system=system, messages=[{"role": "user", "content": user}]
            ) as s:
                s.get_final_message()
    for ex in examples[:5]:  # logged and priced, never distilled
        oa.embeddings.create(model="demo-teacher", input=ex.messages[1]["content"])


def test_a_day_of_responses_and_messages_traffic_certifies_and_serves_from_the_student(tmp_path, monkeypatch):
    import openai

    from ratchet_core.student_model import ensure_demo_base
    from ratchet_core.workloads import compare, get_workload, solve
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig
    from ratchet_gateway.demo_teacher.app import create_app as demo_teacher
    from ratchet_gateway.student_server.app import create_app
    from ratchet_stats.keys import public_key_pem, save_private_key

    home = tmp_path / "home"
    # Ratchet's accelerated clock, frozen on DAY (a day lasts ~3 years): the rows' day is the night's partition
    monkeypatch.setenv("RATCHET_HOME", str(home))
    monkeypatch.setenv("RATCHET_DAY_SECONDS", "1e8")
    monkeypatch.setenv("RATCHET_CLOCK_START", DAY)
    base = ensure_demo_base(home / "models" / "demo-base")
    day_examples = get_workload("tickets").generate(REQUESTS, seed=11)
    with (
        serve_in_thread(demo_teacher(DemoTeacherConfig(model="demo-teacher"))) as teacher,
        serve_in_thread(create_app(base)) as student,
        running_gateway(
            tmp_path,
            f"{teacher}/v1",
            f"{student}/v1",
            day_seconds=1e8,
            clock_start=DAY,
            embedding_model="openai/demo-teacher",
            embedding_api_base=f"{teacher}/v1",
            student_timeout_s=60,
        ) as g,
    ):
        save_private_key(g.private_key, home / "keys" / "signing.key")
        (home / "keys" / "signing.pub").write_text(public_key_pem(g.private_key.public_key()))
        _send_day(g, day_examples)
        g.drain()
        rows = [r for r in sealed_rows(g.settings.lake_root) if r["kind"] == "request"]
        assert {r["day"] for r in rows} == {DAY}
        by_api = {api: sum(r["api"] == api for r in rows) for api in ("responses", "messages", "embeddings")}
        assert by_api == {"responses": REQUESTS // 2, "messages": REQUESTS // 2, "embeddings": 5}
        assert all(r["served_by"] == "teacher" and r["status_code"] == 200 for r in rows)

        set_task_policy(
            home,
            "tickets",
            ["--target", "0.6", "--delta", "0.1", "--golden-share", "0.35", "--reason", "agents' traffic"],
        )
        # the night's learner without refit's second training (ONE_TRAINING): this test is about the APIs
        result = materialize_night(home, DAY, base, student, training=ONE_TRAINING)
        meta = {
            e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()
        }
        assert "evaluation_certificate" in meta, [e.message for e in result.all_events if e.is_failure]
        # every example came from a Responses or Messages row; the embeddings rows were never candidates
        # the part of the example key that varies here: one example per distinct prompt
        prompts = {r["messages"] for r in rows if r["api"] != "embeddings"}
        assert meta["examples"]["dagster/row_count"] == len(prompts)
        [cert_file] = (home / "artifacts" / "certificates").glob("*.dsse.json")
        predicate = json.loads(base64.b64decode(json.loads(cert_file.read_text())["payload"]))["predicate"]
        section = predicate["tasks"]["tickets"]
        assert predicate["certified_tasks"] == ["tickets"] and section["lower_bound"] >= 0.6, section
        version = predicate["version"]
        print(f"tickets from Responses/Messages traffic: n={section['n']} lower={section['lower_bound']:.3f}")

        # the certified version goes live at its calibrated threshold; the same gateway now serves the task from
        # the student, as Responses
        threshold = (section.get("ltt") or {}).get("threshold") or 0.0
        g.publish(tickets={"stage": "live", "version": version, "threshold": threshold})
        oa = openai.OpenAI(
            base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120, default_headers=TASK
        )
        fresh = get_workload("tickets").generate(4, seed=99)
        served = []
        for ex in fresh:
            system, user = ex.messages[0]["content"], ex.messages[1]["content"]
            raw = oa.responses.with_raw_response.create(model="ratchet", instructions=system, input=user)
            answer = raw.parse()
            assert raw.headers["x-ratchet-served-by"] == "student", raw.headers
            assert raw.headers["x-ratchet-version"] == version
            assert answer.status == "completed" and answer.output[0].type == "message"
            label = {"role": "assistant", "content": answer.output_text}
            served.append(compare("tickets", solve("tickets", ex.messages), label))
        with oa.responses.stream(model="ratchet", instructions=system, input=user) as s:
            streamed = s.get_final_response()
        assert streamed.output_text == answer.output_text
        assert sum(served) >= 3, served
        g.drain()
        student_rows = [r for r in sealed_rows(g.settings.lake_root) if r["served_by"] == "student"]
        assert len(student_rows) == 5 and {(r["api"], r["version"]) for r in student_rows} == {
            ("responses", version)
        }
