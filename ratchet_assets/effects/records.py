"""What the effect ledger answers and stores: its records, its errors and the built-in types' policies.

:class:`Begin` is ``begin``'s decision, :class:`EffectRecord` one row of the ``effects`` table, :class:`Rules` one
effect type's rules (``effect_policies``), :class:`Approval` one operator decision (``effect_approvals``). They
are frozen dataclasses: the CLI and the assets' metadata print ``to_dict()``, and the HTTP gate's models
(``models.py``) answer with them as they are.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal

Outcome = Literal["execute", "duplicate", "in_flight", "blocked", "denied", "awaiting_approval"]
# What an indeterminate effect of a type gets (its lease lapsed without a report): stored as its `policy`.
IndeterminateAction = Literal["block", "retry", "probe"]
STATUSES = ("in_flight", "done", "failed", "indeterminate")
RESOLUTIONS = ("done", "failed", "forget")

# Effect types Ratchet itself performs and what to do when a holder vanished mid-effect.
DEFAULT_POLICIES: dict[str, IndeterminateAction] = {
    "receipt.sign": "probe",  # the receipt file on disk says whether the signature was written
    "training.launch": "block",  # costs money: an operator decides
    "adapter.load": "retry",  # loading the same adapter twice is harmless
    "release.publish": "block",
    "webhook": "block",
}


# The most one effect may cost, in dollars, unless configured (RATCHET_EFFECTS_MAX_COST_USD): a bound that keeps
# every sum of costs finite (two 1e308 estimates would sum to infinity) and a typo from booking a fortune.
MAX_COST_USD = 10_000.0


class EffectError(RuntimeError):
    """Misuse of the effect ledger (unknown row, bad resolution); `param` names the field a door reports."""

    def __init__(self, message: str, param: str | None = None, code: str = "effect_error") -> None:
        super().__init__(message)
        self.param, self.code = param, code


class StaleToken(EffectError):
    """The caller's token is no longer the row's: its lease lapsed and another holder took over."""


class ForeignType(EffectError):
    """A client named an effect type outside its own namespace (the control plane's or another client's)."""


def check_cost(cost_usd: float | None, maximum: float = MAX_COST_USD, what: str = "cost_usd") -> None:
    """Refuse a cost that is not a number (a string or a boolean is not: ``True`` is an int in Python) or not
    finite within ``[0, maximum]``."""
    if cost_usd is None:
        return
    if isinstance(cost_usd, bool) or not isinstance(cost_usd, int | float):
        raise EffectError(
            f"{what} must be a number of dollars (a JSON number, not a string or boolean), not "
            f"{type(cost_usd).__name__}",
            what,
            "invalid_cost",
        )
    if not (math.isfinite(cost_usd) and 0 <= cost_usd <= maximum):
        raise EffectError(
            f"{what} must be a finite number from 0 to {maximum:g} dollars (the maximum per effect, "
            f"RATCHET_EFFECTS_MAX_COST_USD), not {cost_usd:.6g}",
            what,
            "invalid_cost",
        )


class _Record:
    """``to_dict`` for the ledger's dataclasses (what the CLI and the assets' metadata print)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True)
class Begin(_Record):
    """What ``begin`` decided. Only ``execute`` may act; ``token`` is then needed to report."""

    outcome: Outcome
    token: str | None = None
    result: dict[str, Any] | None = None
    status: str = ""
    attempts: int = 0
    detail: str = ""
    remaining_usd: float | None = None


@dataclass(frozen=True)
class EffectRecord(_Record):
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

    def lease_lapsed(self, now: datetime | None = None) -> bool:
        return datetime.fromisoformat(self.lease_until) <= (now or utc_now())


@dataclass(frozen=True)
class Rules(_Record):
    """The gate's rules for one effect type (``effect_policies``); ``None`` means no limit."""

    effect_type: str
    policy: IndeterminateAction
    approval_required: bool = False
    max_attempts: int | None = None
    cap_usd: float | None = None
    cap_window_seconds: int | None = None


@dataclass(frozen=True)
class Approval(_Record):
    effect_type: str
    key: str
    fingerprint: str
    state: str  # pending | granted | denied
    summary: str
    requested_by: str
    requested_at: str
    decided_by: str | None
    decided_at: str | None
    reason: str | None


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="microseconds")


def record_of(row: Any) -> EffectRecord:
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
