"""The night as one partitioned job, and its daily schedule (02:00 UTC, for the day that just ended; running by
default)."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg

from ratchet_assets.defs.partitions import daily_partitions

# The night is ONE asset group, so the UI's lineage of the group (and the global lineage) shows the whole chain
# traffic -> examples -> golden_split -> training_set -> lora_adapter -> evaluation_certificate -> bom, with
# daily_receipt and cost_report, unfolded; a new night asset joins with group_name="night". Retention stays in
# "governance" (its own job and schedule below).
NIGHT_GROUPS = ("night",)

nightly = dg.define_asset_job(
    "nightly",
    selection=dg.AssetSelection.groups(*NIGHT_GROUPS),
    partitions_def=daily_partitions,
    description="traffic -> examples -> golden_split -> training_set (-> adapter, certificate, BOM) "
    "and daily_receipt for one UTC day.",
)


# Running by default (issue 16): with `dagster dev` or a daemon, each day's night starts at 02:00 UTC without anyone
# switching it on. The segments sensor (defs/sensors.py, stopped by default) is the faster trigger: start one of the
# two, not both (`dagster schedule stop nightly_schedule` before `dagster sensor start night_segments_sensor`).
@dg.schedule(
    job=nightly,
    cron_schedule="0 2 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="At 02:00 UTC, the night of the day that just ended (skipped when that day is not a partition: "
    "before the start, or after a configured RATCHET_PARTITIONS_END such as the accelerated demo's).",
)
def nightly_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    """Like ``build_schedule_from_partitioned_job``'s (the day before the tick, run_key = the day), except that it
    never runs the definition's last partition in place of a day that is not one."""
    now = context.scheduled_execution_time
    day = (now - timedelta(days=1)).strftime("%Y-%m-%d")
    if day not in daily_partitions.get_partition_keys(current_time=now):
        return dg.SkipReason(f"{day} is not a night partition ({daily_partitions})")
    return dg.RunRequest(run_key=day, partition_key=day)
