"""The night's partitions: one per UTC day, from the first day with traffic.

The first day is the setting ``partitions_start`` (``RATCHET_PARTITIONS_START``, YYYY-MM-DD) when it is set;
otherwise the first day the lake has traffic for (so the UI's partition bar and plots start where the data does),
and 2026-01-01 for an empty or unreadable lake. Read when the code location loads: a lake that gets its first
traffic later moves the start on the next reload (``dagster dev`` reloads with the code location).
"""

from __future__ import annotations

import dagster as dg

from ratchet_core.settings import load_settings

DEFAULT_START = "2026-01-01"


def partitions_start(settings=None) -> str:
    """The configured start, else the lake's first traffic day, else ``DEFAULT_START``."""
    s = settings or load_settings()
    if "partitions_start" in s.model_fields_set:
        return s.partitions_start
    try:
        from ratchet_core.lake import Lake

        days = Lake(s.lake_root).days()
    except Exception:  # an unreachable object store must not stop the code location from loading
        days = []
    return days[0] if days else DEFAULT_START


daily_partitions = dg.DailyPartitionsDefinition(start_date=partitions_start(), timezone="UTC")
