"""The one reading of a ``--since``/``--until`` option in the governance commands (erase, export)."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_when(value: str | None, option: str) -> datetime | None:
    """An ISO date or time as an aware datetime (a naive one is UTC); None for none. Raises ValueError naming
    ``option`` and the accepted forms."""
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{option} {value!r} is not an ISO date or time (2026-01-31 or 2026-01-31T12:00)"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)
