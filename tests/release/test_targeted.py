"""The targeted audit stream (issue 35, point 3): where the candidate's answer differs from live's, the teacher
judges it with a logged inclusion probability p_hi, and the carried bound's processes test
"P(differs and wrong) >= u" on X = 1{differs, included, wrong} against the null p_hi * u (``decision``, "carried
bound"): the weighting that keeps the bound exact, checked by simulation; the routing that draws the stream."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ratchet_assets.release.budget import evidence_budget, mirror_per_stage, target_rate
from ratchet_assets.release.decision import CARRY_MAX_FRACTION, ReleaseRule
from ratchet_core.manifest import Manifest, TaskRelease
from ratchet_core.routing import SafetyState, pairs, route, unit_hash
from ratchet_stats.eprocess import log_wealth_paths

RULE = ReleaseRule()


def _false_carry_rate(
    p_hi: float, u: float, alpha: float, weighted: bool = True, runs: int = 2000, steps: int = 2000
) -> float:
    """Share of seeded runs in which the process on X rejects "P(differs and wrong) >= u" at `alpha` when it is
    exactly u (the null's boundary, its hardest case): 8% of answers differ from live, half of those are wrong, and
    each differing answer is judged with probability p_hi. `weighted` False: the null not scaled by p_hi (as if the
    targeted rows were a uniform sample)."""
    rng = np.random.default_rng(20261207)
    differs = rng.random((runs, steps)) < 2 * u
    wrong = rng.random((runs, steps)) < 0.5
    included = rng.random((runs, steps)) < p_hi
    x = differs & wrong & included
    eps = p_hi * u if weighted else u
    log_wealth = log_wealth_paths(x, "promote", eps, CARRY_MAX_FRACTION)
    return float((log_wealth.max(axis=1) >= math.log(1 / alpha)).mean())


@pytest.mark.parametrize("p_hi", [0.3, 1.0])
def test_the_weighted_process_promotes_wrongly_at_most_alpha_of_the_time(p_hi):
    """Ville's inequality, checked: under the null P(differs and wrong) = u the process on X with null p_hi * u
    crosses 1/alpha in at most alpha of the runs (here alpha 0.2, so the check can fail; the release rule's own
    levels are alpha/12 each). Without the weighting (null u) the same runs carry almost always."""
    alpha = 0.2
    assert _false_carry_rate(p_hi, 0.04, alpha) <= alpha
    if p_hi < 1:
        assert _false_carry_rate(p_hi, 0.04, alpha, weighted=False) > 0.5


def test_the_weighted_process_has_power_when_the_candidate_is_right_where_it_differs():
    """A candidate that differs on 8% of answers and is wrong on a tenth of those (P = 0.008 < u = 0.04) carries in
    most runs at the release rule's own level, at p_hi 0.3 as at 1."""
    level = RULE.carry_alpha / len(RULE.levels)
    rng = np.random.default_rng(11)
    for p_hi in (0.3, 1.0):
        x = (
            (rng.random((500, 3000)) < 0.08)
            & (rng.random((500, 3000)) < 0.1)
            & (rng.random((500, 3000)) < p_hi)
        )
        log_wealth = log_wealth_paths(x, "promote", p_hi * 0.04, CARRY_MAX_FRACTION)
        assert (log_wealth.max(axis=1) >= math.log(1 / level)).mean() > 0.9


def test_the_vectorised_paths_are_the_tracks_own_processes():
    """The simulation above uses ``log_wealth_paths``; the track's processes (``new_carry_disagree``) bet the same
    way on the same stream."""
    rng = np.random.default_rng(3)
    x = (rng.random(1500) < 0.02).tolist()
    procs = RULE.new_carry_disagree(0.3)
    for xi in x:
        for p in procs:
            p.update(xi)
    for p, u in zip(procs, RULE.levels, strict=True):
        assert p.eps == pytest.approx(0.3 * u)
        path = log_wealth_paths(np.array(x), "promote", 0.3 * u, CARRY_MAX_FRACTION)
        assert p.log_wealth == pytest.approx(float(path[0, -1]))


def _manifest(target: float | None, audit: float = 0.05) -> Manifest:
    m = Manifest.default()
    m.flags.audit_rate = audit
    m.tasks["t"] = TaskRelease(
        stage="shadow", version="v2", threshold=0.3, previous_live="v1", previous_threshold=0.1,
        target_audit_rate=target,
    )  # fmt: skip
    return m


def test_the_targeted_stream_is_drawn_from_the_audit_hash_and_nested_with_the_uniform_one():
    rids = [f"req-{i}" for i in range(400)]
    m = _manifest(0.3, audit=0.05)
    for rid in rids:
        r = route(m, SafetyState(), "t", rid)
        u = unit_hash("audit", rid)
        assert (r.targeted, r.audit) == (u < 0.3, u < 0.05)
        assert not r.audit or r.targeted  # nested: every uniformly audited request is in the targeted stream
        p = pairs(r, "student")
        assert p.mirror == "v2" and p.targeted == r.targeted
        assert not pairs(r, "teacher").targeted  # live did not serve it: nothing mirrored, nothing targeted
    assert 0.2 < sum(route(m, SafetyState(), "t", rid).targeted for rid in rids) / len(rids) < 0.4
    # no targeted stream signed, or nothing live behind the candidate: none
    assert not any(route(_manifest(None), SafetyState(), "t", rid).targeted for rid in rids)
    alone = _manifest(1.0)
    alone.tasks["t"] = alone.tasks["t"].model_copy(update={"previous_live": None})
    assert alone.target_audit_rate("t") is None
    assert not any(route(alone, SafetyState(), "t", rid).targeted for rid in rids)


def test_the_rate_is_signed_only_when_set_and_checked():
    m = _manifest(None)
    assert "target_audit_rate" not in m.to_predicate()["tasks"]["t"]  # older bytes unchanged
    assert _manifest(0.5).to_predicate()["tasks"]["t"]["target_audit_rate"] == 0.5
    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            TaskRelease(stage="shadow", version="v2", previous_live="v1", target_audit_rate=bad)


def test_the_budget_sizes_the_targeted_stream_within_the_policy_cap():
    """Without a spend cap every differing answer is judged (p_hi 1); with one, p_hi is what the cap leaves after
    the uniform rate, for a candidate that differs on 10% of the requests, never below the uniform rate."""
    assert target_rate(RULE, 600, 0.002, 0.25) == 1.0
    capped = ReleaseRule(evidence_spend_usd=0.36)  # 0.36 / (600 * 0.002) = a rate cap of 0.3
    b = evidence_budget(capped, 600, 0.002, 0.05)
    assert (b.rate, b.rate_cap, b.target_rate) == (0.3, 0.3, 0.3)  # the uniform rate used the whole cap
    roomy = ReleaseRule(evidence_spend_usd=1.2)  # a rate cap of 1.0; the uniform rate needs 720 / 600 -> 1.0
    assert evidence_budget(roomy, 6000, 0.0002, 0.05).target_rate == 1.0
    some = ReleaseRule(evidence_spend_usd=0.4)  # cap 0.4 / (6000 * 0.0002) = 0.333; uniform 720 / 6000 = 0.12
    b = evidence_budget(some, 6000, 0.0002, 0.05)
    assert b.rate == 0.12 and b.target_rate == 1.0  # (0.333 - 0.12) / 0.1 > 1
    tight = ReleaseRule(evidence_spend_usd=0.16)  # cap 0.1333 - 0.12 = 0.0133 -> 0.133
    assert evidence_budget(tight, 6000, 0.0002, 0.05).target_rate == pytest.approx(0.1333, abs=1e-4)
    # a lower inclusion probability needs more mirrored answers per step (its null is p_hi * u)
    assert mirror_per_stage(RULE, 0.04, 0.25) > 3 * mirror_per_stage(RULE, 0.04, 1.0)
    # nothing live: nothing to mirror, no targeted stream
    assert evidence_budget(RULE, 600, 0.002, 0.05, live=False).target_rate is None
