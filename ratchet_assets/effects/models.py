"""The effect gate's requests and answers, for every door to the gate: REST and MCP alike (ARCHITECTURE.md, "Effects").

Requests are pydantic models with ``extra="forbid"`` and ``allow_inf_nan=False``: costs are JSON numbers (not
strings or booleans), finite and >= 0 (``"5"``, ``true``, ``NaN``, ``1e999`` and negatives are refused before the
ledger sees them, which then holds each to the maximum per effect); keys follow the one name rule. A route's query or path parameters are
a model too (``ListQuery``, ``EffectRef``, ``TypeRef``, ``UsageQuery``), so the MCP tool that maps onto the route
takes the same fields. Answers are the ledger's own records (``Begin``, ``EffectRecord``, ``Rules``,
``Approval``: dataclasses pydantic reads as they are) with what the gate adds. ``ratchet_assets.effects.api``
reads and answers with these, so ``/openapi.json`` carries their JSON schemas, and ``ratchet_assets.effects.tools``
gives each MCP tool the same models' schemas (``pydantic.TypeAdapter(X).json_schema()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ratchet_assets.effects.records import Approval, Begin, EffectError, EffectRecord, Rules
from ratchet_assets.effects.tenancy import MAX_TYPE_LENGTH, check_fingerprint
from ratchet_core import names

# An effect key by the one name rule (printable ASCII: no control or bidi character is stored or echoed).
Key = Annotated[str, AfterValidator(lambda key: names.check("effect key", key, "key"))]


def _fingerprint(value: str) -> str:
    try:
        return check_fingerprint(value)
    except EffectError as exc:  # pydantic reports a ValueError as the field's error (a 400 naming it)
        raise ValueError(str(exc)) from None


Fingerprint = Annotated[str, AfterValidator(_fingerprint)]


def _text(value: str) -> str:
    from ratchet_core.reasons import check_text

    return check_text(
        value, "the text"
    )  # a ValueError: pydantic reports it as the field's error (a 400 naming it)


# Free text shown to a person (a summary, an error, a reason): no control character but tab and newline, no bidi
# mark or override (``ratchet_core.reasons``: nothing a terminal or page would act on rather than show).
Text = Annotated[str, AfterValidator(_text)]
# A dollar amount: a JSON number (``strict``: not a string such as "5", not a boolean), finite, >= 0; the ledger
# then holds an effect's cost to the maximum per effect (RATCHET_EFFECTS_MAX_COST_USD).
Dollars = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]


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
    key: Key = Field(
        min_length=1,
        max_length=400,
        description="Derived from the effect's content, not a run id: printable ASCII ('!' to '~').",
    )
    fingerprint: Fingerprint = Field(
        min_length=1, max_length=128, description="Hash of the payload the effect acts on."
    )
    lease_seconds: float = Field(600.0, gt=0, le=86400, strict=True)
    cost_usd: Dollars | None = Field(None, description="Estimated cost; required where a spend cap is set.")
    summary: Text = Field("", max_length=2000, description="Shown to the operator who approves.")


class ReportBody(_Body):
    token: str = Field(min_length=1, max_length=64)
    result: dict[str, Any] = Field(default_factory=dict)
    cost_usd: Dollars | None = Field(None, description="What the effect actually cost.")


class FailBody(_Body):
    token: str = Field(min_length=1, max_length=64)
    error: Text = Field(min_length=1, max_length=2000)
    cost_usd: Dollars | None = Field(None, description="What was spent anyway (0 releases the reservation).")


class ResolveBody(_Body):
    effect_type: str = Field(min_length=1, max_length=MAX_TYPE_LENGTH)
    key: Key = Field(min_length=1, max_length=512)
    resolution: Literal["done", "failed", "forget"]
    reason: Text = Field(max_length=2000)
    force: bool = False


class DecisionBody(_Body):
    effect_type: str = Field(min_length=1, max_length=MAX_TYPE_LENGTH)
    key: Key = Field(min_length=1, max_length=512)
    reason: Text = Field(max_length=2000)


class ListQuery(_Body):
    """``GET /effects``'s query (the ``list_effects`` tool's arguments)."""

    effect_type: str | None = Field(
        None, min_length=1, max_length=MAX_TYPE_LENGTH, description="Only this type (a client's own name)."
    )
    status: Literal["in_flight", "done", "failed", "indeterminate"] | None = Field(
        None, description="Only effects in this state (`indeterminate` includes lapsed leases)."
    )
    limit: int = Field(100, ge=1, le=1000, description="At most this many, newest first.")


class EffectRef(_Body):
    """One effect: ``GET /effects/{effect_type}/{key}`` (the ``get_effect`` tool's arguments)."""

    effect_type: str = Field(min_length=1, max_length=MAX_TYPE_LENGTH, examples=["report.file"])
    key: Key = Field(min_length=1, max_length=512)


class TypeRef(_Body):
    """One effect type: ``GET /rules/{effect_type}`` (the ``get_policy`` tool's arguments)."""

    effect_type: str = Field(
        min_length=1,
        max_length=MAX_TYPE_LENGTH,
        examples=["report.file", "*"],
        description="A client's own type, or `*` for the client's own cap over all its types.",
    )


class UsageQuery(_Body):
    """``GET /usage``'s query (the ``get_usage`` tool's arguments)."""

    client: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Admin key only: the client to read; a client reads its own usage and leaves it out.",
    )


class RulesBody(_Body):
    reason: Text = Field(max_length=2000)
    policy: Literal["block", "retry", "probe"] | None = None
    approval_required: bool = False
    max_attempts: int | None = Field(None, ge=1)
    cap_usd: Dollars | None = None
    cap_window_seconds: int | None = Field(None, ge=1)


# Answers: the ledger's own records (``ratchet_assets.effects``), plus what the HTTP gate adds -----------------------
@dataclass(frozen=True)
class BeginAnswer(Begin):
    """What ``begin`` decided, with the type as stored (``<client>/<name>`` for a client's type) and the key."""

    effect_type: str = ""
    key: str = ""


class ErrorDetail(_Body):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(_Body):
    """OpenAI's error shape: every answer of the gate that is not 2xx, validation errors included (400)."""

    error: ErrorDetail


class EffectList(_Body):
    """The ``list_effects`` tool's answer: ``GET /effects``'s list under one name (a tool answers an object)."""

    effects: list[EffectRecord]


class Finished(_Body):
    status: Literal["done", "failed"]


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


@dataclass(frozen=True)
class RulesView(Rules):
    """A type's rules and its spend; for a client's type also the client's own cap over all its types."""

    spend: SpendView | None = None
    client_spend: SpendView | None = None


__all__ = [
    "Approval",
    "BeginAnswer",
    "BeginBody",
    "DecisionBody",
    "EffectList",
    "EffectRecord",
    "EffectRef",
    "ErrorBody",
    "ErrorDetail",
    "FailBody",
    "Finished",
    "Forgotten",
    "ListQuery",
    "ReportBody",
    "ResolveBody",
    "RulesBody",
    "RulesView",
    "SpendView",
    "TypeRef",
    "UsageQuery",
]
