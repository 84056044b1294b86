"""The control DB's contract, on SQLite (WAL) and on a real PostgreSQL server alike.

Concurrent publishers keep one linear, signed manifest chain with no lost change; eight concurrent `begin`s of
one effect give exactly one `execute`; a lapsed lease turns into `indeterminate`; the versions registry and the
audit log read back what was written, atomically with the manifest that caused it.
"""

from __future__ import annotations

import multiprocessing as mp
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from ratchet_assets.effects import EffectLedger, StaleToken
from ratchet_assets.release import registry
from ratchet_core import manifest as mf
from ratchet_core.control_db import ensure_schema, make_engine
from ratchet_stats.keys import generate_private_key, load_private_key_file, save_private_key

PUBLISHERS, PUBLISHES_EACH = 4, 4


def _create_schema(url: str) -> None:
    """What a deployment does once before its processes start (not make_engine: forked children must not
    share its pool)."""
    engine = sa.create_engine(url)
    ensure_schema(engine)
    EffectLedger(engine)
    engine.dispose()


def _publish_pins(url: str, key_file: str, who: int, barrier, out) -> None:
    from ratchet_assets.admin.cli import admin

    barrier.wait()
    codes = []
    for j in range(PUBLISHES_EACH):
        result = CliRunner().invoke(
            admin,
            ["pin", f"task-{who}-{j}", "--reason", f"publisher {who} change {j}", "--actor", f"p{who}"]
            + ["--signing-key-file", key_file, "--control-db", url, "--json"],
        )
        codes.append((result.exit_code, result.output[-300:]))
    out.put(codes)


def test_concurrent_publishers_keep_one_linear_chain(control_db_url: str, tmp_path: Path) -> None:
    key_file = tmp_path / "signing.key"
    save_private_key(generate_private_key(), key_file)
    _create_schema(control_db_url)
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(PUBLISHERS), ctx.Queue()
    procs = [
        ctx.Process(target=_publish_pins, args=(control_db_url, str(key_file), i, barrier, out))
        for i in range(PUBLISHERS)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    failures = [r for codes in results for r in codes if r[0] != 0]
    assert failures == []

    engine = make_engine(control_db_url)
    public = load_private_key_file(key_file).public_key()
    chain = mf.history(engine, public)
    total = PUBLISHERS * PUBLISHES_EACH
    assert [e["sequence"] for e in chain] == list(range(1, total + 1))
    assert all(e["verified"] for e in chain)
    previous = ""
    for e in chain:  # each manifest names the digest of the one before it: one chain, no fork
        assert e["manifest"]["previous_digest"] == previous
        previous = e["digest"]
    latest, rejected = mf.latest_verified(engine, public)
    every_pin = {f"task-{i}-{j}" for i in range(PUBLISHERS) for j in range(PUBLISHES_EACH)}
    assert rejected == 0 and latest.sequence == total and set(latest.pins) == every_pin  # no lost update

    audit = [r for r in registry.read_audit_log(engine) if r["action"] == "pin"]
    assert sorted(r["manifest_sequence"] for r in audit) == list(range(1, total + 1))
    assert {r["target"] for r in audit} == every_pin


def _begin_in_child(url: str, barrier, out) -> None:
    ledger = EffectLedger(make_engine(url), policies={"training.launch": "block"})
    barrier.wait()
    out.put(ledger.begin("training.launch", "train:root-abc", "fp-1").outcome)


def test_eight_concurrent_begins_give_one_execute(control_db_url: str) -> None:
    _create_schema(control_db_url)
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_begin_in_child, args=(control_db_url, barrier, out)) for _ in range(8)]
    for p in procs:
        p.start()
    outcomes = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert outcomes == ["execute"] + ["in_flight"] * 7
    record = EffectLedger(make_engine(control_db_url)).lookup("training.launch", "train:root-abc")
    assert (record.status, record.attempts) == ("in_flight", 1)


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t


def test_lapsed_leases_become_indeterminate_then_follow_policy(control_db_url: str) -> None:
    clock = Clock()
    ledger = EffectLedger(make_engine(control_db_url), policies={"b": "block", "r": "retry"}, clock=clock)
    holders = {t: ledger.begin(t, "k", "fp", lease_seconds=60) for t in ("b", "r")}
    assert ledger.begin("b", "k", "fp").outcome == "in_flight"  # lease still valid
    clock.t += timedelta(seconds=61)  # both holders vanished without a report
    assert {r.effect_type for r in ledger.indeterminate()} == {"b", "r"}

    blocked = ledger.begin("b", "k", "fp")
    assert blocked.outcome == "blocked" and ledger.lookup("b", "k").status == "indeterminate"
    assert ledger.begin("b", "k", "other-payload").outcome == "denied"
    retried = ledger.begin("r", "k", "fp")
    assert (retried.outcome, retried.attempts) == ("execute", 2)
    with pytest.raises(StaleToken):
        ledger.report(holders["r"].token, {"late": True})
    ledger.report(retried.token, {"ok": True})
    assert ledger.begin("r", "k", "fp").result == {"ok": True}
    ledger.resolve("b", "k", "done", reason="operator saw the training job finish", result={"job": "j1"})
    assert ledger.begin("b", "k", "fp").outcome == "duplicate"
    assert ledger.indeterminate() == []


def test_registry_and_audit_log_commit_with_their_manifest(control_db_url: str) -> None:
    engine = make_engine(control_db_url)
    key = generate_private_key()
    ensure_schema(engine)

    with engine.begin() as conn:
        new = mf.publish_in(
            conn,
            key,
            lambda m: m.tasks.update(tickets=mf.TaskRelease(stage="canary", version="v7", canary_percent=5)),
            "certified at 0.97 on 400 golden rows",
            "sensor:release",
        )
        registry.set_status(conn, "v7", "tickets", "canary", "canary", "canary by sensor")
        registry.append_audit(
            conn, "sensor", "promote", "v7/tickets", "certified", {"to": "canary-5"}, new.sequence
        )

    def failing(m: mf.Manifest) -> None:
        m.pins.append("tickets")
        raise RuntimeError("change refused half-way")

    with pytest.raises(RuntimeError), engine.begin() as conn:  # nothing of a failed change is written
        mf.publish_in(conn, key, failing, "pin while broken", "ops")
        registry.append_audit(conn, "ops", "pin", "tickets", "never stored")

    with engine.connect() as conn:
        row = registry.get_version(conn, "v7", "tickets")
    assert (row["status"], row["stage"]) == ("canary", "canary")
    assert [r["version"] for r in registry.list_versions(engine, status="canary")] == ["v7"]
    assert registry.list_versions(engine, status="live") == []
    log = registry.read_audit_log(engine)
    assert [(r["action"], r["manifest_sequence"], r["details"]) for r in log] == [
        ("promote", 1, {"to": "canary-5"})
    ]
    latest, _ = mf.latest_verified(engine, key.public_key())
    assert latest.sequence == 1 and latest.pins == [] and latest.task("tickets").canary_percent == 5

    assert registry.record_failed_night(engine, "run-1", "night", "2026-01-02", "boom") is True
    assert registry.record_failed_night(engine, "run-1", "night", "2026-01-02", "boom") is False


def _feedback_in_child(url: str, value: float, barrier, out) -> None:
    from ratchet_core import feedback as fb

    engine = sa.create_engine(url)
    row = {
        "client": "app", "feedback_id": "same-id", "target": "request", "request_id": "req_1", "metric": "rating",
        "kind": "float", "value": value, "fingerprint": f"fp-{value}", "state": "recorded",
        "received_at": datetime.now(UTC).isoformat(),
    }  # fmt: skip
    barrier.wait()
    try:
        stored, new = fb.take(engine, row)
        out.put(("new" if new else "again", stored["value"]))
    except fb.FeedbackError as exc:
        out.put((exc.code, value))
    engine.dispose()


def test_one_feedback_id_taken_by_eight_replicas_at_once_is_stored_once(control_db_url: str) -> None:
    """A retry lands on several replicas at once: one row is stored, the same item is answered as stored, another
    item under the same id is refused (409)."""
    from ratchet_core import feedback as fb

    _create_schema(control_db_url)
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(8), ctx.Queue()
    values = [4.0] * 6 + [1.0] * 2
    procs = [ctx.Process(target=_feedback_in_child, args=(control_db_url, v, barrier, out)) for v in values]
    for p in procs:
        p.start()
    outcomes = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    [stored] = fb.rows(make_engine(control_db_url))
    kinds = sorted(k for k, _ in outcomes)
    assert kinds.count("new") == 1 and all(v == stored["value"] for k, v in outcomes if k in ("new", "again"))
    assert kinds.count("feedback_id_reused") == sum(v != stored["value"] for v in values)
