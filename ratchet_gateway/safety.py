"""Safety-only switches a gateway may apply on its own: disable the student, pin a task to the teacher.

The gateway holds no signing key, so it can never *widen* what the student serves; it can only narrow it, at once.
``POST /ratchet/admin/student-disabled`` and ``POST /ratchet/admin/pin`` (bearer ``RATCHET_ADMIN_KEY``) apply
the change in-process immediately and record it in the control-DB table ``gateway_safety_events`` so every
replica applies it on its next manifest poll. An event stays in force until the control plane clears it
(:func:`clear_events`, e.g. from ``ratchet admin``), which is the widening step and belongs with the signing key.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ratchet_core.control_db import gateway_safety_events
from ratchet_core.routing import SafetyState

# The table is defined with every other control-DB table in ratchet_core.control_db; the state the events impose
# (SafetyState) is a routing input, defined with the routing decision in ratchet_core.routing.
KINDS = ("student_disabled", "pin")


def record_event(engine: Engine, kind: str, reason: str, actor: str, task: str = "") -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown safety event {kind!r}; use one of {KINDS}")
    with engine.begin() as conn:
        conn.execute(
            gateway_safety_events.insert().values(
                created_at=datetime.now(UTC).isoformat(), kind=kind, task=task, reason=reason, actor=actor
            )
        )


def active_state(engine: Engine) -> SafetyState:
    """The union of every event not cleared yet."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(gateway_safety_events.c.kind, gateway_safety_events.c.task).where(
                gateway_safety_events.c.cleared_at.is_(None)
            )
        ).all()
    state = SafetyState()
    for kind, task in rows:
        if kind == "student_disabled":
            state.student_disabled = True
        elif kind == "pin":
            state.pins.add(task)
    return state


def clear_events(engine: Engine, reason: str, kind: str | None = None, task: str | None = None) -> int:
    """Clear active events (control plane only: this widens serving). Returns how many were cleared."""
    cond = gateway_safety_events.c.cleared_at.is_(None)
    if kind:
        cond = cond & (gateway_safety_events.c.kind == kind)
    if task is not None:
        cond = cond & (gateway_safety_events.c.task == task)
    with engine.begin() as conn:
        res = conn.execute(
            gateway_safety_events.update()
            .where(cond)
            .values(cleared_at=datetime.now(UTC).isoformat(), cleared_reason=reason)
        )
    return int(res.rowcount or 0)
