"""An erasure's scope reaches rows not sealed yet: a real gateway process holding an end user's unsealed rows
applies ``erase --user`` to its own journal and DuckDB file; a segment sealed after the erasure is swept by the
night; the control DB keeps no erased text; the matcher's rules (redacted text, JSON escaping, time bound)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import openai
import pyarrow as pa
import pytest
import sqlalchemy as sa

from ratchet_assets.governance.erase import ErasureScope, erase, read_log, sweep
from ratchet_assets.night.erasures import load_erasures
from ratchet_assets.night.fixtures import request_rows, write_day
from ratchet_core import feedback
from ratchet_core.control_db import erasure_applied, make_engine
from ratchet_core.erasure_scope import ScopeMatcher
from ratchet_core.redact import redact_text
from ratchet_core.schema import LEDGER_SCHEMA
from ratchet_gateway.demo_teacher.app import create_app as teacher_app
from ratchet_gateway.ledger import Ledger
from ratchet_stats.canonical import canonical_json
from ratchet_stats.keys import generate_private_key, public_key_pem
from tests.governance.test_erase import _found
from tests.night.test_feedback_labels import _send
from tests.serve import free_port, serve_in_thread

DAY = "2026-01-01"
SERVE = """
import sys, uvicorn
from ratchet_core.settings import load_settings
from ratchet_gateway.app import create_app
from ratchet_gateway.state import GatewayOptions
app = create_app(load_settings(), GatewayOptions(replica="gw"))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", timeout_graceful_shutdown=30)
"""


def _rows(**over) -> pa.Table:
    base = request_rows(DAY, 1, seed=1, failure_share=0, student_share=0, repeat_share=0)[0]
    return pa.Table.from_pylist([dict(base, **over)], schema=LEDGER_SCHEMA)


def test_matcher_redacted_text_json_escapes_and_time_bound() -> None:
    t0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
    mail = "alice@example.com"
    msgs = canonical_json(
        [{"role": "user", "content": f'Mail {redact_text(mail)} re "Order-77" now'}]
    ).decode()
    row = _rows(
        request_id="r1", ts=t0, messages=msgs, params=canonical_json({"user": redact_text(mail)}).decode()
    )
    before = t0 + timedelta(seconds=1)
    assert ScopeMatcher.build(ts_before=before, text="ALICE@example.com").matched_request_ids(row) == {"r1"}
    assert ScopeMatcher.build(ts_before=before, text='re "order-77"').matched_request_ids(row) == {"r1"}
    assert ScopeMatcher.build(ts_before=before, users=[mail]).matched_request_ids(row) == {"r1"}
    assert ScopeMatcher.build(ts_before=before, text="order-78").matched_request_ids(row) == set()
    assert ScopeMatcher.build(ts_before=before, users=["bob"]).matched_request_ids(row) == set()
    # a request made after the erasure is new data: not in its scope
    assert ScopeMatcher.build(ts_before=t0, text="order-77").matched_request_ids(row) == set()
    stored = ScopeMatcher.build(ts_before=before, users=[mail], text="order-77").to_json()
    assert "alice" not in stored and "order" not in stored
    assert ScopeMatcher.from_json(stored).matched_request_ids(row) == {"r1"}


def test_a_segment_sealed_after_the_erasure_is_swept_by_the_night(tmp_path: Path) -> None:
    lake, art = tmp_path / "lake", tmp_path / "art"
    engine = make_engine(f"sqlite:///{(tmp_path / 'control.db').as_posix()}")
    key = generate_private_key()
    write_day(lake, DAY, 20, seed=3)
    marker = "carol-secret-note-5521"
    late = [
        dict(r, request_id=f"req-carol-{i}", messages=canonical_json([{"role": "user", "content": marker}]).decode(),
             params=canonical_json({"user": "carol"}).decode())
        for i, r in enumerate(request_rows(DAY, 3, seed=4, failure_share=0, student_share=0, repeat_share=0))
    ]  # fmt: skip
    # A replica that has not polled the erasure yet (no erasure feed) holds carol's rows unsealed.
    ledger = Ledger(tmp_path / "ledger", str(lake), segment_seconds=3600, replica_base="slow")
    ledger.open()
    try:
        for row in late:
            ledger.append_nowait(dict(row))
        done = erase(
            ErasureScope(users=("carol",)),
            lake_root=str(lake),
            artifacts_root=str(art),
            engine=engine,
            reason="GDPR art. 17",
            private_key=key,
        )
        assert done.counts["requests"] == 0  # nothing sealed matches yet
        ledger.seal_now()  # sealed after the erasure began, with carol's text
    finally:
        ledger.close()
    assert _found(tmp_path / "lake", [marker.encode()])
    _send(engine, late[0], "fb-carol", "comment", "thanks", {})  # on a request the erasure could not see yet
    swept = sweep(engine, str(lake), str(art), DAY)
    assert swept["requests"] == 3 and swept["lake_rows"] == 3 and swept["feedback_items"] == 1
    assert feedback.rows(engine) == []
    assert _found(tmp_path / "lake", [marker.encode()]) == {}
    assert {f"req-carol-{i}" for i in range(3)} <= load_erasures(
        engine
    ).request_ids  # the nights leave them out
    assert sweep(engine, str(lake), str(art), DAY) == {}  # idempotent
    log = read_log(engine, [key.public_key()])
    assert [(a["store"], a["counts"]["requests"]) for a in log[0]["applied"]] == [(f"lake:{DAY}", 3)]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # drain, flush, seal the ledger
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


@pytest.mark.slow
def test_erase_by_user_reaches_a_live_gateways_unsealed_rows(tmp_path: Path) -> None:
    home = tmp_path / "home"
    key = generate_private_key()
    (home / "keys").mkdir(parents=True)
    (home / "keys" / "signing.pub").write_text(public_key_pem(key))
    engine = make_engine(f"sqlite:///{(home / 'control.db').as_posix()}")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("RATCHET_", "DAGSTER_"))}
    alice = [f"alice-unsealed-note-{i}-qpzm" for i in range(3)]
    bob = "bob-unsealed-note-kept-xyzw"
    with serve_in_thread(teacher_app()) as teacher:
        port = free_port()
        env.update(
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            RATCHET_HOME=str(home),
            RATCHET_API_KEYS="acme:sk-acme-1234",
            RATCHET_TEACHER_API_BASE=teacher + "/v1",
            RATCHET_STUDENT_BASE_URL=f"http://127.0.0.1:{free_port()}/v1",  # no student: the teacher answers
            RATCHET_SEGMENT_SECONDS="3600",  # nothing is sealed while it runs
        )
        log = (tmp_path / "gw.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            client = openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-acme-1234", max_retries=0
            )
            deadline = time.monotonic() + 120
            while True:
                try:
                    client.models.list()
                    break
                except openai.APIConnectionError:
                    assert proc.poll() is None, (tmp_path / "gw.log").read_text()[-3000:]
                    assert time.monotonic() < deadline, "gateway not up after 120 s"
                    time.sleep(0.3)
            ids = {}
            for user, text in [*(("alice", t) for t in alice), ("bob", bob)]:
                msgs = [{"role": "user", "content": f"Please file this note: {text}"}]
                raw = client.chat.completions.with_raw_response.create(
                    model="ratchet", messages=msgs, user=user
                )
                ids[text] = raw.headers["x-ratchet-request-id"]
            for i, text in enumerate([alice[0], bob]):  # feedback on unsealed requests: this replica's own
                sent = httpx.post(
                    f"http://127.0.0.1:{port}/ratchet/feedback",
                    headers={"Authorization": "Bearer sk-acme-1234"},
                    json={
                        "feedback_id": f"fb-{i}",
                        "request_id": ids[text],
                        "metric": "comment",
                        "value": "ok",
                    },
                )
                assert sent.status_code == 200 and sent.json()["status"] == "recorded", sent.text
            assert not list((home / "lake").rglob("*.parquet"))  # every row is still the replica's alone
            # the journal, not the DuckDB file: the gateway holds that alone
            journal = (home / "ledger" / "gw-0.journal").read_bytes()
            assert all(a.encode() in journal for a in alice)
            done = erase(
                ErasureScope(users=("alice",)),
                lake_root=str(home / "lake"),
                artifacts_root=str(home / "artifacts"),
                engine=engine,
                reason="GDPR art. 17 request from alice",
                private_key=key,
            )
            assert done.counts["requests"] == 0  # the lake has none of it: the replica's poll must do it all
            deadline = time.monotonic() + 30  # the ledger polls the control DB every 5 s
            while True:
                with engine.connect() as conn:
                    applied = conn.execute(sa.select(erasure_applied)).mappings().all()
                if applied:
                    break
                assert time.monotonic() < deadline, (tmp_path / "gw.log").read_text()[-3000:]
                time.sleep(0.2)
            assert applied[0]["store"] == "replica:gw-0"
            counts = json.loads(applied[0]["counts"])
            assert counts["requests_not_sealed"] == len(alice) and counts["feedback_items"] == 1
            # the feedback on alice's scrubbed request went with it; bob's stays
            assert [r["request_id"] for r in feedback.rows(engine)] == [ids[bob]]
        finally:
            _stop(proc)
    assert list((home / "lake").rglob("*.parquet"))  # sealed at shutdown, alice's rows blanked
    assert _found(home, [a.encode() for a in alice]) == {}
    assert _found(home, [bob.encode()])  # bob's note is not in the scope
