"""One candidate slot per task, a one-deep queue, preemption only of a stale or worse candidate, and the evidence
budget (``ratchet_assets.release.tick``, ``ratchet_assets.release.budget``): pure functions, as the sensor and
``ratchet sim`` call them."""

from __future__ import annotations

import pytest

from ratchet_assets.release.admission import Candidate, Paired
from ratchet_assets.release.budget import audits_per_stage, evidence_budget
from ratchet_assets.release.decision import ReleaseRule, Track, feed
from ratchet_assets.release.tick import admission_statuses, decide_tick
from ratchet_core import manifest as mf
from ratchet_core.task_policy import TaskPolicy

RULE = ReleaseRule()


def _slot(stage: str = "shadow") -> mf.Manifest:
    rel = mf.TaskRelease(
        stage=stage, version="v2", canary_percent=25.0 if stage == "canary" else 0.0, threshold=0.4,
        previous_live="v1", previous_threshold=0.3,
    )  # fmt: skip
    return mf.Manifest(tasks={"t": rel})


def _candidate(version: str = "v3", paired: Paired | None = None) -> Candidate:
    return Candidate(version, "t", 0.2, 0.97, f"{version}.dsse.json", paired=paired)


def _track(since: str, stage_step: int = 0) -> Track:
    t = Track.start("v2", "t", stage_step, RULE)
    t.since = since
    feed(t, [False] * 40, RULE)  # 40 agreeing answers: on its way, not there yet
    return t


@pytest.mark.parametrize("stage", ["shadow", "canary"])
def test_a_newcomer_waits_behind_a_candidate_within_reach(stage):
    slot = _track("2026-01-03", 0 if stage == "shadow" else 2)
    plan = decide_tick(_slot(stage), [_candidate()], {("v2", "t"): slot}, [], RULE, today="2026-01-04")
    assert not plan.admissions
    assert plan.manifest.task("t").version == "v2"  # the candidate keeps its slot and its evidence
    assert "v3 on t waits behind v2" in plan.waiting[0] and "1 of 2 days in the slot" in plan.waiting[0]
    # With the task's traffic known, the slot is held as long as the evidence budget expects: 720 audits at the
    # capped rate 0.25 of 600 requests a day take 4.8 days, so 6 days.
    plan = decide_tick(
        _slot(stage),
        [_candidate()],
        {("v2", "t"): slot},
        [],
        RULE,
        today="2026-01-07",
        traffic={"t": (600.0, 0.002)},
    )
    assert not plan.admissions and "4 of 6 days in the slot" in plan.waiting[0]
    # Not significantly better on the same golden rows (McNemar p > delta): still waits.
    close = _candidate(paired=Paired("v2", 6, 3))
    plan = decide_tick(_slot(stage), [close], {("v2", "t"): slot}, [], RULE, today="2026-01-04")
    assert not plan.admissions and "McNemar p = 0.254 > 0.05" in plan.waiting[0]


def test_a_newcomer_preempts_a_stale_candidate_with_its_evidence_kept():
    slot = _track("2026-01-01")
    plan = decide_tick(_slot(), [_candidate()], {("v2", "t"): slot}, [], RULE, today="2026-01-04")
    (adm,) = plan.admissions
    assert adm.replaces == "v2" and "preempts v2 at shadow" in adm.message
    assert "held the candidate slot 3 days (> 2)" in adm.message
    assert adm.replaced_evidence["total_audits"] == 40
    assert adm.replaced_evidence["preemption"]["slot_days"] == 3
    assert ("v2", "t", "superseded") in {(c.version, c.task, c.status) for c in admission_statuses(adm)}
    assert plan.tracks[("v3", "t")].since == "2026-01-04"  # the newcomer's own clock starts
    # The task's policy sets how long a slot is held.
    m = _slot()
    m.policies = {"t": TaskPolicy(max_candidate_days=5)}
    assert not decide_tick(m, [_candidate()], {("v2", "t"): slot}, [], RULE, today="2026-01-04").admissions


def test_a_newcomer_significantly_better_on_the_same_golden_rows_preempts_at_once():
    slot = _track("2026-01-04")
    better = _candidate(paired=Paired("v2", 20, 1))  # right where v2 was wrong 20 times, the reverse once
    plan = decide_tick(_slot(), [better], {("v2", "t"): slot}, [], RULE, today="2026-01-04")
    (adm,) = plan.admissions
    assert "v2 is worse than v3" in adm.message and "exact McNemar p = 1.05e-05 <= 0.05" in adm.message
    assert adm.replaced_evidence["preemption"]["mcnemar"] == {"b": 20, "c": 1, "p": pytest.approx(1.049e-5, rel=1e-3), "delta": 0.05}  # fmt: skip
    other = _candidate(paired=Paired("v1", 20, 1))  # compared with another version: says nothing about v2
    assert not decide_tick(_slot(), [other], {("v2", "t"): slot}, [], RULE, today="2026-01-04").admissions


def test_the_newest_queued_version_wins_the_slot_and_the_older_one_is_skipped():
    live = mf.Manifest(
        tasks={"t": mf.TaskRelease(stage="live", version="v2", canary_percent=100.0, threshold=0.4)}
    )
    plan = decide_tick(live, [_candidate("v3"), _candidate("v4")], {}, [], RULE, today="2026-01-05")
    (adm,) = plan.admissions
    assert adm.version == "v4" and adm.retire == ("v3",) and "skips v3" in adm.message
    assert ("v3", "t", "retired") in {(c.version, c.task, c.status) for c in admission_statuses(adm)}


def test_a_recertified_version_in_the_slot_or_live_starts_no_rollout():
    for m in (
        _slot(),
        mf.Manifest(tasks={"t": mf.TaskRelease(stage="live", version="v2", canary_percent=100.0)}),
    ):
        plan = decide_tick(m, [_candidate("v2")], {}, [], RULE, today="2026-01-04")
        assert not plan.admissions and not plan.waiting and plan.manifest.task("t") == m.task("t")


def test_the_evidence_budget_chooses_a_rate_that_reaches_live_in_a_day_within_the_spend_cap():
    # the e-value with no disagreement at target 0.95: 117 at alpha 0.05, 144 at alpha/2 beside the carried bound
    assert audits_per_stage(ReleaseRule(carry=False)) == 117 and audits_per_stage(RULE) == 144
    assert evidence_budget(RULE, 600, 0.002, 0.05).audits_needed == 720  # ceil(1.25 * 4 * 144)
    rule = ReleaseRule(carry=False)
    b = evidence_budget(rule, requests_per_day=600, cost_per_audit_usd=0.002, base_rate=0.05)
    assert b.audits_needed == 585 and b.rate_needed == 0.975  # ceil(1.25 * 4 * 117) / 600
    assert b.rate == 0.25 and b.slot_days == 5  # capped at DEFAULT_MAX_RATE: 585 / 150 = 3.9 days, + 1
    assert b.expected_spend_usd == pytest.approx(0.25 * 600 * 0.002)
    paid = evidence_budget(
        ReleaseRule(evidence_spend_usd=1.2, carry=False),
        requests_per_day=600,
        cost_per_audit_usd=0.002,
        base_rate=0.05,
    )
    assert paid.rate == 0.975 and paid.expected_spend_usd <= 1.2 and paid.slot_days == 2  # within a day
    capped = evidence_budget(
        ReleaseRule(evidence_spend_usd=0.12, carry=False),
        requests_per_day=600,
        cost_per_audit_usd=0.002,
        base_rate=0.05,
    )
    assert capped.rate == 0.1 and capped.expected_spend_usd <= 0.12  # 0.12 / (600 * 0.002)
    assert evidence_budget(rule, 20_000, 0.002, 0.05).rate == 0.05  # plenty of traffic: the ordinary rate
    free = evidence_budget(rule, 600, 0.002, 0.05, live=False)
    assert free.free and free.rate == 0.05  # nothing live: every shadowed request is paired with the teacher


def test_the_budget_rate_is_signed_into_the_release_and_read_by_routing():
    live = mf.Manifest(
        tasks={"t": mf.TaskRelease(stage="live", version="v2", canary_percent=100.0, threshold=0.4)}
    )
    plan = decide_tick(live, [_candidate()], {}, [], RULE, today="2026-01-05", traffic={"t": (600.0, 0.002)})
    rel = plan.manifest.task("t")
    assert rel.stage == "shadow" and rel.audit_rate == 0.25 and plan.manifest.audit_rate("t") == 0.25
    assert "720 audited answers to reach live" in plan.admissions[0].message
    assert plan.manifest.to_predicate()["tasks"]["t"]["audit_rate"] == 0.25
    assert "audit_rate" not in live.to_predicate()["tasks"]["t"]  # releases without a budget keep their bytes
    # beside a live version, the targeted stream's inclusion probability is signed too (no spend cap: 1)
    assert rel.target_audit_rate == 1.0 and plan.manifest.target_audit_rate("t") == 1.0
    assert "where it differs from live, audited at 1 (targeted stream)" in plan.admissions[0].message
    assert plan.admissions[0].target_audit_rate == 1.0
    # An operator's canary audit rate wins; live drops the budget rate.
    plan.manifest.policies = {"t": TaskPolicy(canary_audit_rate=0.3)}
    assert plan.manifest.audit_rate("t") == 0.3
    assert plan.manifest.target_audit_rate("t") == 1.0  # p_hi is the release's, whatever p_lo is


@pytest.mark.parametrize(
    "args",
    [["--max-candidate-days", "-1"], ["--max-candidate-days", "9999"], ["--evidence-spend-usd", "-0.5"]],
)
def test_bad_slot_days_or_spend_are_refused_with_a_usage_error_by_sim_and_the_policy(args):
    from click.testing import CliRunner
    from pydantic import ValidationError

    from ratchet_assets.sim.cli import sim

    out = CliRunner().invoke(sim, ["--days", "1", "--requests", "5", *args])
    assert out.exit_code == 2 and args[0] in out.output  # a usage error naming the option, nothing simulated
    field = args[0].lstrip("-").replace("-", "_")
    with pytest.raises(ValidationError):
        TaskPolicy(**{field: float(args[1])})


def test_the_sensor_signs_the_budget_rate_from_yesterdays_traffic_in_the_lake(engine, key, tmp_path):
    """release_tick reads the task's requests and the teacher's mean price from the newest sealed day before today
    (``evidence.task_traffic``) and signs the evidence budget's rate into the candidate's release."""
    from ratchet_assets.night.fixtures import write_segment
    from ratchet_assets.release.control import release_tick
    from ratchet_core.lake import segment_relpath
    from ratchet_core.schema import request_row
    from tests.evidence.certificates import sign_certificate

    art, lake = tmp_path / "artifacts", tmp_path / "lake"
    mf.publish(
        engine,
        key,
        lambda m: m.tasks.update(
            t=mf.TaskRelease(stage="live", version="v1", canary_percent=100.0, threshold=0.3)
        ),
        "v1 is live",
        "ops",
    )
    rows = [
        request_row(
            request_id=f"r{i}", day="2026-01-04", replica="gw1", seq=i + 1, task="t", teacher_cost_usd=0.001
        )
        for i in range(1000)
    ]
    write_segment(lake / segment_relpath("2026-01-04", "gw1", 1), rows)
    sign_certificate(art, key, "v2", "t", correct=300, n=300, day="2026-01-04")
    release_tick(engine, key, lake, art, None, today="2026-01-05")
    m, _ = mf.latest_verified(engine, key.public_key())
    rel = m.task("t")
    # 720 audits / 1000 requests = 0.72 needed, capped at 0.25 (no spend cap in the policy)
    assert (rel.stage, rel.version, rel.audit_rate, m.audit_rate("t")) == ("shadow", "v2", 0.25, 0.25)
    assert "720 audited answers to reach live" in m.reason
