"""ratchet_stats: Ratchet's verifier kit. Pure functions an auditor can run offline; no Dagster, no web stack.

Statistics (exact where exact exists):
  bounds   -- Clopper-Pearson / Wilson one-sided bounds, rows_to_certify, rows_for_power
  mcnemar  -- exact McNemar test on discordant pairs (candidate vs baseline on the same rows)
  ltt      -- Learn-then-Test threshold calibration with fixed-sequence binomial tests
  eprocess -- betting e-processes for anytime-valid canary promotion and rollback

The names below are re-exported lazily (PEP 562), so `import ratchet_stats` stays cheap and a caller that only
needs signatures never imports scipy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    # bounds
    "PlanRow": "ratchet_stats.bounds",
    "PowerPlan": "ratchet_stats.bounds",
    "clopper_pearson_lower": "ratchet_stats.bounds",
    "clopper_pearson_upper": "ratchet_stats.bounds",
    "max_errors_certified": "ratchet_stats.bounds",
    "rows_for_power": "ratchet_stats.bounds",
    "rows_to_certify": "ratchet_stats.bounds",
    "wilson_lower": "ratchet_stats.bounds",
    "wilson_upper": "ratchet_stats.bounds",
    # mcnemar
    "McNemarResult": "ratchet_stats.mcnemar",
    "mcnemar_exact": "ratchet_stats.mcnemar",
    # ltt
    "DEFAULT_GRID": "ratchet_stats.ltt",
    "LTTResult": "ratchet_stats.ltt",
    "LTTRow": "ratchet_stats.ltt",
    "default_grid": "ratchet_stats.ltt",
    "ltt_calibrate": "ratchet_stats.ltt",
    # eprocess
    "BettingEProcess": "ratchet_stats.eprocess",
    "log_wealth_paths": "ratchet_stats.eprocess",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ratchet_stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
