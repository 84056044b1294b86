"""Control-DB tables of release control: the versions registry, the admin audit log, failed nights.

``versions`` has one row per (version, task): ``status`` is candidate | shadow | canary | live | rolled_back |
superseded | retired | rejected and ``stage`` the manifest stage it was last published at. ``superseded``: a newer
certified version took its place in shadow or canary (``ratchet_assets.release.tick``); it was not rolled back,
and the audit-log row of that admission keeps its evidence. A verified, consistent evaluation
certificate (``<artifacts>/certificates/<version>.dsse.json``, ``ratchet_stats.certificate``) registers the version:
``candidate`` for each certified task (with the certificate's LTT threshold), ``rejected`` for the others.

``certificate_path`` is the certificate's name in the artifacts tree (``certificates/<version>.dsse.json``), read
with :func:`certificate_file` under the artifacts root of the reader; rows registered before names were relative
hold an absolute path, read the same way (``ratchet_core.layout``, "Stored names").
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ratchet_core.control_db import (
    ensure_schema,
    failed_nights,
    gateway_safety_events,
    release_audit_log,
    release_state,
    version_certificates,
    versions,
)
from ratchet_core.layout import ArtifactLayout

VERSION_STATUSES = (
    "candidate",
    "shadow",
    "canary",
    "live",
    "rolled_back",
    "superseded",
    "retired",
    "rejected",
)

# The tables live with every other control-DB table in ratchet_core.control_db (one MetaData, one migration path).
audit_log = release_audit_log


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def append_audit(
    conn: Connection,
    actor: str,
    action: str,
    target: str,
    reason: str,
    details: dict[str, Any] | None = None,
    manifest_sequence: int | None = None,
) -> None:
    conn.execute(
        audit_log.insert().values(
            at=now_iso(),
            actor=actor,
            action=action,
            target=target,
            reason=reason,
            details=json.dumps(details or {}, sort_keys=True),
            manifest_sequence=manifest_sequence,
        )
    )


def set_status(conn: Connection, version: str, task: str, status: str, stage: str, note: str = "") -> None:
    """Update (or create, for a version the operator names directly) one registry row."""
    assert status in VERSION_STATUSES, status
    t = versions
    where = sa.and_(t.c.version == version, t.c.task == task)
    values = {"status": status, "stage": stage, "updated_at": now_iso()}
    if note:
        values["note"] = note[:500]
    if conn.execute(t.update().where(where).values(**values)).rowcount == 0:
        conn.execute(
            t.insert().values(
                version=version,
                task=task,
                threshold=None,
                certificate_path="",
                day="",
                created_at=now_iso(),
                note=note[:500],
                **{k: v for k, v in values.items() if k != "note"},
            )
        )


def get_version(conn: Connection, version: str, task: str) -> dict[str, Any] | None:
    row = (
        conn.execute(
            sa.select(versions).where(sa.and_(versions.c.version == version, versions.c.task == task))
        )
        .mappings()
        .first()
    )
    return dict(row) if row else None


def list_versions(engine: Engine, status: str | None = None) -> list[dict[str, Any]]:
    ensure_schema(engine)
    q = sa.select(versions).order_by(versions.c.created_at, versions.c.version, versions.c.task)
    if status:
        q = q.where(versions.c.status == status)
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]


def certificate_file(artifacts: str | Path, row: dict[str, Any] | None, version: str) -> Path:
    """The certificate a registry row names (its ``certificate_path``), under `artifacts`; where the night writes
    `version`'s certificate when the row names none (a version an operator put in the registry directly)."""
    layout = ArtifactLayout(artifacts)
    stored = (row or {}).get("certificate_path") or ""
    return layout.resolve(stored) if stored else layout.certificate(version)


def _stored_name(layout: ArtifactLayout, stored: str) -> str:
    """A registry row's ``certificate_path`` as a name (an older row's absolute path read as one)."""
    try:
        return layout.name_of(layout.resolve(stored))
    except ValueError:  # names nothing in this tree
        return stored


def register_certificates(engine: Engine, artifacts: Path, public_keys: Any) -> list[str]:
    """Register every certificate not yet in the registry; return one line per certificate acted on.

    A certificate whose signature does not verify under `public_keys`, or whose numbers do not recompute
    (``ratchet_stats.certificate.check_certificate``), registers nothing and is reported (it stays on disk).
    """
    from ratchet_core.key_history import keys_ever_trusted
    from ratchet_core.keys import as_key_list
    from ratchet_stats.certificate import check_certificate, verify_certificate
    from ratchet_stats.dsse import VerificationError

    ensure_schema(engine)
    # A certificate signed before a key rotation still verifies: every key the history ever trusted counts.
    public_keys = [*as_key_list(public_keys), *keys_ever_trusted(engine)]
    layout = ArtifactLayout(artifacts)
    files = layout.certificate_files()
    if not files:
        return []
    with engine.connect() as conn:
        stored = [r[0] for r in conn.execute(sa.select(versions.c.certificate_path).distinct()) if r[0]]
        stored += [r[0] for r in conn.execute(sa.select(version_certificates.c.certificate_path))]
    known = {_stored_name(layout, s) for s in stored}
    notes: list[str] = []
    for path in files:
        name = layout.name_of(path)
        if name in known:
            continue
        try:
            statement = verify_certificate(path.read_text(), public_keys)
        except (VerificationError, ValueError, OSError) as exc:
            check = getattr(exc, "check", "read")
            notes.append(f"{path.name}: not registered, {check} check failed: {exc}")
            continue
        predicate = statement["predicate"]
        problems = check_certificate(predicate, statement["predicateType"])
        if problems:
            notes.append(f"{path.name}: not registered, numbers do not recompute: {problems[0]}")
            continue
        version = str(predicate["version"])
        day = str(predicate.get("day") or "")
        with engine.begin() as conn:
            earlier = _chain(conn, version, name, day, path.read_bytes(), predicate)
            for task, section in sorted(predicate["tasks"].items()):
                row = get_version(conn, version, task)
                if row is not None:
                    if earlier and section.get("certified") is True:
                        # Re-certified (release.content): the newest certificate's numbers, same status and
                        # stage: a re-certification starts no rollout.
                        conn.execute(
                            versions.update()
                            .where(sa.and_(versions.c.version == version, versions.c.task == task))
                            .values(
                                certificate_path=name,
                                threshold=(section.get("ltt") or {}).get("threshold"),
                                updated_at=now_iso(),
                                note=f"re-certified on {day}: lower bound {section.get('lower_bound')}",
                            )
                        )
                        notes.append(
                            f"{version} on {task}: re-certified on {day} ({row['status']}, no rollout)"
                        )
                    continue
                certified = section.get("certified") is True
                conn.execute(
                    versions.insert().values(
                        version=version,
                        task=task,
                        stage="teacher",
                        status="candidate" if certified else "rejected",
                        threshold=(section.get("ltt") or {}).get("threshold"),
                        certificate_path=name,
                        day=day,
                        created_at=now_iso(),
                        updated_at=now_iso(),
                        note=f"certificate: lower bound {section.get('lower_bound')} vs target "
                        f"{predicate.get('target')}",
                    )
                )
                notes.append(
                    f"{version} on {task}: {'candidate' if certified else 'rejected'} by certificate"
                )
    return notes


def _chain(
    conn: Connection, version: str, name: str, day: str, envelope: bytes, predicate: dict[str, Any]
) -> bool:
    """Record certificate `name` of `version` in ``version_certificates``, chained (``previous_digest``) to the
    version's newest earlier certificate; return whether the version had one (this one re-certifies it)."""
    import hashlib

    t = version_certificates
    previous = conn.execute(
        sa.select(t.c.digest).where(t.c.version == version).order_by(t.c.day.desc(), t.c.registered_at.desc())
    ).first()
    # A version registered before certificates were chained has a registry row and no chain row yet.
    known = previous is not None or (
        conn.execute(sa.select(versions.c.version).where(versions.c.version == version)).first() is not None
    )
    conn.execute(
        t.insert().values(
            certificate_path=name,
            version=version,
            day=day,
            digest=hashlib.sha256(envelope).hexdigest(),
            previous_digest=previous[0] if previous else "",
            golden_root=str((predicate.get("golden") or {}).get("root") or ""),
            certified_tasks=",".join(predicate.get("certified_tasks") or []),
            registered_at=now_iso(),
        )
    )
    return known


def certificates_of(engine: Engine, version: str | None = None) -> list[dict[str, Any]]:
    """Every registered certificate (of `version`), oldest first: day, name, digest and the digest it chains to."""
    ensure_schema(engine)
    t = version_certificates
    q = sa.select(t).order_by(t.c.version, t.c.day, t.c.registered_at)
    if version:
        q = q.where(t.c.version == version)
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]


def load_state(engine: Engine) -> dict[str, Any] | None:
    with engine.connect() as conn:
        text = conn.execute(sa.select(release_state.c.state).where(release_state.c.id == 1)).scalar()
    return json.loads(text) if text else None


def store_state(conn: Connection, state: dict[str, Any]) -> None:
    values = {"generation": int(state.get("generation", 0)), "state": json.dumps(state, sort_keys=True)}
    if (
        conn.execute(
            release_state.update().where(release_state.c.id == 1).values(updated_at=now_iso(), **values)
        ).rowcount
        == 0
    ):
        conn.execute(release_state.insert().values(id=1, updated_at=now_iso(), **values))


def record_failed_night(engine: Engine, run_id: str, job_name: str, partition: str, message: str) -> bool:
    """Store a failed night run once (idempotent by run id); return True when newly recorded."""
    ensure_schema(engine)
    with engine.begin() as conn:
        exists = conn.execute(
            sa.select(failed_nights.c.run_id).where(failed_nights.c.run_id == run_id)
        ).first()
        if exists:
            return False
        conn.execute(
            failed_nights.insert().values(
                run_id=run_id,
                job_name=job_name,
                partition=partition,
                failed_at=now_iso(),
                message=message[:2000],
            )
        )
    return True


def read_audit_log(engine: Engine, limit: int = 1000) -> list[dict[str, Any]]:
    """Release audit-log rows plus the gateway's safety events (``gateway_safety_events``), newest first."""
    ensure_schema(engine)
    with engine.connect() as conn:
        rows = [
            {**dict(r), "source": "control-plane", "details": json.loads(r["details"])}
            for r in conn.execute(
                sa.select(audit_log).order_by(audit_log.c.id.desc()).limit(limit)
            ).mappings()
        ]
        events = gateway_safety_events
        for r in conn.execute(sa.select(events).order_by(events.c.id.desc()).limit(limit)).mappings():
            rows.append(
                {
                    "id": None,
                    "at": r["created_at"] or "",
                    "actor": r["actor"] or "gateway",
                    "action": r["kind"],
                    "target": r["task"] or "",
                    "reason": r["reason"] or "",
                    "details": {k: (str(v) if v is not None else None) for k, v in dict(r).items()},
                    "manifest_sequence": None,
                    "source": "gateway",
                }
            )
    rows.sort(key=lambda r: r["at"] or "", reverse=True)
    return rows[:limit]
