"""Release steps that require approval: the sensor's tick waits (and keeps the evidence) until an operator
grants `release.live` for the version, then takes the step on its next tick; a denial keeps it waiting."""

from __future__ import annotations

from ratchet_assets.effects import EffectLedger
from ratchet_assets.release.control import release_tick
from ratchet_core import manifest as mf

from .conftest import write_certificate, write_pairs


def _tick(engine, key, tmp_path, state):
    return release_tick(engine, key, tmp_path / "lake", tmp_path / "artifacts", state)


def _stage(engine, key):
    m, _ = mf.latest_verified(engine, key.public_key())
    return m.task("tickets").stage, m.task("tickets").canary_percent


def test_promotion_to_live_waits_for_approval_then_happens(engine, key, tmp_path):
    gate = EffectLedger(engine)
    gate.set_rules("release.live", reason="promotion to live needs a person", approval_required=True)
    write_certificate(tmp_path / "artifacts", key, "v1-aaa", "tickets", correct=300, n=300)
    r = _tick(engine, key, tmp_path, None)
    write_pairs(tmp_path / "lake", "2026-01-02", 2, "v1-aaa", "tickets", [False] * 600)
    stages = []
    for _ in range(6):
        r = _tick(engine, key, tmp_path, r.state)
        stages.append(_stage(engine, key))
    assert stages[:3] == [
        ("canary", 5.0),
        ("canary", 25.0),
        ("canary", 50.0),
    ]  # canary steps need no approval
    assert stages[3:] == [("canary", 50.0)] * 3  # live waits
    assert "waits: awaiting_approval" in r.summary()
    pending = gate.approvals()
    assert [(a.effect_type, a.key, a.requested_by) for a in pending] == [
        ("release.live", "v1-aaa/tickets", "release-sensor")
    ]
    gate.decide("release.live", "v1-aaa/tickets", False, "hold until Monday's review")
    r = _tick(engine, key, tmp_path, r.state)
    assert _stage(engine, key) == ("canary", 50.0) and "hold until Monday's review" in r.summary()
    gate.decide("release.live", "v1-aaa/tickets", True, "reviewed: canary audits agree")
    r = _tick(engine, key, tmp_path, r.state)
    assert _stage(engine, key) == ("live", 100.0)
