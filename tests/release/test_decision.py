"""The release rule on simulated audits: walk to live, roll back a corrupted version, hold on thin evidence."""

from __future__ import annotations

import random

from ratchet_assets.release.decision import LADDER, LIVE, ReleaseRule, Track, feed, simulate

POLICY = ReleaseRule(target=0.95, floor=0.90, alpha=0.05)


def _stream(rate: float, n: int, seed: int) -> list[bool]:
    rng = random.Random(seed)
    return [rng.random() < rate for _ in range(n)]


def test_good_version_walks_shadow_to_live():
    for seed in range(5):
        events = simulate(_stream(0.01, 3000, seed), POLICY)
        assert [d.action for _, d in events] == ["promote"] * 4
        assert [LADDER[d.to_step].describe() for _, d in events] == [
            "canary 5%",
            "canary 25%",
            "canary 50%",
            "live",
        ]
        # Each stage earns its own evidence: with no errors at all a step needs log(20)/-log(0.95) > 58 answers.
        positions = [0] + [pos for pos, _ in events]
        assert min(b - a for a, b in zip(positions, positions[1:], strict=False)) > 58


def test_corrupted_version_rolls_back_within_200_audits_and_never_reaches_50_percent():
    for seed in range(40):
        events = simulate(_stream(0.30, 200, seed), POLICY)
        assert events and events[-1][1].action == "rollback", f"seed {seed}: no rollback in 200 audits"
        assert events[-1][0] <= 200
        assert all(d.to_step is None or LADDER[d.to_step].percent < 50 for _, d in events)


def test_too_few_audits_hold_and_say_what_is_needed():
    track = Track.start("v3-abc", "tickets", 1, POLICY)
    decision, used = feed(track, [False] * 20, POLICY)
    assert decision.action == "hold" and used == 20
    assert "20 audits" in decision.message and "of 40 needed" in decision.message
    assert "more agreeing audits" in decision.message
    # Those further agreeing audits are indeed enough (the stated need is right, not a guess).
    need = int(decision.message.split("at least ")[1].split()[0])
    d2, used2 = feed(track, [False] * need, POLICY)
    assert d2.action == "promote" and used2 == need


def test_frozen_holds_promotion_but_not_rollback_and_promotes_once_unfrozen():
    track = Track.start("v1", "t", 0, POLICY)
    decision, _ = feed(track, [False] * 300, POLICY, frozen=True)
    assert decision.action == "hold" and "frozen" in decision.message
    decision, used = feed(track, [], POLICY, frozen=False)
    assert decision.action == "promote" and used == 0
    bad = Track.start("v2", "t", LIVE, POLICY)
    decision, _ = feed(bad, [True] * 50, POLICY, frozen=True)
    assert decision.action == "rollback"


def test_track_state_round_trips_and_decides_identically():
    a = Track.start("v1", "t", 2, POLICY)
    feed(a, _stream(0.02, 40, 1), POLICY)
    b = Track.from_dict(a.to_dict())
    rest = _stream(0.02, 400, 2)
    da, ua = feed(a, rest, POLICY)
    db, ub = feed(b, rest, POLICY)
    assert (da.action, ua, da.evidence) == (db.action, ub, db.evidence)
