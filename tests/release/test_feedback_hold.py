"""Feedback as release evidence: a version whose answers the application rates worse than the teacher's at the same
time is held by the paired betting e-process (pure function), and by the sensor on a real control DB and lake."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from ratchet_assets.release.control import release_tick
from ratchet_assets.release.decision import feedback_evidence
from ratchet_core import feedback as fb
from ratchet_core import manifest as mf
from ratchet_core.task_policy import TaskPolicy

from .conftest import write_certificate, write_pairs

POLICY = TaskPolicy(metrics={"thumbs_up": {"type": "boolean"}}, bad_when="thumbs_up=false")


def _interleaved(student_bad: float, teacher_bad: float, n: int, seed: int) -> list[tuple[str, bool]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        out.append(("student", rng.random() < student_bad))
        out.append(("teacher", rng.random() < teacher_bad))
    return out


def test_worse_feedback_is_found_and_equal_or_better_feedback_is_not() -> None:
    worse = feedback_evidence(_interleaved(0.4, 0.1, 300, seed=1))
    assert worse.worse and worse.student_bad > worse.discordant / 2
    assert "worse than the teacher's" in worse.message("v2", "t")
    for seed in range(5):  # the same rate, and a better student: never held
        assert not feedback_evidence(_interleaved(0.2, 0.2, 2000, seed=seed)).worse
        assert not feedback_evidence(_interleaved(0.05, 0.3, 500, seed=seed)).worse
    # only the teacher has feedback: no pair, no evidence
    assert feedback_evidence([("teacher", True)] * 50).pairs == 0


def _feedback(engine, n: int, student_bad: float, teacher_bad: float) -> None:
    start = datetime(2026, 1, 2, tzinfo=UTC)
    for i, (served, bad) in enumerate(_interleaved(student_bad, teacher_bad, n, seed=3)):
        row = {
            "client": "app", "feedback_id": f"f{i}", "target": "request", "request_id": f"req_{i:024d}",
            "task": "t", "metric": "thumbs_up", "kind": "boolean", "value": 0.0 if bad else 1.0,
            "fingerprint": str(i), "state": "recorded", "served_by": served,
            "version": "v2" if served == "student" else "", "example_key": f"{i:064x}", "request_day": "2026-01-02",
            "received_at": (start + timedelta(seconds=i)).isoformat(),
        }  # fmt: skip
        fb.take(engine, row)


def _rollout(engine, key, tmp_path):
    art, lake = tmp_path / "artifacts", tmp_path / "lake"

    def live_v1_with_feedback_declared(m) -> None:
        m.tasks.update(t=mf.TaskRelease(stage="live", version="v1", threshold=0.3))
        m.policies.update(t=POLICY)

    mf.publish(engine, key, live_v1_with_feedback_declared, "v1 is live; feedback declared", "ops")
    write_certificate(art, key, "v2", "t", correct=300, n=300)
    state = release_tick(engine, key, lake, art, None).state  # v2 admitted to shadow
    write_pairs(lake, "2026-01-02", 1, "v2", "t", [False] * 200, role="shadow")  # plenty to promote
    return art, lake, state


def test_the_sensor_holds_a_version_the_feedback_rates_worse(engine, key, tmp_path) -> None:
    art, lake, state = _rollout(engine, key, tmp_path)
    _feedback(engine, 200, student_bad=0.5, teacher_bad=0.05)
    r = release_tick(engine, key, lake, art, state)
    m, _ = mf.latest_verified(engine, key.public_key())
    assert m.task("t").stage == "shadow"  # the audits alone would have promoted it
    assert any("worse than the teacher's" in h for h in r.holds), r.holds


def test_the_sensor_promotes_when_the_feedback_is_no_worse(engine, key, tmp_path) -> None:
    art, lake, state = _rollout(engine, key, tmp_path)
    _feedback(engine, 200, student_bad=0.05, teacher_bad=0.05)
    release_tick(engine, key, lake, art, state)
    m, _ = mf.latest_verified(engine, key.public_key())
    assert m.task("t").stage == "canary"
