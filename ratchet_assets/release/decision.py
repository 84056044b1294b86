"""The release rule: a version walks shadow -> canary 5% -> 25% -> 50% -> live on evidence, or rolls back.

Evidence is a stream of audited answers of one (version, task): ``error`` = the student disagreed with the
teacher (pair rows, ``pair_role`` shadow or audit). Two betting e-processes (``ratchet_stats.eprocess``) watch it:

- promote, H0: error >= 1 - target. Rejecting (e-value >= 1/alpha) is evidence precision > target: advance one
  step. The promote process is RESET at every step, so each exposure level must earn its own evidence on answers
  it has not seen (a fresh e-process on fresh data is again valid at level alpha).
- rollback, H0: error <= 1 - floor. Rejecting is evidence precision < floor: roll back to the best version the
  evidence still supports, else the teacher (``tick.rollback_release``; the support process below). One rollback
  process runs for the version's whole life (never reset): errors seen in shadow still count against it at 50%,
  which only makes rollback faster; by Ville's inequality the chance it ever fires for a version whose precision
  is >= floor is <= ``rollback_alpha``.
- drift restarts (live only): the whole-life process bets from its whole history (aGRAPA's plug-in mean), so a
  version that was right for 1,000 audits and then turns bad (traffic drift) would need hundreds of bad audits
  before it even starts betting. So from the moment a version is live, a further rollback process E_j starts every
  ``drift_block`` of its answers (j = 1 at once, 2, ...); the newest ``drift_keep`` are kept, and the version is
  rolled back when the mixture M = sum_j w_j E_j, w_j = 1 / (j (j + 1)) (sum 1), reaches 1/drift_alpha. Each
  E_j is a test supermartingale started at a stopping time (1 before), a weighted average of such is one, and
  dropping old terms only lowers it, so by Ville the chance M ever crosses under H0 is <= ``drift_alpha`` (the
  e-detector construction of Shin, Ramdas & Rinaldo 2024). Together: P(a version with precision >= floor is ever
  rolled back) <= rollback_alpha + drift_alpha. A 30%-wrong stream is caught within 200 answers after 0 to 1,500
  clean ones at live.
- support (every version, restarted each day): H0: error >= 1 - floor. Rejecting (e-value >= 1/``restore_alpha``)
  is evidence that today's answers of the version are right more often than the floor: it may take over when the
  live version is rolled back (``tick.rollback_release``: "leave drift fast"). Restarted at the first evaluation
  of each day (``tick.tracks_for``), so it speaks of recent traffic only; a fresh e-process on fresh answers is
  valid again, and it is read once per rollback, so the chance that one rollback hands the task to a version whose
  precision today is <= floor is <= ``restore_alpha``: a third error budget, beside rollback_alpha and
  drift_alpha (which bound rolling back a good version), spent once per rollback that restores a version.

Which answers feed a track: every version that serves a task has one. The release's own version (shadow, canary
or live) is fed by all its pair rows (shadow answers and audits of the requests it served); while a candidate is
in shadow or canary, the live version it would replace (``previous_live``, which serves the rest) has its own
track at ``live``, fed only by audits (``pair_role`` audit) of the requests it served
(:func:`serving_tracks`, :meth:`Track.accepts`).

One decision per (version, task) per evaluation: after a decision the remaining evidence waits for the next
evaluation (so a burst of audits cannot skip a stage). Rollback is checked before promotion on every answer.
When releases are frozen, promotions are held (the promote process keeps its rejection; it fires once unfrozen,
which stays valid because an e-process may be stopped at any stopping time) while rollbacks still happen: a
rollback only narrows what the student serves.

The rules a task's signed policy chooses (``ratchet_core.task_policy``; :meth:`ReleaseRule.for_task`), each one
pure function of the track and the rule, looked up in ``ROLLBACK_RULES`` and ``PROMOTE_RULES``:

- release rule ``sequential`` (the default, :func:`sequential_rollback`): the e-processes above. Anytime-valid:
  checked after every answer, the chance of ever rolling back a version with precision >= floor stays
  <= rollback_alpha + drift_alpha.
- release rule ``wilson`` (:func:`wilson_rollback`): the Wilson score interval at level 1 - rollback_alpha over the
  stage's own audited answers (at live: its newest ``wilson_window``), once the stage has ``min_stage_audits``;
  roll back when its upper bound is below the floor. A fixed-sample interval looked at after every answer: its
  error is not controlled under this continuous monitoring (each look spends another ~rollback_alpha), which is
  what ``ratchet sim --compare-release`` shows beside the sequential rule.
- promote evidence ``e-value`` (:func:`e_value_promotes`): the stage's promote e-process rejects "precision <=
  target" at alpha. ``bound`` (:func:`bound_promotes`): the Wilson lower bound at level 1 - alpha over the stage's
  answers (at least ``min_stage_audits``) exceeds the target, with the same caveat. Default: ``e-value`` under the
  sequential rule, ``bound`` under the Wilson rule.

Free evidence, the carried bound (issue 35, "free evidence first"; ``e-value`` promotion only): while a candidate
is in shadow or canary beside a live version, it also answers every request live serves and is compared with
live's answer (``mirror`` pair rows, ``ratchet_core.routing``; ``evidence.PairRow.disagrees``). On the requests
live serves, let L = live's answer is right, C = the candidate's answer is kept and right, D = the candidate's
answer is not kept or differs from live's, W = not C. When the task's comparator is transitive (``label``,
``json``, ``tool_call``: equality of stripped text, of canonical JSON, of calls; a custom comparator is not assumed
to be, and turns the carried bound off), "right" means equal to the teacher's answer, so where D = 0 the candidate
is right exactly when live is: C >= L - 1{D and W} pointwise and

    precision(candidate) >= precision(live) - P(differs from live and wrong).

Who is right where the two differ is what the teacher is asked (targeted audits): a request live served whose
candidate answer differs is judged by the teacher when ``unit_hash("audit", request_id) < p_hi``, the release's
signed ``target_audit_rate`` (the evidence budget's, ``release.budget``; the same draw as the uniform audit, which
audits u < p_lo, so the two streams nest when p_lo <= p_hi): a ``targeted`` pair row for the same request, written
after its mirror row. Each mirror row gives X = 1{D, u < p_hi, W}: 0 where the answers agree or u >= p_hi (the
sensor recomputes u from the row's request id), else the teacher's verdict from the targeted row
(``PairRow.differs_wrong``: 1 unless the candidate's answer is kept and the teacher agrees with it; a failed
teacher call is 1). As u is uniform (the request id is the gateway's own CSPRNG draw,
``ratchet_gateway.responses.new_request_id``) and independent of the answers, E[X] = p_hi P(D and W): the
inverse-probability-weighted estimate X / p_hi of P(D and W) is unbiased, and testing "P(D and W) >= u_k" is testing
"E[X] >= p_hi u_k" on a Bernoulli stream, which the same betting e-process does exactly (its wealth stays
nonnegative: the bet is at most ``CARRY_MAX_FRACTION`` of it). With p_hi = 1 (the default without a spend cap) X is
1{D and W} itself. The order matters too: a verdict lands a teacher call after its mirror row, so feeding verdicts
as they land would let the agreeing rows behind a late wrong verdict bet first (a supermartingale only in an order
fixed before the outcomes). So X is fed in mirror order (``Track.observe_mirror``): a row that waits for its verdict
holds the rows after it (``carry_pending``); a verdict still missing after ``CARRY_PENDING_MAX`` later rows counts
as X = 1 (only ever against the candidate).

Both sides are anytime-valid tests on a grid of levels u_k (``carry_levels``, 0.01, 0.02, 0.04): on live's audited
answers over its whole life (like its whole-life rollback process: from shadow on, so a version is carry-ready as
soon as it goes live), ``carry_live[k]`` rejects "precision(live) <= target + u_k"; on the candidate's mirror and
targeted rows at its current step, ``carry_disagree[k]`` rejects "P(differs and wrong) >= u_k" (null p_hi u_k on
X). When both of one level have rejected, the candidate's precision exceeds the target and it is promoted one step,
as its own promote process would. The error budget of a step's promotion (alpha, what the release rule promises)
is split: alpha/2 on the candidate's own promote process, alpha/4 on live's carried processes (alpha/12 per level),
alpha/4 on the disagreement's processes (alpha/12 per level); a wrongful promotion needs one of them to reject
wrongly, so P(promoting a step whose precision <= target) <= alpha (Ville, union bound). The targeted stream spends
no further error: it changes which rows the disagreement's processes see, and their null is scaled to match.
Without carrying (``carry`` off, the ``bound`` rule, a custom comparator, no live version behind the candidate when
its step starts, or a release signed without ``target_audit_rate``: a mirror row that differs says nothing about
who was right) the own process has all of alpha. The carried processes bet with ``CARRY_MAX_FRACTION`` 0.9
(near-clean streams are the expected case; the bet shrinks after each error). Limits, stated: live's side is its
precision averaged over its whole life and the disagreement is over the candidate's step, so the bound is exact
when live's precision is stationary (the live watch's drift restarts are what notice it is not, and a rolled-back
live version carries nothing); it speaks of the requests live serves (the rest go to the teacher, where the
candidate's shadow pairs are its own evidence); a candidate whose live version changes mid-step carries nothing
for the rest of that step (``carry_with``), nor does one whose step's rows were read at one p_hi and then at another
(``Track.with_target_rate``: each row's X is exact only at its own rate; p_hi is signed once per rollout, so this
is an operator re-signing the release), and a live version whose drift restarts are halfway to an alarm
(e-value >= 1/sqrt(drift_alpha)) carries nothing. Targeted rows are never audits of the candidate's precision (not
a uniform sample: its own promote and rollback processes never see them) nor training labels (the night reads
``audit`` rows). Not built: the inclusion probability on the row itself (a ledger column): the sensor takes it from
the manifest, where the release signs it, and a reader of the ledger recomputes each row's inclusion from
``request_id`` and the signed manifest in force.

Feedback (``ratchet_core.feedback``) is evidence too: :func:`feedback_evidence` asks whether the student's answers of
a task draw worse feedback than the teacher's at the same time. Student and teacher observations (bad or not, by
the task's ``bad_when``, or a demonstration the served answer disagrees with) are paired in the order they arrive;
under H0 "the student's bad rate is at most the teacher's" (independent answers), a discordant pair (one bad, the
other not) is the student's bad one with probability at most 1/2, so the same betting e-process the rollback uses,
``BettingEProcess.rollback(1/2, alpha)`` over the discordant pairs, is anytime-valid (a sign test, as McNemar's).
When it rejects, the version's promotions are held (``held`` of :func:`decide`) while its audits go on deciding
rollbacks.

References: Ramdas, Grünwald, Vovk & Shafer (2023), "Game-theoretic statistics and safe anytime-valid
inference", Statistical Science 38(4); Waudby-Smith & Ramdas (2023), JRSS-B 86(1) (the betting rule); Shin,
Ramdas & Rinaldo (2024), "E-detectors: a nonparametric framework for sequential change detection", New England
Journal of Statistics in Data Science 2(2) (restarted e-processes with summable weights); Wilson (1927), JASA
22(158) (the score interval); Armitage, McPherson & Rowe (1969), JRSS-A 132(2) (repeated significance tests on
accumulating data: why looking after every answer inflates a fixed-sample test's error).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ratchet_core.manifest import TaskRelease
from ratchet_core.routing import unit_hash
from ratchet_core.task_policy import default_promote_evidence
from ratchet_stats.bounds import wilson_lower, wilson_upper
from ratchet_stats.canonical import digest
from ratchet_stats.eprocess import BettingEProcess

# The carried processes' largest bet (module docstring, "carried bound"): BettingEProcess's default is 0.5.
CARRY_MAX_FRACTION = 0.9
# A live version whose drift restarts' e-value has reached DRIFT_QUIET / sqrt(drift_alpha) (about 4.5: halfway to
# an alarm, on the log scale) carries nothing: a guard against a bound that averages over its whole life (module
# docstring); an extra condition, so it spends no error.
DRIFT_QUIET = 1.0
# Mirror rows that may wait behind one whose targeted verdict has not come (module docstring): beyond this, the
# oldest counts as wrong (X = 1: a lost teacher call never helps the candidate).
CARRY_PENDING_MAX = 1000
# Comparators known to be transitive (equality of a canonical form: ratchet_core.workloads.comparators).
TRANSITIVE_COMPARATORS = ("label", "json", "tool_call")


@dataclass(frozen=True)
class Step:
    """One rung of the ladder: a manifest stage and the share of eligible traffic the version serves."""

    stage: Literal["shadow", "canary", "live"]
    percent: float

    @property
    def label(self) -> str:
        return f"canary-{self.percent:g}" if self.stage == "canary" else self.stage

    def describe(self) -> str:
        return f"canary {self.percent:g}%" if self.stage == "canary" else self.stage


LADDER: tuple[Step, ...] = (
    Step("shadow", 0.0),
    Step("canary", 5.0),
    Step("canary", 25.0),
    Step("canary", 50.0),
    Step("live", 100.0),
)
LIVE = len(LADDER) - 1


def step_of(release: TaskRelease) -> int | None:
    """Ladder index of a published release (None for ``teacher``); a custom canary share maps to the rung below."""
    if release.stage == "shadow":
        return 0
    if release.stage == "live":
        return LIVE
    if release.stage == "canary":
        rungs = [
            i for i, s in enumerate(LADDER) if s.stage == "canary" and s.percent <= release.canary_percent
        ]
        return max(rungs) if rungs else 0
    return None


@dataclass(frozen=True)
class ReleaseRule:
    """target: promote on evidence precision > target; floor: roll back on evidence precision < floor.

    ``release_rule`` and ``promote_evidence`` choose the canary rules (module docstring); ``calibration``,
    ``paired_gate``, ``min_certified`` and ``delta`` are the admission rules (``ratchet_assets.release.admission``).
    All of them come from the task's signed policy (:meth:`for_task`)."""

    target: float = 0.95
    floor: float = 0.90
    alpha: float = 0.05
    rollback_alpha: float = 0.05
    drift_alpha: float = 0.05  # level of the restarted rollback processes together (module docstring)
    drift_block: int = 50  # answers between restarts
    drift_keep: int = 6  # restarts kept (the newest)
    restore_alpha: float = (
        0.05  # level of the daily support process a rollback target needs (module docstring)
    )
    release_rule: Literal["sequential", "wilson"] = "sequential"
    promote_evidence: Literal["e-value", "bound"] | None = None  # None: the release rule's own
    min_stage_audits: int = 30  # wilson / bound: answers at a stage before its interval decides
    wilson_window: int = 200  # wilson at live: the newest answers its interval is over
    calibration: Literal["ltt", "point"] = "ltt"
    paired_gate: bool = False
    min_certified: float | None = None  # None: the target
    delta: float = 0.05  # the certification level; the paired gate tests at it
    max_candidate_days: int | None = (
        None  # days a candidate keeps the slot (tick); None: the budget's slot_days
    )
    evidence_spend_usd: float | None = (
        None  # per-day cap on the teacher's pay for a candidate's audits (budget)
    )
    carry: bool = True  # the carried bound may promote (module docstring); off for a custom comparator
    carry_levels: tuple[float, ...] = (0.01, 0.02, 0.04)  # the u_k of the carried bound

    def __post_init__(self) -> None:
        if not 0.0 < self.floor < self.target < 1.0:
            raise ValueError(
                f"need 0 < floor < target < 1 (got floor={self.floor}, target={self.target}); "
                "e.g. target 0.95, floor 0.90"
            )
        if not 0.0 < self.restore_alpha < 1.0:
            raise ValueError(f"need 0 < restore_alpha < 1 (got {self.restore_alpha}); e.g. 0.05")
        if not 0.0 < self.drift_alpha < 1.0 or self.drift_block < 1 or self.drift_keep < 1:
            raise ValueError(
                f"need 0 < drift_alpha < 1, drift_block >= 1, drift_keep >= 1 (got {self.drift_alpha}, "
                f"{self.drift_block}, {self.drift_keep}); e.g. 0.05, 50, 6"
            )
        if self.release_rule not in ROLLBACK_RULES or self.promotes_on not in PROMOTE_RULES:
            raise ValueError(
                f"release rule {self.release_rule!r} / promote evidence {self.promote_evidence!r}: choose one of "
                f"{', '.join(ROLLBACK_RULES)} / {', '.join(PROMOTE_RULES)}"
            )
        if not all(0.0 < u < 1.0 for u in self.carry_levels):
            raise ValueError(
                f"need every carry level in (0, 1) (got {self.carry_levels}); e.g. 0.01, 0.02, 0.04"
            )
        if self.min_stage_audits < 1 or self.wilson_window < self.min_stage_audits:
            raise ValueError(
                f"need 1 <= min_stage_audits <= wilson_window (got {self.min_stage_audits}, {self.wilson_window})"
            )

    @property
    def promotes_on(self) -> str:
        """The evidence that promotes: ``promote_evidence``, else the release rule's own."""
        return self.promote_evidence or default_promote_evidence(self.release_rule)

    @property
    def levels(self) -> tuple[float, ...]:
        """The carry levels u_k this target can use (live must be able to beat target + u_k < 1)."""
        return tuple(u for u in self.carry_levels if self.target + u < 1.0 - 1e-9)

    @property
    def carries(self) -> bool:
        """Whether the carried bound may promote: ``carry`` on, ``e-value`` promotion, a usable level."""
        return self.carry and self.promotes_on == "e-value" and bool(self.levels)

    @property
    def promote_alpha(self) -> float:
        """The own promote process's share of alpha: alpha/2 when carrying (module docstring), else alpha."""
        return self.alpha / 2 if self.carries else self.alpha

    @property
    def carry_alpha(self) -> float:
        """Each side's share of alpha when carrying (live's processes; the disagreement's): alpha/4."""
        return self.alpha / 4

    def for_task(self, task: str, manifest: Any) -> ReleaseRule:
        """This rule as `task`'s signed policy sets it (ratchet_core.task_policy): its own target (the floor keeps
        its distance below the target when the task's target is at or under it), release rule, promote
        evidence, calibration, paired gate, minimum certified bound, delta, candidate slot days and evidence
        spend."""
        policy = (getattr(manifest, "policies", None) or {}).get(task)
        if policy is None:
            return self
        changes: dict[str, Any] = {
            name: value
            for name in (
                "release_rule",
                "promote_evidence",
                "calibration",
                "paired_gate",
                "min_certified",
                "delta",
                "max_candidate_days",
                "evidence_spend_usd",
            )
            if (value := getattr(policy, name)) is not None and value != getattr(self, name)
        }
        comparator = getattr(policy, "comparator", None)
        if comparator is not None and comparator not in TRANSITIVE_COMPARATORS and self.carry:
            changes["carry"] = False  # a custom comparator is not known to be transitive: nothing carries
        if policy.target is not None and policy.target != self.target:
            floor = self.floor if self.floor < policy.target else policy.target - (self.target - self.floor)
            changes.update(target=policy.target, floor=max(floor, policy.target / 2))
        return dataclasses.replace(self, **changes) if changes else self

    def carries_at(self, step: int, beside_live: bool) -> bool:
        """Whether a step may carry: the rule carries, the step is below live, a live version is behind it."""
        return self.carries and beside_live and step < LIVE

    def new_promote(self, beside_live: bool = True) -> BettingEProcess:
        """A step's own promote process: at ``promote_alpha`` when the step may carry (a live version behind
        it), else at alpha (nothing to carry from: the step's whole budget is its own)."""
        return BettingEProcess.promote(1.0 - self.target, self.promote_alpha if beside_live else self.alpha)

    def new_carry_live(self) -> list[BettingEProcess]:
        """A version's carried processes (read while it is live): per level u_k, reject "precision <= target +
        u_k" at carry_alpha / K."""
        a = self.carry_alpha / len(self.levels)
        return [BettingEProcess.promote(1.0 - self.target - u, a, CARRY_MAX_FRACTION) for u in self.levels]

    def new_carry_disagree(self, target_rate: float = 1.0) -> list[BettingEProcess]:
        """A candidate's processes on X = 1{differs from live, in the targeted stream, not kept-and-right} (module
        docstring): per level u_k, reject "E[X] >= target_rate * u_k", i.e. "P(differs and wrong) >= u_k"."""
        a = self.carry_alpha / len(self.levels)
        return [BettingEProcess.promote(target_rate * u, a, CARRY_MAX_FRACTION) for u in self.levels]

    def new_rollback(self) -> BettingEProcess:
        return BettingEProcess.rollback(1.0 - self.floor, self.rollback_alpha)

    def new_restart(self) -> BettingEProcess:
        """A restarted rollback process (its own ``rejected`` is unused: the mixture decides)."""
        return BettingEProcess.rollback(1.0 - self.floor, self.drift_alpha)

    def new_support(self) -> BettingEProcess:
        """The daily support process: rejects "precision <= floor" at ``restore_alpha`` (module docstring)."""
        return BettingEProcess.promote(1.0 - self.floor, self.restore_alpha)


def serving_tracks(release: TaskRelease) -> list[tuple[str, int]]:
    """(version, ladder step) of every version to watch on a task, the release's own version first.

    The release's version at its step; while it is in shadow or canary, also the live version it would replace
    (``previous_live``, which serves the rest of the traffic), at ``live``.
    """
    step = step_of(release)
    if step is None or not release.version:
        return []
    out = [(release.version, step)]
    if (
        release.stage in ("shadow", "canary")
        and release.previous_live
        and release.previous_live != release.version
    ):
        out.append((release.previous_live, LIVE))
    return out


@dataclass
class Track:
    """Evidence about one (version, task) at its current step."""

    version: str
    task: str
    step: int
    promote: BettingEProcess
    rollback: BettingEProcess
    ignored: int = 0  # pair rows that say nothing about precision (pair error, below threshold)
    restarts: list[tuple[int, BettingEProcess]] = field(
        default_factory=list
    )  # (j, drift restart), oldest first
    live_seen: int = 0  # answers seen while live (restart j starts at live_seen = (j - 1) * drift_block)
    drift_rejected_at: int | None = None  # rollback.n when the restart mixture reached 1/drift_alpha
    recent: str = (
        ""  # wilson rule at live: its newest answers, oldest first ("1" = disagreed), <= wilson_window
    )
    since: str = (
        ""  # the day its track started (a candidate: the day it took the slot; tick.decide_tick's today)
    )
    support: BettingEProcess | None = None  # today's support process (module docstring); None: none yet
    support_day: str = ""  # the day `support` started ('' : the track's start)
    carry_live: list[BettingEProcess] = field(default_factory=list)  # the carried processes, whole life
    carry_disagree: list[BettingEProcess] = field(default_factory=list)  # shadow/canary: vs live, per step
    carry_with: str = ""  # the live version carry_disagree is about (VOID: it changed this step)
    target_rate: float | None = None  # the targeted stream's inclusion probability carry_disagree is about
    # mirror rows whose X waits for its targeted row, and those after them, in mirror order: [request_id, X | None]
    carry_pending: list[list] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        version: str,
        task: str,
        step: int,
        rule: ReleaseRule,
        beside_live: bool = True,
        target_rate: float | None = 1.0,
    ) -> Track:
        """A new track at `step`; `beside_live`: a live version serves the rest of the task and a targeted audit
        stream (inclusion probability `target_rate`, the release's ``target_audit_rate``) judges where the two
        differ (the step may carry, so its own promote process has alpha/2; decided at the step's start, so the
        split stays valid)."""
        beside_live = beside_live and target_rate is not None
        carry = rule.carries_at(step, beside_live)
        t = cls(version, task, step, rule.new_promote(carry), rule.new_rollback(), support=rule.new_support())
        t.carry_live = rule.new_carry_live() if rule.carries else []
        return t._carry_at(step, rule, beside_live, target_rate)

    def _carry_at(
        self, step: int, rule: ReleaseRule, beside_live: bool = True, target_rate: float | None = 1.0
    ) -> Track:
        """Fresh processes on X for `step` (below live, beside a live version, with a targeted stream at
        `target_rate`), in place; the carried processes of its own precision (``carry_live``) run for the version's
        whole life."""
        carry = rule.carries_at(step, beside_live) and target_rate is not None
        self.carry_disagree = rule.new_carry_disagree(target_rate or 1.0) if carry else []
        self.target_rate = target_rate if carry else None
        self.carry_with = ""
        self.carry_pending = []
        return self

    def with_target_rate(self, target_rate: float | None) -> Track:
        """The track read under a manifest whose targeted stream has inclusion probability `target_rate`: a step
        whose processes are about another rate carries nothing for the rest of the step (VOID), as when the live
        version changes: each row's X is only exact at the rate the processes assume."""
        if self.carry_disagree and target_rate != self.target_rate:
            return dataclasses.replace(self, carry_with=VOID, carry_pending=[])
        return self

    def to_dict(self) -> dict[str, Any]:
        out = {
            "version": self.version,
            "task": self.task,
            "step": self.step,
            "promote": self.promote.to_json(),
            "rollback": self.rollback.to_json(),
            "ignored": self.ignored,
            "restarts": [[j, p.to_json()] for j, p in self.restarts],
            "live_seen": self.live_seen,
            "drift_rejected_at": self.drift_rejected_at,
        }
        if self.recent:  # only the wilson rule keeps it: a sequential track keeps its state's bytes
            out["recent"] = self.recent
        if self.since:
            out["since"] = self.since
        if self.support is not None:
            out["support"] = self.support.to_json()
            out["support_day"] = self.support_day
        if self.carry_live:
            out["carry_live"] = [p.to_json() for p in self.carry_live]
        if self.carry_disagree:
            out["carry_disagree"] = [p.to_json() for p in self.carry_disagree]
        if self.carry_with:
            out["carry_with"] = self.carry_with
        if self.target_rate is not None:
            out["target_rate"] = self.target_rate
        if self.carry_pending:
            out["carry_pending"] = [list(p) for p in self.carry_pending]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Track:
        return cls(
            d["version"],
            d["task"],
            int(d["step"]),
            BettingEProcess.from_json(d["promote"]),
            BettingEProcess.from_json(d["rollback"]),
            int(d.get("ignored", 0)),
            [(int(j), BettingEProcess.from_json(p)) for j, p in d.get("restarts", [])],
            int(d.get("live_seen", 0)),
            d.get("drift_rejected_at"),
            str(d.get("recent", "")),
            str(d.get("since", "")),
            BettingEProcess.from_json(d["support"]) if d.get("support") else None,
            str(d.get("support_day", "")),
            [BettingEProcess.from_json(p) for p in d.get("carry_live", [])],
            [BettingEProcess.from_json(p) for p in d.get("carry_disagree", [])],
            str(d.get("carry_with", "")),
            None if d.get("target_rate") is None else float(d["target_rate"]),
            [[str(rid), None if x is None else bool(x)] for rid, x in d.get("carry_pending", [])],
        )

    def on_day(self, today: str, rule: ReleaseRule) -> Track:
        """The track on `today`: its support process restarts when the day changed (module docstring)."""
        if not today or (self.support is not None and self.support_day == today):
            return self
        return dataclasses.replace(self, support=rule.new_support(), support_day=today)

    @property
    def supported(self) -> bool:
        """Whether today's answers show precision above the floor at ``restore_alpha`` and no rollback process
        has rejected: the version may take over when the live version is rolled back (``tick.rollback_release``)."""
        return self.support is not None and self.support.rejected and not self.rolled_back

    def at_step(
        self, step: int, rule: ReleaseRule, beside_live: bool = True, target_rate: float | None = 1.0
    ) -> Track:
        """The track after the manifest moved it to `step` (by us or an operator): fresh promote evidence (at
        alpha/2 when `beside_live` with a targeted stream and the rule carries, :meth:`start`)."""
        if step == self.step:
            return self.with_target_rate(target_rate) if step < LIVE else self
        beside_live = beside_live and target_rate is not None
        carry = rule.carries_at(step, beside_live)
        return dataclasses.replace(self, step=step, promote=rule.new_promote(carry))._carry_at(
            step, rule, beside_live, target_rate
        )

    def accepts(self, role: str) -> bool:
        """Whether a pair row of this version with `role` is evidence here: a live version only learns from
        audits of the requests it served; a version in shadow or canary from its shadow answers and audits."""
        return self.step < LIVE or role == "audit"

    def observe(self, error: bool, rule: ReleaseRule) -> None:
        """One audited answer: update every process; while live, start a drift restart every ``drift_block``."""
        if self.step == LIVE:
            if self.live_seen % rule.drift_block == 0:
                j = self.live_seen // rule.drift_block + 1
                self.restarts = [*self.restarts, (j, rule.new_restart())][-rule.drift_keep :]
            self.live_seen += 1
            if rule.release_rule == "wilson":
                self.recent = (self.recent + ("1" if error else "0"))[-rule.wilson_window :]
        self.promote.update(error)
        self.rollback.update(error)
        if self.support is not None:
            self.support.update(error)
        for p in self.carry_live:
            p.update(error)
        for _, proc in self.restarts:
            proc.update(error)
        if self.drift_rejected_at is None and self.drift_e_value >= 1.0 / rule.drift_alpha:
            self.drift_rejected_at = self.rollback.n

    def observe_mirror(self, differs: bool, request_id: str, live_version: str) -> None:
        """One mirror row (the candidate against the answer `live_version` served; ``PairRow.disagrees``): its X is
        0 where the answers agree or the request is outside the targeted stream (u >= p_hi, recomputed here from
        `request_id` as the gateway drew it), else the teacher's verdict, which its targeted row brings
        (:meth:`observe_targeted`). X is fed in mirror order: rows after one that waits for its verdict wait too,
        so the order the processes see never depends on a verdict (module docstring). The processes are about one
        live version per step (another one voids them for the step)."""
        if not self.carry_disagree or self.carry_with == VOID:
            return
        if self.carry_with and self.carry_with != live_version:
            self.carry_with = VOID
            self.carry_pending = []
            return
        self.carry_with = live_version
        judged = differs and unit_hash("audit", request_id) < (self.target_rate or 0.0)
        self.carry_pending.append([request_id, None if judged else False])
        self._feed_carry()

    def observe_targeted(self, differs_wrong: bool, request_id: str) -> None:
        """One targeted row: the teacher's verdict X on a waiting mirror row of the same request (``True``: the
        candidate's differing answer is wrong); a verdict nothing waits for is ignored."""
        if not self.carry_disagree or self.carry_with == VOID:
            return
        for entry in self.carry_pending:
            if entry[0] == request_id and entry[1] is None:
                entry[1] = bool(differs_wrong)
                break
        self._feed_carry()

    def _feed_carry(self) -> None:
        """Feed the processes on X the waiting rows whose X is known, in mirror order; a verdict still missing after
        ``CARRY_PENDING_MAX`` later rows (a lost teacher call) counts as X = 1, which only slows the bound."""
        while self.carry_pending and (
            self.carry_pending[0][1] is not None or len(self.carry_pending) > CARRY_PENDING_MAX
        ):
            _, x = self.carry_pending.pop(0)
            for p in self.carry_disagree:
                p.update(True if x is None else x)

    @property
    def drift_e_value(self) -> float:
        """The restart mixture sum_j E_j / (j (j + 1)) over the kept restarts."""
        return sum(p.e_value / (j * (j + 1)) for j, p in self.restarts)

    @property
    def rolled_back(self) -> bool:
        """Whether either sequential rollback process (whole-life, drift restarts) has rejected: the track's
        e-processes run under every release rule, so this says whether a version is known bad."""
        return self.rollback.rejected or self.drift_rejected_at is not None

    def wilson_sample(self) -> tuple[int, int, str]:
        """(answers, disagreements, what they are) the Wilson interval is over: the stage's answers (the promote
        process restarts at every step), at live the newest answers kept in ``recent``."""
        if self.step == LIVE and self.recent:
            return len(self.recent), self.recent.count("1"), f"of its newest {len(self.recent)} at live"
        return self.promote.n, self.promote.errors, f"at {LADDER[self.step].describe()}"

    def evidence_digest(self) -> str:
        """SHA-256 of the e-process states a decision rests on (part of the effect key)."""
        return digest(self.to_dict())


VOID = "-"  # Track.carry_with when the live version changed during the step

Action = Literal["promote", "rollback", "hold"]


@dataclass
class Decision:
    action: Action
    version: str
    task: str
    from_step: int
    to_step: int | None  # ladder index; None = leave the ladder (rollback)
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def target_label(self) -> str:
        return "rollback" if self.to_step is None else LADDER[self.to_step].label


# --- the rules: one pure function each (module docstring) -------------------------------------------------------
def sequential_rollback(track: Track, rule: ReleaseRule) -> str | None:
    """Why the betting e-processes roll `track` back (whole-life process, then the drift restarts), or None."""
    if track.rollback.rejected:
        return (
            f"{track.rollback.errors} of {track.rollback.n} audited answers disagree with the teacher; "
            f"rollback e-value {track.rollback.e_value:.3g} >= {track.rollback.threshold:g}"
        )
    if track.drift_rejected_at is not None:
        j, first = track.restarts[0]
        return (
            f"{first.errors} of its last {first.n} audited answers disagree with the teacher; drift e-value "
            f"{track.drift_e_value:.3g} >= {1.0 / rule.drift_alpha:g}"
        )
    return None


def wilson_rollback(track: Track, rule: ReleaseRule) -> str | None:
    """Why the Wilson rule rolls `track` back: the upper bound at level 1 - rollback_alpha over the stage's answers
    (at live its newest ``wilson_window``), once there are ``min_stage_audits``, is below the floor; or None."""
    n, errors, where = track.wilson_sample()
    if n < rule.min_stage_audits:
        return None
    upper = wilson_upper(n - errors, n, rule.rollback_alpha)
    if upper >= rule.floor:
        return None
    return (
        f"{errors} of {n} audited answers {where} disagree with the teacher; Wilson upper bound {upper:.4f} "
        f"< floor {rule.floor:g}"
    )


def e_value_promotes(track: Track, rule: ReleaseRule) -> bool:
    """The stage's promote e-process rejects "precision <= target" at alpha (anytime-valid)."""
    return track.promote.rejected


def bound_promotes(track: Track, rule: ReleaseRule) -> bool:
    """The Wilson lower bound at level 1 - alpha over the stage's answers (at least ``min_stage_audits``) exceeds
    the target."""
    n, e = track.promote.n, track.promote.errors
    return n >= rule.min_stage_audits and wilson_lower(n - e, n, rule.alpha) > rule.target


def carried(track: Track, live: Track | None, rule: ReleaseRule) -> int | None:
    """The first level k at which the carried bound shows `track`'s precision above the target (module docstring):
    `live` (the live version serving the rest, at live, not rolled back) rejected "precision <= target + u_k" and
    `track`'s mirror and targeted rows against that same version rejected "P(differs and wrong) >= u_k"; None
    when no level has."""
    if (
        live is None
        or not rule.carries
        or track.step >= LIVE
        or live.step != LIVE
        or live.rolled_back
        or live.drift_e_value >= DRIFT_QUIET / rule.drift_alpha**0.5
        or track.carry_with != live.version
    ):
        return None
    for k, (lp, dp) in enumerate(zip(live.carry_live, track.carry_disagree, strict=False)):
        if lp.rejected and dp.rejected:
            return k
    return None


ROLLBACK_RULES: dict[str, Callable[[Track, ReleaseRule], str | None]] = {
    "sequential": sequential_rollback,
    "wilson": wilson_rollback,
}
PROMOTE_RULES: dict[str, Callable[[Track, ReleaseRule], bool]] = {
    "e-value": e_value_promotes,
    "bound": bound_promotes,
}


def _needed_agreements(proc: BettingEProcess, cap: int = 5000) -> int | None:
    """How many further agreeing answers in a row would make `proc` reject (None if more than `cap`)."""
    if proc.rejected:
        return 0
    probe = BettingEProcess.from_json(proc.to_json())
    for i in range(1, cap + 1):
        probe.update(False)
        if probe.rejected:
            return i
    return None


def _needed_for_bound(track: Track, rule: ReleaseRule, cap: int = 5000) -> int | None:
    """How many further agreeing answers in a row would make the stage's Wilson lower bound exceed the target
    (None if more than `cap`); the bound grows with each agreeing answer, so a binary search finds it."""
    n, e = track.promote.n, track.promote.errors

    def ok(i: int) -> bool:
        return n + i >= rule.min_stage_audits and wilson_lower(n + i - e, n + i, rule.alpha) > rule.target

    if not ok(cap):
        return None
    lo, hi = 0, cap
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def carried_evidence(track: Track, live: Track | None, rule: ReleaseRule) -> dict[str, Any] | None:
    """The carried bound's state (levels, live's processes, the disagreement's), or None when it has none."""
    if not track.carry_disagree and not track.carry_live:
        return None

    def procs(ps: list[BettingEProcess]) -> list[dict[str, Any]]:
        return [
            {"n": p.n, "errors": p.errors, "e_value": _finite(p.e_value), "e_threshold": p.threshold}
            for p in ps
        ]

    out: dict[str, Any] = {
        "levels": list(rule.levels),
        "target_rate": track.target_rate,
        "alpha_own": rule.promote_alpha,
        "alpha_live": rule.carry_alpha,
        "alpha_disagree": rule.carry_alpha,
    }
    if track.carry_live:
        out["own"] = procs(track.carry_live)
    if track.carry_disagree:
        out.update(against=track.carry_with, disagree=procs(track.carry_disagree))
        if live is not None and live.carry_live:
            out["live"] = procs(live.carry_live)
        k = carried(track, live, rule)
        out["carried_level"] = None if k is None else rule.levels[k]
    return out


def evidence_of(track: Track, rule: ReleaseRule, live: Track | None = None) -> dict[str, Any]:
    """The evidence a decision about `track` rests on (a decision's ``evidence``; the audit log keeps it);
    `live`: the live version serving the rest, for the carried bound."""
    p, r = track.promote, track.rollback
    out = {
        "step": LADDER[track.step].label,
        "stage_audits": p.n,
        "stage_disagreements": p.errors,
        "promote_e_value": _finite(p.e_value),
        "total_audits": r.n,
        "total_disagreements": r.errors,
        "rollback_e_value": _finite(r.e_value),
        "e_threshold": p.threshold,
        "drift_e_value": _finite(track.drift_e_value),
        "drift": [
            {
                "restart": j,
                "after_audit": r.n - q.n,
                "audits": q.n,
                "disagreements": q.errors,
                "e_value": _finite(q.e_value),
                "e_threshold": q.threshold,
            }
            for j, q in track.restarts
        ],
        "ignored": track.ignored,
        "support": None
        if track.support is None
        else {
            "day": track.support_day,
            "audits": track.support.n,
            "disagreements": track.support.errors,
            "e_value": _finite(track.support.e_value),
            "e_threshold": track.support.threshold,
        },
        "evidence_digest": track.evidence_digest(),
        "release_rule": rule.release_rule,
        "promote_evidence": rule.promotes_on,
    }
    carry = carried_evidence(track, live, rule)
    if carry is not None:
        out["carried"] = carry
    if rule.release_rule == "wilson" or rule.promotes_on == "bound":
        n, errors, where = track.wilson_sample()
        out["wilson"] = {
            "audits": n,
            "disagreements": errors,
            "over": where,
            "lower": wilson_lower(p.n - p.errors, p.n, rule.alpha) if p.n else 0.0,
            "upper": wilson_upper(n - errors, n, rule.rollback_alpha) if n else 1.0,
            "min_stage_audits": rule.min_stage_audits,
        }
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _promote_text(track: Track, rule: ReleaseRule, live: Track | None = None) -> str:
    """The evidence that promotes, as a message fragment."""
    p = track.promote
    k = None if PROMOTE_RULES[rule.promotes_on](track, rule) else carried(track, live, rule)
    if k is not None and live is not None:
        u, lp, dp = rule.levels[k], live.carry_live[k], track.carry_disagree[k]
        return (
            f"carried bound: {live.version}'s precision > {rule.target + u:g} ({lp.n} audits, {lp.errors} "
            f"disagree, e-value {lp.e_value:.3g} >= {lp.threshold:g}) and P(differs from it and wrong) < {u:g} "
            f"({dp.n} mirrored answers, {dp.errors} differ and were judged wrong at inclusion probability "
            f"{track.target_rate:g}, e-value {dp.e_value:.3g} >= {dp.threshold:g}), so precision > {rule.target:g}"
        )
    if rule.promotes_on == "bound":
        return (
            f"Wilson lower bound {wilson_lower(p.n - p.errors, p.n, rule.alpha) if p.n else 0.0:.4f} > "
            f"{rule.target:g} (level {1 - rule.alpha:g})"
        )
    return f"promote e-value {p.e_value:.3g} >= {p.threshold:g} (evidence precision > {rule.target:g})"


def promotes(track: Track, rule: ReleaseRule, live: Track | None = None) -> bool:
    """Whether `track`'s evidence supports its next step: its own promote rule, or the carried bound."""
    return PROMOTE_RULES[rule.promotes_on](track, rule) or carried(track, live, rule) is not None


def decide(
    track: Track, rule: ReleaseRule, frozen: bool = False, held: str = "", live: Track | None = None
) -> Decision:
    """What the current evidence says for `track` under `rule` (rollback first, then promotion, else hold): the
    one release decision, used by the sensor and the simulator alike. The rule's release rule picks the rollback
    evidence (``ROLLBACK_RULES``) and its promote evidence what promotes (``PROMOTE_RULES``).

    ``frozen`` (releases frozen) or ``held`` (why promotions of this release wait, e.g. an operator forced it)
    turn a promotion into a hold; rollbacks still happen. `live`: the live version serving the rest of the task
    while `track` is in shadow or canary (its carried bound, module docstring)."""
    name = f"{track.version} on {track.task} at {LADDER[track.step].describe()}"
    ev = evidence_of(track, rule, live)
    why = ROLLBACK_RULES[rule.release_rule](track, rule)
    if why:
        # What the alarm is about (tick.rollback_release): the version's whole life, or its recent answers (drift
        # restarts; the Wilson rule's window), after which only versions with evidence on recent traffic serve.
        whole = track.rollback.rejected if rule.release_rule == "sequential" else track.step < LIVE
        ev["rollback_cause"] = "whole-life" if whole else "recent"
        return Decision(
            "rollback",
            track.version,
            track.task,
            track.step,
            None,
            f"rolling back {name}: {why} (evidence precision < {rule.floor:g})",
            ev,
        )
    if track.step < LIVE and promotes(track, rule, live):
        nxt = LADDER[track.step + 1]
        if frozen or held:
            why = held or (
                'releases are frozen; unfreeze with `ratchet admin flag releases_frozen false --reason "..."`'
            )
            return Decision(
                "hold",
                track.version,
                track.task,
                track.step,
                track.step,
                f"holding {name}: evidence supports {nxt.describe()} ({_promote_text(track, rule, live)}) but {why}",
                ev,
            )
        return Decision(
            "promote",
            track.version,
            track.task,
            track.step,
            track.step + 1,
            f"promoting {name} to {nxt.describe()}: {track.promote.n} audits at this step, "
            f"{track.promote.errors} disagree; {_promote_text(track, rule, live)}",
            ev,
        )
    if track.step == LIVE:
        msg = (
            f"{name}: serving; watching for rollback ({track.rollback.n} audits, {track.rollback.errors} "
            f"disagree, rollback e-value {track.rollback.e_value:.3g} of {track.rollback.threshold:g})"
        )
    else:
        if rule.promotes_on == "bound":
            need = _needed_for_bound(track, rule)
            have = f"Wilson lower bound of {rule.target:g} needed"
        else:
            need = _needed_agreements(track.promote)
            have = f"promote e-value {track.promote.e_value:.3g} of {track.promote.threshold:g} needed"
        need_text = f"at least {need} more agreeing audits" if need is not None else "far more audits"
        msg = (
            f"holding {name}: has {track.promote.n} audits at this step ({track.promote.errors} disagree), "
            f"{have}; needs {need_text} for {LADDER[track.step + 1].describe()}"
        )
    return Decision("hold", track.version, track.task, track.step, track.step, msg, ev)


def feed(
    track: Track,
    errors: Iterable[bool | None],
    rule: ReleaseRule,
    frozen: bool = False,
    held: str = "",
    live: Track | None = None,
) -> tuple[Decision, int]:
    """Feed answers one by one until a decision; return it and how many answers were consumed.

    ``None`` in `errors` is an answer that says nothing about precision (counted as ignored). Answers after a
    promote or rollback decision are NOT consumed: the caller keeps them for the next evaluation.
    """
    consumed = 0
    decision = decide(track, rule, frozen, held, live)
    if decision.action != "hold":
        return decision, 0
    rollback = ROLLBACK_RULES[rule.release_rule]
    for err in errors:
        consumed += 1
        if err is None:
            track.ignored += 1
            continue
        track.observe(bool(err), rule)
        # Cheap test first: decide() also works out the hold message, which simulates further audits.
        if rollback(track, rule) or (
            track.step < LIVE and not (frozen or held) and promotes(track, rule, live)
        ):
            return decide(track, rule, frozen, held, live), consumed
    return decide(track, rule, frozen, held, live), consumed


@dataclass(frozen=True)
class FeedbackEvidence:
    """What feedback says of a version against the teacher (module docstring): the pairs, the discordant ones, the
    student's bad ones among them, the e-value and whether it rejected H0 (worse feedback: hold)."""

    pairs: int
    discordant: int
    student_bad: int
    e_value: float
    threshold: float
    worse: bool

    def message(self, version: str, task: str) -> str:
        return (
            f"the application's feedback rates {version}'s answers on {task} worse than the teacher's at the same "
            f"time ({self.student_bad} of {self.discordant} discordant pairs bad for the student, e-value "
            f"{self.e_value:.3g} >= {self.threshold:g}); promotions wait while audits still decide rollbacks"
        )


def feedback_evidence(observations: Iterable[tuple[str, bool]], alpha: float = 0.05) -> FeedbackEvidence:
    """`observations`: (served_by, bad) in arrival order; the paired sign test of the module docstring."""
    proc = BettingEProcess.rollback(0.5, alpha)
    student: list[bool] = []
    teacher: list[bool] = []
    pairs = discordant = 0
    for served_by, bad in observations:
        (student if served_by == "student" else teacher).append(bool(bad))
        if student and teacher:
            s, t = student.pop(0), teacher.pop(0)
            pairs += 1
            if s != t:
                discordant += 1
                proc.update(s)
    return FeedbackEvidence(pairs, discordant, proc.errors, proc.e_value, proc.threshold, proc.rejected)


def simulate(
    error_stream: Sequence[bool], rule: ReleaseRule, start_step: int = 0
) -> list[tuple[int, Decision]]:
    """Walk a version along the ladder on a stream of audited answers (the sensor's logic without I/O).

    Returns ``(answers consumed so far, decision)`` for every promote/rollback; stops after a rollback or when
    the stream ends.
    """
    track = Track.start("sim", "sim", start_step, rule)
    pos = 0
    events: list[tuple[int, Decision]] = []
    while pos <= len(error_stream):
        decision, used = feed(track, error_stream[pos:], rule)
        pos += used
        if decision.action == "hold":
            break
        events.append((pos, decision))
        if decision.action == "rollback":
            break
        assert decision.to_step is not None
        track = track.at_step(decision.to_step, rule)
    return events
