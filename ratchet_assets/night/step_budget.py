"""Hard tasks get more: a night after nights that did not certify one of its tasks trains with a larger step budget.

Plain functions (no Dagster), called by ``night.adapter.train_adapter`` before a launch. The evidence is the
nights' own signed certificates: walking back from the day before ``day`` (at most ``LOOKBACK_DAYS``), each
earlier night's adapter record (``adapters/day=P/adapter.json``) names its version, whose certificate of that
night (``certificates/<version>.dsse.json``, or ``<version>@<day>.dsse.json`` where the night re-certified a
version an earlier night minted; verified with the home's keys before it is read) says per task whether it
certified. Every consecutive night, newest first, on which some task of tonight's training set was evaluated and
not certified doubles the budget; the walk stops at the first night that certified every such task it evaluated,
or that has no record or no certificate. The factor is at most ``MAX_FACTOR``.

The budget scales ``min_steps`` (a cold night's floor) and ``max_epochs`` (how long early stopping may run, and the
schedule the learning rate decays over; a warm night's floor is half of it; at most x``MAX_EPOCHS_FACTOR``), and
takes as many doublings from ``max_extensions`` (a run short of steps doubling
its own schedule, ``lora_trainer``, "Short of steps"), so the two together stay within ``MAX_FACTOR`` times the
config's budget; ``time_budget_s``, the night's time budget, still ends a run that would pass it, so
"larger" is never "longer than the night may take". The scaled values are the training config the launch is keyed
by, so a rerun of the same night (same certificates) reuses its adapter; the record's ``step_budget`` says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from ratchet_core.layout import ArtifactLayout

MAX_FACTOR = 4
LOOKBACK_DAYS = 7
SCALED_FIELDS = ("min_steps", "max_epochs")
# `max_epochs` grows at most this much: it is also the length the learning rate decays over, and at x4 a run that
# patience stops is still near its peak rate. `departments` night 3 (cold, x4): 32 epochs, the split swinging 0.17-0.57,
# 161/298 golden; 16 epochs (x2) with the same x4 floor: 297/298, certified. The floor (`min_steps`) still grows x4.
MAX_EPOCHS_FACTOR = 2


@dataclass(frozen=True)
class StepBudget:
    """The factor tonight's step budget is multiplied by, and the nights (day, version, tasks) that earned it."""

    factor: int = 1
    nights: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, train_config: dict[str, Any]) -> dict[str, Any]:
        """``train_config`` with ``min_steps`` and ``max_epochs`` scaled (unchanged at factor 1)."""
        if self.factor == 1:
            return dict(train_config)
        from ratchet_assets.night.lora_trainer import LoraTrainConfig

        defaults = LoraTrainConfig()
        out = dict(train_config)
        for name in SCALED_FIELDS:
            factor = min(self.factor, MAX_EPOCHS_FACTOR) if name == "max_epochs" else self.factor
            out[name] = int(out.get(name, getattr(defaults, name))) * factor
        # a run short of steps doubles its schedule again (lora_trainer, "Short of steps"): the doublings left
        # keep the two together at MAX_FACTOR times the config's budget
        doublings = int(out.get("max_extensions", defaults.max_extensions))
        out["max_extensions"] = max(0, min(doublings, _doublings(MAX_FACTOR) - _doublings(self.factor)))
        return out

    def to_record(self) -> dict[str, Any]:
        return {"factor": self.factor, "not_certified": self.nights}

    def describe(self) -> str:
        if self.factor == 1:
            return "step budget x1"
        said = "; ".join(f"{n['day']} {n['version']}: {', '.join(n['tasks'])}" for n in self.nights)
        return f"step budget x{self.factor} (min_steps, max_epochs): not certified on {said}"


def _doublings(factor: int) -> int:
    """How many doublings make ``factor`` (a power of two): 1 -> 0, 2 -> 1, 4 -> 2."""
    return max(0, int(factor).bit_length() - 1)


def _not_certified(layout: ArtifactLayout, day: str, tasks: set[str], public_keys: Any) -> dict | None:
    """The night ``day``'s version and the tasks of ``tasks`` it evaluated and did not certify; None when the walk
    stops there (no record, no verifiable certificate, or every such task certified)."""
    import json

    from ratchet_stats.certificate import check_certificate, verify_certificate

    pointer = layout.adapter_pointer(day)
    if not pointer.exists():
        return None
    version = json.loads(pointer.read_text(encoding="utf-8")).get("version")
    # night `day`'s own certificate: the minting night's, or ``<version>@<day>`` where that night re-certified a
    # version an earlier night minted (its outcome on that night's golden set, not the first night's)
    cert = layout.night_certificate(str(version), day) if version else None
    if cert is None or not cert.exists():
        return None
    try:
        statement = verify_certificate(cert.read_bytes(), public_keys)
    except Exception:  # an unverifiable certificate is no evidence: the budget does not grow on it
        return None
    predicate = statement.get("predicate") or {}
    if check_certificate(predicate, statement.get("predicateType")):
        return None
    sections = predicate.get("tasks") or {}
    failed = sorted(t for t in tasks if t in sections and sections[t].get("certified") is not True)
    return {"day": day, "version": version, "tasks": failed} if failed else None


def step_budget(artifacts: str | Path, day: str, tasks: list[str], public_keys: Any) -> StepBudget:
    """The budget of night ``day`` for a training set of ``tasks`` (module docstring); factor 1 without keys."""
    if not public_keys or not tasks:
        return StepBudget()
    layout = ArtifactLayout(artifacts)
    wanted = {t for t in tasks if t != "?"}
    current = date.fromisoformat(day)
    return budget_of(
        _not_certified(layout, (current - timedelta(days=back)).isoformat(), wanted, public_keys)
        for back in range(1, LOOKBACK_DAYS + 1)
    )


def budget_of(nights: Iterable[dict[str, Any] | None]) -> StepBudget:
    """The budget earned by earlier ``nights``, newest first: each one's record of the tasks it did not certify, or
    None where the walk stops (a night that certified every such task, or no evidence). Each night doubles the
    factor, up to ``MAX_FACTOR``; the iterable is read no further than needed (``step_budget`` reads certificates
    lazily; ``ratchet sim`` passes its own nights' outcomes)."""
    found: list[dict[str, Any]] = []
    for night in nights:
        if night is None:
            break
        found.append(night)
        if 2 ** len(found) >= MAX_FACTOR:
            break
    return StepBudget(min(MAX_FACTOR, 2 ** len(found)), found)
