"""Asset ``traffic``: the day's sealed ledger segments, validated and merged into one partition file."""

from datetime import timedelta

import dagster as dg

from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ControlDB, NightConfig, RatchetPaths
from ratchet_assets.governance.erase import sweep
from ratchet_assets.night import markdown_table
from ratchet_assets.night.budget import PeakRSS
from ratchet_assets.night.traffic import TrafficError, consolidate_traffic
from ratchet_core.artifact_store import publishes_artifacts


@dg.asset(
    partitions_def=daily_partitions,
    group_name="night",
    kinds={"duckdb", "parquet"},
    check_specs=[dg.AssetCheckSpec("no_late_segments", asset="traffic")],
)
@publishes_artifacts  # what it wrote goes to RATCHET_ARTIFACTS_URL (a no-op without it)
def traffic(
    context: dg.AssetExecutionContext, paths: RatchetPaths, night: NightConfig, control_db: ControlDB
) -> dg.MaterializeResult:
    """The day's gateway traffic: every sealed segment, schema-checked and deduplicated."""
    day = context.partition_key
    rss = PeakRSS()
    # erasure scopes applied to segments sealed after their erasure began (governance.erase.sweep)
    swept = sweep(control_db.engine(), paths.lake_root(), paths.artifacts_root(), day)
    if swept:
        context.log.info(f"{day}: erasures swept segments sealed after them: {swept}")
    try:
        r = consolidate_traffic(
            paths.lake_root(),
            paths.artifacts_root(),
            day,
            grace=timedelta(minutes=night.late_grace_minutes),
            budget=night.budget(),
        )
    except TrafficError as exc:
        raise dg.Failure(description=str(exc)) from None
    context.log.info(
        f"{day}: {r.segments} segments, {r.rows} rows kept, {r.duplicates_dropped} duplicates dropped, "
        f"{len(r.late_segments)} late"
    )
    requests = max(r.requests, 1)
    preview = markdown_table(["task", "requests"], [[task, n] for task, n in sorted(r.tasks.items())])
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": dg.MetadataValue.int(r.rows),
            "dagster/uri": dg.MetadataValue.path(r.path),
            "requests": dg.MetadataValue.int(r.requests),
            "pairs": dg.MetadataValue.int(r.pairs),
            "segments": dg.MetadataValue.int(r.segments),
            "clients": dg.MetadataValue.int(r.clients),
            "teacher_share": dg.MetadataValue.float(r.served_by.get("teacher", 0) / requests),
            "student_share": dg.MetadataValue.float(r.served_by.get("student", 0) / requests),
            "tokens": dg.MetadataValue.int(r.tokens),
            "teacher_equivalent_cost_usd": dg.MetadataValue.float(r.teacher_cost_usd),
            "actual_cost_usd": dg.MetadataValue.float(r.actual_cost_usd),
            "duplicates_dropped": dg.MetadataValue.int(r.duplicates_dropped),
            "wrong_day_dropped": dg.MetadataValue.int(r.wrong_day_dropped),
            "late_segments": dg.MetadataValue.int(len(r.late_segments)),
            "erasure_swept_requests": dg.MetadataValue.int(swept.get("requests", 0)),
            "tasks": dg.MetadataValue.md(preview),
            "peak_rss_mb": dg.MetadataValue.float(round(rss.mb(), 1)),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="no_late_segments",
                passed=not r.late_segments,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"late": dg.MetadataValue.text(", ".join(r.late_segments[:20]) or "none")},
                description="Segments sealed after the day's end + grace, or new since the last materialisation.",
            )
        ],
    )
