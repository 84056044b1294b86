"""Signed release manifests: what every gateway replica serves, per task, as a chain of DSSE-signed documents.

A manifest says, for each task, which release stage it is in (``teacher`` | ``shadow`` | ``canary`` | ``live``),
which adapter version, what share of eligible traffic a canary gets, and the calibrated confidence threshold; plus
global flags (student disabled, releases frozen, training paused, audit rate) and tasks pinned to the teacher.

Only the control plane (Dagster sensors, ``ratchet admin``) holds the signing key and calls :func:`publish`; each
gateway holds public keys only and follows :func:`latest_verified`, so a row it cannot verify never widens what the
student serves. Manifests form a hash chain: ``sequence`` increases by one per publish and ``previous_digest`` is
the SHA-256 of the previous envelope's canonical JSON (the ``digest`` column), like a transparency log's
linked entries. Which keys may sign is the control DB's signed key history (``ratchet_core.key_history``): publishing with
any other key fails before anything is written, and gateways follow key rotations recorded there.

Serving semantics of one :class:`TaskRelease` (the gateway follows these):

- ``teacher``: the teacher answers everything; ``version`` is informational.
- ``shadow``: ``version`` answers off the request path (pair rows, ``pair_role='shadow'``); clients are served by
  ``previous_live`` (with ``previous_threshold``) when set, else by the teacher.
- ``canary``: ``canary_percent`` of eligible requests go to ``version`` (with ``threshold``); the rest as in
  shadow (``previous_live`` when set, else the teacher).
- ``live``: ``version`` serves every eligible request; ``previous_live`` is where a rollback goes.

``pins`` (tasks pinned to the teacher) and ``flags.student_disabled`` override all of the above towards the
teacher. A task missing from ``tasks`` is in ``teacher``. With no manifest at all, :meth:`Manifest.default`
applies: every task ``teacher``, audit rate 0.05.

Storage: table ``release_manifests(sequence INTEGER PRIMARY KEY, envelope TEXT, digest TEXT, created_at TEXT)`` in
the control DB (defined with every other table in ``ratchet_core.control_db``). The primary key on ``sequence`` plus
a serialised read-apply-insert transaction (SQLite: ``BEGIN IMMEDIATE`` from
:func:`ratchet_core.control_db.make_engine`; Postgres: ``SELECT ... FOR UPDATE`` on a one-row lock table) means concurrent publishers line up and never fork the chain or lose a change.

References: DSSE v1 (secure-systems-lab/dsse), in-toto Statement v1, RFC 8785 (canonical JSON).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.engine import Connection, Engine

from ratchet_core.control_db import ensure_schema, release_manifest_lock, release_manifests
from ratchet_core.key_history import keys_ever_trusted, require_trusted, trusted_keys
from ratchet_core.keys import KeyTrustError, as_key_list
from ratchet_core.names import NameRuleError, check
from ratchet_core.reasons import ReasonError, check_reason
from ratchet_core.task_policy import TaskPolicy
from ratchet_stats.release_manifest import PREDICATE_TYPE as MANIFEST_PREDICATE

DEFAULT_AUDIT_RATE = 0.05
STAGES = ("teacher", "shadow", "canary", "live")

Stage = Literal["teacher", "shadow", "canary", "live"]


class TaskRelease(BaseModel):
    """Release state of one task."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    stage: Stage = "teacher"
    version: str = ""
    canary_percent: float = Field(0.0, ge=0.0, le=100.0)
    threshold: float | None = None
    previous_live: str | None = None
    previous_threshold: float | None = None
    # An operator put `version` here with `ratchet admin promote --force` (no certificate was required); the
    # release sensor never promotes a forced release further.
    forced: bool = False
    # The candidate's audit rate while in shadow or canary, chosen at admission by the evidence budget
    # (ratchet_assets.release.budget); at live, the watch rate of a live version serving alone (budget.watch_rate);
    # None: the policy's rates. Written only when set (older bytes unchanged).
    audit_rate: float | None = Field(None, ge=0.0, le=1.0)
    # The targeted audit stream while in shadow or canary beside a live version (ratchet_core.routing): a request
    # live served whose candidate answer differs from live's is audited when unit_hash("audit", request_id) < this
    # rate (its inclusion probability, which the carried bound's processes are about: release.decision); chosen
    # at admission by the evidence budget. None: no targeted stream (and nothing carries). Written only when set.
    target_audit_rate: float | None = Field(None, gt=0.0, le=1.0)

    @property
    def live_version(self) -> str | None:
        """The version serving as live: a live release's own, or during a rollout (shadow, canary) the previous
        live version serving the rest; None when the teacher serves."""
        if self.stage == "live":
            return self.version or None
        if self.stage in ("shadow", "canary"):
            return self.previous_live or None
        return None


class Flags(BaseModel):
    """Global switches. ``audit_rate``: share of student-served requests re-asked of the teacher."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    student_disabled: bool = False
    releases_frozen: bool = False
    training_paused: bool = False
    audit_rate: float = Field(DEFAULT_AUDIT_RATE, ge=0.0, le=1.0)


class Manifest(BaseModel):
    """One release manifest: the predicate of a signed in-toto Statement (``MANIFEST_PREDICATE``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    sequence: int = Field(0, ge=0)
    issued_at: str = ""
    previous_digest: str = ""
    tasks: dict[str, TaskRelease] = Field(default_factory=dict)
    flags: Flags = Field(default_factory=Flags)
    pins: list[str] = Field(default_factory=list)
    reason: str = ""
    actor: str = ""
    # Per-task policy (ratchet_core.task_policy); left out of the signed predicate while empty.
    policies: dict[str, TaskPolicy] = Field(default_factory=dict)

    @classmethod
    def default(cls) -> Manifest:
        """What applies before any manifest exists: every task on the teacher, audit rate 0.05."""
        return cls(sequence=0, reason="default: no manifest published yet", actor="ratchet")

    def task(self, name: str) -> TaskRelease:
        """The release of `name` as published (``teacher`` when absent)."""
        return self.tasks.get(name) or TaskRelease()

    def serving(self, name: str) -> TaskRelease:
        """The release a gateway must apply to `name`: pins and ``student_disabled`` force the teacher."""
        policy = self.policies.get(name)
        if self.flags.student_disabled or name in self.pins or (policy is not None and not policy.enabled):
            return TaskRelease(stage="teacher", version=self.task(name).version)
        return self.task(name)

    def audit_rate(self, name: str) -> float:
        """The audit rate of task `name`: while a candidate is in shadow or canary its policy's
        ``canary_audit_rate`` (an operator's choice wins), else the release's ``audit_rate`` (the evidence budget's);
        a live release's ``audit_rate`` (the watch rate of a live version serving alone,
        ``ratchet_assets.release.budget.watch_rate``); else its policy's ``audit_rate`` when set, else
        ``flags.audit_rate``."""
        policy = self.policies.get(name)
        rel = self.task(name)
        rollout = rel.stage in ("shadow", "canary")
        signed = rel.stage in ("shadow", "canary", "live") and rel.audit_rate is not None
        if policy is None:
            return rel.audit_rate if signed and rel.audit_rate is not None else self.flags.audit_rate
        if policy.canary_audit_rate is not None and rollout:
            return policy.canary_audit_rate
        if signed and rel.audit_rate is not None:
            return rel.audit_rate
        return self.flags.audit_rate if policy.audit_rate is None else policy.audit_rate

    def target_audit_rate(self, name: str) -> float | None:
        """The inclusion probability of the targeted audit stream of task `name` (``TaskRelease.target_audit_rate``)
        while a candidate is in shadow or canary beside a live version; None otherwise (no targeted audits)."""
        rel = self.task(name)
        if rel.stage not in ("shadow", "canary") or not rel.previous_live:
            return None
        return rel.target_audit_rate

    def to_predicate(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if not data["policies"]:
            del data["policies"]  # manifests without policies keep the bytes they always had
        for rel in data["tasks"].values():
            if rel.get("audit_rate") is None:
                rel.pop("audit_rate", None)  # likewise releases without an evidence budget
            if rel.get("target_audit_rate") is None:
                rel.pop("target_audit_rate", None)  # and without a targeted audit stream
        return data

    @classmethod
    def from_predicate(cls, predicate: dict[str, Any]) -> Manifest:
        return cls.model_validate(predicate)


class ManifestError(ValueError):
    """A manifest change a user asked for cannot be published; the message says what to do instead."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def sign_manifest(manifest: Manifest, private_key: Any) -> tuple[str, str]:
    """Sign `manifest`; return (envelope text as canonical JSON, its SHA-256 hex digest)."""
    from ratchet_stats.canonical import canonical_json, digest, sha256_hex
    from ratchet_stats.dsse import make_statement, sign_statement

    predicate = manifest.to_predicate()
    subject = {"name": f"release-manifest/{manifest.sequence}", "digest": {"sha256": digest(predicate)}}
    envelope = sign_statement(make_statement(MANIFEST_PREDICATE, predicate, [subject]), private_key)
    text = canonical_json(envelope).decode("utf-8")
    return text, sha256_hex(text.encode("utf-8"))


def verify_row(sequence: int, envelope_text: str, public_keys: Any) -> Manifest:
    """Verify one stored row and return its manifest; raise ``ValueError`` saying which check failed.

    Order: DSSE signature first (``ratchet_stats.dsse.verify_statement`` checks it before parsing the payload),
    then the predicate type, then the predicate schema, then that the signed sequence equals the row's (a signed
    manifest copied into another row is a replay, not a new release).
    """
    from ratchet_stats.dsse import VerificationError, verify_statement

    try:
        envelope = json.loads(envelope_text)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"row {sequence}: envelope: not JSON ({exc})") from exc
    try:
        statement = verify_statement(envelope, as_key_list(public_keys), predicate_type=MANIFEST_PREDICATE)
    except VerificationError as exc:
        text = str(exc) if str(exc).startswith(f"{exc.check}:") else f"{exc.check}: {exc}"
        raise ValueError(f"row {sequence}: {text}") from exc
    except Exception as exc:  # malformed text that the verifier could not even read
        raise ValueError(f"row {sequence}: envelope: {exc}") from exc
    try:
        manifest = Manifest.from_predicate(statement.get("predicate"))
    except (ValidationError, TypeError) as exc:
        raise ValueError(f"row {sequence}: predicate: does not parse as a release manifest: {exc}") from exc
    if manifest.sequence != sequence:
        raise ValueError(
            f"row {sequence}: sequence: the signed manifest says {manifest.sequence} (replayed row)"
        )
    return manifest


def _latest_verified(conn: Connection, public_keys: Any, batch: int = 64) -> tuple[Manifest | None, int, str]:
    rejected = 0
    upper: int | None = None
    while True:
        q = sa.select(release_manifests.c.sequence, release_manifests.c.envelope).order_by(
            release_manifests.c.sequence.desc()
        )
        if upper is not None:
            q = q.where(release_manifests.c.sequence < upper)
        rows = conn.execute(q.limit(batch)).all()
        if not rows:
            return None, rejected, ""
        for sequence, envelope_text in rows:
            try:
                manifest = verify_row(sequence, envelope_text, public_keys)
            except ValueError:
                rejected += 1
                continue
            from ratchet_stats.canonical import sha256_hex

            return manifest, rejected, sha256_hex(envelope_text.encode("utf-8"))
        upper = rows[-1][0]


def latest_verified(engine: Engine | Connection, public_keys: Any) -> tuple[Manifest | None, int]:
    """The newest manifest whose signature verifies under a trusted key and whose predicate parses.

    `public_keys` are the trust roots (a gateway's configured keys); the control DB's signed key history
    (``ratchet_core.key_history``) carries them forward: keys it added are trusted too, keys it retired are not.
    Returns ``(manifest or None, number of rejected rows newer than it)``. Rows that fail any check (unsigned,
    forged, wrong key, wrong predicate type, unparsable, replayed) are skipped, never trusted. ``None`` means no
    valid manifest: apply :meth:`Manifest.default`.
    """
    if isinstance(engine, Connection):
        manifest, rejected, _ = _latest_verified(engine, trusted_keys(engine, as_key_list(public_keys)))
        return manifest, rejected
    with engine.connect() as conn:
        try:
            keys = trusted_keys(conn, as_key_list(public_keys))
            manifest, rejected, _ = _latest_verified(conn, keys)
        except (sa.exc.OperationalError, sa.exc.ProgrammingError):
            conn.rollback()
            if not sa.inspect(conn).has_table(release_manifests.name):
                return None, 0  # nothing published yet: a fresh control DB
            raise
    return manifest, rejected


ChangeFn = Callable[[Manifest], "Manifest | None"]


def _check_new_names(base: Manifest, new: Manifest) -> None:
    """ManifestError unless every task and version the change adds follows the one name rule
    (``ratchet_core.names``): nothing with a CR/LF or markup is ever signed. Names already signed stay readable."""
    try:
        for task in (set(new.tasks) | set(new.policies) | set(new.pins)) - (
            set(base.tasks) | set(base.policies) | set(base.pins)
        ):
            check("task", task, "task")
        for task, release in new.tasks.items():
            for version in (release.version, release.previous_live):
                if version and version not in (base.task(task).version, base.task(task).previous_live):
                    check("version", version, f"{task}'s version")
    except NameRuleError as exc:
        raise ManifestError(f"nothing was published: {exc.message}") from None


def publish_in(
    conn: Connection,
    private_key: Any,
    change_fn: ChangeFn,
    reason: str,
    actor: str,
    *,
    public_keys: Any = None,
) -> Manifest:
    """:func:`publish` inside a transaction the caller holds (so it can write, e.g., an audit-log row atomically).

    The caller must have begun the transaction with ``engine.begin()``; on SQLite that is ``BEGIN IMMEDIATE``.
    `private_key` must be trusted by the control DB's key history (``ratchet_core.key_history.require_trusted``; on an
    empty history it becomes the first trusted key), else :class:`ManifestError` and nothing is written.
    `public_keys`: extra keys to read the current manifest with (the trusted keys always are).
    """
    try:
        reason = check_reason(reason)
    except ReasonError as exc:
        raise ManifestError(str(exc)) from None
    # Postgres: serialise publishers on the lock row. SQLite ignores FOR UPDATE; BEGIN IMMEDIATE already did it.
    conn.execute(sa.select(release_manifest_lock.c.id).with_for_update()).first()
    # Gateways follow only manifests signed by a trusted key: refuse any other key before writing anything.
    try:
        trust = require_trusted(conn, private_key, actor)
    except KeyTrustError as exc:
        raise ManifestError(str(exc)) from None
    keys = list(trust.trusted.values()) + as_key_list(public_keys)
    current, _, previous_digest = _latest_verified(conn, keys)
    base = current if current is not None else Manifest.default()
    draft = base.model_copy(deep=True)
    changed = change_fn(draft)
    new = Manifest.model_validate((changed if isinstance(changed, Manifest) else draft).model_dump())
    _check_new_names(base, new)
    # Rows we could not verify still hold their sequence number: go above them so the primary key never collides.
    top = conn.execute(sa.select(sa.func.max(release_manifests.c.sequence))).scalar()
    new = new.model_copy(
        update={
            "sequence": int(top or 0) + 1,
            "issued_at": _now(),
            "previous_digest": previous_digest,
            "reason": reason,
            "actor": actor,
            "pins": sorted(set(new.pins)),
        }
    )
    envelope_text, digest_hex = sign_manifest(new, private_key)
    conn.execute(
        release_manifests.insert().values(
            sequence=new.sequence, envelope=envelope_text, digest=digest_hex, created_at=new.issued_at
        )
    )
    return new


def publish(
    engine: Engine,
    private_key: Any,
    change_fn: ChangeFn,
    reason: str,
    actor: str,
    *,
    public_keys: Any = None,
) -> Manifest:
    """Atomically read the latest verified manifest, apply `change_fn`, sign and append it; return it.

    ``change_fn(draft)`` edits a deep copy of the current manifest in place or returns a new :class:`Manifest`
    (any other return value is ignored); raising aborts the publish with nothing written. The new manifest gets
    ``sequence`` = highest stored sequence + 1 and ``previous_digest`` = digest of the envelope it was derived
    from. A signing key the control DB does not trust is refused before anything is written (:func:`publish_in`).
    """
    ensure_schema(engine)
    with engine.begin() as conn:
        return publish_in(conn, private_key, change_fn, reason, actor, public_keys=public_keys)


def history(engine: Engine, public_keys: Any) -> list[dict[str, Any]]:
    """Every stored row, oldest first, with whether it verifies and why not (for audit logs and exports).

    A row verifies under `public_keys` or any key the control DB's key history ever trusted (so manifests signed
    before a key rotation still show as verified).
    """
    ensure_schema(engine)
    out: list[dict[str, Any]] = []
    with engine.connect() as conn:
        rows = conn.execute(sa.select(release_manifests).order_by(release_manifests.c.sequence)).all()
        public_keys = as_key_list(public_keys) + keys_ever_trusted(conn)
    for row in rows:
        entry: dict[str, Any] = {"sequence": row.sequence, "digest": row.digest, "created_at": row.created_at}
        try:
            m = verify_row(row.sequence, row.envelope, public_keys)
            entry.update(verified=True, manifest=m.to_predicate())
        except ValueError as exc:
            entry.update(verified=False, error=str(exc))
        out.append(entry)
    return out


def envelope_of(engine: Engine, sequence: int) -> dict[str, Any] | None:
    """The stored DSSE envelope of one row (for `ratchet verify manifest`), or None."""
    with engine.connect() as conn:
        text = conn.execute(
            sa.select(release_manifests.c.envelope).where(release_manifests.c.sequence == sequence)
        ).scalar()
    return None if text is None else json.loads(text)


def current_policies(engine: Engine, public_keys: Any) -> dict[str, TaskPolicy]:
    """The per-task policies (``ratchet_core.task_policy``) of the newest verified manifest ({} when none)."""
    ensure_schema(engine)
    manifest, _ = latest_verified(engine, public_keys)
    return dict(manifest.policies) if manifest is not None else {}
