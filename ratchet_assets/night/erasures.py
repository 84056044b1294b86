"""Erasures: example keys or request ids that must never again reach an examples file or a training set.

Control-DB table ``erasures(id, example_key, request_id, reason, at)``; one of the two ids per row. The
``examples`` and ``training_set`` steps read it every night, so an erasure also drops rows of earlier days
still inside the training window. (``ratchet admin erase --request-id|--example-key`` writes here.)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ratchet_core.control_db import ensure_schema, erasures

# The ``erasures`` table is defined with every other control-DB table in ratchet_core.control_db.
erasures_table = erasures


@dataclass(frozen=True)
class Erasures:
    example_keys: frozenset[str] = frozenset()
    request_ids: frozenset[str] = frozenset()


def record_erasure(
    engine: Engine, *, reason: str, example_key: str | None = None, request_id: str | None = None
) -> None:
    """Record that an example (by key) or a request's data (by request id) must be forgotten."""
    if bool(example_key) == bool(request_id):
        raise ValueError("give exactly one of example_key (`ratchet proof key`) or request_id")
    from ratchet_core.reasons import check_reason

    reason = check_reason(reason)  # the one rule: 3-500 characters, not blank (ReasonError is a ValueError)
    ensure_schema(engine)
    with engine.begin() as conn:
        conn.execute(
            erasures_table.insert().values(
                example_key=example_key or None,
                request_id=request_id or None,
                reason=reason,
                at=datetime.now(UTC).isoformat(timespec="seconds"),
            )
        )


def load_erasures(engine: Engine | None) -> Erasures:
    """Every erased key and request id (empty when there is no control DB)."""
    if engine is None:
        return Erasures()
    ensure_schema(engine)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(erasures_table.c.example_key, erasures_table.c.request_id)).all()
    return Erasures(
        example_keys=frozenset(r[0] for r in rows if r[0]),
        request_ids=frozenset(r[1] for r in rows if r[1]),
    )
