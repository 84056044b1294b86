"""The gate's rules, checked before any ``execute`` is handed out: approval, max_attempts and spend caps.

Rules per effect type live in ``effect_policies`` (set with :meth:`EffectLedger.set_rules`, HTTP
``PUT /rules/{effect_type}``); spend reservations in ``effect_spend``. :func:`gate_in` runs in the ledger's
``begin`` transaction (ARCHITECTURE.md, "Effects"); the ledger's module docstring says what each rule does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ratchet_assets.effects.records import Begin, IndeterminateAction, Rules, iso
from ratchet_assets.effects.tenancy import ALL_TYPES, client_cap_type, is_namespace_rule, namespace_of
from ratchet_core.control_db import effect_approvals, effect_policies, effect_spend


@dataclass
class Gate:
    """What a ``begin`` brings to the gate's checks, and what they found (remaining budget)."""

    cost_usd: float | None
    summary: str
    requested_by: str
    ceiling: float  # the maximum per effect: what one stored spend row counts as at most (:func:`used_in`)
    remaining: float | None = None


def stored_cap(cap_usd: float | None) -> float | None:
    """A cap as the gate applies it. An older gate's row may hold what is refused now: an infinite cap is no cap
    (what it meant), a NaN or negative one is 0 (nothing spends until an operator sets it again), so the rules
    always read as finite numbers."""
    if cap_usd is None or (math.isfinite(cap_usd) and cap_usd >= 0):
        return cap_usd
    return None if cap_usd == math.inf else 0.0


def rules_in(conn: Connection, effect_type: str, default: IndeterminateAction) -> Rules:
    """The rules of ``effect_type`` as stored; ``default`` is its indeterminate policy when none is set."""
    row = (
        conn.execute(sa.select(effect_policies).where(effect_policies.c.effect_type == effect_type))
        .mappings()
        .first()
    )
    if row is None:
        return Rules(effect_type, default)
    return Rules(
        effect_type,
        row["policy"] or default,
        bool(row["approval_required"]),
        row["max_attempts"],
        stored_cap(row["cap_usd"]),
        row["cap_window_seconds"],
    )


def used_in(conn: Connection, rules: Rules, now: datetime, ceiling: float) -> float:
    """Reserved + spent dollars of ``rules``' type (a client's ``<client>/*``: all its types) in its window.

    Each row counts within ``[0, ceiling]`` (the maximum per effect): a row an older gate stored infinite, huge or
    negative counts as the maximum or 0, so the sum, the usage and the rules stay finite and readable."""
    t = effect_spend
    if is_namespace_rule(rules.effect_type):  # the client's spend over all its types
        prefix = rules.effect_type.removesuffix(ALL_TYPES)
        of_type = t.c.effect_type.startswith(prefix, autoescape=True)
    else:
        of_type = t.c.effect_type == rules.effect_type
    usd = sa.case((t.c.usd > ceiling, ceiling), (t.c.usd >= 0, t.c.usd), else_=0.0)
    query = sa.select(sa.func.coalesce(sa.func.sum(usd), 0.0)).where(of_type)
    if rules.cap_window_seconds is not None:
        since = iso(now - timedelta(seconds=rules.cap_window_seconds))
        query = query.where(effect_spend.c.at > since)
    return float(conn.execute(query).scalar() or 0.0)


def gate_in(
    conn: Connection,
    rules: Rules,
    gate: Gate,
    key: str,
    fingerprint: str,
    attempts: int,
    now: datetime,
    token: str,
    rules_of: Callable[[Connection, str], Rules],
) -> Begin | None:
    """None when an execute may be handed out (spend then reserved), else the refusal."""
    if rules.max_attempts is not None and attempts >= rules.max_attempts:
        return Begin(
            "blocked",
            attempts=attempts,
            detail=f"{rules.effect_type}:{key} was attempted {attempts} times (max_attempts "
            f"{rules.max_attempts}); resolve it with `ratchet admin effects resolve` or raise max_attempts",
        )
    if rules.approval_required:
        a = effect_approvals
        where = sa.and_(a.c.effect_type == rules.effect_type, a.c.key == key)
        row = conn.execute(sa.select(a).where(where)).mappings().first()
        if row is None:
            conn.execute(
                a.insert().values(
                    effect_type=rules.effect_type,
                    key=key,
                    fingerprint=fingerprint,
                    state="pending",
                    summary=gate.summary[:2000],
                    requested_by=gate.requested_by,
                    requested_at=iso(now),
                )
            )
            row = {"state": "pending", "fingerprint": fingerprint}
        if row["fingerprint"] != fingerprint:
            return Begin(
                "denied",
                attempts=attempts,
                detail=f"the approval for {rules.effect_type}:{key} is for fingerprint "
                f"{row['fingerprint']}, not {fingerprint}",
            )
        if row["state"] == "pending":
            return Begin(
                "awaiting_approval",
                attempts=attempts,
                detail=f"{rules.effect_type}:{key} needs approval: `ratchet admin approve "
                f"{rules.effect_type} {key} --reason ...` (or --deny)",
            )
        if row["state"] == "denied":
            return Begin(
                "denied",
                attempts=attempts,
                detail=f"denied by {row['decided_by']}: {row['reason']}",
            )
    caps = [rules]
    if (client := namespace_of(rules.effect_type)) is not None:  # the client's own cap, over all its types
        caps.append(rules_of(conn, client_cap_type(client)))
    for cap in caps:
        if cap.cap_usd is None:
            continue
        if gate.cost_usd is None:
            return Begin(
                "denied",
                attempts=attempts,
                detail=f"{cap.effect_type} has a spend cap: begin it with its estimated cost_usd",
            )
        remaining = max(0.0, cap.cap_usd - used_in(conn, cap, now, gate.ceiling))
        if gate.cost_usd > remaining + 1e-12:
            window = f"per {cap.cap_window_seconds} s" if cap.cap_window_seconds is not None else "in all"
            return Begin(
                "denied",
                attempts=attempts,
                remaining_usd=remaining,
                detail=f"spend cap: {cap.effect_type} may spend ${cap.cap_usd:.6f} {window}; "
                f"${remaining:.6f} remains, this effect is estimated at ${gate.cost_usd:.6f}",
            )
        left = remaining - gate.cost_usd
        gate.remaining = left if gate.remaining is None else min(gate.remaining, left)
    if gate.cost_usd is not None:
        conn.execute(
            effect_spend.insert().values(
                effect_type=rules.effect_type,
                key=key,
                token=token,
                usd=float(gate.cost_usd),
                state="reserved",
                at=iso(now),
            )
        )
    return None
