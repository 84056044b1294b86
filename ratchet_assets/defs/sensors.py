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


def _replicas(folder: Path) -> set[str]:
    return {p.name.rsplit("-", 1)[0] for p in folder.glob("*.parquet") if not p.name.startswith(".")}


def complete_days(lake_root: Path, after: str, now: datetime, grace: timedelta, start: str) -> list[str]:
    """Days after ``after`` (exclusive) whose segments are complete, in order, stopping at the first that is not."""
    folders = {
        p.name.removeprefix("day="): p for p in sorted((lake_root / "traffic").glob("day=*")) if p.is_dir()
    }
    days = sorted(d for d in folders if d > after and d >= start)
    out = []
    for day in days:
        end = datetime.combine(date.fromisoformat(day) + timedelta(days=1), datetime.min.time(), UTC)
        if now < end:
            break
        seen = _replicas(folders[day])
        later: set[str] = set()
        for d, folder in folders.items():
            if d > day:
                later |= _replicas(folder)
        if not (seen <= later or now >= end + grace):
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
            f"no complete day after {after or 'the start'} in {paths.lake_root() / 'traffic'}"
        )
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"night-{d}", partition_key=d) for d in days],
        cursor=days[-1],
    )
