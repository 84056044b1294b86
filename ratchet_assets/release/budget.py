"""The evidence budget: the audit rate a candidate gets, so its rollout is expected to be decided within a day.

A candidate walks shadow -> canary 5% -> 25% -> 50% -> live, and each of those four steps needs its own evidence
(``decision``: the promote process restarts at every step). With no disagreement, the stage's promote e-process
(or Wilson bound) needs ``n_stage`` audited answers (:func:`audits_per_stage`: 117 at target 0.95 and alpha 0.05 for
the e-value, 52 for the bound), so reaching live needs ``4 * n_stage``; a candidate that disagrees now and then
needs more, so the budget asks for ``MARGIN`` times that. While a live version serves the task, a candidate's
evidence is the audited share of the task's traffic (its canary's audited answers, and the audited requests live
served, which it shadows); so the rate that gets there in a day of ``requests_per_day`` is

    rate_needed = MARGIN * 4 * n_stage / requests_per_day

and the teacher is paid ``rate * requests_per_day * cost_per_audit_usd`` a day for it. The task's policy caps that
spend (``evidence_spend_usd``): ``rate_cap = evidence_spend_usd / (requests_per_day * cost_per_audit_usd)``, and
without one ``rate_cap = DEFAULT_MAX_RATE`` (0.25). The rate is ``min(1, max(base_rate, min(rate_needed,
rate_cap)))``: never below the task's ordinary audit rate. When the cap binds, live is expected in
``expected_days = audits_needed / (rate * requests_per_day)`` days, and the candidate holds the task's slot that
long plus a day (``slot_days``) unless the policy sets ``max_candidate_days``. With nothing
live (the teacher serves the rest) every shadowed request is already paired with the teacher's answer: the
evidence is free and the rate stays the base rate.

The budget spends no error: it changes how many audited answers arrive a day, not the tests that read them (an
e-process is valid at any sampling rate fixed before the answers it samples; the rate is fixed at admission).

Free evidence (``decision``, "carried bound"): beside a live version the candidate answers every request live
serves (``mirror`` pair rows, student cost only). When live's own carried process has already shown its precision
above target + u at some level (``carry_level``: the largest such u), the candidate's steps can be earned by
mirrored answers alone: each step needs ``n_mirror`` of them (none differing and wrong, what the carried process
at u and p_hi needs; ``mirrored_needed``), so live is expected in ``MARGIN * 4 * n_mirror / requests_per_day`` days
(the slot is held that long plus a day; ``rate_needed`` and ``rate_cap`` still report what the uniform rate asks
and may use). The audit rate stays what it would be without carrying: the live version behind the candidate serves most
of the traffic, and those audits are what watches it for drift (``ratchet sim`` with the candidate at the watch rate
instead: a third less evidence spend over ten good days, but drift on day 4 served at 0.67-0.71 instead of
0.80-0.88, and one seed two days below 0.90); the candidate's own audits go on watching it for rollback and can
still promote it. A candidate that disagrees with
live more than u needs its own audits, or is preempted once it has held the slot past
``slot_days``. With a carried bound the own promote process has alpha/2 (``ReleaseRule.promote_alpha``), so
``audits_per_stage`` is 144 rather than 117 at target 0.95 and alpha 0.05.

The watch rate (:func:`watch_rate`): a live version serving a task alone (no candidate in the slot) is audited at
the rate that gives its drift watch, within a day of the task's traffic (as the candidate's budget aims at live
within a day), the audits it needs to catch a version that turns ``WATCH_ERROR`` (30%) wrong after a clean history
as long as its drift restarts remember (``drift_keep * drift_block`` answers; ``watch_audits``: the restarted
rollback processes of ``decision`` on such a stream, 77 at the defaults), capped as the candidate's rate is and
never below the base rate; those audits are also what live's carried processes learn from. ``tick.apply_decision`` signs it into the release (``TaskRelease.audit_rate`` of a
live release; ``Manifest.audit_rate``).

The targeted stream (:func:`target_rate`, ``decision``: "carried bound"): beside a live version, a request live
served whose candidate answer differs from live's is judged by the teacher with probability p_hi (signed into the
release as ``target_audit_rate``). Without a spend cap p_hi = 1: every differing answer is judged (the spend is the
candidate's disagreement share of the traffic, e.g. 5% of 600 requests a day: 30 teacher calls). With one, p_hi
is what the cap leaves after the uniform rate, sized for a candidate that differs on ``TARGET_DIFFER_SHARE`` (10%)
of the requests: ``p_hi = min(1, max(rate, (rate_cap - rate) / 0.10))``, so such a candidate's expected evidence
spend stays within the cap (one that differs more is judged more often and is usually rolled back by its own
audits first). A lower p_hi makes each carried step need more mirrored answers (:func:`mirror_per_stage`: the
null is p_hi * u; 150 at p_hi 1 and u 0.04, 607 at 0.25). Like the rates, p_hi spends no error: the processes'
null is scaled to it.

One pure function, :func:`evidence_budget`, called by the release sensor (``release.control``) and ``ratchet sim``
(``sim.engine``) at admission; the manifest carries its rate (``TaskRelease.audit_rate``), which the gateway's
routing reads while the candidate is in shadow or canary (``Manifest.audit_rate``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ratchet_assets.release.decision import (
    CARRY_MAX_FRACTION,
    LIVE,
    ReleaseRule,
    Track,
    _needed_agreements,
    _needed_for_bound,
    simulate,
)
from ratchet_stats.eprocess import BettingEProcess

MARGIN = 1.25  # room for disagreeing and ignored answers
# Without a spend cap in the policy, at most this share of a task's traffic is audited for a candidate: auditing
# everything until a version is live would cost what the teacher costs (`ratchet sim` measured a cost ratio of 0.94
# against 0.43 with a cap); the slot is then held as long as the evidence needs (``expected_days``).
DEFAULT_MAX_RATE = 0.25
DEFAULT_SLOT_DAYS = 2  # how long a candidate holds the slot when the traffic is unknown
STEPS_TO_LIVE = LIVE  # shadow, canary 5%, 25%, 50%: each earns its own promotion


WATCH_ERROR = 0.30  # the share of wrong answers the watch rate is sized to catch within a day
# Under a spend cap, the targeted stream is sized for a candidate that differs from live on this share of requests.
TARGET_DIFFER_SHARE = 0.10


@lru_cache(maxsize=64)
def _per_stage(
    target: float, alpha: float, promotes_on: str, min_stage_audits: int, carry: bool = False
) -> int:
    rule = ReleaseRule(
        target=target, floor=target / 2, alpha=alpha, min_stage_audits=min_stage_audits, carry=carry
    )
    track = Track.start("budget", "budget", 0, rule)
    need = (
        _needed_for_bound(track, rule)
        if promotes_on == "bound"
        else _needed_agreements(track.promote, cap=20_000)
    )
    return need or 20_000


def audits_per_stage(rule: ReleaseRule) -> int:
    """Audited answers one step needs under `rule` when none disagrees."""
    return _per_stage(rule.target, rule.alpha, rule.promotes_on, rule.min_stage_audits, rule.carries)


@lru_cache(maxsize=64)
def _mirror_per_stage(u: float, alpha: float, levels: int, target_rate: float = 1.0) -> int:
    rule = ReleaseRule(alpha=alpha)
    proc = BettingEProcess.promote(target_rate * u, rule.carry_alpha / levels, CARRY_MAX_FRACTION)
    return _needed_agreements(proc, cap=200_000) or 200_000


def mirror_per_stage(rule: ReleaseRule, u: float, target_rate: float = 1.0) -> int:
    """Mirrored answers one step needs, none differing and wrong, for the carried process at level `u` with a
    targeted stream at inclusion probability `target_rate` (its null is target_rate * u: ``decision``)."""
    return _mirror_per_stage(u, rule.alpha, len(rule.levels), target_rate)


def target_rate(
    rule: ReleaseRule, requests_per_day: float, cost_per_audit_usd: float, rate: float
) -> float | None:
    """The targeted stream's inclusion probability p_hi beside a live version (module docstring): 1 without a spend
    cap in the policy; with one, what the cap leaves after the uniform rate `rate`, spread over a candidate that
    differs from live on ``TARGET_DIFFER_SHARE`` of the requests, never below `rate` nor above 1 (4 decimals, as
    the manifest signs it); None when that is 0 (no targeted stream: nothing carries)."""
    if rule.evidence_spend_usd is None:
        return 1.0
    if requests_per_day <= 0:
        return round(min(1.0, rate), 4) or None
    headroom = _rate_cap(rule, requests_per_day, cost_per_audit_usd) - rate
    return round(min(1.0, max(rate, headroom / TARGET_DIFFER_SHARE)), 4) or None


@lru_cache(maxsize=64)
def _watch_audits(floor: float, drift_alpha: float, drift_block: int, drift_keep: int) -> int:
    rule = ReleaseRule(
        target=min(0.99, floor + 0.05),
        floor=floor,
        drift_alpha=drift_alpha,
        drift_block=drift_block,
        drift_keep=drift_keep,
    )
    clean = drift_block * drift_keep
    stream = [math.floor((i + 1) * WATCH_ERROR) > math.floor(i * WATCH_ERROR) for i in range(5000)]
    events = simulate([False] * clean + stream, rule, start_step=LIVE)
    return events[0][0] - clean if events else 5000


def watch_audits(rule: ReleaseRule) -> int:
    """Audits a live version's drift watch needs to roll it back once it turns ``WATCH_ERROR`` wrong after a clean
    history of ``drift_keep * drift_block`` answers."""
    return _watch_audits(rule.floor, rule.drift_alpha, rule.drift_block, rule.drift_keep)


def _rate_cap(rule: ReleaseRule, requests_per_day: float, cost_per_audit_usd: float) -> float:
    """The most of a task's traffic audited for evidence: what ``evidence_spend_usd`` pays for a day, else
    ``DEFAULT_MAX_RATE``."""
    if rule.evidence_spend_usd is None:
        return DEFAULT_MAX_RATE
    return rule.evidence_spend_usd / (requests_per_day * max(cost_per_audit_usd, 1e-12))


def _capped_rate(rate_needed: float, cap: float, base_rate: float) -> float:
    """`rate_needed` held to `cap`, never below `base_rate` nor above 1 (4 decimals, as the manifest signs it)."""
    return round(min(1.0, max(base_rate, min(rate_needed, cap))), 4)


def watch_rate(
    rule: ReleaseRule, requests_per_day: float, cost_per_audit_usd: float, base_rate: float
) -> float:
    """The audit rate of a live version serving `rule`'s task alone (module docstring): ``watch_audits`` within
    a day of `requests_per_day`, capped like a candidate's rate (``evidence_spend_usd``, else
    ``DEFAULT_MAX_RATE``), never below `base_rate`."""
    if requests_per_day <= 0:
        return base_rate
    cap = _rate_cap(rule, requests_per_day, cost_per_audit_usd)
    return _capped_rate(watch_audits(rule) / requests_per_day, cap, base_rate)


@dataclass(frozen=True)
class EvidenceBudget:
    rate: float
    audits_needed: int  # MARGIN * 4 * audits_per_stage
    rate_needed: float  # audits_needed / requests_per_day; 0.0 when the evidence is free (nothing live)
    rate_cap: (
        float | None
    )  # evidence_spend_usd / (requests_per_day * cost), else DEFAULT_MAX_RATE; None: unknown
    expected_spend_usd: float  # rate * requests_per_day * cost_per_audit_usd (the uniform stream)
    free: bool  # nothing live: shadowed requests are paired with the teacher's answer already
    expected_days: float | None = (
        None  # to live: audits_needed / (rate * requests_per_day), or mirrored_needed's
    )
    carried: float | None = None  # the carry level the budget counts on (module docstring); None: audits only
    target_rate: float | None = None  # the targeted stream's inclusion probability (beside a live version)
    mirrored_needed: int | None = None  # carried: MARGIN * 4 * mirror_per_stage (mirrored answers, free)

    @property
    def slot_days(self) -> int:
        """How long a candidate holds the task's slot unless the policy says (``max_candidate_days``): the days its
        evidence is expected to take, rounded up, plus one; ``DEFAULT_SLOT_DAYS`` when the traffic is unknown."""
        if self.expected_days is None:
            return DEFAULT_SLOT_DAYS
        return max(1, math.ceil(self.expected_days)) + 1

    def explain(self) -> str:
        if self.free:
            return f"audit rate {self.rate:g}: nothing live, every shadowed request is compared with the teacher's"
        target = (
            ""
            if self.target_rate is None
            else f"; where it differs from live, audited at {self.target_rate:g} (targeted stream)"
        )
        if self.carried is not None:
            days = "" if self.expected_days is None else f", live expected in {self.expected_days:.1f} days"
            return (
                f"audit rate {self.rate:g} (it also watches live): live's precision is known above the target by "
                f"more than {self.carried:g}; {self.mirrored_needed} mirrored answers (free) carry it to "
                f"live{days}{target}"
            )
        capped = self.rate_cap is not None and self.rate_needed > self.rate_cap
        cap = f", capped at {self.rate_cap:.3f}" if capped else ""
        days = "" if self.expected_days is None else f", live expected in {self.expected_days:.1f} days"
        return (
            f"audit rate {self.rate:.3f}: {self.audits_needed} audited answers to reach live within a day "
            f"needs {self.rate_needed:.3f}{cap}{days}; about ${self.expected_spend_usd:.4f} a day of teacher "
            f"audits{target}"
        )


def evidence_budget(
    rule: ReleaseRule,
    requests_per_day: float,
    cost_per_audit_usd: float,
    base_rate: float,
    live: bool = True,
    carry_level: float | None = None,
) -> EvidenceBudget:
    """The candidate's audit rate (module docstring); `requests_per_day`: the task's traffic (the last day's),
    `cost_per_audit_usd`: the teacher's mean price of one answer on the task, `base_rate`: its ordinary audit rate,
    `live`: whether a live version serves the rest of the task (else the evidence is free), `carry_level`: the
    largest u at which live's carried process has rejected (its precision is above target + u), else None."""
    needed = math.ceil(MARGIN * STEPS_TO_LIVE * audits_per_stage(rule))
    if not live:  # every request a candidate shadows is evidence: nothing to pay for, nothing to mirror
        days = 1.0 if requests_per_day > 0 else None
        cap = _rate_cap(rule, requests_per_day, cost_per_audit_usd) if requests_per_day > 0 else None
        return EvidenceBudget(base_rate, needed, 0.0, cap, 0.0, True, days)
    if requests_per_day <= 0:  # traffic unknown: the base rate, and the targeted stream the policy allows
        targeted = target_rate(rule, 0.0, cost_per_audit_usd, base_rate) if rule.carries else None
        return EvidenceBudget(base_rate, needed, 0.0, None, 0.0, False, None, target_rate=targeted)
    rate_needed = needed / requests_per_day
    cap = _rate_cap(rule, requests_per_day, cost_per_audit_usd)
    # beside a live version, carrying or not, the uniform rate is the same: while the candidate rolls out those
    # audits are also what watches the live version behind it for drift (module docstring)
    rate = _capped_rate(rate_needed, cap, base_rate)
    targeted = target_rate(rule, requests_per_day, cost_per_audit_usd, rate) if rule.carries else None
    spend = round(rate * requests_per_day * cost_per_audit_usd, 6)
    if carry_level is not None and rule.carries and targeted is not None:
        mirrored = math.ceil(MARGIN * STEPS_TO_LIVE * mirror_per_stage(rule, carry_level, targeted))
        return EvidenceBudget(
            rate,
            needed,
            rate_needed,
            cap,
            spend,
            False,
            mirrored / requests_per_day,
            carry_level,
            targeted,
            mirrored,
        )
    return EvidenceBudget(
        rate,
        needed,
        rate_needed,
        cap,
        spend,
        False,
        needed / (rate * requests_per_day) if rate > 0 else None,
        target_rate=targeted,
    )
