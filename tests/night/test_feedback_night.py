"""People's labels teach the night, end to end (issue "feedback teaches the night", must show).

Real components: a teacher on loopback that is wrong on one kind of request (the demo teacher, but every `billing`
ticket answered `account`), the gateway with the real openai client, the application's feedback through
``POST /ratchet/feedback:batch`` (a demonstration of the right label for three in four of the teacher's wrong
answers, thumbs down for the rest), the sealed lake, then the night's Dagster assets with a real (tiny) LoRA
training on the demo base (the night's learner without refit: ``ONE_TRAINING``) and the real student server. The
next night's adapter answers held-out billing tickets with the people's label, not the teacher's; the certificate
(v2) states both bounds, teacher agreement and people's labels; the training set's commitment and the BOM record
every row's label source.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.night.nights import ONE_TRAINING, materialize_night, set_task_policy

pytestmark = (
    pytest.mark.slow
)  # one real training and ~130 golden answers: a few minutes on the shared 2 cores

DAY = "2026-03-10"  # the gateway's clock (RATCHET_DAY_SECONDS): a day the night's partitions hold
KEY = "sk-app-0123456789abcdef"
N = 360


def wrong_on_billing(app):
    """The demo teacher, except that it answers `account` wherever `billing` is right (the same byte length)."""

    async def teacher(scope, receive, send):
        async def rewrite(message):
            if message["type"] == "http.response.body" and message.get("body"):
                message = {**message, "body": message["body"].replace(b'"billing"', b'"account"')}
            await send(message)

        await app(scope, receive, rewrite if scope["type"] == "http" else send)

    return teacher


def _policy(home: Path) -> None:
    set_task_policy(
        home, "tickets",
        ["--target", "0.7", "--delta", "0.1", "--golden-share", "0.35", "--metric", "thumbs_up:boolean",
         "--bad-when", "thumbs_up=false", "--reason", "the app rates answers"],
    )  # fmt: skip


def _serve_traffic(home: Path, key) -> dict:
    """Every request through the gateway; the application's feedback; the lake sealed. Returns what was sent."""
    from ratchet_core.settings import Settings
    from ratchet_core.workloads import get_workload
    from ratchet_gateway.app import GatewayOptions, create_app
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig
    from ratchet_gateway.demo_teacher.app import create_app as demo_app
    from tests.serve import serve_in_thread

    sent: dict = {"billing": [], "other": []}
    with serve_in_thread(wrong_on_billing(demo_app(DemoTeacherConfig(model="demo-teacher")))) as teacher:
        settings = Settings(
            home=home, api_keys=f"app:{KEY}", teacher_model="openai/demo-teacher", teacher_api_base=teacher + "/v1",
            teacher_api_key="sk-teacher", segment_seconds=3600, manifest_poll_seconds=0.2, day_seconds=1e7,
        )  # fmt: skip
        app = create_app(settings, GatewayOptions(replica="gw", public_keys=[key.public_key()]))
        with serve_in_thread(app) as url:
            gw = app.state.gateway
            deadline = time.monotonic() + 20
            while "tickets" not in gw.manifest.policies and time.monotonic() < deadline:
                time.sleep(0.1)  # the gateway follows the signed policy on its next poll
            assert "tickets" in gw.manifest.policies
            client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
            for ex in get_workload("tickets").generate(N, seed=21):
                raw = client.chat.completions.with_raw_response.create(
                    model="ratchet",
                    messages=ex.messages,
                    extra_body={"metadata": {"ratchet_task": "tickets"}},
                )
                answer = raw.parse().choices[0].message.content
                truth = ex.expected["content"]
                assert (answer == "account") if truth == "billing" else (answer == truth)  # wrong on one kind
                kind = "billing" if truth == "billing" else "other"
                sent[kind].append((raw.headers["x-ratchet-request-id"], ex))
            items = []
            for i, (rid, _) in enumerate(sent["billing"]):
                if i % 4 == 3:
                    items.append(
                        {"feedback_id": f"f{i}", "request_id": rid, "metric": "thumbs_up", "value": False}
                    )
                else:
                    items.append(
                        {
                            "feedback_id": f"f{i}",
                            "request_id": rid,
                            "metric": "demonstration",
                            "value": "billing",
                        }
                    )
            items += [
                {"feedback_id": f"g{i}", "request_id": rid, "metric": "thumbs_up", "value": True}
                for i, (rid, _) in enumerate(sent["other"][:20])
            ]
            r = httpx.post(
                url + "/ratchet/feedback:batch", json={"items": items}, headers={"Authorization": f"Bearer {KEY}"},
                timeout=60,
            )  # fmt: skip
            assert r.status_code == 200 and {x["status"] for x in r.json()["results"]} == {"recorded"}, r.text
            gw.ledger.seal_now()
    sent["feedback_items"] = len(items)
    return sent


def _night(home: Path):
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_gateway.student_server.app import create_app
    from tests.serve import serve_in_thread

    base = ensure_demo_base(home / "models" / "demo-base")
    student = serve_in_thread(create_app(base))
    url = student.__enter__()
    # the prompt-hash validation split: this night has ~200 training rows, and holding a tenth of them out by
    # near-duplicate group (the default) left the adapter at 72/96 golden rows, short of certifying, which is the
    # learner's business (tests/night/test_validation_split.py), not feedback's
    # and one training (ONE_TRAINING: refit's second run is the learner's, certified in test_night_e2e.py)
    training = {**ONE_TRAINING, "validation_groups": "prompt"}
    result = materialize_night(home, DAY, base, url, training=training, bom=True)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    return student, url


def test_demonstrations_teach_the_night_and_the_certificate_states_both_bounds(tmp_path, monkeypatch) -> None:
    from ratchet_core.layout import ArtifactLayout
    from ratchet_core.workloads import get_workload
    from ratchet_stats import certificate as C
    from ratchet_stats.bom_format import P_LABELS, components_by_ref, properties, verify_bom
    from ratchet_stats.keys import generate_private_key, public_key_pem, save_private_key

    home = tmp_path / "home"
    monkeypatch.setenv("RATCHET_HOME", str(home))
    monkeypatch.setenv("RATCHET_DAY_SECONDS", "1e7")
    monkeypatch.setenv("RATCHET_CLOCK_START", DAY)
    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    (home / "keys" / "signing.pub").write_text(public_key_pem(key.public_key()))
    _policy(home)
    sent = _serve_traffic(home, key)
    assert len(sent["billing"]) >= 40  # a share of the task: ~1 in 6 tickets

    student, url = _night(home)
    try:
        layout = ArtifactLayout(home / "artifacts")
        # the training set: the teacher's wrong labels never reach it (replaced by people's, or left out)
        train = json.loads(layout.train_commitment(DAY).read_text())
        assert train["labels"]["counts"]["people"] > 0 and train["feedback"]["bad_left_out"] > 0
        assert train["feedback"]["items"] == sent["feedback_items"]
        from ratchet_core.workloads import solve

        rows = [json.loads(line)["messages"] for line in layout.train_jsonl(DAY).read_text().splitlines()]
        billing = [m[-1]["content"] for m in rows if solve("tickets", m[:-1])["content"] == "billing"]
        assert billing and set(billing) == {"billing"}  # never the teacher's `account`
        # the certificate: v2, main bound against the best labels, and both bounds stated
        [cert_file] = layout.certificate_files()
        statement = C.verify_certificate(cert_file.read_bytes(), [key.public_key()])
        predicate = statement["predicate"]
        assert statement["predicateType"] == C.v2.PREDICATE_TYPE and C.check_certificate(predicate) == []
        section = predicate["tasks"]["tickets"]
        people, teacher = section["people"], section["teacher_agreement"]
        print(
            f"tickets: {section['correct']}/{section['n']} (bound {section['lower_bound']:.3f}); people's labels "
            f"{people['correct']}/{people['n']} (bound {people['lower_bound']}); teacher agreement "
            f"{teacher['agree']}/{teacher['n']} (bound {teacher['lower_bound']:.3f})"
        )
        assert people["n"] >= people["min_rows"] and people["lower_bound"] is not None
        # it answers as people said, not as the teacher did: scored against the best labels (people's where they
        # gave one) it is right more often than it agrees with the teacher's answers, and on the rows people
        # labelled it gives their label more often than not (the held-out tickets below are the sharper check)
        assert section["precision"] > teacher["rate"] and people["precision"] > 0.5
        assert section["certified"]
        # the BOM records who labelled the rows
        version = predicate["version"]
        report = verify_bom(layout.bom(version).read_bytes(), [key.public_key()])
        train_props = properties(components_by_ref(report.bom)["data:train"])
        assert int(train_props[f"{P_LABELS}people"]) == train["labels"]["counts"]["people"]
        # held-out billing tickets (never trained on, never golden): the adapter gives the people's answer
        seen = {json.dumps(ex.messages) for kind in ("billing", "other") for _, ex in sent[kind]}
        held = [
            ex for ex in get_workload("tickets").generate(400, seed=99)
            if ex.expected["content"] == "billing" and json.dumps(ex.messages) not in seen
        ][:30]  # fmt: skip
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        said = [
            (client.chat.completions.create(model=version, messages=ex.messages, temperature=0, max_tokens=8)
             .choices[0].message.content or "").strip()
            for ex in held
        ]  # fmt: skip
        print(
            f"held-out billing tickets: {said.count('billing')}/{len(said)} billing, {said.count('account')} account"
        )
        # people's label, hardly ever the teacher's: the rest are the adapter's general errors (~7-10% on golden
        # here), which move with the last bits of the weights from machine to machine, so the bounds leave them room
        billing, account = said.count("billing"), said.count("account")
        assert (
            len(held) >= 20
            and billing >= 0.7 * len(said)
            and account <= 0.1 * len(said)
            and billing >= 5 * account
        )
    finally:
        student.__exit__(None, None, None)
    # the certificate's predicate is what `ratchet verify certificate` recomputes
    payload = json.loads(base64.b64decode(json.loads(cert_file.read_text())["payload"]))
    assert payload["predicateType"] == C.v2.PREDICATE_TYPE
