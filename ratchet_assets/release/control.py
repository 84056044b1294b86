"""One evaluation of release control (what the promotion sensor runs each tick), with no Dagster in it.

``release_tick(engine, private_key, lake, artifacts, state)`` gathers the inputs, lets the pure
``ratchet_assets.release.tick.decide_tick`` decide (the simulator calls the same function), and applies the plan:

1. registers new evaluation certificates (``registry.register_certificates``) and verifies the certificate of
   every candidate again (``guard.certified_task``: signature under the trusted keys, numbers, the task certified
   at the release rule's target, a calibrated threshold);
2. the plan admits the newest candidate of a task into ``shadow`` when the task is not mid-rollout (teacher or
   live); each admission is published as its own signed manifest;
3. the plan feeds unread pair rows, in segment order, into the (version, task) tracks of every version serving a
   task (``decision.serving_tracks``), stopping at the first promote/rollback decision (one decision per tick: the
   watermark stays right after the deciding row); a version whose student answers the application's feedback
   rates worse than the teacher's at the same time (:func:`feedback_holds`, ``decision.feedback_evidence``) is held:
   its promotions wait, its rollbacks do not;
4. the decision is applied: effect ledger (type ``release.publish``, key = version/task/target/evidence digest) ->
   signed manifest (``tick.apply_decision``), versions registry (``tick.decision_statuses``) and audit log in one
   control-DB transaction.

When the manifest moved under the plan (an operator published in between), an admission or the decision is
dropped (``ManifestMoved``) and, for an admission, nothing of the evidence is consumed: the next tick plans again.
An admission that supersedes a version in shadow or canary keeps that version's evidence in its audit-log row.
Rollback targets: ``tick.rollback_release``.

The state (the sensor cursor) is JSON: the tracks' e-process states and the segment watermark. A tick that fails
before returning leaves the old state in place; re-running it recomputes the same decision with the same effect
key, and the effect ledger (policy ``probe``: a manifest whose reason names the key) makes it happen once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ratchet_assets.release import registry
from ratchet_assets.release.admission import Candidate
from ratchet_assets.release.decision import Decision, ReleaseRule, Track, feedback_evidence, serving_tracks
from ratchet_assets.release.evidence import (
    Watermark,
    feedback_observations,
    pending_segments,
    read_pairs,
    task_traffic,
)
from ratchet_assets.release.guard import NotCertified, certified_task
from ratchet_assets.release.tick import (
    Admission,
    Frozen,
    ManifestMoved,
    StatusChange,
    admission_statuses,
    admit,
    apply_decision,
    beside_live,
    decide_tick,
    decision_statuses,
    healthy_versions,
    supported_versions,
)
from ratchet_core import manifest as mf
from ratchet_core.control_db import ensure_schema
from ratchet_core.lake import day_of as lake_day_of
from ratchet_core.reasons import REASON_MAX

EFFECT_TYPE = "release.publish"
SENSOR_ACTOR = "release-sensor"


@dataclass
class TickResult:
    state: dict[str, Any]
    decisions: list[Decision] = field(default_factory=list)  # promote/rollback applied (or duplicates)
    admitted: list[str] = field(default_factory=list)
    holds: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    published: list[mf.Manifest] = field(default_factory=list)
    stages: list[dict[str, Any]] = field(default_factory=list)  # (version, task, stage, day) for observations

    @property
    def acted(self) -> bool:
        return bool(self.decisions or self.admitted)

    def summary(self) -> str:
        lines = [d.message for d in self.decisions] + self.admitted + self.holds + self.notes
        return "; ".join(lines) if lines else "no version in shadow, canary or live and no new certificate"


def _effect_ledger(engine: Engine):
    from ratchet_assets.effects import EffectLedger

    # probe, not block: whether a release happened is visible in the manifest chain (its reason names the key).
    return EffectLedger(engine, policies={EFFECT_TYPE: "probe"})


def _probe(engine: Engine, public_keys: Any) -> Callable[[Any], dict[str, Any] | None]:
    def probe(record: Any) -> dict[str, Any] | None:
        for entry in reversed(mf.history(engine, public_keys)):
            if entry.get("verified") and f"[effect {record.key}]" in entry["manifest"]["reason"]:
                return {"sequence": entry["sequence"]}
        return None

    return probe


def _reason(message: str, key: str) -> str:
    tag = f" [effect {key}]"
    return message[: REASON_MAX - len(tag)] + tag


def _healthy(engine: Engine, task: str, tracks: dict[tuple[str, str], Track]) -> Callable[[str], bool]:
    with engine.connect() as conn:
        status = {
            r.version: r.status
            for r in conn.execute(
                sa.select(registry.versions.c.version, registry.versions.c.status).where(
                    registry.versions.c.task == task
                )
            )
        }
    return healthy_versions(status, tracks, task)


def _set_statuses(conn: Any, changes: list[StatusChange]) -> None:
    for c in changes:
        registry.set_status(conn, c.version, c.task, c.status, c.stage, c.note)


def _approved(ledger: Any, decision: Decision, result: TickResult) -> bool:
    """A step whose effect type ``release.<target>`` (e.g. ``release.live``) requires approval waits for it.

    The approval is keyed by version/task (not the evidence, which grows every tick), so one grant with
    `ratchet admin approve release.live <version>/<task>` lets the sensor take that step on its next tick.
    """
    approval_type = f"release.{decision.target_label}"
    if not ledger.rules(approval_type).approval_required:
        return True
    gate = ledger.begin(
        approval_type,
        f"{decision.version}/{decision.task}",
        decision.version,
        summary=f"{decision.action} {decision.version} on {decision.task} to {decision.target_label}: "
        f"{decision.message}",
        requested_by="release-sensor",
    )
    if gate.outcome == "execute":
        ledger.report(gate.token, {"approved": True})
        return True
    if gate.outcome == "duplicate":
        return True
    result.notes.append(
        f"{decision.action} of {decision.version} on {decision.task} to {decision.target_label} waits: "
        f"{gate.outcome} ({gate.detail})"
    )
    return False


def _apply(
    engine: Engine,
    private_key: Any,
    decision: Decision,
    public_keys: Any,
    result: TickResult,
    state_after: dict[str, Any],
    tracks: dict[tuple[str, str], Track],
    watch_rate: float | None = None,
) -> None:
    key = f"{decision.version}/{decision.task}/{decision.target_label}/{decision.evidence['evidence_digest']}"
    fingerprint = decision.evidence["evidence_digest"]
    ledger = _effect_ledger(engine)
    if not _approved(ledger, decision, result):
        return
    begin = ledger.begin(EFFECT_TYPE, key, fingerprint, lease_seconds=120, probe=_probe(engine, public_keys))
    if begin.outcome == "duplicate":
        result.decisions.append(decision)
        result.notes.append(
            f"{decision.action} of {decision.version} on {decision.task} was already published"
        )
        return
    if begin.outcome != "execute":
        raise RuntimeError(
            f"release effect {key} is {begin.outcome}: {begin.detail or 'another tick holds it'}"
        )

    history: list[mf.Manifest] = []
    healthy = _healthy(engine, decision.task, tracks)
    if decision.action == "rollback":
        history = [
            mf.Manifest.from_predicate(e["manifest"])
            for e in mf.history(engine, public_keys)
            if e.get("verified")
        ]
    try:
        with engine.begin() as conn:
            new = mf.publish_in(
                conn,
                private_key,
                lambda m: apply_decision(
                    m,
                    decision,
                    history,
                    healthy,
                    supported_versions(tracks, decision.task),
                    watch_rate,  # the live version serving alone afterwards is watched (budget.watch_rate)
                ),
                _reason(decision.message, key),
                SENSOR_ACTOR,
                public_keys=public_keys,
            )
            _set_statuses(conn, decision_statuses(decision, new.task(decision.task)))
            registry.store_state(conn, state_after)
            registry.append_audit(
                conn,
                SENSOR_ACTOR,
                decision.action,
                f"{decision.version}/{decision.task}",
                decision.message,
                decision.evidence,
                new.sequence,
            )
    except (ManifestMoved, Frozen) as exc:
        ledger.fail(begin.token, str(exc))
        result.notes.append(f"dropped {decision.action} of {decision.version} on {decision.task}: {exc}")
        return
    except BaseException as exc:
        ledger.fail(begin.token, f"{type(exc).__name__}: {exc}")
        raise
    ledger.report(begin.token, {"sequence": new.sequence})
    result.decisions.append(decision)
    result.published.append(new)


def _admit(engine: Engine, private_key: Any, adm: Admission, public_keys: Any, result: TickResult) -> bool:
    """Publish one admission to shadow; False when the manifest moved since the plan (nothing published)."""
    try:
        with engine.begin() as conn:
            new = mf.publish_in(
                conn,
                private_key,
                lambda m: admit(m, adm),
                adm.message[:REASON_MAX],  # the audit-log row below keeps it whole
                SENSOR_ACTOR,
                public_keys=public_keys,
            )
            _set_statuses(conn, admission_statuses(adm))
            details: dict[str, Any] = (
                {"supersedes": adm.replaces, "its_evidence": adm.replaced_evidence} if adm.replaces else {}
            )
            if adm.retire:  # older queued candidates the newest skipped
                details["skipped"] = list(adm.retire)
            if adm.audit_rate is not None:
                details["audit_rate"] = adm.audit_rate
            if adm.target_audit_rate is not None:  # the targeted stream's inclusion probability (budget)
                details["target_audit_rate"] = adm.target_audit_rate
            registry.append_audit(
                conn, SENSOR_ACTOR, "admit", f"{adm.version}/{adm.task}", adm.message, details, new.sequence
            )
    except ManifestMoved as exc:
        result.notes.append(f"{adm.version} on {adm.task} not admitted: {exc}")
        return False
    result.admitted.append(adm.message)
    result.published.append(new)
    return True


def candidates(
    engine: Engine, public_keys: Any, rule: ReleaseRule, artifacts: str | Path, manifest: mf.Manifest
) -> list[Candidate]:
    """Registry candidates in registration order; the newest of each task with its certificate (under
    `artifacts`) verified again now (``guard.certified_task``: signature under `public_keys`, numbers, the task
    certified at its target and calibration: `rule` as the task's signed policy sets it in `manifest`,
    ``ratchet_core.task_policy``). A candidate registered before the version now in shadow or canary on its task
    is older than that version and never supersedes it."""
    every = registry.list_versions(engine)
    order = {(r["version"], r["task"]): i for i, r in enumerate(every)}
    rows = [r for r in every if r["status"] == "candidate"]
    newest = {row["task"]: row["version"] for row in rows}  # only these can be admitted; older ones retire
    out = []
    for row in rows:
        version, task = row["version"], row["task"]
        path = registry.certificate_file(artifacts, row, version)
        name = Path(path).name
        if newest[task] != version:
            out.append(
                Candidate(version, task, row["threshold"], None, name, problem="a newer candidate exists")
            )
            continue
        rel = manifest.task(task)
        if rel.stage in ("shadow", "canary") and order.get((rel.version, task), -1) > order[(version, task)]:
            problem = f"it was certified before {rel.version}, which is in {rel.stage} now"
            out.append(Candidate(version, task, row["threshold"], None, name, problem=problem))
            continue
        task_rule = rule.for_task(task, manifest)
        try:
            ct = certified_task(path, version, task, public_keys, task_rule.target, task_rule.calibration)
        except NotCertified as exc:
            out.append(Candidate(version, task, row["threshold"], None, name, problem=str(exc)))
            continue
        n = ct.numbers
        out.append(
            Candidate(version, task, n.ltt_threshold, n.lower_bound, name, "", n.point_threshold, n.paired)
        )
    return out


def feedback_holds(engine: Engine, manifest: mf.Manifest, rule: ReleaseRule) -> dict[tuple[str, str], str]:
    """(version, task) -> why its promotions wait: the application's feedback rates the version's answers worse
    than the teacher's at the same time (``decision.feedback_evidence``, at the rule's alpha)."""
    holds: dict[tuple[str, str], str] = {}
    for task, release in sorted(manifest.tasks.items()):
        if not release.version:
            continue
        policy = manifest.policies.get(task)
        ev = feedback_evidence(feedback_observations(engine, task, release.version, policy), rule.alpha)
        if ev.worse:
            holds[(release.version, task)] = ev.message(release.version, task)
    return holds


def release_tick(
    engine: Engine,
    private_key: Any,
    lake: str | Path,
    artifacts: Path,
    state: dict[str, Any] | str | None,
    rule: ReleaseRule | None = None,
    public_keys: Any = None,
    today: str | None = None,
) -> TickResult:
    """One evaluation of release control (module docstring); returns the new state and what happened. `today`:
    the ISO day of the evaluation (default: today in UTC), how long a candidate has held its slot."""
    rule = rule or ReleaseRule()
    if isinstance(state, str):
        state = json.loads(state) if state else {}
    state = state or {}
    keys = public_keys if public_keys is not None else [private_key.public_key()]
    ensure_schema(engine)
    stored = registry.load_state(engine)
    if stored and int(stored.get("generation", 0)) > int(state.get("generation", 0)):
        state = stored  # the cursor is older than the last publish (the sensor died before storing it)
    generation = int(state.get("generation", 0))
    result = TickResult(state=state)
    today = today or datetime.now(UTC).date().isoformat()
    result.notes.extend(registry.register_certificates(engine, Path(artifacts), keys))

    manifest, rejected = mf.latest_verified(engine, keys)
    manifest = manifest or mf.Manifest.default()
    if rejected:
        result.notes.append(f"{rejected} manifest row(s) failed verification and were ignored")
    old = {(t.version, t.task): t for t in map(Track.from_dict, state.get("tracks", {}).values())}
    wm = Watermark.from_dict(state.get("watermark"))
    segments, late = pending_segments(lake, wm)
    if late:
        result.notes.append(f"{late} segment(s) of settled days ignored")
    pairs = read_pairs(lake, segments, wm)
    try:
        plan = decide_tick(
            manifest,
            candidates(engine, keys, rule, artifacts, manifest),
            old,
            pairs,
            rule,
            feedback_holds(engine, manifest, rule),
            today=today,
            traffic=task_traffic(lake, today),
        )
    finally:
        pairs.close()  # a plan stops reading at its decision: close the lake connection now
    result.holds.extend(plan.waiting)
    as_planned = all([_admit(engine, private_key, adm, keys, result) for adm in plan.admissions])

    if as_planned:  # else the manifest moved under the plan: nothing is consumed, the next tick starts over
        newest_day = ""
        for rel in [*plan.read, *([plan.stop.segment] if plan.stop else [])]:
            newest_day = max(newest_day, lake_day_of(rel))
        for rel in plan.read:
            wm.mark_done(rel)
        if plan.stop is not None:
            wm.partial[plan.stop.segment] = plan.stop.index + 1
        if newest_day:
            wm.settle(newest_day)
        decision = plan.decision
        if decision is not None:
            after = {f"{v}|{t}": tr.to_dict() for (v, t), tr in plan.tracks_after(rule).items()}
            state_after = {"tracks": after, "watermark": wm.to_dict(), "generation": generation + 1}
            _apply(
                engine,
                private_key,
                decision,
                keys,
                result,
                state_after,
                plan.tracks,
                plan.watch_rates.get(decision.task),
            )
            if result.published:
                generation += 1
        result.holds.extend(plan.holds)
        tracks = plan.tracks
    else:
        tracks = dict(old)

    # The state after the decision: the decided track moves (promote) or leaves (rollback) the ladder.
    latest, _ = mf.latest_verified(engine, keys)
    latest = latest or mf.Manifest.default()
    new_tracks: dict[str, Any] = {}
    for (version, task), t in tracks.items():
        step = dict(serving_tracks(latest.task(task))).get(version)
        if step is not None:
            new_tracks[f"{version}|{task}"] = t.at_step(
                step, rule.for_task(task, latest), beside_live(latest.task(task), version)
            ).to_dict()
    result.state = {"tracks": new_tracks, "watermark": wm.to_dict(), "generation": generation}
    with engine.connect() as conn:
        day_of = {
            (r.version, r.task): r.day
            for r in conn.execute(
                sa.select(registry.versions.c.version, registry.versions.c.task, registry.versions.c.day)
            )
        }
    for task, rel in sorted(latest.tasks.items()):
        serving = [(rel.version, rel.stage, rel.canary_percent)] if rel.version else []
        if rel.stage in ("shadow", "canary") and rel.previous_live:
            serving.append((rel.previous_live, "live", 100.0 - rel.canary_percent))  # serves the rest
        for version, stage, percent in serving:
            result.stages.append(
                {
                    "version": version,
                    "task": task,
                    "stage": stage,
                    "canary_percent": percent,
                    "day": day_of.get((version, task), ""),
                    "manifest_sequence": latest.sequence,
                }
            )
    return result
