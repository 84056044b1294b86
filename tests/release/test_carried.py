"""Free evidence (issue 35, point 3): the carried bound precision(candidate) >= precision(live) - P(differs),
its error budget, and the watch rate of a live version serving alone (``ratchet_assets.release.decision``,
``tick``, ``budget``): pure functions, as the sensor and ``ratchet sim`` call them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ratchet_assets.release.budget import audits_per_stage, evidence_budget, watch_rate
from ratchet_assets.release.decision import CARRY_PENDING_MAX, LIVE, ReleaseRule, Track, feed
from ratchet_assets.release.evidence import PairRow
from ratchet_assets.release.tick import apply_decision, decide_tick
from ratchet_core import manifest as mf
from ratchet_core.routing import unit_hash
from ratchet_core.task_policy import TaskPolicy

RULE = ReleaseRule()
ROOT = Path(__file__).resolve().parents[2]


def _slot(stage: str = "shadow", target_audit_rate: float | None = 1.0) -> mf.Manifest:
    rel = mf.TaskRelease(
        stage=stage, version="v2", canary_percent=5.0 if stage == "canary" else 0.0, threshold=0.4,
        previous_live="v1", previous_threshold=0.3, target_audit_rate=target_audit_rate,
    )  # fmt: skip
    return mf.Manifest(tasks={"t": rel})


def _live(audits: int, errors_every: int = 0) -> Track:
    """v1 at live with `audits` audited answers over its life (one wrong every `errors_every`, 0: none)."""
    t = Track.start("v1", "t", LIVE, RULE)
    feed(t, [bool(errors_every) and (i + 1) % errors_every == 0 for i in range(audits)], RULE)
    return t


def _rows(role: str, outcomes: list[str], version: str = "v2") -> list[PairRow]:
    return [
        PairRow("seg", i, version, "t", role, o, 0.9, 0.4, request_id=f"r{i}") for i, o in enumerate(outcomes)
    ]


def _tick(live: Track, rows: list[PairRow], stage: str = "shadow", own: int = 0):
    cand = Track.start("v2", "t", 0 if stage == "shadow" else 1, RULE)
    feed(cand, [False] * own, RULE)
    return decide_tick(_slot(stage), [], {("v1", "t"): live, ("v2", "t"): cand}, [("seg", rows)], RULE)


@pytest.mark.parametrize("stage", ["shadow", "canary"])
def test_a_candidate_that_agrees_with_a_well_audited_live_version_is_promoted_with_few_own_audits(stage):
    # live: 400 clean audits over its life; the candidate: 10 own audits (144 needed alone) and mirrored answers
    plan = _tick(_live(400), _rows("mirror", ["agree"] * 600), stage, own=10)
    d = plan.decision
    assert d is not None and d.action == "promote" and d.version == "v2"
    assert d.evidence["stage_audits"] == 10 < audits_per_stage(RULE)  # its own e-process is far from 40
    carried = d.evidence["carried"]
    assert carried["against"] == "v1" and carried["carried_level"] in RULE.levels
    k = RULE.levels.index(carried["carried_level"])
    assert carried["live"][k]["n"] == 400 and carried["disagree"][k]["errors"] == 0
    assert carried["disagree"][k]["n"] < 600  # decided on the row that completed the bound (plan.stop)
    assert plan.stop is not None and plan.stop.index + 1 == carried["disagree"][k]["n"]
    assert f"carried bound: v1's precision > {RULE.target + carried['carried_level']:g}" in d.message


def test_mirrored_answers_alone_promote_nothing_while_live_is_barely_audited():
    """A thousand agreeing mirror rows say the candidate answers as live does; with 20 audits of live that says
    nothing about precision, and a mirror row is never an audit of the candidate."""
    plan = _tick(_live(20), _rows("mirror", ["agree"] * 1000))
    assert plan.decision is None
    cand = plan.tracks[("v2", "t")]
    assert cand.promote.n == 0 and cand.carry_disagree[0].n == 1000  # mirror rows feed the carried bound only
    assert "needs at least 144 more agreeing audits" in plan.holds[-1] or any(
        "144 more agreeing audits" in h for h in plan.holds
    )


def _differing(n: int, every: int, outcome: str, confidence: float = 0.9, late: int = 0) -> list[PairRow]:
    """The candidate against live on `n` requests: every `every`-th answer differs from live's (a mirror row that
    disagrees; the targeted stream at 1 judges it: a targeted row with `outcome` against the teacher's answer,
    `late` rows after its mirror row, as a slow teacher call lands), the others agree (a mirror row)."""
    mirrors = [
        PairRow("seg", 0, "v2", "t", "mirror", "disagree" if (i + 1) % every == 0 else "agree", confidence, 0.4,
                request_id=f"r{i}")
        for i in range(n)
    ]  # fmt: skip
    rows: list[PairRow] = []
    verdicts: list[tuple[int, PairRow]] = []
    for i, m in enumerate(mirrors):
        rows.append(m)
        if m.outcome == "disagree":
            verdicts.append((i + late, PairRow("seg", 0, "v2", "t", "targeted", outcome, confidence, 0.4,
                                               request_id=m.request_id)))  # fmt: skip
        while verdicts and verdicts[0][0] <= i:
            rows.append(verdicts.pop(0)[1])
    rows += [v for _, v in verdicts]
    return [dataclasses.replace(r, index=k) for k, r in enumerate(rows)]


def test_a_candidate_that_differs_from_live_where_it_is_right_is_promoted_on_a_few_targeted_audits():
    """One in 20 of the candidate's answers differs from live's (5%: more than every carry level, so the old
    "P(differs) < u" bound could never carry it), and the teacher agrees with the candidate on each of them: the
    carried bound P(differs and wrong) < u promotes it on its 10 own audits and the few targeted ones."""
    plan = _tick(_live(1000), _differing(3000, 20, "agree"), own=10)
    d = plan.decision
    assert d is not None and d.action == "promote" and d.version == "v2"
    assert d.evidence["stage_audits"] == 10  # targeted rows are never audits of its own precision
    carried = d.evidence["carried"]
    assert carried["carried_level"] in RULE.levels and carried["target_rate"] == 1.0
    assert plan.stop is not None
    read = _differing(3000, 20, "agree")[: plan.stop.index + 1]
    teacher_calls = sum(r.role == "targeted" for r in read)
    assert (
        teacher_calls <= 10 < audits_per_stage(RULE)
    )  # against 144 own audits for the step without carrying
    assert "differ and were judged wrong at inclusion probability 1" in d.message


def test_a_candidate_that_is_wrong_where_it_differs_from_live_is_not_promoted_by_it():
    # one in 20 differs and the teacher says the candidate is wrong there: P(differs and wrong) = 5% > every level
    plan = _tick(_live(1000), _differing(3000, 20, "disagree"), own=10)
    assert plan.decision is None
    cand = plan.tracks[("v2", "t")]
    assert [p.n for p in cand.carry_disagree] == [3000] * len(RULE.levels)
    assert all(not p.rejected for p in cand.carry_disagree) and cand.carry_disagree[0].errors == 150
    # the teacher agrees, but the candidate's cascade would not have kept its answer (below its threshold): wrong
    low = _differing(3000, 20, "agree", confidence=0.1)
    assert _tick(_live(1000), low).decision is None
    assert all(r.differs_wrong for r in low if r.role == "targeted") and low[19].error is None
    # a failed teacher call counts against the candidate too
    assert _tick(_live(1000), _differing(3000, 20, "error")).decision is None


def _fed(rows: list[PairRow]) -> Track:
    t = Track.start("v2", "t", 0, RULE)
    for r in rows:
        if r.role == "mirror":
            t.observe_mirror(bool(r.disagrees), r.request_id, "v1")
        else:
            t.observe_targeted(bool(r.differs_wrong), r.request_id)
    return t


def test_the_processes_see_mirror_order_whenever_the_teacher_answers():
    """A differing answer's verdict comes after its mirror row, later the slower the teacher; the processes take
    X in mirror order (rows after a waiting one wait with it), so what they see never depends on when, or whether,
    a verdict arrived: a wrong verdict that lands late cannot let the agreeing rows after it bet first."""
    on_time, late = _fed(_differing(600, 20, "disagree")), _fed(_differing(600, 20, "disagree", late=37))
    assert [p.log_wealth for p in late.carry_disagree] == [p.log_wealth for p in on_time.carry_disagree]
    assert late.carry_disagree[0].n == 600 and late.carry_disagree[0].errors == 30 and not late.carry_pending
    waiting = _fed([r for r in _differing(600, 20, "disagree") if r.role == "mirror"])  # no verdict came yet
    assert (
        waiting.carry_disagree[0].n == 19 and len(waiting.carry_pending) == 581
    )  # all wait behind the first
    lost = Track.start("v2", "t", 0, RULE)
    lost.observe_mirror(
        True, "r0", "v1"
    )  # its verdict never comes (a lost call): after 1000 rows it counts as wrong
    for i in range(1, CARRY_PENDING_MAX + 2):
        lost.observe_mirror(False, f"r{i}", "v1")
    assert lost.carry_disagree[0].errors == 1 and lost.carry_disagree[0].n > 1
    # outside the targeted stream (u >= p_hi, recomputed from the request id) a differing answer is X = 0 at once
    outside = Track.start("v2", "t", 0, RULE, target_rate=0.5)
    rid = next(f"q{i}" for i in range(100) if unit_hash("audit", f"q{i}") >= 0.5)
    outside.observe_mirror(True, rid, "v1")
    assert outside.carry_disagree[0].n == 1 and outside.carry_disagree[0].errors == 0


def test_without_a_targeted_stream_or_when_its_rate_changes_nothing_carries():
    """A release signed without ``target_audit_rate`` (an operator's, or one written before it) carries nothing: a
    mirror row that differs says nothing about who was right. A step whose rows were read at one inclusion
    probability and then at another carries nothing for the rest of the step (each row's X is exact only at its
    own rate)."""
    rows = _rows("mirror", ["agree"] * 1000)
    cand = Track.start("v2", "t", 0, RULE, target_rate=None)
    assert not cand.carry_disagree and 1 / cand.promote.threshold == pytest.approx(RULE.alpha)
    plan = decide_tick(_slot(target_audit_rate=None), [], {("v1", "t"): _live(1000)}, [("seg", rows)], RULE)
    assert plan.decision is None and not plan.tracks[("v2", "t")].carry_disagree
    half = _tick(_live(1000), _rows("mirror", ["agree"] * 20))
    t = half.tracks[("v2", "t")]
    assert t.target_rate == 1.0 and t.carry_with == "v1"
    later = decide_tick(
        _slot(target_audit_rate=0.5), [], {("v1", "t"): _live(1000), ("v2", "t"): t}, [("seg", rows)], RULE
    )
    assert later.decision is None and later.tracks[("v2", "t")].carry_with == "-"


def test_a_live_version_that_drifts_or_is_rolled_back_carries_nothing():
    live = _live(1000)
    while live.drift_e_value < 1 / RULE.drift_alpha**0.5:  # its recent answers turn bad: halfway to an alarm
        feed(live, [True], RULE)
    # its whole life still looks good
    assert not live.rolled_back and all(p.rejected for p in live.carry_live)
    plan = _tick(live, _rows("mirror", ["agree"] * 1000))
    assert plan.decision is None or plan.decision.version == "v1"  # no carried promotion of v2
    cand = plan.tracks[("v2", "t")]
    assert cand.carry_disagree[-1].rejected  # the candidate agrees with live: live's drift is what holds it


def test_the_error_budget_split_is_what_the_docs_say():
    """A step's promotion spends alpha in all: alpha/2 on the candidate's own promote process, alpha/4 on live's
    carried processes, alpha/4 on the disagreement's (each split evenly over the levels); without carrying (a
    custom comparator, the bound rule) the own process has all of alpha."""
    own = RULE.new_promote()
    lives, dis = RULE.new_carry_live(), RULE.new_carry_disagree()
    spent = 1 / own.threshold + sum(1 / p.threshold for p in lives) + sum(1 / p.threshold for p in dis)
    assert spent == pytest.approx(RULE.alpha)
    assert 1 / own.threshold == pytest.approx(RULE.alpha / 2)
    assert sum(1 / p.threshold for p in lives) == pytest.approx(RULE.alpha / 4)
    assert [p.eps for p in dis] == list(RULE.levels) == [0.01, 0.02, 0.04]
    assert [round(p.eps, 6) for p in lives] == [0.04, 0.03, 0.01]  # precision > 0.96, 0.97, 0.99
    # nothing live behind the candidate when its step starts: nothing to carry from, its own process has alpha
    alone = decide_tick(
        mf.Manifest(tasks={"t": mf.TaskRelease(stage="shadow", version="v2", threshold=0.4)}),
        [],
        {},
        [],
        RULE,
    )
    t = alone.tracks[("v2", "t")]
    assert 1 / t.promote.threshold == pytest.approx(RULE.alpha) and not t.carry_disagree
    assert 1 / _tick(_live(10), []).tracks[("v2", "t")].promote.threshold == pytest.approx(RULE.alpha / 2)
    m = _slot()
    m.policies = {"t": TaskPolicy(comparator="custom:loose")}
    custom = RULE.for_task("t", m)
    assert not custom.carries and 1 / custom.new_promote().threshold == pytest.approx(RULE.alpha)
    assert not ReleaseRule(release_rule="wilson").carries and not ReleaseRule(carry_levels=(0.06,)).carries
    for doc in ("README.md", "ARCHITECTURE.md"):
        text = " ".join((ROOT / doc).read_text().split())
        assert "alpha/2 on the candidate's own promote process" in text, doc
        assert "alpha/4 on live's carried processes" in text and "alpha/4 on the disagreement" in text, doc


def test_a_live_version_serving_alone_is_audited_at_the_watch_rate():
    rate = watch_rate(RULE, 600, 0.002, 0.05)
    assert 0.05 < rate <= 0.25
    promote = _slot("canary")
    promote.tasks["t"] = promote.task("t").model_copy(update={"canary_percent": 50.0})
    cand = Track.start("v2", "t", 3, RULE)
    plan = decide_tick(
        promote,
        [],
        {("v2", "t"): cand, ("v1", "t"): _live(10)},
        [("seg", _rows("shadow", ["agree"] * 300))],
        RULE,
        traffic={"t": (600.0, 0.002)},
    )
    d = plan.decision
    assert d is not None and d.action == "promote" and d.to_step == LIVE
    assert plan.watch_rates == {"t": rate}
    m = plan.manifest.model_copy(deep=True)
    apply_decision(m, d, watch_rate=plan.watch_rates["t"])
    assert (m.task("t").stage, m.task("t").audit_rate, m.audit_rate("t")) == ("live", rate, rate)
    # a candidate admitted beside it brings the evidence budget's rate instead (its audits also watch live);
    # when live is known good the mirrored answers carry it: the slot is held for their days, not the audits'
    budget = evidence_budget(RULE, 600, 0.002, 0.05, carry_level=0.02)
    alone = evidence_budget(RULE, 600, 0.002, 0.05)
    assert budget.carried == 0.02 and budget.rate == alone.rate == 0.25
    assert budget.mirrored_needed == 1515 and budget.slot_days == 4 < alone.slot_days == 6  # 1.25 * 4 * 303
    # what it reports is what it did: the audits the own process would need, the rate they ask, the cap
    assert (budget.audits_needed, budget.rate_needed, budget.rate_cap) == (720, 1.2, 0.25)
    assert (
        budget.target_rate == alone.target_rate == 1.0
    )  # no spend cap in the policy: every differing answer
