"""The effect ledger: every irreversible effect happens at most once per content-derived key (DESIGN §6).

A caller asks ``begin(effect_type, key, fingerprint)`` before acting and acts only on ``execute``:

==============================================  ===========================================================
row state                                        outcome of ``begin``
==============================================  ===========================================================
no row                                           insert ``in_flight`` -> ``execute``
``done``, same fingerprint                       ``duplicate`` (with the stored result)
any state, different fingerprint                 ``denied`` (same key, other payload: never acted twice)
``in_flight``, lease still valid                 ``in_flight`` (someone else is acting now)
``in_flight``, lease lapsed / ``indeterminate``  mark ``indeterminate``, then the type's policy:
                                                 ``block`` -> ``blocked`` (an operator resolves it);
                                                 ``retry`` -> ``execute`` again (attempts + 1);
                                                 ``probe`` -> the caller's probe decides: a result means it
                                                 happened (``duplicate``), ``None`` means it did not
                                                 (``execute``)
``failed``                                       ``block`` -> ``blocked``; ``retry``/``probe`` -> ``execute``
==============================================  ===========================================================

The decision runs in one control-DB transaction (SQLite ``BEGIN IMMEDIATE`` from ``make_engine``; row lock
``SELECT ... FOR UPDATE`` on Postgres), so concurrent callers on one key get exactly one ``execute``.
``report``/``fail`` carry the token handed out with ``execute``; a holder whose lease was taken over cannot
report (``StaleToken``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ratchet_core.control_db import effects, ensure_schema

Outcome = Literal["execute", "duplicate", "in_flight", "blocked", "denied"]
Policy = Literal["block", "retry", "probe"]
STATUSES = ("in_flight", "done", "failed", "indeterminate")
RESOLUTIONS = ("done", "failed", "forget")

# Effect types Ratchet itself performs and what to do when a holder vanished mid-effect.
DEFAULT_POLICIES: dict[str, Policy] = {
    "receipt.sign": "probe",  # the receipt file on disk says whether the signature was written
    "training.launch": "block",  # costs money: an operator decides
    "adapter.load": "retry",  # loading the same adapter twice is harmless
    "release.publish": "block",
    "webhook": "block",
}

# The ``effects`` table is defined with every other control-DB table in ratchet_core.control_db.
effects_table = effects


class EffectError(RuntimeError):
    """Misuse of the effect ledger (unknown row, bad resolution)."""


class StaleToken(EffectError):
    """The caller's token is no longer the row's: its lease lapsed and another holder took over."""


@dataclass(frozen=True)
class Begin:
    """What ``begin`` decided. Only ``execute`` may act; ``token`` is then needed to report."""

    outcome: Outcome
    token: str | None = None
    result: dict[str, Any] | None = None
    status: str = ""
    attempts: int = 0
    detail: str = ""


@dataclass(frozen=True)
class EffectRecord:
    effect_type: str
    key: str
    fingerprint: str
    status: str
    lease_until: str
    attempts: int
    result: dict[str, Any] | None
    error: str | None
    note: str | None
    created_at: str
    updated_at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lease_lapsed(self, now: datetime | None = None) -> bool:
        return datetime.fromisoformat(self.lease_until) <= (now or _now())


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="microseconds")


def ensure_tables(engine: Engine) -> None:
    """Create (or migrate) the control DB's schema, ``effects`` included (idempotent)."""
    ensure_schema(engine)


class EffectLedger:
    """Begin / report / fail / resolve effects in the control DB."""

    def __init__(
        self,
        engine: Engine,
        policies: dict[str, Policy] | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.engine = engine
        self.policies: dict[str, Policy] = {**DEFAULT_POLICIES, **(policies or {})}
        self.clock = clock
        ensure_tables(engine)

    def policy(self, effect_type: str) -> Policy:
        return self.policies.get(effect_type, "block")

    # The state machine ------------------------------------------------------------------------------------
    def begin(
        self,
        effect_type: str,
        key: str,
        fingerprint: str,
        lease_seconds: float = 600.0,
        probe: Callable[[EffectRecord], dict[str, Any] | None] | None = None,
    ) -> Begin:
        """Decide atomically whether the caller may perform the effect (table in the module docstring)."""
        policy = self.policy(effect_type)
        if policy == "probe" and probe is None:
            raise EffectError(f"effect type {effect_type!r} has policy 'probe': pass probe=... to begin()")
        for _ in range(5):
            try:
                with self.engine.begin() as conn:
                    return self._begin_in(conn, effect_type, key, fingerprint, lease_seconds, policy, probe)
            except sa.exc.IntegrityError:  # a concurrent insert won the race (Postgres): decide again
                continue
        raise EffectError(f"could not decide effect {effect_type}:{key} after 5 attempts; retry")

    def _begin_in(
        self,
        conn: Connection,
        effect_type: str,
        key: str,
        fingerprint: str,
        lease_seconds: float,
        policy: Policy,
        probe: Callable[[EffectRecord], dict[str, Any] | None] | None,
    ) -> Begin:
        now = self.clock()
        t = effects_table
        where = sa.and_(t.c.effect_type == effect_type, t.c.key == key)
        query = sa.select(t).where(where)
        if conn.dialect.name != "sqlite":
            query = query.with_for_update()
        row = conn.execute(query).mappings().first()
        lease_until = _iso(now + timedelta(seconds=lease_seconds))
        token = uuid.uuid4().hex
        if row is None:
            conn.execute(
                t.insert().values(
                    effect_type=effect_type,
                    key=key,
                    fingerprint=fingerprint,
                    status="in_flight",
                    lease_until=lease_until,
                    token=token,
                    attempts=1,
                    created_at=_iso(now),
                    updated_at=_iso(now),
                )
            )
            return Begin("execute", token=token, status="in_flight", attempts=1)
        record = _record(row)
        if row["fingerprint"] != fingerprint:
            return Begin(
                "denied",
                result=record.result,
                status=record.status,
                attempts=record.attempts,
                detail=f"{effect_type}:{key} is recorded with fingerprint {row['fingerprint']}, "
                f"not {fingerprint}",
            )
        if row["status"] == "done":
            return Begin("duplicate", result=record.result, status="done", attempts=record.attempts)

        def take_over(note: str) -> Begin:
            conn.execute(
                t.update()
                .where(where)
                .values(
                    status="in_flight",
                    token=token,
                    lease_until=lease_until,
                    attempts=row["attempts"] + 1,
                    note=note,
                    updated_at=_iso(now),
                )
            )
            return Begin("execute", token=token, status="in_flight", attempts=row["attempts"] + 1)

        if row["status"] == "failed":
            if policy == "block":
                return Begin("blocked", status="failed", attempts=record.attempts, detail=record.error or "")
            return take_over("retry after failure")
        if row["status"] == "in_flight" and not record.lease_lapsed(now):
            return Begin("in_flight", status="in_flight", attempts=record.attempts)
        # A holder vanished (lease lapsed) or an earlier caller already found it so: indeterminate.
        if row["status"] != "indeterminate":
            conn.execute(
                t.update()
                .where(where)
                .values(status="indeterminate", note="lease lapsed without a report", updated_at=_iso(now))
            )
            record = _record({**row, "status": "indeterminate"})
        if policy == "retry":
            return take_over("retried after indeterminate")
        if policy == "probe":
            assert probe is not None
            found = probe(record)
            if found is None:
                return take_over("probe: effect not found, executing again")
            conn.execute(
                t.update()
                .where(where)
                .values(
                    status="done",
                    result=json.dumps(found, sort_keys=True),
                    note="probe: effect found",
                    updated_at=_iso(now),
                )
            )
            return Begin("duplicate", result=found, status="done", attempts=record.attempts)
        return Begin(
            "blocked",
            status="indeterminate",
            attempts=record.attempts,
            detail="lease lapsed without a report; resolve with `ratchet admin effects resolve`",
        )

    def report(self, token: str, result: dict[str, Any]) -> None:
        """Record that the effect holding ``token`` happened, with its result."""
        self._finish(token, status="done", result=json.dumps(result, sort_keys=True), error=None)

    def fail(self, token: str, error: str) -> None:
        """Record that the effect holding ``token`` did not happen (it may be retried per policy)."""
        self._finish(token, status="failed", result=None, error=error)

    def _finish(self, token: str, status: str, result: str | None, error: str | None) -> None:
        t = effects_table
        with self.engine.begin() as conn:
            updated = conn.execute(
                t.update()
                .where(sa.and_(t.c.token == token, t.c.status == "in_flight"))
                .values(status=status, result=result, error=error, updated_at=_iso(self.clock()))
            ).rowcount
        if updated != 1:
            raise StaleToken(
                "this effect's lease was taken over (or already reported); its outcome is recorded by the "
                "new holder — see `ratchet admin effects list`"
            )

    def resolve(
        self,
        effect_type: str,
        key: str,
        resolution: str,
        reason: str,
        result: dict[str, Any] | None = None,
        *,
        force: bool = False,
    ) -> EffectRecord | None:
        """Operator decision on a stuck effect: ``done`` (it happened), ``failed`` (it did not), ``forget``.

        The reason follows the one rule (``ratchet_core.reasons``). An effect that is ``done`` becomes ``failed``
        or is forgotten only with ``force``: either lets it happen again.
        """
        from ratchet_core.reasons import ReasonError, check_reason

        if resolution not in RESOLUTIONS:
            raise EffectError(f"resolution must be one of {', '.join(RESOLUTIONS)}, not {resolution!r}")
        try:
            reason = check_reason(reason)
        except ReasonError as exc:
            raise EffectError(str(exc)) from None
        t = effects_table
        where = sa.and_(t.c.effect_type == effect_type, t.c.key == key)
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(t).where(where)).mappings().first()
            if row is None:
                raise EffectError(
                    f"no effect {effect_type} {key!r}; list them with `ratchet admin effects list`"
                )
            if row["status"] == "done" and resolution != "done" and not force:
                raise EffectError(
                    f"{effect_type} {key!r} is done (it happened); resolving it {resolution} lets it happen "
                    "again: pass --force (with the reason) if that is what you want"
                )
            if resolution == "forget":
                conn.execute(t.delete().where(where))
                return None
            values: dict[str, Any] = {
                "status": resolution,
                "note": f"resolved {resolution}: {reason}",
                "token": uuid.uuid4().hex,  # any old holder can no longer report
                "updated_at": _iso(self.clock()),
            }
            if result is not None:
                values["result"] = json.dumps(result, sort_keys=True)
            if resolution == "failed":
                values["error"] = reason
            conn.execute(t.update().where(where).values(**values))
        return self.lookup(effect_type, key)

    # Reading ----------------------------------------------------------------------------------------------
    def lookup(self, effect_type: str, key: str) -> EffectRecord | None:
        t = effects_table
        with self.engine.connect() as conn:
            row = (
                conn.execute(sa.select(t).where(sa.and_(t.c.effect_type == effect_type, t.c.key == key)))
                .mappings()
                .first()
            )
        return _record(row) if row else None

    def list_effects(
        self,
        effect_type: str | None = None,
        status: str | None = None,
        limit: int = 100,
    ) -> list[EffectRecord]:
        """Newest first; ``status='indeterminate'`` also returns in-flight rows whose lease lapsed."""
        t = effects_table
        query = sa.select(t).order_by(t.c.updated_at.desc(), t.c.key).limit(limit)
        if effect_type:
            query = query.where(t.c.effect_type == effect_type)
        if status == "indeterminate":
            query = query.where(
                sa.or_(
                    t.c.status == "indeterminate",
                    sa.and_(t.c.status == "in_flight", t.c.lease_until <= _iso(self.clock())),
                )
            )
        elif status:
            query = query.where(t.c.status == status)
        with self.engine.connect() as conn:
            return [_record(r) for r in conn.execute(query).mappings()]

    def indeterminate(self) -> list[EffectRecord]:
        """Effects whose outcome nobody knows: flagged by the Dagster check and `admin effects list`."""
        return self.list_effects(status="indeterminate", limit=1000)


def _record(row: Any) -> EffectRecord:
    return EffectRecord(
        effect_type=row["effect_type"],
        key=row["key"],
        fingerprint=row["fingerprint"],
        status=row["status"],
        lease_until=row["lease_until"],
        attempts=row["attempts"],
        result=json.loads(row["result"]) if row["result"] else None,
        error=row["error"],
        note=row["note"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
