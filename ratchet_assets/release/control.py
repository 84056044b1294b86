"""One evaluation of release control (what the promotion sensor runs each tick), with no Dagster in it.

``release_tick(engine, private_key, lake, artifacts, state)``:

1. registers new evaluation certificates (``registry.register_certificates``);
2. admits the newest candidate of a task into ``shadow`` when the task is not mid-rollout (teacher or live);
3. feeds unread pair rows, in segment order, into the (version, task) tracks of every version serving a task in
   the current manifest (``policy.serving_tracks``: the release's version and, mid-rollout, the live version it
   would replace, fed by its audits only), stopping at the first promote/rollback decision (one decision per
   tick: the watermark stays right after the deciding row);
4. applies the decision: effect ledger (type ``release.publish``, key = version/task/target/evidence digest) ->
   signed manifest, versions registry and audit log in one control-DB transaction.

Rollback targets (:func:`rollback_release`): a live version goes back to the version that was live before it
(``previous_live``, or found in the manifest chain) if that one is still healthy (not rolled back or rejected,
its rollback processes quiet), else to the teacher. When the live version behind a candidate in shadow or canary
is rolled back, the candidate keeps its stage and evidence; what serves the rest becomes that healthy predecessor
or the teacher.

The state (the sensor cursor) is JSON: the tracks' e-process states and the segment watermark. A tick that fails
before returning leaves the old state in place; re-running it recomputes the same decision with the same effect
key, and the effect ledger (policy ``probe``: a manifest whose reason names the key) makes it happen once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ratchet_assets.release import registry
from ratchet_assets.release.evidence import Watermark, pending_segments, read_pairs
from ratchet_assets.release.policy import (
    LADDER,
    Decision,
    ReleasePolicy,
    Track,
    decide,
    feed,
    serving_tracks,
)
from ratchet_core import manifest as mf

EFFECT_TYPE = "release.publish"
SENSOR_ACTOR = "release-sensor"


class Superseded(Exception):
    """The manifest moved since the evidence was read (an operator acted): drop the decision."""


class Frozen(Exception):
    """Releases were frozen between reading the flags and publishing."""


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
    return message[: mf.REASON_MAX - len(tag)] + tag


def release_for(step: int, version: str, threshold: float | None, current: mf.TaskRelease) -> mf.TaskRelease:
    """The task's release at ladder `step` of `version`, keeping the previous live version to fall back to."""
    s = LADDER[step]
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
    )


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
) -> mf.TaskRelease:
    """The task's release once `version` is rolled back; `version` is the release's own version (shadow, canary
    or live) or, mid-rollout, the live version behind it (``previous_live``).

    - a candidate (shadow/canary): the live version behind it serves again, as live;
    - the live version: back to its ``previous_live`` if ``healthy``, else the teacher;
    - the live version behind a candidate: the candidate keeps its stage; the rest is served by the live version's
      own predecessor (from `history`) if ``healthy``, else by the teacher.

    A restored live version keeps its own healthy predecessor (from `history`) as ``previous_live``. Raises
    ValueError when `version` is not serving `task` in `current`.
    """

    def ok(fallback: tuple[str, float | None] | None) -> tuple[str, float | None] | None:
        return fallback if fallback and fallback[0] != version and healthy(fallback[0]) else None

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
    if current.version == version and current.stage in ("shadow", "canary", "live"):
        return restore(ok(prev))
    if current.stage in ("shadow", "canary") and current.previous_live == version:
        fallback = ok(predecessor(history, task, version))
        return current.model_copy(
            update={
                "previous_live": fallback[0] if fallback else None,
                "previous_threshold": fallback[1] if fallback else None,
            }
        )
    raise ValueError(f"{version} is not serving {task} ({current.stage} {current.version or '(teacher)'})")


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

    def healthy(version: str) -> bool:
        t = tracks.get((version, task))
        return status.get(version) not in ("rolled_back", "rejected") and (t is None or not t.rolled_back)

    return healthy


def _apply(
    engine: Engine,
    private_key: Any,
    decision: Decision,
    public_keys: Any,
    result: TickResult,
    state_after: dict[str, Any],
    tracks: dict[tuple[str, str], Track],
) -> None:
    key = f"{decision.version}/{decision.task}/{decision.target_label}/{decision.evidence['evidence_digest']}"
    fingerprint = decision.evidence["evidence_digest"]
    ledger = _effect_ledger(engine)
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

    def change(m: mf.Manifest) -> None:
        cur = m.task(decision.task)
        if (decision.version, decision.from_step) not in serving_tracks(cur):
            raise Superseded(f"{decision.task} is now {cur.stage} {cur.version or '(teacher)'}")
        if decision.action == "rollback":
            m.tasks[decision.task] = rollback_release(cur, decision.task, decision.version, history, healthy)
        else:
            if m.flags.releases_frozen:
                raise Frozen("releases were frozen")
            assert decision.to_step is not None
            m.tasks[decision.task] = release_for(decision.to_step, decision.version, cur.threshold, cur)

    try:
        with engine.begin() as conn:
            new = mf.publish_in(
                conn,
                private_key,
                change,
                _reason(decision.message, key),
                SENSOR_ACTOR,
                public_keys=public_keys,
            )
            rel = new.task(decision.task)
            if decision.action == "rollback":
                registry.set_status(
                    conn, decision.version, decision.task, "rolled_back", "teacher", decision.message
                )
                serving = rel.version if rel.stage == "live" else rel.previous_live
                if serving and rel.stage != "teacher":
                    registry.set_status(
                        conn,
                        serving,
                        decision.task,
                        "live",
                        "live",
                        f"restored by rollback of {decision.version}",
                    )
            else:
                status = "live" if rel.stage == "live" else rel.stage
                registry.set_status(
                    conn, decision.version, decision.task, status, rel.stage, decision.message
                )
                if rel.stage == "live" and rel.previous_live:
                    registry.set_status(
                        conn,
                        rel.previous_live,
                        decision.task,
                        "retired",
                        "teacher",
                        f"replaced by {decision.version}",
                    )
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
    except (Superseded, Frozen) as exc:
        ledger.fail(begin.token, str(exc))
        result.notes.append(f"dropped {decision.action} of {decision.version} on {decision.task}: {exc}")
        return
    except BaseException as exc:
        ledger.fail(begin.token, f"{type(exc).__name__}: {exc}")
        raise
    ledger.report(begin.token, {"sequence": new.sequence})
    result.decisions.append(decision)
    result.published.append(new)


def _admit(
    engine: Engine, private_key: Any, manifest: mf.Manifest, public_keys: Any, result: TickResult
) -> None:
    """Put the newest candidate of each task into shadow when the task is on the teacher or live."""
    cands = registry.list_versions(engine, status="candidate")
    newest: dict[str, dict[str, Any]] = {}
    for row in cands:  # ordered by created_at: the last one wins
        newest[row["task"]] = row
    for task, row in sorted(newest.items()):
        cur = manifest.task(task)
        if cur.stage not in ("teacher", "live"):
            result.holds.append(
                f"{row['version']} on {task} waits: {cur.version} is in {cur.stage} (it must reach live or roll back)"
            )
            continue
        if manifest.flags.releases_frozen:
            result.holds.append(f"{row['version']} on {task} waits: releases are frozen")
            continue
        version, threshold = row["version"], row["threshold"]

        def change(
            m: mf.Manifest, task: str = task, version: str = version, threshold: Any = threshold
        ) -> None:
            cur = m.task(task)
            if cur.stage not in ("teacher", "live") or m.flags.releases_frozen:
                raise Superseded(f"{task} is now {cur.stage}")
            m.tasks[task] = release_for(0, version, threshold, cur)

        msg = f"admitting {version} on {task} to shadow: certified by {Path(row['certificate_path']).name}"
        try:
            with engine.begin() as conn:
                new = mf.publish_in(conn, private_key, change, msg, SENSOR_ACTOR, public_keys=public_keys)
                registry.set_status(conn, version, task, "shadow", "shadow", msg)
                for older in cands:
                    if older["task"] == task and older["version"] != version:
                        registry.set_status(
                            conn, older["version"], task, "retired", "teacher", f"superseded by {version}"
                        )
                registry.append_audit(conn, SENSOR_ACTOR, "admit", f"{version}/{task}", msg, {}, new.sequence)
        except Superseded as exc:
            result.notes.append(f"{version} on {task} not admitted: {exc}")
            continue
        result.admitted.append(msg)
        result.published.append(new)
        manifest = new


def release_tick(
    engine: Engine,
    private_key: Any,
    lake: str | Path,
    artifacts: Path,
    state: dict[str, Any] | str | None,
    policy: ReleasePolicy | None = None,
    public_keys: Any = None,
) -> TickResult:
    """One evaluation of release control (module docstring); returns the new state and what happened."""
    policy = policy or ReleasePolicy()
    if isinstance(state, str):
        state = json.loads(state) if state else {}
    state = state or {}
    keys = public_keys if public_keys is not None else [private_key.public_key()]
    registry.ensure_tables(engine)
    stored = registry.load_state(engine)
    if stored and int(stored.get("generation", 0)) > int(state.get("generation", 0)):
        state = stored  # the cursor is older than the last publish (the sensor died before storing it)
    generation = int(state.get("generation", 0))
    result = TickResult(state=state)
    result.notes.extend(registry.register_certificates(engine, Path(artifacts), keys))

    manifest, rejected = mf.latest_verified(engine, keys)
    manifest = manifest or mf.Manifest.default()
    if rejected:
        result.notes.append(f"{rejected} manifest row(s) failed verification and were ignored")
    _admit(engine, private_key, manifest, keys, result)
    manifest, _ = mf.latest_verified(engine, keys)
    manifest = manifest or mf.Manifest.default()
    frozen = manifest.flags.releases_frozen

    # Tracks of the versions serving a task (policy.serving_tracks); a moved step (operator) resets promote
    # evidence, never rollback evidence.
    old = {k: Track.from_dict(v) for k, v in state.get("tracks", {}).items()}
    tracks: dict[tuple[str, str], Track] = {}
    for task, rel in sorted(manifest.tasks.items()):
        for version, step in serving_tracks(rel):
            prev = old.get(f"{version}|{task}")
            tracks[(version, task)] = (
                prev.at_step(step, policy) if prev else Track.start(version, task, step, policy)
            )

    wm = Watermark.from_dict(state.get("watermark"))
    decision: Decision | None = None
    for t in tracks.values():  # evidence already in hand (e.g. a promotion held while frozen)
        d = decide(t, policy, frozen)
        if d.action != "hold":
            decision = d
            break
    segments, late = pending_segments(lake, wm)
    if late:
        result.notes.append(f"{late} segment(s) of settled days ignored")
    newest_day = ""
    if decision is None:
        for rel, rows in read_pairs(lake, segments, wm):
            newest_day = max(newest_day, rel.split("/")[1].removeprefix("day="))
            stopped = False
            for row in rows:
                t = tracks.get((row.version, row.task))
                if t is None or not t.accepts(row.role):
                    continue
                d, _ = feed(t, [row.error], policy, frozen)
                if d.action != "hold":
                    decision = d
                    wm.partial[rel] = row.index + 1
                    stopped = True
                    break
            if stopped:
                break
            wm.mark_done(rel)
    if newest_day:
        wm.settle(newest_day)

    if decision is not None:
        after = {}
        for (version, task), t in tracks.items():
            if (version, task) != (decision.version, decision.task):
                after[f"{version}|{task}"] = t.to_dict()
            elif decision.to_step is not None:
                after[f"{version}|{task}"] = t.at_step(decision.to_step, policy).to_dict()
        state_after = {"tracks": after, "watermark": wm.to_dict(), "generation": generation + 1}
        _apply(engine, private_key, decision, keys, result, state_after, tracks)
        if result.published:
            generation += 1
    for t in tracks.values():
        d = decide(t, policy, frozen)
        if d.action == "hold" and not (decision and (t.version, t.task) == (decision.version, decision.task)):
            result.holds.append(d.message)

    # The state after the decision: the decided track moves (promote) or leaves (rollback) the ladder.
    latest, _ = mf.latest_verified(engine, keys)
    latest = latest or mf.Manifest.default()
    new_tracks: dict[str, Any] = {}
    for (version, task), t in tracks.items():
        step = dict(serving_tracks(latest.task(task))).get(version)
        if step is not None:
            new_tracks[f"{version}|{task}"] = t.at_step(step, policy).to_dict()
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
