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
from ratchet_core.task_policy import default_promote_evidence
from ratchet_stats.bounds import wilson_lower, wilson_upper
from ratchet_stats.canonical import digest
from ratchet_stats.eprocess import BettingEProcess


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
        if self.min_stage_audits < 1 or self.wilson_window < self.min_stage_audits:
            raise ValueError(
                f"need 1 <= min_stage_audits <= wilson_window (got {self.min_stage_audits}, {self.wilson_window})"
            )

    @property
    def promotes_on(self) -> str:
        """The evidence that promotes: ``promote_evidence``, else the release rule's own."""
        return self.promote_evidence or default_promote_evidence(self.release_rule)

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
        if policy.target is not None and policy.target != self.target:
            floor = self.floor if self.floor < policy.target else policy.target - (self.target - self.floor)
            changes.update(target=policy.target, floor=max(floor, policy.target / 2))
        return dataclasses.replace(self, **changes) if changes else self

    def new_promote(self) -> BettingEProcess:
        return BettingEProcess.promote(1.0 - self.target, self.alpha)

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

    @classmethod
    def start(cls, version: str, task: str, step: int, rule: ReleaseRule) -> Track:
        return cls(version, task, step, rule.new_promote(), rule.new_rollback(), support=rule.new_support())

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

    def at_step(self, step: int, rule: ReleaseRule) -> Track:
        """The track after the manifest moved it to `step` (by us or an operator): fresh promote evidence."""
        if step == self.step:
            return self
        return dataclasses.replace(self, step=step, promote=rule.new_promote())

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
        for _, proc in self.restarts:
            proc.update(error)
        if self.drift_rejected_at is None and self.drift_e_value >= 1.0 / rule.drift_alpha:
            self.drift_rejected_at = self.rollback.n

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


def evidence_of(track: Track, rule: ReleaseRule) -> dict[str, Any]:
    """The evidence a decision about `track` rests on (a decision's ``evidence``; the audit log keeps it)."""
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


def _promote_text(track: Track, rule: ReleaseRule) -> str:
    """The evidence that promotes, as a message fragment."""
    p = track.promote
    if rule.promotes_on == "bound":
        return (
            f"Wilson lower bound {wilson_lower(p.n - p.errors, p.n, rule.alpha) if p.n else 0.0:.4f} > "
            f"{rule.target:g} (level {1 - rule.alpha:g})"
        )
    return f"promote e-value {p.e_value:.3g} >= {p.threshold:g} (evidence precision > {rule.target:g})"


def decide(track: Track, rule: ReleaseRule, frozen: bool = False, held: str = "") -> Decision:
    """What the current evidence says for `track` under `rule` (rollback first, then promotion, else hold): the
    one release decision, used by the sensor and the simulator alike. The rule's release rule picks the rollback
    evidence (``ROLLBACK_RULES``) and its promote evidence what promotes (``PROMOTE_RULES``).

    ``frozen`` (releases frozen) or ``held`` (why promotions of this release wait, e.g. an operator forced it)
    turn a promotion into a hold; rollbacks still happen."""
    name = f"{track.version} on {track.task} at {LADDER[track.step].describe()}"
    ev = evidence_of(track, rule)
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
    if track.step < LIVE and PROMOTE_RULES[rule.promotes_on](track, rule):
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
                f"holding {name}: evidence supports {nxt.describe()} ({_promote_text(track, rule)}) but {why}",
                ev,
            )
        return Decision(
            "promote",
            track.version,
            track.task,
            track.step,
            track.step + 1,
            f"promoting {name} to {nxt.describe()}: {track.promote.n} audits at this step, "
            f"{track.promote.errors} disagree; {_promote_text(track, rule)}",
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
    track: Track, errors: Iterable[bool | None], rule: ReleaseRule, frozen: bool = False, held: str = ""
) -> tuple[Decision, int]:
    """Feed answers one by one until a decision; return it and how many answers were consumed.

    ``None`` in `errors` is an answer that says nothing about precision (counted as ignored). Answers after a
    promote or rollback decision are NOT consumed: the caller keeps them for the next evaluation.
    """
    consumed = 0
    decision = decide(track, rule, frozen, held)
    if decision.action != "hold":
        return decision, 0
    rollback, promotes = ROLLBACK_RULES[rule.release_rule], PROMOTE_RULES[rule.promotes_on]
    for err in errors:
        consumed += 1
        if err is None:
            track.ignored += 1
            continue
        track.observe(bool(err), rule)
        # Cheap test first: decide() also works out the hold message, which simulates further audits.
        if rollback(track, rule) or (track.step < LIVE and not (frozen or held) and promotes(track, rule)):
            return decide(track, rule, frozen, held), consumed
    return decide(track, rule, frozen, held), consumed


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
