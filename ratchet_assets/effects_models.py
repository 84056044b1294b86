"""The effect gate's request and response bodies: one pydantic model each, ``extra="forbid"`` and no NaN/Infinity.

``ratchet effects serve`` (``ratchet_assets.effects_api``) reads and answers with these, so its OpenAPI document
carries their JSON schemas, and another door to the same gate can reuse them as they are. Costs are finite numbers
>= 0 (``allow_inf_nan=False``: ``NaN``, ``1e999`` and negatives are refused before the ledger sees them).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ratchet_assets.effects import MAX_TYPE_LENGTH


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class BeginBody(_Body):
    effect_type: str = Field(
        min_length=1,
        max_length=MAX_TYPE_LENGTH,
        examples=["report.file"],
        description="A client names its own types (`report.file` means `<client>/report.file`); the admin names "
        "any type in full.",
    )
    key: str = Field(
        min_length=1, max_length=400, description="Derived from the effect's content, not a run id."
    )
    fingerprint: str = Field(
        min_length=1, max_length=128, description="Hash of the payload the effect acts on."
    )
    lease_seconds: float = Field(600.0, gt=0, le=86400)
    cost_usd: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="Estimated cost; required where a spend cap is set."
    )
    summary: str = Field("", max_length=2000, description="Shown to the operator who approves.")


class ReportBody(_Body):
    token: str = Field(min_length=1, max_length=64)
    result: dict[str, Any] = Field(default_factory=dict)
    cost_usd: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="What the effect actually cost."
    )


class FailBody(_Body):
    token: str = Field(min_length=1, max_length=64)
    error: str = Field(min_length=1, max_length=2000)
    cost_usd: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="What was spent anyway (0 releases the reservation)."
    )


class ResolveBody(_Body):
    effect_type: str = Field(min_length=1, max_length=MAX_TYPE_LENGTH)
    key: str = Field(min_length=1, max_length=512)
    resolution: Literal["done", "failed", "forget"]
    reason: str
    force: bool = False


class DecisionBody(_Body):
    effect_type: str = Field(min_length=1, max_length=MAX_TYPE_LENGTH)
    key: str = Field(min_length=1, max_length=512)
    reason: str


class RulesBody(_Body):
    reason: str
    policy: Literal["block", "retry", "probe"] | None = None
    approval_required: bool = False
    max_attempts: int | None = Field(None, ge=1)
    cap_usd: float | None = Field(None, ge=0, allow_inf_nan=False)
    cap_window_seconds: int | None = Field(None, ge=1)


# Answers ------------------------------------------------------------------------------------------------------
class BeginAnswer(_Body):
    """What ``begin`` decided; only ``execute`` may act, and ``token`` then reports or fails it."""

    outcome: Literal["execute", "duplicate", "in_flight", "blocked", "denied", "awaiting_approval"]
    effect_type: str = Field(description="The type as stored: `<client>/<name>` for a client's type.")
    key: str
    token: str | None = None
    result: dict[str, Any] | None = None
    status: str = ""
    attempts: int = 0
    detail: str = ""
    remaining_usd: float | None = None


class Finished(_Body):
    status: Literal["done", "failed"]


class EffectView(_Body):
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


class Forgotten(_Body):
    effect_type: str
    key: str
    forgotten: Literal[True] = True


class SpendView(_Body):
    """Reserved + spent dollars in the current window of one cap (a type's, or a client's over all its types)."""

    effect_type: str
    cap_usd: float | None
    window_seconds: int | None
    used_usd: float
    remaining_usd: float | None


class RulesView(_Body):
    effect_type: str
    policy: Literal["block", "retry", "probe"]
    approval_required: bool = False
    max_attempts: int | None = None
    cap_usd: float | None = None
    cap_window_seconds: int | None = None
    spend: SpendView
    client_spend: SpendView | None = Field(
        None, description="For a client's type: the client's own cap over all its types (`<client>/*`)."
    )


class ApprovalView(_Body):
    effect_type: str
    key: str
    fingerprint: str
    state: Literal["pending", "granted", "denied"]
    summary: str
    requested_by: str
    requested_at: str
    decided_by: str | None
    decided_at: str | None
    reason: str | None
