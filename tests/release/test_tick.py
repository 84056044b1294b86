"""release_tick end to end on a real control DB, real Parquet segments and real signed certificates."""

from __future__ import annotations

import json
import random

import sqlalchemy as sa

from ratchet_assets.effects import EffectLedger
from ratchet_assets.release import registry
from ratchet_assets.release.control import EFFECT_TYPE, release_tick
from ratchet_core import manifest as mf

from .conftest import write_certificate, write_pairs


def _tick(engine, key, tmp_path, state):
    return release_tick(engine, key, tmp_path / "lake", tmp_path / "artifacts", state)


def _status(engine, version, task="tickets"):
    return {(r["version"], r["task"]): r["status"] for r in registry.list_versions(engine)}[(version, task)]


def test_certificate_admits_to_shadow_then_audits_walk_to_live(engine, key, tmp_path):
    write_certificate(tmp_path / "artifacts", key, "v1-aaa", "tickets", correct=300, n=300)
    write_certificate(tmp_path / "artifacts", key, "v0-bad", "extract", correct=150, n=300)
    r = _tick(engine, key, tmp_path, None)
    assert _status(engine, "v1-aaa") == "shadow" and _status(engine, "v0-bad", "extract") == "rejected"
    m, _ = mf.latest_verified(engine, key.public_key())
    assert m.task("tickets").stage == "shadow" and m.task("extract").stage == "teacher"

    # Too few audits: hold, with a reason; the cursor keeps the evidence.
    write_pairs(tmp_path / "lake", "2026-01-02", 1, "v1-aaa", "tickets", [False] * 30)
    r = _tick(engine, key, tmp_path, r.state)
    assert not r.acted and "30 audits" in r.summary() and "needed" in r.summary()
    assert r.state["tracks"]["v1-aaa|tickets"]["step"] == 0

    # Plenty of agreeing audits in one segment: one step per tick, the rest of the segment waits.
    write_pairs(tmp_path / "lake", "2026-01-02", 2, "v1-aaa", "tickets", [False] * 600)
    stages = []
    for _ in range(6):
        r = _tick(engine, key, tmp_path, r.state)
        m, _ = mf.latest_verified(engine, key.public_key())
        stages.append((m.task("tickets").stage, m.task("tickets").canary_percent))
    assert stages[:4] == [("canary", 5.0), ("canary", 25.0), ("canary", 50.0), ("live", 100.0)]
    assert stages[4:] == [("live", 100.0)] * 2
    assert _status(engine, "v1-aaa") == "live"
    # Every decision went through the effect ledger once and is in the audit log with its manifest.
    done = EffectLedger(engine).list_effects(effect_type=EFFECT_TYPE, status="done")
    assert len(done) == 4
    log = registry.read_audit_log(engine)
    assert [e["action"] for e in log if e["action"] in ("promote", "admit")].count("promote") == 4
    with engine.connect() as conn:
        seqs = [r[0] for r in conn.execute(sa.select(mf.release_manifests.c.sequence).order_by("sequence"))]
    assert seqs == list(range(1, 6))


def test_corrupted_successor_is_rolled_back_to_previous_live(engine, key, tmp_path):
    mf.publish(
        engine,
        key,
        lambda m: m.tasks.update(tickets=mf.TaskRelease(stage="live", version="v1-good", threshold=0.4)),
        "v1 is live",
        "ops",
    )
    write_certificate(tmp_path / "artifacts", key, "v2-bad", "tickets", correct=300, n=300)
    r = _tick(engine, key, tmp_path, None)
    m, _ = mf.latest_verified(engine, key.public_key())
    assert (m.task("tickets").stage, m.task("tickets").previous_live) == ("shadow", "v1-good")
    rng = random.Random(7)
    write_pairs(
        tmp_path / "lake", "2026-01-03", 1, "v2-bad", "tickets", [rng.random() < 0.3 for _ in range(200)]
    )
    r = _tick(engine, key, tmp_path, r.state)
    m, _ = mf.latest_verified(engine, key.public_key())
    assert m.task("tickets") == mf.TaskRelease(
        stage="live", version="v1-good", canary_percent=100, threshold=0.4
    )
    assert _status(engine, "v2-bad") == "rolled_back"
    assert "rolling back" in r.summary()
    assert r.state["tracks"] == {} or "v2-bad|tickets" not in r.state["tracks"]


def test_frozen_releases_hold_promotion(engine, key, tmp_path):
    mf.publish(
        engine,
        key,
        lambda m: (
            m.tasks.update(t=mf.TaskRelease(stage="shadow", version="v1")),
            setattr(m.flags, "releases_frozen", True),
        ),
        "frozen for the holidays",
        "ops",
    )
    write_pairs(tmp_path / "lake", "2026-01-02", 1, "v1", "t", [False] * 200)
    r = _tick(engine, key, tmp_path, None)
    assert not r.acted and "frozen" in r.summary()
    mf.publish(engine, key, lambda m: setattr(m.flags, "releases_frozen", False), "thawed", "ops")
    r = _tick(engine, key, tmp_path, r.state)
    m, _ = mf.latest_verified(engine, key.public_key())
    assert m.task("t").stage == "canary" and m.task("t").canary_percent == 5


def test_lost_cursor_neither_republishes_nor_reuses_evidence(engine, key, tmp_path):
    """The sensor died after publishing, before Dagster stored its cursor: the next tick resumes from the state
    committed with the manifest, so the same 200 audits do not also pay for the next stage."""
    mf.publish(
        engine, key, lambda m: m.tasks.update(t=mf.TaskRelease(stage="shadow", version="v1")), "start", "ops"
    )
    write_pairs(tmp_path / "lake", "2026-01-02", 1, "v1", "t", [False] * 200)
    first = _tick(engine, key, tmp_path, None)
    assert len(first.published) == 1
    again = _tick(engine, key, tmp_path, None)  # the old (empty) cursor
    assert again.published == [] and again.state["generation"] == first.state["generation"] == 1
    used = next(iter(first.state["watermark"]["partial"].values()))
    assert 0 < used < 200
    promote = json.loads(again.state["tracks"]["v1|t"]["promote"])
    assert promote["n"] == 200 - used  # only the audits after the deciding one count for canary 5%
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(mf.release_manifests)).scalar() == 2


def test_only_a_candidate_certified_at_the_release_target_enters_shadow(engine, key, tmp_path):
    """The certificate's own target was 0.9: 290/300 right certifies there, not at the sensor's 0.95."""
    write_certificate(tmp_path / "artifacts", key, "v1-low", "tickets", correct=290, n=300)
    r = _tick(engine, key, tmp_path, None)
    assert not r.published and _status(engine, "v1-low") == "candidate"
    assert "below the release target 0.95" in r.summary() or "< the release target 0.95" in r.summary()
    write_certificate(tmp_path / "artifacts", key, "v2-good", "tickets", correct=300, n=300)
    r = _tick(engine, key, tmp_path, r.state)
    m, _ = mf.latest_verified(engine, key.public_key())
    assert (m.task("tickets").stage, m.task("tickets").version, m.task("tickets").threshold) == (
        "shadow",
        "v2-good",
        0.0,
    )
    assert _status(engine, "v1-low") == "retired"  # superseded by the newer candidate
