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

Not built yet (issue 35, point 3, "free evidence first"): beside a live version the candidate does not answer
every request live answers, so their disagreement is not measured on all traffic and every step is paid for with
audits (this budget). What is missing: a routing pair role in which the candidate answers each live-served request
off the path (``ratchet_core.routing.pairs``; student cost only) with a ``disagree`` outcome against live's answer;
a promote rule using the carried bound, precision(candidate) >= LB_live - UB_disagree, with alpha split between
live's audited lower bound and the disagreement's upper bound (e.g. alpha/2 each, stated in ``ReleaseRule``); and
audits drawn with a logged inclusion probability (higher where the two disagree), each pair row carrying it, and
the e-processes updated with inverse-probability-weighted increments so they stay test supermartingales.

One pure function, :func:`evidence_budget`, called by the release sensor (``release.control``) and ``ratchet sim``
(``sim.engine``) at admission; the manifest carries its rate (``TaskRelease.audit_rate``), which the gateway's
routing reads while the candidate is in shadow or canary (``Manifest.audit_rate``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ratchet_assets.release.decision import LIVE, ReleaseRule, Track, _needed_agreements, _needed_for_bound

MARGIN = 1.25  # room for disagreeing and ignored answers
# Without a spend cap in the policy, at most this share of a task's traffic is audited for a candidate: auditing
# everything until a version is live would cost what the teacher costs (`ratchet sim` measured a cost ratio of 0.94
# against 0.43 with a cap); the slot is then held as long as the evidence needs (``expected_days``).
DEFAULT_MAX_RATE = 0.25
DEFAULT_SLOT_DAYS = 2  # how long a candidate holds the slot when the traffic is unknown
STEPS_TO_LIVE = LIVE  # shadow, canary 5%, 25%, 50%: each earns its own promotion


@lru_cache(maxsize=64)
def _per_stage(target: float, alpha: float, promotes_on: str, min_stage_audits: int) -> int:
    rule = ReleaseRule(target=target, floor=target / 2, alpha=alpha, min_stage_audits=min_stage_audits)
    track = Track.start("budget", "budget", 0, rule)
    need = (
        _needed_for_bound(track, rule)
        if promotes_on == "bound"
        else _needed_agreements(track.promote, cap=20_000)
    )
    return need or 20_000


def audits_per_stage(rule: ReleaseRule) -> int:
    """Audited answers one step needs under `rule` when none disagrees."""
    return _per_stage(rule.target, rule.alpha, rule.promotes_on, rule.min_stage_audits)


@dataclass(frozen=True)
class EvidenceBudget:
    rate: float
    audits_needed: int  # MARGIN * 4 * audits_per_stage
    rate_needed: float
    rate_cap: float  # evidence_spend_usd / (requests_per_day * cost_per_audit_usd), else DEFAULT_MAX_RATE
    expected_spend_usd: float  # rate * requests_per_day * cost_per_audit_usd
    free: bool  # nothing live: shadowed requests are paired with the teacher's answer already
    expected_days: float | None = None  # audits_needed / (rate * requests_per_day); None: unknown traffic

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
        cap = f", capped at {self.rate_cap:.3f}" if self.rate_needed > self.rate_cap else ""
        days = "" if self.expected_days is None else f", live expected in {self.expected_days:.1f} days"
        return (
            f"audit rate {self.rate:.3f}: {self.audits_needed} audited answers to reach live within a day "
            f"needs {self.rate_needed:.3f}{cap}{days}; about ${self.expected_spend_usd:.4f} a day of teacher audits"
        )


def evidence_budget(
    rule: ReleaseRule,
    requests_per_day: float,
    cost_per_audit_usd: float,
    base_rate: float,
    live: bool = True,
) -> EvidenceBudget:
    """The candidate's audit rate (module docstring); `requests_per_day`: the task's traffic (the last day's),
    `cost_per_audit_usd`: the teacher's mean price of one answer on the task, `base_rate`: its ordinary audit rate,
    `live`: whether a live version serves the rest of the task (else the evidence is free)."""
    needed = math.ceil(MARGIN * STEPS_TO_LIVE * audits_per_stage(rule))
    if not live or requests_per_day <= 0:
        days = 1.0 if requests_per_day > 0 else None  # every request a candidate shadows is evidence
        return EvidenceBudget(base_rate, needed, 0.0, 1.0, 0.0, True, days)
    rate_needed = needed / requests_per_day
    cap = DEFAULT_MAX_RATE
    if rule.evidence_spend_usd is not None:
        cap = rule.evidence_spend_usd / (requests_per_day * max(cost_per_audit_usd, 1e-12))
    rate = round(min(1.0, max(base_rate, min(rate_needed, cap))), 4)
    return EvidenceBudget(
        rate,
        needed,
        rate_needed,
        cap,
        round(rate * requests_per_day * cost_per_audit_usd, 6),
        False,
        needed / (rate * requests_per_day) if rate > 0 else None,
    )
