"""The night's partitions: one per UTC day.

The first day is ``$RATCHET_PARTITIONS_START`` (YYYY-MM-DD, a Ratchet setting), default 2026-01-01.
"""

from __future__ import annotations

import os

import dagster as dg

START_ENV = "RATCHET_PARTITIONS_START"
DEFAULT_START = "2026-01-01"

daily_partitions = dg.DailyPartitionsDefinition(
    start_date=os.environ.get(START_ENV, DEFAULT_START), timezone="UTC"
)
