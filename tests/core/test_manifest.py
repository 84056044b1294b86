"""Signed release manifests: hash chain, forged rows ignored, serialised publishers."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
import sqlalchemy as sa

from ratchet_core import manifest as mf
from ratchet_stats.dsse import sign_statement, verify_statement
from ratchet_stats.keys import generate_private_key
from tests.evidence.manifests import engine as engine  # noqa: F401 (fixture)
from tests.evidence.manifests import insert_raw_row, write_signed_manifest
from tests.evidence.manifests import key as key  # noqa: F401 (fixture)


def _rows(engine):
    with engine.connect() as conn:
        return conn.execute(sa.select(mf.release_manifests).order_by(mf.release_manifests.c.sequence)).all()


def test_publish_builds_a_verifiable_hash_chain(engine, key):
    assert mf.latest_verified(engine, key.public_key()) == (None, 0)  # fresh DB: no table yet, no error
    mf.publish(
        engine,
        key,
        lambda m: m.tasks.update(tickets=mf.TaskRelease(stage="shadow", version="v1-a")),
        "first",
        "ops",
    )
    mf.publish(engine, key, lambda m: setattr(m.flags, "audit_rate", 0.2), "audit more", "ops")
    rows = _rows(engine)
    assert [r.sequence for r in rows] == [1, 2]
    # Independent check: the stored digest is SHA-256 of the stored envelope text, and links the chain.
    for r in rows:
        assert r.digest == hashlib.sha256(r.envelope.encode()).hexdigest()
    statement = verify_statement(json.loads(rows[1].envelope), [key.public_key()])
    assert statement["predicateType"] == mf.MANIFEST_PREDICATE
    assert statement["predicate"]["previous_digest"] == rows[0].digest
    latest, rejected = mf.latest_verified(engine, key.public_key())
    assert rejected == 0 and latest.sequence == 2
    assert latest.flags.audit_rate == 0.2 and latest.task("tickets").version == "v1-a"  # change 1 kept
    assert latest.task("never-seen").stage == "teacher"


def test_forged_unsigned_and_replayed_rows_are_ignored(engine, key):
    good = mf.publish(
        engine,
        key,
        lambda m: m.tasks.update(t=mf.TaskRelease(stage="shadow", version="v1")),
        "first release",
        "ops",
    )
    widen = {"t": {"stage": "live", "version": "evil", "canary_percent": 100}}
    # 2: signed by another key; 3: unsigned JSON; 4: tampered payload under a valid signature;
    # 5: a valid signed manifest replayed into a newer row; 6: right key, wrong predicate type.
    write_signed_manifest(engine, generate_private_key(), tasks=widen)
    insert_raw_row(engine, 3, json.dumps({"predicate": widen}))
    env = json.loads(_rows(engine)[0].envelope)
    payload = json.loads(base64.b64decode(env["payload"]))
    payload["predicate"]["tasks"]["t"]["stage"] = "live"
    env["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    insert_raw_row(engine, 4, json.dumps(env))
    insert_raw_row(engine, 5, _rows(engine)[0].envelope)
    stmt = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "x", "digest": {"sha256": "0" * 64}}],
        "predicateType": "x",
        "predicate": {},
    }
    insert_raw_row(engine, 6, json.dumps(sign_statement(stmt, key)))
    latest, rejected = mf.latest_verified(engine, key.public_key())
    assert latest == good and rejected == 5
    errors = {h["sequence"]: h.get("error", "") for h in mf.history(engine, key.public_key())}
    assert "keyid" in errors[2] and "sequence" in errors[5] and "predicate" in errors[6]
    # A publisher above forged rows keeps the chain on the last verified manifest.
    nxt = mf.publish(engine, key, lambda m: None, "after forgery", "ops")
    assert nxt.sequence == 7 and nxt.task("t").stage == "shadow"
    assert nxt.previous_digest == _rows(engine)[0].digest


def test_reason_and_values_are_checked(engine, key):
    with pytest.raises(mf.ManifestError, match="reason"):
        mf.publish(engine, key, lambda m: None, "no", "ops")
    with pytest.raises(ValueError):
        mf.publish(
            engine, key, lambda m: setattr(m.flags, "audit_rate", float("nan")) or m, "bad rate", "ops"
        )
    with pytest.raises(ValueError):
        mf.TaskRelease(stage="canary", canary_percent=150)
    assert mf.latest_verified(engine, key.public_key()) == (None, 0)


def test_serving_forces_teacher_for_pins_and_disabled_student():
    m = mf.Manifest(
        tasks={
            "a": mf.TaskRelease(stage="live", version="v1"),
            "b": mf.TaskRelease(stage="live", version="v2"),
        },
        pins=["a"],
    )
    assert m.serving("a").stage == "teacher" and m.serving("b").stage == "live"
    m.flags.student_disabled = True
    assert m.serving("b").stage == "teacher"
