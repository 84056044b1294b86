"""Asset ``examples``: the day's complete teacher answers, one per example key, erasures honoured."""

import dagster as dg

from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ControlDB, RatchetPaths
from ratchet_assets.night import markdown_table
from ratchet_assets.night.erasures import load_erasures
from ratchet_assets.night.examples import build_examples


@dg.asset(
    partitions_def=daily_partitions,
    group_name="night",
    kinds={"duckdb", "parquet"},
    deps=["traffic"],
)
def examples(
    context: dg.AssetExecutionContext, paths: RatchetPaths, control_db: ControlDB
) -> dg.MaterializeResult:
    """Teacher-labelled examples of the day, deduplicated by example key."""
    day = context.partition_key
    r = build_examples(paths.artifacts_root(), day, load_erasures(control_db.engine()))
    context.log.info(f"{day}: {r.examples} examples from {r.candidates} teacher answers ({r.erased} erased)")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": dg.MetadataValue.int(r.examples),
            "dagster/uri": dg.MetadataValue.path(r.path),
            "teacher_answers": dg.MetadataValue.int(r.candidates),
            "duplicate_keys": dg.MetadataValue.int(r.duplicates),
            "erased": dg.MetadataValue.int(r.erased),
            "from_audits": dg.MetadataValue.int(r.by_source.get("audit", 0)),
            "by_task": dg.MetadataValue.md(
                markdown_table(["task", "examples"], [[t, n] for t, n in sorted(r.by_task.items())])
            ),
        }
    )
