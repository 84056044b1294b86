"""The effect ledger: every irreversible effect happens at most once per content-derived key (ARCHITECTURE.md, "Effects").

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

The gate's rules (table ``effect_policies``, set with :meth:`EffectLedger.set_rules`, HTTP
``PUT /rules/{effect_type}``) are checked, in the same transaction, before any ``execute`` is handed out, first
or again:

- ``max_attempts``: an effect that has been attempted that many times is ``blocked`` instead of executed again;
- ``approval_required``: the first ``begin`` records a pending approval and answers ``awaiting_approval``; an
  operator grants or denies it with a reason (``ratchet admin approve``, ``POST /approvals/...``); a grant lets the
  next ``begin`` execute, a denial answers ``denied`` with the operator's reason. A grant covers that effect (type,
  key and fingerprint) only;
- ``cap_usd`` per ``cap_window_seconds``: an ``execute`` reserves the caller's estimated ``cost_usd``; an effect
  whose estimate would take the window's reserved + spent total over the cap is ``denied`` with the remaining
  budget (``remaining_usd``). ``report(..., cost_usd=actual)`` replaces the estimate with what it cost; a
  failure keeps the reservation unless it says what was spent, so the cap is never overrun by unknown spend.
  Costs are numbers (not strings or booleans), finite, from 0 to the maximum per effect (``max_cost_usd``,
  RATCHET_EFFECTS_MAX_COST_USD, default $10,000); so no sum of them is ever infinite, and a spend row stored
  before that bound counts within it (``rules.used_in``).

Names. Effect types and keys follow the one name rule (``ratchet_core.names``: "effect type", "effect key"), and
a fingerprint the key's: printable ASCII only, so no control or bidi character is ever stored or echoed.

Tenancy. The control plane's own types (``training.launch``, ``release.live``, ``liverun.<run>``...) have no
``/``. A client of the HTTP gate owns the namespace ``<client>/``: every type it names is ``<client>/<name>``
(:func:`client_effect_type`), so no client can begin, report, read or exhaust the cap of the control plane's
types or another client's, and ``report``/``fail`` with a ``namespace`` only settle effects of that namespace.
Rules on ``<client>/*`` (:func:`client_cap_type`) hold the client's own cap: every ``execute`` of any of its
types reserves against it too (and against its type's own cap, if any).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ratchet_assets.effects.records import (
    DEFAULT_POLICIES,
    MAX_COST_USD,
    RESOLUTIONS,
    Approval,
    Begin,
    EffectError,
    EffectRecord,
    IndeterminateAction,
    Rules,
    StaleToken,
    check_cost,
    iso,
    record_of,
    utc_now,
)
from ratchet_assets.effects.rules import Gate, gate_in, rules_in, used_in
from ratchet_assets.effects.tenancy import (
    NAMESPACE_SEP,
    check_effect_type,
    check_fingerprint,
    check_key,
    is_namespace_rule,
)
from ratchet_core.control_db import effect_approvals, effect_policies, effect_spend, effects, ensure_schema

# The ``effects`` table is defined with every other control-DB table in ratchet_core.control_db.
effects_table = effects


def _checked_text(text: str, field: str) -> str:
    """A summary or error by the free-text rule (``ratchet_core.reasons.check_text``), or :class:`EffectError`
    naming the field."""
    from ratchet_core.reasons import TextError, check_text

    try:
        return check_text(text, field)
    except TextError as exc:
        raise EffectError(str(exc), field) from None


def _checked_reason(reason: str) -> str:
    """An operator's reason by the one rule (``ratchet_core.reasons``), or :class:`EffectError` saying what it needs."""
    from ratchet_core.reasons import ReasonError, check_reason

    try:
        return check_reason(reason)
    except ReasonError as exc:
        raise EffectError(str(exc), "reason") from None


def _execute(token: str, attempts: int, gate: Gate) -> Begin:
    """The one ``execute`` answer: the caller holds the lease (`token`) for this attempt."""
    return Begin("execute", token=token, status="in_flight", attempts=attempts, remaining_usd=gate.remaining)


class EffectLedger:
    """Begin / report / fail / resolve effects in the control DB."""

    def __init__(
        self,
        engine: Engine,
        policies: dict[str, IndeterminateAction] | None = None,
        clock: Callable[[], datetime] = utc_now,
        max_cost_usd: float = MAX_COST_USD,
    ) -> None:
        if not (math.isfinite(max_cost_usd) and max_cost_usd > 0):
            raise EffectError(
                f"the maximum cost per effect must be a finite number > 0, not {max_cost_usd!r}"
            )
        self.engine = engine
        self.max_cost_usd = float(max_cost_usd)
        self.policies: dict[str, IndeterminateAction] = {**DEFAULT_POLICIES, **(policies or {})}
        self.clock = clock
        ensure_schema(engine)

    def policy(self, effect_type: str) -> IndeterminateAction:
        return self.policies.get(effect_type, "block")

    # The state machine ------------------------------------------------------------------------------------
    def begin(
        self,
        effect_type: str,
        key: str,
        fingerprint: str,
        lease_seconds: float = 600.0,
        probe: Callable[[EffectRecord], dict[str, Any] | None] | None = None,
        *,
        cost_usd: float | None = None,
        summary: str = "",
        requested_by: str = "ratchet",
    ) -> Begin:
        """Decide atomically whether the caller may perform the effect (tables in the module docstring).

        ``cost_usd`` is the caller's estimate (required when the type has a spend cap); ``summary`` and
        ``requested_by`` are shown to the operator who approves.
        """
        check_effect_type(effect_type)
        check_key(key)
        check_fingerprint(fingerprint)
        check_cost(cost_usd, self.max_cost_usd)
        _checked_text(summary, "summary")
        gate = Gate(cost_usd, summary, requested_by, self.max_cost_usd)
        if self.rules(effect_type).policy == "probe" and probe is None:
            raise EffectError(f"effect type {effect_type!r} has policy 'probe': pass probe=... to begin()")
        for _ in range(5):
            try:
                with self.engine.begin() as conn:
                    rules = self._rules_in(conn, effect_type)
                    return self._begin_in(
                        conn, effect_type, key, fingerprint, lease_seconds, rules.policy, probe, rules, gate
                    )
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
        policy: IndeterminateAction,
        probe: Callable[[EffectRecord], dict[str, Any] | None] | None,
        rules: Rules,
        gate: Gate,
    ) -> Begin:
        now = self.clock()
        t = effects_table
        where = sa.and_(t.c.effect_type == effect_type, t.c.key == key)
        query = sa.select(t).where(where)
        if conn.dialect.name != "sqlite":
            query = query.with_for_update()
        row = conn.execute(query).mappings().first()
        lease_until = iso(now + timedelta(seconds=lease_seconds))
        token = uuid.uuid4().hex
        if row is None:
            refused = gate_in(conn, rules, gate, key, fingerprint, 0, now, token, self._rules_in)
            if refused is not None:
                return refused
            conn.execute(
                t.insert().values(
                    effect_type=effect_type,
                    key=key,
                    fingerprint=fingerprint,
                    status="in_flight",
                    lease_until=lease_until,
                    token=token,
                    attempts=1,
                    created_at=iso(now),
                    updated_at=iso(now),
                )
            )
            return _execute(token, 1, gate)
        record = record_of(row)
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
            refused = gate_in(
                conn, rules, gate, key, fingerprint, row["attempts"], now, token, self._rules_in
            )
            if refused is not None:
                return refused
            conn.execute(
                t.update()
                .where(where)
                .values(
                    status="in_flight",
                    token=token,
                    lease_until=lease_until,
                    attempts=row["attempts"] + 1,
                    note=note,
                    updated_at=iso(now),
                )
            )
            return _execute(token, row["attempts"] + 1, gate)

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
                .values(status="indeterminate", note="lease lapsed without a report", updated_at=iso(now))
            )
            record = record_of({**row, "status": "indeterminate"})
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
                    updated_at=iso(now),
                )
            )
            return Begin("duplicate", result=found, status="done", attempts=record.attempts)
        return Begin(
            "blocked",
            status="indeterminate",
            attempts=record.attempts,
            detail="lease lapsed without a report; resolve with `ratchet admin effects resolve`",
        )

    def report(
        self,
        token: str,
        result: dict[str, Any],
        cost_usd: float | None = None,
        *,
        namespace: str | None = None,
    ) -> None:
        """Record that the effect holding ``token`` happened, with its result (and what it cost, if known).

        With ``namespace`` (a client of the HTTP gate) only an effect of that client's types can be settled; any
        other token is answered like a stale one, so a client learns nothing about other clients' effects."""
        try:
            text = json.dumps(result, sort_keys=True, allow_nan=False)
        except ValueError:
            raise EffectError("result must be JSON: NaN and Infinity are not") from None
        self._finish(token, "done", text, None, cost_usd, namespace)

    def fail(
        self, token: str, error: str, cost_usd: float | None = None, *, namespace: str | None = None
    ) -> None:
        """Record that the effect holding ``token`` did not happen (it may be retried per policy).

        Its spend reservation stays unless ``cost_usd`` says what was actually spent (0 when nothing was).
        ``namespace`` as for :meth:`report`.
        """
        self._finish(token, "failed", None, _checked_text(error, "error"), cost_usd, namespace)

    def _finish(
        self,
        token: str,
        status: str,
        result: str | None,
        error: str | None,
        cost_usd: float | None,
        namespace: str | None,
    ) -> None:
        t = effects_table
        check_cost(cost_usd, self.max_cost_usd)
        where = sa.and_(t.c.token == token, t.c.status == "in_flight")
        if namespace is not None:
            where = sa.and_(where, t.c.effect_type.startswith(namespace + NAMESPACE_SEP, autoescape=True))
        with self.engine.begin() as conn:
            updated = conn.execute(
                t.update()
                .where(where)
                .values(status=status, result=result, error=error, updated_at=iso(self.clock()))
            ).rowcount
            if updated == 1 and cost_usd is not None:
                conn.execute(
                    effect_spend.update()
                    .where(effect_spend.c.token == token)
                    .values(usd=float(cost_usd), state="spent")
                )
        if updated != 1:
            raise StaleToken(
                "this token holds no effect in flight: its lease was taken over (or it was already reported, "
                "or it was never yours); the outcome is recorded by the holder — see `ratchet admin effects list`"
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
        if resolution not in RESOLUTIONS:
            raise EffectError(f"resolution must be one of {', '.join(RESOLUTIONS)}, not {resolution!r}")
        reason = _checked_reason(reason)
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
                "updated_at": iso(self.clock()),
            }
            if result is not None:
                values["result"] = json.dumps(result, sort_keys=True)
            if resolution == "failed":
                values["error"] = reason
            conn.execute(t.update().where(where).values(**values))
        return self.lookup(effect_type, key)

    # The gate's rules -------------------------------------------------------------------------------------
    def rules(self, effect_type: str) -> Rules:
        with self.engine.connect() as conn:
            return self._rules_in(conn, effect_type)

    def _rules_in(self, conn: Connection, effect_type: str) -> Rules:
        return rules_in(conn, effect_type, self.policy(effect_type))

    def set_rules(
        self,
        effect_type: str,
        *,
        reason: str,
        actor: str = "operator",
        policy: IndeterminateAction | None = None,
        approval_required: bool = False,
        max_attempts: int | None = None,
        cap_usd: float | None = None,
        cap_window_seconds: int | None = None,
    ) -> Rules:
        """Set (replace) the gate's rules for ``effect_type``; the reason follows the one rule.

        ``<client>/*`` (:func:`client_cap_type`) takes only a spend cap: the client's, over all its types."""
        check_effect_type(effect_type, rules_target=True)
        reason = _checked_reason(reason)
        if policy is not None and policy not in ("block", "retry", "probe"):
            raise EffectError(f"policy must be block, retry or probe, not {policy!r}")
        if max_attempts is not None and max_attempts < 1:
            raise EffectError("max_attempts must be >= 1 (leave it unset for no limit)")
        if cap_usd is not None and (
            isinstance(cap_usd, bool)
            or not isinstance(cap_usd, int | float)
            or not (math.isfinite(cap_usd) and cap_usd >= 0)
        ):
            raise EffectError(
                "cap_usd must be a finite number >= 0 (leave it unset for no cap)", "cap_usd", "invalid_cost"
            )
        if cap_window_seconds is not None and cap_window_seconds < 1:
            raise EffectError("cap_window_seconds must be >= 1 (leave it unset for a cap over all time)")
        if is_namespace_rule(effect_type) and (policy or approval_required or max_attempts is not None):
            raise EffectError(
                f"{effect_type} holds the client's own spend cap over all its types: give only cap_usd and "
                "cap_window_seconds (set policy, approval and max_attempts on one of its types)"
            )
        values = dict(
            policy=policy,
            approval_required=approval_required,
            max_attempts=max_attempts,
            cap_usd=cap_usd,
            cap_window_seconds=cap_window_seconds,
            actor=actor,
            reason=reason,
            updated_at=iso(self.clock()),
        )
        with self.engine.begin() as conn:
            where = effect_policies.c.effect_type == effect_type
            if conn.execute(sa.select(effect_policies.c.effect_type).where(where)).first() is None:
                conn.execute(effect_policies.insert().values(effect_type=effect_type, **values))
            else:
                conn.execute(effect_policies.update().where(where).values(**values))
        return self.rules(effect_type)

    def spend(self, effect_type: str) -> dict[str, Any]:
        """Reserved + spent dollars in the type's current cap window, the cap and what remains."""
        rules = self.rules(effect_type)
        with self.engine.connect() as conn:
            used = used_in(conn, rules, self.clock(), self.max_cost_usd)
        remaining = None if rules.cap_usd is None else max(0.0, rules.cap_usd - used)
        return {
            "effect_type": effect_type,
            "cap_usd": rules.cap_usd,
            "window_seconds": rules.cap_window_seconds,
            "used_usd": used,
            "remaining_usd": remaining,
        }

    # Approvals --------------------------------------------------------------------------------------------
    def decide(
        self, effect_type: str, key: str, grant: bool, reason: str, actor: str = "operator"
    ) -> Approval:
        """Grant or deny a pending approval (a decided one may be changed: the new decision is recorded)."""
        reason = _checked_reason(reason)
        a = effect_approvals
        where = sa.and_(a.c.effect_type == effect_type, a.c.key == key)
        with self.engine.begin() as conn:
            if conn.execute(sa.select(a.c.state).where(where)).first() is None:
                raise EffectError(
                    f"no approval requested for {effect_type} {key!r}; see `ratchet admin approve --list`"
                )
            conn.execute(
                a.update()
                .where(where)
                .values(
                    state="granted" if grant else "denied",
                    decided_by=actor,
                    decided_at=iso(self.clock()),
                    reason=reason,
                )
            )
        approval = self.approval(effect_type, key)
        assert approval is not None
        return approval

    def approval(self, effect_type: str, key: str) -> Approval | None:
        a = effect_approvals
        with self.engine.connect() as conn:
            row = (
                conn.execute(sa.select(a).where(sa.and_(a.c.effect_type == effect_type, a.c.key == key)))
                .mappings()
                .first()
            )
        return Approval(**dict(row)) if row else None

    def approvals(self, state: str | None = "pending", limit: int = 100) -> list[Approval]:
        a = effect_approvals
        query = sa.select(a).order_by(a.c.requested_at.desc()).limit(limit)
        if state:
            query = query.where(a.c.state == state)
        with self.engine.connect() as conn:
            return [Approval(**dict(r)) for r in conn.execute(query).mappings()]

    # Reading ----------------------------------------------------------------------------------------------
    def lookup(self, effect_type: str, key: str) -> EffectRecord | None:
        t = effects_table
        with self.engine.connect() as conn:
            row = (
                conn.execute(sa.select(t).where(sa.and_(t.c.effect_type == effect_type, t.c.key == key)))
                .mappings()
                .first()
            )
        return record_of(row) if row else None

    def list_effects(
        self,
        effect_type: str | None = None,
        status: str | None = None,
        limit: int = 100,
        namespace: str | None = None,
    ) -> list[EffectRecord]:
        """Newest first; ``status='indeterminate'`` also returns in-flight rows whose lease lapsed; with
        ``namespace`` only that client's types."""
        t = effects_table
        query = sa.select(t).order_by(t.c.updated_at.desc(), t.c.key).limit(limit)
        if namespace:
            query = query.where(t.c.effect_type.startswith(namespace + NAMESPACE_SEP, autoescape=True))
        if effect_type:
            query = query.where(t.c.effect_type == effect_type)
        if status == "indeterminate":
            query = query.where(
                sa.or_(
                    t.c.status == "indeterminate",
                    sa.and_(t.c.status == "in_flight", t.c.lease_until <= iso(self.clock())),
                )
            )
        elif status:
            query = query.where(t.c.status == status)
        with self.engine.connect() as conn:
            return [record_of(r) for r in conn.execute(query).mappings()]

    def indeterminate(self) -> list[EffectRecord]:
        """Effects whose outcome nobody knows: flagged by the Dagster check and `admin effects list`."""
        return self.list_effects(status="indeterminate", limit=1000)
