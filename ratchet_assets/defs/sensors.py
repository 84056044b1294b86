"""Sensor ``night_segments_sensor``: start a day's night once its traffic is complete.

A day D is complete when it is over on Ratchet's clock and either every replica that sealed segments for D has
also sealed one for a later day (its ledger rolled past midnight, so nothing more for D is coming), or the grace
period after midnight has passed. Days start in order; the cursor is the last day started; ``run_key`` is
``night-D``, so a day is never started twice by the sensor.
"""

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg

from ratchet_assets.defs.jobs import nightly
from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import NightConfig, RatchetPaths
from ratchet_core.clock import now as clock_now
from ratchet_core.lake import Lake, Segment


def _replicas(segments: list[Segment]) -> set[str]:
    return {seg.name.rsplit("-", 1)[0] for seg in segments}


def complete_days(
    lake_root: str | Path, after: str, now: datetime, grace: timedelta, start: str
) -> list[str]:
    """Days after ``after`` (exclusive) whose segments are complete, in order, stopping at the first that is not.

    ``lake_root``: a folder or an fsspec URL (``ratchet_core.lake``); each day folder is listed once."""
    lake = Lake(lake_root)
    all_days = lake.days()
    days = [d for d in all_days if d > after and d >= start]
    replicas: dict[str, set[str]] = {}

    def seen_on(day: str) -> set[str]:
        if day not in replicas:
            replicas[day] = _replicas(lake.segments(day))
        return replicas[day]

    out = []
    for day in days:
        end = datetime.combine(date.fromisoformat(day) + timedelta(days=1), datetime.min.time(), UTC)
        if now < end:
            break
        if now < end + grace:  # before the grace period ends, every replica must have rolled past midnight
            later: set[str] = set()
            for d in all_days:
                if d > day:
                    later |= seen_on(d)
            if not seen_on(day) <= later:
                break
        out.append(day)
    return out


@dg.sensor(job=nightly, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED)
def night_segments_sensor(
    context: dg.SensorEvaluationContext, paths: RatchetPaths, night: NightConfig
) -> dg.SensorResult | dg.SkipReason:
    """Start the night for each day whose sealed segments are complete."""
    start = daily_partitions.start.strftime("%Y-%m-%d")
    after = context.cursor or ""
    days = complete_days(
        paths.lake_root(), after, clock_now(), timedelta(minutes=night.late_grace_minutes), start
    )
    if not days:
        return dg.SkipReason(
            f"no complete day after {after or 'the start'} in {Lake(paths.lake_root()).uri('traffic')}"
        )
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"night-{d}", partition_key=d) for d in days],
        cursor=days[-1],
    )
