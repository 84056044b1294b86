"""The night's partitions: one per UTC day.

The first day is ``$NIGHT_PARTITIONS_START`` (YYYY-MM-DD), default 2026-01-01. The variable is deliberately
not ``RATCHET_``-prefixed: Ratchet's settings reject unknown ``RATCHET_*`` variables.
"""

from __future__ import annotations

import os

import dagster as dg

START_ENV = "NIGHT_PARTITIONS_START"
DEFAULT_START = "2026-01-01"

daily_partitions = dg.DailyPartitionsDefinition(
    start_date=os.environ.get(START_ENV, DEFAULT_START), timezone="UTC"
)
