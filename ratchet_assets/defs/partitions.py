"""The night's partitions: one per UTC day, from the first day with traffic, through yesterday or a configured end.

The first day is the setting ``partitions_start`` (``RATCHET_PARTITIONS_START``, YYYY-MM-DD) when it is set; else
the start of the home's partition window (``$RATCHET_HOME/partitions.json``, ``ratchet_core.partition_window``:
the accelerated demo records its days there); otherwise the first day the lake has traffic for (so the UI's
partition bar and plots start where the data does), and 2026-01-01 for an empty or unreadable lake. Read when the
code location loads: a lake that gets its first traffic later moves the start on the next reload (``dagster dev``
reloads with the code location).

The last day is ``partitions_end`` (``RATCHET_PARTITIONS_END``) when set, else the home window's end, else
yesterday on the wall clock (Dagster's default). Why an end at all: the asset page's Plots (Partitions view, the
default for a partitioned asset, and the lineage sidebar's "Metadata plots") graph the latest materialisation of
each of the definition's NEWEST 120 partition keys (Dagster 1.13 UI, ``AssetEventMetadataPlots`` ->
``useLatestAssetPartitionMaterializations``: ``partitionKeyConnection(limit: 120, ascending: false)`` then
``latestMaterializationByPartition``). Nights more than 120 days before the wall clock's yesterday, such as the
accelerated demo's days from 2026-01-01, fall outside that window and the view is empty however their metadata is
typed. The demo's window file makes the partitions its own days, during the demo and in any later ``dagster dev``
on its home, so the view plots them.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg

from ratchet_core.partition_window import PartitionWindow, read_window
from ratchet_core.settings import load_settings

DEFAULT_START = "2026-01-01"
# partitions the UI's Partitions plot view graphs: the newest 120 keys of the definition
UI_PLOT_PARTITIONS = 120


def home_window(settings=None) -> PartitionWindow | None:
    """The window the home records (``$RATCHET_HOME/partitions.json``), None when it records none."""
    return read_window((settings or load_settings()).home)


def partitions_start(settings=None) -> str:
    """The configured start, else the home window's, else the lake's first traffic day, else ``DEFAULT_START``."""
    s = settings or load_settings()
    if "partitions_start" in s.model_fields_set:
        return s.partitions_start
    window = home_window(s)
    if window is not None:
        return window.start
    try:
        from ratchet_core.lake import Lake

        days = Lake(s.lake_root).days()
    except Exception:  # an unreachable object store must not stop the code location from loading
        days = []
    return days[0] if days else DEFAULT_START


def partitions_end_offset(settings=None, today: date | None = None) -> int:
    """Dagster's ``end_offset`` that ends the partitions at ``partitions_end``, else at the home window's end
    (0: through yesterday).

    An offset from the wall clock's yesterday, not ``end_date``: Dagster 1.13's descending partition-key pagination
    (``get_paginated_partition_keys(ascending=False)``, what the UI's Partitions plots ask for) starts at the current
    time and ignores ``end_date``, but honours a negative ``end_offset``. Computed when the code location loads, so
    the end moves one day later at each UTC midnight until the next load (the extra days are empty partitions)."""
    s = settings or load_settings()
    window = None if s.partitions_end else home_window(s)
    end = s.partitions_end or (window.end if window is not None else None)
    if not end:
        return 0
    yesterday = (today or datetime.now(UTC).date()) - timedelta(days=1)
    return (date.fromisoformat(end) - yesterday).days


def build_daily_partitions(settings=None) -> dg.DailyPartitionsDefinition:
    s = settings or load_settings()
    return dg.DailyPartitionsDefinition(
        start_date=partitions_start(s), end_offset=partitions_end_offset(s), timezone="UTC"
    )


daily_partitions = build_daily_partitions()
