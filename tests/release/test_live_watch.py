"""The live version is watched while a candidate is in shadow or canary, and drift on it is caught in time."""

from __future__ import annotations

import random
from pathlib import Path

from ratchet_assets.release import registry
from ratchet_assets.release.control import release_tick
from ratchet_assets.release.decision import LIVE, ReleaseRule, Track, feed, serving_tracks
from ratchet_assets.release.tick import rollback_release
from ratchet_core import manifest as mf
from ratchet_core.lake import segment_relpath

from .conftest import seal_pair_rows, write_certificate

POLICY = ReleaseRule(target=0.95, floor=0.90, alpha=0.05)


def _errors(rate: float, n: int, rng: random.Random) -> list[bool]:
    return [rng.random() < rate for _ in range(n)]


def write_rows(lake: Path, day: str, seq: int, task: str, rows: list[tuple[str, str, bool]]) -> None:
    """Seal one segment of shadow-stage pair rows (version, pair_role, student wrong)."""
    seal_pair_rows(lake, day, seq, task, "shadow", rows)


def test_live_version_behind_a_shadow_candidate_is_rolled_back_within_200_bad_audits(engine, key, tmp_path):
    lake, artifacts = tmp_path / "lake", tmp_path / "artifacts"
    live = mf.TaskRelease(stage="live", version="v0-old", threshold=0.5)
    mf.publish(engine, key, lambda m: m.tasks.update(tickets=live), "v0 is live", "ops")
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
    r = release_tick(engine, key, lake, artifacts, None)
    m, _ = mf.latest_verified(engine, key.public_key())
    assert (m.task("tickets").stage, m.task("tickets").previous_live) == ("shadow", "v1-live")

    rng = random.Random(11)
    # Day 2: v1 is right (1% wrong) on 150 audits; the candidate has 20 clean shadow answers (not enough to move);
    # shadow-role rows carrying v1's name say nothing about what v1 served and must not count.
    write_rows(lake, "2026-01-02", 1, "tickets", [("v2-new", "shadow", False)] * 20)
    write_rows(lake, "2026-01-02", 2, "tickets", [("v1-live", "audit", e) for e in _errors(0.01, 150, rng)])
    write_rows(lake, "2026-01-02", 3, "tickets", [("v1-live", "shadow", True)] * 40)
    r = release_tick(engine, key, lake, artifacts, r.state)
    assert not r.published
    v1 = r.state["tracks"]["v1-live|tickets"]
    assert v1["step"] == LIVE and '"n":150' in v1["rollback"].replace(" ", "")
    # Day 3: traffic drifts; v1 is wrong on 30% of its audits.
    bad = _errors(0.30, 200, rng)
    write_rows(lake, "2026-01-03", 1, "tickets", [("v1-live", "audit", e) for e in bad])
    for _ in range(3):
        r = release_tick(engine, key, lake, artifacts, r.state)
        if r.published:
            break
    assert [d.action for d in r.decisions] == ["rollback"] and r.decisions[0].version == "v1-live"
    consumed = r.state["watermark"]["partial"][segment_relpath("2026-01-03", "gw1", 1)]
    assert consumed <= 200 and sum(bad[:consumed]) / consumed > 0.15
    # The candidate keeps shadow and its evidence (20 answers do not support it as live); the alarm is about
    # recent traffic, on which v0 has no evidence, so the teacher serves the rest (test_leave_drift).
    m, _ = mf.latest_verified(engine, key.public_key())
    assert r.decisions[0].evidence["rollback_cause"] == "recent"
    assert m.task("tickets") == mf.TaskRelease(
        stage="shadow",
        version="v2-new",
        threshold=m.task("tickets").threshold,
    )
    status = {row["version"]: row["status"] for row in registry.list_versions(engine)}
    assert status["v1-live"] == "rolled_back" and status["v2-new"] == "shadow"
    assert "v1-live|tickets" not in r.state["tracks"] and '"n":20' in r.state["tracks"]["v2-new|tickets"][
        "promote"
    ].replace(" ", "")


def test_drift_after_long_clean_history_is_caught_within_200_and_clean_versions_stay():
    for prefix in (0, 300, 1500):
        for seed in range(10):
            rng = random.Random(seed * 7 + prefix)
            track = Track.start("v1", "t", LIVE, POLICY)
            d, _ = feed(track, _errors(0.01, prefix, rng), POLICY)
            assert d.action == "hold", (prefix, seed)
            d, used = feed(track, _errors(0.30, 200, rng), POLICY)
            assert d.action == "rollback", f"prefix {prefix} seed {seed}: 200 bad audits not enough"
    for seed in range(10):  # 2% wrong (floor 10%): never rolled back in 2000 audits
        track = Track.start("v1", "t", LIVE, POLICY)
        d, _ = feed(track, _errors(0.02, 2000, random.Random(seed)), POLICY)
        assert d.action == "hold", seed


def test_track_with_restarts_round_trips():
    a = Track.start("v1", "t", LIVE, POLICY)
    feed(a, _errors(0.05, 170, random.Random(1)), POLICY)
    assert len(a.restarts) == 4 and a.live_seen == 170
    b = Track.from_dict(a.to_dict())
    rest = _errors(0.3, 300, random.Random(2))
    assert feed(a, rest, POLICY)[1] == feed(b, rest, POLICY)[1]


def test_rollback_targets():
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
    shadow = mf.TaskRelease(
        stage="shadow", version="v2", threshold=0.3, previous_live="v1", previous_threshold=0.4
    )
    assert serving_tracks(shadow) == [("v2", 0), ("v1", LIVE)]
    # the live version behind a candidate: the candidate stays, v0 serves the rest (or the teacher if v0 is bad)
    assert rollback_release(shadow, "t", "v1", history).previous_live == "v0"
    after = rollback_release(shadow, "t", "v1", history, healthy=lambda v: v != "v0")
    assert (after.stage, after.version, after.previous_live) == ("shadow", "v2", None)
    # the candidate: v1 is live again, with its own healthy predecessor to fall back to
    assert rollback_release(shadow, "t", "v2", history) == mf.TaskRelease(
        stage="live",
        version="v1",
        canary_percent=100,
        threshold=0.4,
        previous_live="v0",
        previous_threshold=0.5,
    )
    # the live version: back to v0 if healthy, else the teacher
    live = history[1].task("t")
    assert rollback_release(live, "t", "v1", history).version == "v0"
    assert rollback_release(live, "t", "v1", history, healthy=lambda v: False).stage == "teacher"
