"""The night's partitions: one per UTC day.

The first day is the setting ``partitions_start`` (``RATCHET_PARTITIONS_START``, YYYY-MM-DD), default 2026-01-01.
"""

from __future__ import annotations

import dagster as dg

from ratchet_core.settings import load_settings

daily_partitions = dg.DailyPartitionsDefinition(start_date=load_settings().partitions_start, timezone="UTC")
