"""Leave drift fast (issue 35 point 5): when the live version is rolled back, the best version today's evidence
still supports serves instead (``tick.rollback_release``), else the teacher; the sensor applies it."""

from __future__ import annotations

import random

import pytest

from ratchet_assets.release import registry
from ratchet_assets.release.control import release_tick
from ratchet_assets.release.decision import LIVE, ReleaseRule, Track, decide, feed
from ratchet_assets.release.tick import apply_decision, rollback_release, supported_versions
from ratchet_core import manifest as mf

from .conftest import seal_pair_rows, write_certificate

RULE = ReleaseRule(target=0.95, floor=0.90, alpha=0.05)


def _errors(rate: float, n: int, seed: int) -> list[bool]:
    rng = random.Random(seed)
    return [rng.random() < rate for _ in range(n)]


def _v1_live_with_v2_in_shadow(engine, key, tmp_path):
    """v0 was live, v1 replaced it, v2 is certified and enters shadow behind v1 (day 1)."""
    lake, artifacts = tmp_path / "lake", tmp_path / "artifacts"
    mf.publish(
        engine,
        key,
        lambda m: m.tasks.update(tickets=mf.TaskRelease(stage="live", version="v0-old", threshold=0.5)),
        "v0 is live",
        "ops",
    )
    mf.publish(
        engine,
        key,
        lambda m: m.tasks.update(
            tickets=mf.TaskRelease(
                stage="live", version="v1-live", threshold=0.4, previous_live="v0-old", previous_threshold=0.5
            )
        ),
        "v1 replaced v0",
        "ops",
    )
    write_certificate(artifacts, key, "v2-new", "tickets", correct=300, n=300)
    r = release_tick(engine, key, lake, artifacts, None, today="2026-01-02")
    m, _ = mf.latest_verified(engine, key.public_key())
    assert (m.task("tickets").stage, m.task("tickets").previous_live) == ("shadow", "v1-live")
    return lake, artifacts, r


def _drift(engine, key, lake, artifacts, r, today: str):
    """v1 is right on 150 audits, then the traffic drifts: 30% of its audits are wrong; tick until a decision."""
    seal_pair_rows(
        lake, "2026-01-02", 2, "tickets", "shadow", [("v1-live", "audit", e) for e in _errors(0.01, 150, 1)]
    )
    r = release_tick(engine, key, lake, artifacts, r.state, today=today)
    assert not r.published
    bad = [("v1-live", "audit", e) for e in _errors(0.30, 200, 2)]
    seal_pair_rows(lake, "2026-01-03", 1, "tickets", "shadow", bad)
    for _ in range(3):
        r = release_tick(engine, key, lake, artifacts, r.state, today=today)
        if r.published:
            break
    assert [(d.action, d.version) for d in r.decisions] == [("rollback", "v1-live")]
    assert r.decisions[0].evidence["rollback_cause"] == "recent"
    return r


def test_drifted_live_version_is_rolled_back_to_the_candidate_todays_evidence_supports(engine, key, tmp_path):
    lake, artifacts, r = _v1_live_with_v2_in_shadow(engine, key, tmp_path)
    # Today v2 answered 80 requests in shadow, all right: too few to promote at the target (117 are needed), enough
    # to show precision above the floor at restore_alpha (57 are needed).
    seal_pair_rows(lake, "2026-01-02", 1, "tickets", "shadow", [("v2-new", "shadow", False)] * 80)
    r = release_tick(engine, key, lake, artifacts, r.state, today="2026-01-02")
    assert not r.published and r.state["tracks"]["v2-new|tickets"]["step"] == 0
    r = _drift(engine, key, lake, artifacts, r, today="2026-01-02")
    # v0 (live before v1) has no evidence on today's traffic; v2 has: it serves as live, at its own threshold.
    m, _ = mf.latest_verified(engine, key.public_key())
    rel = m.task("tickets")
    assert (rel.stage, rel.version, rel.canary_percent, rel.previous_live) == ("live", "v2-new", 100.0, None)
    status = {row["version"]: row["status"] for row in registry.list_versions(engine)}
    assert status["v1-live"] == "rolled_back" and status["v2-new"] == "live"
    assert r.state["tracks"]["v2-new|tickets"]["support"]


def test_drifted_live_version_goes_to_the_teacher_when_no_version_is_supported_today(engine, key, tmp_path):
    lake, artifacts, r = _v1_live_with_v2_in_shadow(engine, key, tmp_path)
    # v2's 80 right answers were yesterday's: its support process restarted today, with no answers yet.
    seal_pair_rows(lake, "2026-01-02", 1, "tickets", "shadow", [("v2-new", "shadow", False)] * 80)
    r = release_tick(engine, key, lake, artifacts, r.state, today="2026-01-02")
    r = _drift(engine, key, lake, artifacts, r, today="2026-01-03")
    m, _ = mf.latest_verified(engine, key.public_key())
    rel = m.task("tickets")
    # v2 keeps shadow (its evidence too); nothing supported serves the rest: the teacher does.
    assert (rel.stage, rel.version, rel.previous_live) == ("shadow", "v2-new", None)
    status = {row["version"]: row["status"] for row in registry.list_versions(engine)}
    assert status["v1-live"] == "rolled_back" and status["v2-new"] == "shadow"


def _live_track(errors: list[bool]) -> Track:
    t = Track.start("v1", "t", LIVE, RULE)
    feed(t, errors, RULE)
    return t


def test_rollback_target_by_evidence():
    history = [
        mf.Manifest(tasks={"t": mf.TaskRelease(stage="live", version="v0", threshold=0.5)}),
        mf.Manifest(
            tasks={
                "t": mf.TaskRelease(
                    stage="live", version="v1", threshold=0.4, previous_live="v0", previous_threshold=0.5
                )
            }
        ),
    ]
    live = history[1].task("t")
    # drift (an alarm on recent answers): v0 serves again only with evidence on today's traffic
    assert rollback_release(live, "t", "v1", history, recent=True).stage == "teacher"
    back = rollback_release(live, "t", "v1", history, supported=lambda v: v == "v0", recent=True)
    assert (back.stage, back.version) == ("live", "v0")
    # a version bad over its whole life (a bad deploy): its healthy predecessor, as before
    assert rollback_release(live, "t", "v1", history).version == "v0"
    # mid-rollout: a supported candidate takes over; an unsupported one keeps its stage, the teacher the rest
    shadow = mf.TaskRelease(
        stage="shadow", version="v2", threshold=0.3, previous_live="v1", previous_threshold=0.4
    )
    took = rollback_release(shadow, "t", "v1", history, supported=lambda v: v == "v2", recent=True)
    assert (took.stage, took.version, took.threshold) == ("live", "v2", 0.3)
    kept = rollback_release(shadow, "t", "v1", history, recent=True)
    assert (kept.stage, kept.version, kept.previous_live) == ("shadow", "v2", None)
    # a supported candidate that is rolled back in the registry never takes over
    no = rollback_release(shadow, "t", "v1", history, lambda v: v != "v2", lambda v: True, recent=True)
    assert (no.stage, no.version, no.previous_live) == ("shadow", "v2", "v0")


def test_drift_decision_names_its_cause_and_the_supported_candidate_takes_over():
    v1 = _live_track(_errors(0.01, 300, 3) + _errors(0.35, 200, 4))
    d = decide(v1, RULE)
    assert d.action == "rollback" and d.evidence["rollback_cause"] == "recent"
    v2 = Track.start("v2", "t", 1, RULE).on_day("2026-01-05", RULE)
    feed(v2, [False] * 60, RULE)
    assert v2.supported and v2.to_dict() == Track.from_dict(v2.to_dict()).to_dict()
    # the next day its support restarts: yesterday's answers say nothing about today's traffic
    assert not v2.on_day("2026-01-06", RULE).supported and v2.on_day("2026-01-05", RULE) is v2
    m = mf.Manifest(
        tasks={"t": mf.TaskRelease(stage="canary", version="v2", canary_percent=5.0, previous_live="v1")}
    )
    apply_decision(m, d, (), supported=supported_versions({("v2", "t"): v2}, "t"))
    assert (m.task("t").stage, m.task("t").version) == ("live", "v2")
    # a candidate with bad answers today is not supported
    v3 = Track.start("v3", "t", 0, RULE).on_day("2026-01-05", RULE)
    feed(v3, _errors(0.2, 300, 5), RULE)
    assert not v3.supported


def test_restore_alpha_out_of_range_is_refused_with_the_fix():
    for bad in (0.0, 1.0, -0.1, 2.0):
        with pytest.raises(ValueError, match="restore_alpha"):
            ReleaseRule(restore_alpha=bad)
