"""The night as one partitioned job, and its daily schedule (02:00 UTC, for the day that just ended; running by
default)."""

from __future__ import annotations

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
nightly_schedule = dg.build_schedule_from_partitioned_job(
    nightly, hour_of_day=2, minute_of_hour=0, default_status=dg.DefaultScheduleStatus.RUNNING
)

# Retention (ratchet_assets.defs.retention): once a day, after the night's schedule.
retention_job = dg.define_asset_job(
    "retention_job", selection=dg.AssetSelection.assets("retention"), description="Delete what has expired."
)
retention_schedule = dg.ScheduleDefinition(job=retention_job, cron_schedule="30 4 * * *")
