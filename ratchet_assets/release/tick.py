"""One release tick, decided without I/O: what the Dagster sensor and ``ratchet sim`` both run.

:func:`decide_tick` takes the current release manifest, the newest certified candidate of each task, the
e-process tracks from the last tick, the unread audit evidence (batches of :class:`PairRow`, in order) and the
release rule, and returns a :class:`TickPlan`:

1. admissions: the newest candidate of a task enters ``shadow`` when releases are not frozen and the task's
   admission rules pass (``ratchet_assets.release.admission``: its certificate bounds precision at or above the
   target and ``min_certified``, a threshold under the task's calibration, the paired gate); else it waits, with a
   line saying why. A task has ONE candidate slot (shadow or canary): a newer certified version waits in a
   one-deep queue (the newest wins it; older queued ones are skipped, named in the admission) while a decision
   about the version in the slot is within reach, and preempts it (:func:`preemption`) only when that version has
   held the slot more than ``max_candidate_days`` (the policy's, else the evidence budget's expected days to live
   plus one) or is significantly worse on the same golden rows (exact McNemar at the task's delta). A preempted
   version leaves the manifest, the live version behind it keeps serving, and the versions registry records it as
   ``superseded`` (not rolled back) with its evidence and the preemption's in the audit log. Never a canary with
   nothing live behind it, nor one an operator forced (:func:`supersedable`). The admission carries the evidence
   budget's audit rate (``release.budget``) into the release. A version re-certified where it already is (shadow,
   canary, live; ``release.content``) starts nothing;
2. the tracks (``decision.serving_tracks``) of the manifest after those admissions, the old ones carried over (a step
   moved by an operator resets promote evidence, never rollback evidence);
3. at most one decision (``decision.decide`` / ``decision.feed``): first from evidence already in hand (a promotion
   held while frozen), else from the evidence rows in order, stopping at the first promote/rollback; the plan
   says which batches were read to the end and the row it stopped at, so the caller's watermark consumes exactly
   those;
4. hold lines for every other track.

The decision does not depend on the clock: evidence order alone decides (the e-processes are anytime-valid). Only
the queue reads a day (`today`, the caller's: the sensor's UTC date, the simulator's day): how long a candidate
has held its slot.

The callers apply the plan with the pure helpers below: :func:`admit` and :func:`apply_decision` change a draft
manifest (raising :class:`ManifestMoved` or :class:`Frozen` when the manifest moved since the plan was made) and
:func:`admission_statuses` / :func:`decision_statuses` say how the versions registry changes.
``ratchet_assets.release.control.release_tick`` does it on the control DB and the lake (signed manifests, effect
ledger); ``ratchet_assets.sim.engine`` on an in-memory manifest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from ratchet_assets.release.admission import Candidate, admission_problem, calibrated_threshold
from ratchet_assets.release.budget import DEFAULT_SLOT_DAYS, evidence_budget, watch_rate
from ratchet_assets.release.decision import (
    LADDER,
    LIVE,
    ROLLBACK_RULES,
    Decision,
    ReleaseRule,
    Track,
    carried,
    decide,
    evidence_of,
    feed,
    serving_tracks,
)
from ratchet_assets.release.evidence import PairRow
from ratchet_core import manifest as mf
from ratchet_stats.mcnemar import mcnemar_exact


class ManifestMoved(Exception):
    """The manifest moved since the evidence was read (an operator acted): drop the decision."""


class Frozen(Exception):
    """Releases were frozen between reading the flags and publishing."""


@dataclass(frozen=True)
class Admission:
    """Put `version` into shadow on `task`; `retire`: the task's older candidates (never served) it retires;
    `replaces`: the version in shadow or canary it supersedes ('' for none), with that version's evidence."""

    version: str
    task: str
    threshold: float | None
    message: str
    retire: tuple[str, ...] = ()
    replaces: str = ""
    replaced_evidence: dict[str, Any] = field(default_factory=dict)
    audit_rate: float | None = (
        None  # the evidence budget's rate while it is in shadow or canary (release.budget)
    )
    target_audit_rate: float | None = (
        None  # the budget's targeted stream beside a live version (release.budget)
    )


@dataclass(frozen=True)
class StatusChange:
    """One versions-registry update: (version, task) gets `status` at manifest `stage`."""

    version: str
    task: str
    status: str
    stage: str
    note: str


@dataclass
class TickPlan:
    manifest: mf.Manifest  # the manifest once the admissions apply (tracks and decision are about it)
    admissions: list[Admission] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # candidates not admitted, and why
    tracks: dict[tuple[str, str], Track] = field(default_factory=dict)
    decision: Decision | None = None
    read: list[str] = field(default_factory=list)  # evidence batches read to the end
    stop: PairRow | None = None  # the row the decision was made on (read up to and including it)
    holds: list[str] = field(default_factory=list)  # hold lines of the tracks the decision is not about
    # task -> the audit rate of a live version serving alone (budget.watch_rate); set by apply_decision
    watch_rates: dict[str, float] = field(default_factory=dict)

    def tracks_after(self, rule: ReleaseRule) -> dict[tuple[str, str], Track]:
        """The tracks once the decision applies: the decided track moves (promote) or leaves (rollback)."""
        out: dict[tuple[str, str], Track] = {}
        d = self.decision
        for key, t in self.tracks.items():
            if d is None or key != (d.version, d.task):
                out[key] = t
            elif d.to_step is not None:
                rel = self.manifest.task(t.task)
                out[key] = t.at_step(
                    d.to_step, rule.for_task(t.task, self.manifest), beside_live(rel, t.version)
                )
        return out


def tracks_for(
    manifest: mf.Manifest, previous: Mapping[tuple[str, str], Track], rule: ReleaseRule, today: str = ""
) -> dict[tuple[str, str], Track]:
    """A track per (version, task) serving in `manifest`, carried over from `previous` (moved to its step); a new
    one starts on `today` (``Track.since``); each one's support process restarts when the day changed
    (``Track.on_day``)."""
    tracks: dict[tuple[str, str], Track] = {}
    for task, rel in sorted(manifest.tasks.items()):
        for version, step in serving_tracks(rel):
            prev = previous.get((version, task))
            task_rule = rule.for_task(task, manifest)
            beside = beside_live(rel, version)
            rate = manifest.target_audit_rate(task) if beside else None
            if prev:
                tracks[(version, task)] = prev.at_step(step, task_rule, beside, rate).on_day(today, task_rule)
            else:
                t = Track.start(version, task, step, task_rule, beside, rate)
                t.since = t.support_day = today
                tracks[(version, task)] = t
    return tracks


def beside_live(rel: mf.TaskRelease, version: str) -> bool:
    """Whether `version` is the candidate of `rel` with a live version serving the rest (its steps may carry)."""
    return rel.stage in ("shadow", "canary") and rel.version == version and bool(rel.previous_live)


def days_between(first: str, last: str) -> int | None:
    """Whole days from ISO day `first` to `last` (None when either is unknown)."""
    if not first or not last:
        return None
    return (date.fromisoformat(last[:10]) - date.fromisoformat(first[:10])).days


def preemption(
    c: Candidate, slot: Track | None, rule: ReleaseRule, today: str, slot_days: int = DEFAULT_SLOT_DAYS
) -> tuple[str | None, dict[str, Any]]:
    """Whether newcomer `c` may take the candidate slot from `slot`'s version (None: it waits), and the evidence.

    It may when the slot's version has held it more than ``max_candidate_days`` (the policy's, else `slot_days`:
    the evidence budget's expected days to live plus one, ``release.budget``) (stale), or when `c`'s certificate
    compares it with that version on the same golden rows and exact one-sided McNemar says the version in the
    slot is worse at level ``delta`` (p = P(B >= b), B ~ Binom(b + c, 1/2), b = rows only the newcomer got right;
    ``ratchet_stats.mcnemar``). This test spends the certificate's delta, as the paired gate does; it decides only
    which certified version is tried first, never what serves."""
    limit = rule.max_candidate_days if rule.max_candidate_days is not None else slot_days
    evidence: dict[str, Any] = {"max_candidate_days": limit}
    if slot is None:
        return "no evidence about the version in the slot", evidence
    age = days_between(slot.since, today)
    evidence.update(slot_since=slot.since, today=today, slot_days=age, slot_evidence=evidence_of(slot, rule))
    if age is not None and age > limit:
        return (
            f"{slot.version} has held the candidate slot {age} days (> {limit})",
            evidence,
        )
    if c.paired is not None and c.paired.baseline == slot.version:
        test = mcnemar_exact(c.paired.b, c.paired.c, alternative="greater")
        evidence["mcnemar"] = {"b": c.paired.b, "c": c.paired.c, "p": test.p_value, "delta": rule.delta}
        if test.p_value <= rule.delta:
            return (
                f"on the same golden rows {slot.version} is worse than {c.version} (right only for {c.version} "
                f"{c.paired.b}, only for {slot.version} {c.paired.c}; exact McNemar p = {test.p_value:.3g} <= "
                f"{rule.delta:g})"
            ), evidence
    return None, evidence


def decide_tick(
    manifest: mf.Manifest,
    candidates: Iterable[Candidate],
    previous: Mapping[tuple[str, str], Track],
    evidence: Iterable[tuple[str, Sequence[PairRow]]],
    rule: ReleaseRule,
    feedback_holds: Mapping[tuple[str, str], str] | None = None,
    today: str = "",
    traffic: Mapping[str, tuple[float, float]] | None = None,
) -> TickPlan:
    """One evaluation of release control (module docstring). `candidates` in registration order (the last of a
    task is the newest); `evidence`: (batch name, unread rows) in order, read lazily and only as far as needed;
    `feedback_holds`: (version, task) -> why the application's feedback holds its promotions
    (``decision.feedback_evidence``); `today`: the ISO day of this evaluation (how long a candidate has held its
    slot); `traffic`: task -> (requests a day, the teacher's mean price of one answer), for the evidence budget
    (``release.budget``; a task without it gets no budget rate)."""
    newest: dict[str, Candidate] = {}
    older: dict[str, list[str]] = {}
    for c in candidates:
        if c.task in newest:
            older.setdefault(c.task, []).append(newest[c.task].version)
        newest[c.task] = c
    current = manifest.model_copy(deep=True)
    plan = TickPlan(manifest=current)
    for task, c in sorted(newest.items()):
        cur = current.task(task)
        task_rule = rule.for_task(task, current)
        if cur.version == c.version and cur.stage in ("shadow", "canary", "live"):
            continue  # re-certified where it already is (release.content): no rollout
        replaces = cur.version if cur.stage in ("shadow", "canary") and cur.version != c.version else ""
        if replaces and cur.forced:
            plan.waiting.append(
                f"{c.version} on {task} waits: an operator forced {cur.version} into {cur.stage} "
                "(`ratchet admin promote --force`); roll it back or promote it by hand"
            )
            continue
        if replaces and not supersedable(cur):
            plan.waiting.append(
                f"{c.version} on {task} waits: {cur.version} is in canary {cur.canary_percent:g}% with no live "
                "version behind it (the only student serving the task): it must reach live or roll back"
            )
            continue
        prev = previous.get((replaces, task)) if replaces else None
        if prev is not None and ROLLBACK_RULES[task_rule.release_rule](prev, task_rule):
            plan.waiting.append(
                f"{c.version} on {task} waits: the evidence in hand rolls {replaces} back first (a rollback, "
                "not a supersede)"
            )
            continue
        live = cur.live_version
        known = (traffic or {}).get(task)
        live_track = previous.get((live, task)) if live else None
        budget = evidence_budget(
            task_rule,
            *(known or (0.0, 0.0)),
            base_rate=_base_rate(current, task),
            live=bool(live),
            carry_level=_carry_ready(live_track, task_rule),
        )
        slot_track = previous.get((replaces, task)) if replaces else None
        preempt_evidence: dict[str, Any] = {}
        if replaces:
            # One candidate slot per task: the newcomer waits in a one-deep queue (the newest wins it) while a
            # decision about the version in the slot is within reach; it preempts a stale or worse one.
            why_preempt, preempt_evidence = preemption(c, slot_track, task_rule, today, budget.slot_days)
            if why_preempt is None:
                age = preempt_evidence.get("slot_days")
                mc = preempt_evidence.get("mcnemar")
                paired = (
                    f"; on the same golden rows McNemar p = {mc['p']:.3g} > {task_rule.delta:g}"
                    if mc
                    else "; its certificate does not compare them"
                )
                plan.waiting.append(
                    f"{c.version} on {task} waits behind {cur.version} (in {cur.stage}, "
                    f"{'?' if age is None else age} of {preempt_evidence['max_candidate_days']} days in the "
                    f"slot{paired})"
                )
                continue
        if current.flags.releases_frozen:
            plan.waiting.append(f"{c.version} on {task} waits: releases are frozen")
            continue
        why_not = admission_problem(c, task_rule, cur.live_version)
        if why_not:
            plan.waiting.append(f"{c.version} on {task} is not admitted: {why_not}")
            continue
        rate = None if budget.free or known is None else budget.rate
        target_rate = None if budget.free else budget.target_rate
        message = f"admitting {c.version} on {task} to shadow: certified by {c.source}"
        if rate is not None:
            message += f"; {budget.explain()}"
        skipped = [v for v in older.get(task, []) if v != c.version]
        if skipped:
            message += f"; skips {', '.join(skipped)} (a newer certified version won the queue)"
        replaced_evidence: dict[str, Any] = {}
        if replaces:
            step = LADDER[serving_tracks(cur)[0][1]].describe()
            if prev is not None:
                replaced_evidence = evidence_of(prev, task_rule)
            seen = (
                f"{prev.rollback.n} audited answers, {prev.rollback.errors} disagreeing, kept in the audit log"
                if prev is not None
                else "no evidence yet"
            )
            message += (
                f"; preempts {replaces} at {step} ({seen}), which was not rolled back: "
                f"{preemption(c, prev, task_rule, today, budget.slot_days)[0]}"
            )
            replaced_evidence = {**replaced_evidence, "preemption": preempt_evidence}
        adm = Admission(
            c.version,
            task,
            calibrated_threshold(c, task_rule),
            message,
            tuple(skipped),
            replaces,
            replaced_evidence,
            rate,
            target_rate,
        )
        admit(current, adm)
        plan.admissions.append(adm)
    for task, known in sorted((traffic or {}).items()):
        plan.watch_rates[task] = watch_rate(
            rule.for_task(task, current), *known, base_rate=_base_rate(current, task)
        )
    frozen = current.flags.releases_frozen
    plan.tracks = tracks = tracks_for(current, previous, rule, today)

    def live_of(t: Track) -> Track | None:
        """The live version serving the rest of `t`'s task while `t` is in shadow or canary."""
        prev = current.task(t.task).previous_live
        return tracks.get((prev, t.task)) if t.step < LIVE and prev else None

    def candidate_of(t: Track) -> Track | None:
        """The candidate in the slot beside `t`, when `t` is the live version serving the rest."""
        rel = current.task(t.task)
        if t.step != LIVE or rel.stage not in ("shadow", "canary") or rel.previous_live != t.version:
            return None
        return tracks.get((rel.version, t.task))

    def held(t: Track) -> str:
        rel = current.task(t.task)
        if rel.forced and rel.version == t.version:
            return "an operator forced it here (`ratchet admin promote --force`): promote it by hand"
        return (feedback_holds or {}).get((t.version, t.task), "")

    decision: Decision | None = None
    for t in tracks.values():  # evidence already in hand (e.g. a promotion held while frozen)
        d = decide(t, rule.for_task(t.task, current), frozen, held(t), live_of(t))
        if d.action != "hold":
            decision = d
            break
    if decision is None:
        for name, rows in evidence:
            for row in rows:
                t = tracks.get((row.version, row.task))
                if t is None:
                    continue
                task_rule = rule.for_task(t.task, current)
                if row.role in ("mirror", "targeted"):  # the candidate against live (decision, carried bound)
                    if t.step >= LIVE:
                        continue
                    live = live_of(t)
                    if row.role == "mirror":
                        prev_live = current.task(t.task).previous_live or ""
                        t.observe_mirror(bool(row.disagrees), row.request_id, prev_live)
                    else:
                        t.observe_targeted(bool(row.differs_wrong), row.request_id)
                    if not (frozen or held(t)) and carried(t, live, task_rule) is not None:
                        decision, plan.stop = decide(t, task_rule, frozen, held(t), live), row
                        break
                    continue
                if not t.accepts(row.role):
                    continue
                d, _ = feed(t, [row.error], task_rule, frozen, held(t), live_of(t))
                cand = candidate_of(t) if d.action == "hold" else None
                if (
                    cand is not None
                    and not (frozen or held(cand))
                    and carried(cand, t, task_rule) is not None
                ):
                    d = decide(cand, task_rule, frozen, held(cand), t)  # live's audit completed the bound
                if d.action != "hold":
                    decision, plan.stop = d, row
                    break
            if decision is not None:
                break
            plan.read.append(name)
    plan.decision = decision
    for t in tracks.values():
        d = decide(t, rule.for_task(t.task, current), frozen, held(t), live_of(t))
        if d.action == "hold" and not (decision and (t.version, t.task) == (decision.version, decision.task)):
            plan.holds.append(d.message)
    return plan


# --- applying a plan (pure: a draft manifest in, the registry changes out) -----------------------------------------
def release_for(
    step: int,
    version: str,
    threshold: float | None,
    current: mf.TaskRelease,
    forced: bool = False,
    audit_rate: float | None = None,
    target_audit_rate: float | None = None,
) -> mf.TaskRelease:
    """The task's release at ladder `step` of `version`, keeping the previous live version to fall back to;
    `forced`: an operator's ``--force`` put it there (``TaskRelease.forced``); `audit_rate`: the evidence budget's
    rate while in shadow or canary (default: the current release's, when it is the same version's);
    `target_audit_rate`: the budget's targeted stream while in shadow or canary beside a live version (the same
    default)."""
    s = LADDER[step]

    def rollout_rate(given: float | None, current_rate: float | None) -> float | None:
        """A rate of shadow or canary (none once live): the one given, else the current release's when it is the
        same version's."""
        if s.stage == "live":
            return None
        if given is not None:
            return given
        return current_rate if current.version == version else None

    if current.stage == "live" and current.version != version:
        prev, prev_thr = current.version, current.threshold
    else:
        prev, prev_thr = current.previous_live, current.previous_threshold
    return mf.TaskRelease(
        stage=s.stage,
        version=version,
        canary_percent=s.percent,
        threshold=threshold,
        previous_live=prev,
        previous_threshold=prev_thr,
        forced=forced,
        audit_rate=rollout_rate(audit_rate, current.audit_rate),
        target_audit_rate=rollout_rate(target_audit_rate, current.target_audit_rate),
    )


def incumbent(rel: mf.TaskRelease) -> str | None:
    """The version a night's certificate compares its adapter with (McNemar on the same golden rows): the candidate
    in the task's slot (shadow or canary), else the live version; None when the teacher serves. A newcomer that is
    significantly better than the candidate may preempt it (:func:`preemption`); once that candidate is live, the
    comparison is with live, which the paired gate needs."""
    if rel.stage in ("shadow", "canary") and rel.version:
        return rel.version
    return rel.live_version


def _carry_ready(live: Track | None, rule: ReleaseRule) -> float | None:
    """The largest carry level at which `live`'s carried process has rejected (its precision is known above
    target + u), or None: the evidence budget then counts on mirrored answers (``release.budget``)."""
    if live is None or not rule.carries or live.rolled_back:
        return None
    ready = [u for u, p in zip(rule.levels, live.carry_live, strict=False) if p.rejected]
    return max(ready) if ready else None


def _base_rate(m: mf.Manifest, task: str) -> float:
    """The task's ordinary audit rate (its policy's, else the flag): what the evidence budget never goes below."""
    policy = m.policies.get(task)
    return m.flags.audit_rate if policy is None or policy.audit_rate is None else policy.audit_rate


def rolled_back(current: mf.TaskRelease) -> mf.TaskRelease:
    """Back to the previous live version (with its threshold), or to the teacher when there was none."""
    if current.previous_live:
        return mf.TaskRelease(
            stage="live",
            version=current.previous_live,
            canary_percent=100.0,
            threshold=current.previous_threshold,
        )
    return mf.TaskRelease(stage="teacher")


def predecessor(history: Sequence[mf.Manifest], task: str, version: str) -> tuple[str, float | None] | None:
    """(version, threshold) that was live on `task` before `version`: the ``previous_live`` of the newest manifest
    (of `history`, oldest first) in which `version` is live with one; None when there is none."""
    for m in reversed(history):
        rel = m.task(task)
        if (
            rel.stage == "live"
            and rel.version == version
            and rel.previous_live
            and rel.previous_live != version
        ):
            return rel.previous_live, rel.previous_threshold
    return None


def rollback_release(
    current: mf.TaskRelease,
    task: str,
    version: str,
    history: Sequence[mf.Manifest] = (),
    healthy: Callable[[str], bool] = lambda v: True,
    supported: Callable[[str], bool] = lambda v: False,
    recent: bool = False,
) -> mf.TaskRelease:
    """The task's release once `version` is rolled back: the one rollback-target rule, used by the sensor and
    ``ratchet sim`` alike (both through :func:`apply_decision`). `version` is the release's own version (shadow,
    canary or live) or, mid-rollout, the live version behind it (``previous_live``).

    The best version the evidence still supports serves instead ("leave drift fast"):

    - a candidate (shadow/canary) is rolled back: the live version behind it serves again, as live (it has served
      the rest of the traffic all along, under its own rollback processes);
    - the live version behind a candidate is rolled back and the candidate is ``supported`` (today's own answers
      show precision above the floor at ``restore_alpha``, ``decision.Track.supported``): the candidate, the
      newest certified version, takes over as live;
    - otherwise an earlier live version (the live version's ``previous_live``, or mid-rollout its predecessor
      from `history`) when ``healthy`` (never rolled back, its processes quiet) and either ``supported`` or
      the alarm is about the version's whole life (``recent`` False: the version itself is bad, what a bad deploy
      looks like); after an alarm on recent answers (``recent``: drift restarts, the Wilson window) an earlier
      version without evidence on today's traffic is not trusted;
    - else the teacher (mid-rollout: the candidate keeps its stage and the teacher serves the rest).

    A restored live version keeps its own healthy predecessor (from `history`) as ``previous_live``. Raises
    ValueError when `version` is not serving `task` in `current`.
    """

    def ok(fallback: tuple[str, float | None] | None) -> tuple[str, float | None] | None:
        return fallback if fallback and fallback[0] != version and healthy(fallback[0]) else None

    def usable(fallback: tuple[str, float | None] | None) -> tuple[str, float | None] | None:
        fallback = ok(fallback)
        return fallback if fallback and (supported(fallback[0]) or not recent) else None

    def restore(fallback: tuple[str, float | None] | None) -> mf.TaskRelease:
        if fallback is None:
            return mf.TaskRelease(stage="teacher")
        before = ok(predecessor(history, task, fallback[0]))
        return mf.TaskRelease(
            stage="live",
            version=fallback[0],
            canary_percent=100.0,
            threshold=fallback[1],
            previous_live=before[0] if before and before[0] != fallback[0] else None,
            previous_threshold=before[1] if before and before[0] != fallback[0] else None,
        )

    prev = (current.previous_live, current.previous_threshold) if current.previous_live else None
    if current.version == version and current.stage in ("shadow", "canary"):
        return restore(ok(prev))
    if current.version == version and current.stage == "live":
        return restore(usable(prev))
    if current.stage in ("shadow", "canary") and current.previous_live == version:
        candidate = (current.version, current.threshold)
        if current.version and ok(candidate) and supported(current.version):
            return restore(candidate)
        fallback = usable(predecessor(history, task, version))
        return current.model_copy(
            update={
                "previous_live": fallback[0] if fallback else None,
                "previous_threshold": fallback[1] if fallback else None,
                # nothing live behind the candidate: nothing to mirror, no targeted stream
                "target_audit_rate": current.target_audit_rate if fallback else None,
            }
        )
    raise ValueError(f"{version} is not serving {task} ({current.stage} {current.version or '(teacher)'})")


def healthy_versions(
    statuses: Mapping[str, str], tracks: Mapping[tuple[str, str], Track], task: str
) -> Callable[[str], bool]:
    """Whether a version may serve `task` again after a rollback: not rolled back or rejected in the registry
    (`statuses`: version -> status on `task`) and its rollback processes quiet."""

    def healthy(version: str) -> bool:
        t = tracks.get((version, task))
        return statuses.get(version) not in ("rolled_back", "rejected") and (t is None or not t.rolled_back)

    return healthy


def supported_versions(tracks: Mapping[tuple[str, str], Track], task: str) -> Callable[[str], bool]:
    """Whether a version's own answers today support it as a rollback target on `task` (``Track.supported``);
    a version without a track has no evidence on today's traffic."""

    def supported(version: str) -> bool:
        t = tracks.get((version, task))
        return t is not None and t.supported

    return supported


def admit(m: mf.Manifest, adm: Admission) -> None:
    """Put the admitted version into shadow in draft `m`, in place of the version it supersedes (the live version
    behind that one stays ``previous_live``); raises ManifestMoved when the task is not where the plan saw it."""
    cur = m.task(adm.task)
    if m.flags.releases_frozen:
        raise ManifestMoved("releases are frozen now")
    if adm.replaces:
        if cur.stage not in ("shadow", "canary") or cur.version != adm.replaces or cur.forced:
            raise ManifestMoved(f"{adm.task} is now {cur.stage} {cur.version or '(teacher)'}")
    elif cur.stage not in ("teacher", "live"):
        raise ManifestMoved(f"{adm.task} is now {cur.stage}")
    if adm.replaces and not supersedable(cur):
        raise ManifestMoved(f"{adm.task} is now canary {cur.version} with nothing live behind it")
    m.tasks[adm.task] = release_for(
        0, adm.version, adm.threshold, cur, audit_rate=adm.audit_rate, target_audit_rate=adm.target_audit_rate
    )


def supersedable(rel: mf.TaskRelease) -> bool:
    """Whether a newer certified version may take the place of `rel`'s version: one in shadow (it serves nothing),
    or in canary with the live version serving the rest (that one keeps serving while the newcomer earns its
    evidence). A canary with nothing live behind it is the only student serving the task: replacing it would
    hand its traffic back to the teacher and restart the rollout each night, so it finishes or rolls back."""
    return rel.stage == "shadow" or (rel.stage == "canary" and bool(rel.previous_live))


def apply_decision(
    m: mf.Manifest,
    decision: Decision,
    history: Sequence[mf.Manifest] = (),
    healthy: Callable[[str], bool] = lambda v: True,
    supported: Callable[[str], bool] = lambda v: False,
    watch_rate: float | None = None,
) -> None:
    """Apply a promote/rollback to draft `m` (a rollback's target: :func:`rollback_release`, told by the decision's
    ``rollback_cause`` whether the alarm was about recent answers); raises ManifestMoved (the version left that
    step) or Frozen. `watch_rate` (``TickPlan.watch_rates``, ``budget.watch_rate``): the audit rate of a live
    version that now serves the task alone (no candidate in the slot)."""
    cur = m.task(decision.task)
    if (decision.version, decision.from_step) not in serving_tracks(cur):
        raise ManifestMoved(f"{decision.task} is now {cur.stage} {cur.version or '(teacher)'}")
    if decision.action == "rollback":
        recent = decision.evidence.get("rollback_cause") == "recent"
        m.tasks[decision.task] = _watched(
            rollback_release(cur, decision.task, decision.version, history, healthy, supported, recent),
            watch_rate,
        )
        return
    if m.flags.releases_frozen:
        raise Frozen("releases were frozen")
    if cur.forced:
        raise ManifestMoved(f"an operator forced {cur.version} on {decision.task}")
    assert decision.to_step is not None
    m.tasks[decision.task] = _watched(
        release_for(decision.to_step, decision.version, cur.threshold, cur), watch_rate
    )


def _watched(rel: mf.TaskRelease, rate: float | None) -> mf.TaskRelease:
    """`rel` with the watch rate when it is a live version serving alone (``Manifest.audit_rate`` reads it)."""
    if rel.stage != "live" or rate is None:
        return rel
    return rel.model_copy(update={"audit_rate": rate})


def admission_statuses(adm: Admission) -> list[StatusChange]:
    """Registry changes of an admission: the newcomer in shadow, the version it replaces ``superseded``, older
    candidates that never served ``retired``."""
    out = [StatusChange(adm.version, adm.task, "shadow", "shadow", adm.message)]
    if adm.replaces:
        out.append(
            StatusChange(adm.replaces, adm.task, "superseded", "teacher", f"superseded by {adm.version}")
        )
    out += [StatusChange(v, adm.task, "retired", "teacher", f"replaced by {adm.version}") for v in adm.retire]
    return out


def decision_statuses(decision: Decision, rel: mf.TaskRelease) -> list[StatusChange]:
    """Registry changes once `decision` applied and the task's release became `rel`."""
    task = decision.task
    if decision.action == "rollback":
        out = [StatusChange(decision.version, task, "rolled_back", "teacher", decision.message)]
        serving = rel.version if rel.stage == "live" else rel.previous_live
        if serving and rel.stage != "teacher":
            out.append(
                StatusChange(
                    serving,
                    task,
                    "live",
                    "live",
                    f"serves as live after the rollback of {decision.version} (rollback_release)",
                )
            )
        return out
    status = "live" if rel.stage == "live" else rel.stage
    out = [StatusChange(decision.version, task, status, rel.stage, decision.message)]
    if rel.stage == "live" and rel.previous_live:
        out.append(
            StatusChange(rel.previous_live, task, "retired", "teacher", f"replaced by {decision.version}")
        )
    return out
