"""Asset ``examples``: the day's complete teacher answers, one per example key, erasures honoured.

A graph of plain night functions (``ratchet_assets.night.examples``), so a big day runs in parallel:
``examples_prepare`` keys every candidate in one pass and writes its row into its example-key range, one
``examples_shard`` per range (checks, deduplicates, sorts; dynamic outputs: the multiprocess executor runs them in parallel processes, the
Kubernetes executor in parallel pods), ``examples_merge`` concatenates them in key order and reports. A day that
fits one key range is written by ``examples_prepare`` alone (one shard op, a no-op). Each op runs in the memory
budget ``NightConfig.memory_mb`` and reports its peak RSS.
"""

import dagster as dg

from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ControlDB, NightConfig, RatchetPaths
from ratchet_assets.night import markdown_table
from ratchet_assets.night.budget import PeakRSS
from ratchet_assets.night.erasures import load_erasures
from ratchet_assets.night.examples import (
    ExamplesPart,
    ExamplesPlan,
    examples_shard,
    merge_examples,
    prepare_examples,
)
from ratchet_core.artifact_store import publishes_artifacts


@dg.op(
    ins={"traffic": dg.In(dg.Nothing)},
    out={"plan": dg.Out(), "shards": dg.DynamicOut(int)},
)
def examples_prepare(
    context: dg.OpExecutionContext, paths: RatchetPaths, control_db: ControlDB, night: NightConfig
):
    """Key every candidate in one pass; write each candidate's row into its example-key range."""
    rss = PeakRSS()
    plan = prepare_examples(
        paths.artifacts_root(),
        context.partition_key,
        load_erasures(control_db.engine()),
        night.budget(),
    )
    context.log.info(f"{plan.day}: {plan.rows} traffic rows keyed into {plan.shards} key range(s)")
    plan.peak_rss_mb = rss.mb()
    yield dg.Output(plan, "plan")
    for shard in range(plan.shards if plan.direct is None else 1):
        yield dg.DynamicOutput(shard, output_name="shards", mapping_key=f"range_{shard}")


@dg.op
def examples_range(
    context: dg.OpExecutionContext, plan: ExamplesPlan, shard: int, night: NightConfig
) -> ExamplesPart:
    """Sort one example-key range by key and finish its rows (a no-op when the day was written directly)."""
    if plan.direct is not None:
        return ExamplesPart(shard, "", 0)
    rss = PeakRSS()
    part = examples_shard(plan, shard, night.budget())
    part.peak_rss_mb = rss.mb()
    context.log.info(
        f"{plan.day}: key range {shard}: {part.rows} examples, peak RSS {part.peak_rss_mb:.0f} MB"
    )
    return part


@dg.op
@publishes_artifacts  # what it wrote goes to RATCHET_ARTIFACTS_URL (a no-op without it)
def examples_merge(
    context: dg.OpExecutionContext, plan: ExamplesPlan, parts: list[ExamplesPart], paths: RatchetPaths
):
    """Concatenate the key ranges in key order; report the day's examples."""
    rss = PeakRSS()
    r = plan.direct if plan.direct is not None else merge_examples(plan, parts)
    peak = max([plan.peak_rss_mb, rss.mb(), *(p.peak_rss_mb for p in parts)])
    context.log.info(
        f"{r.day}: {r.examples} examples from {r.candidates} teacher answers ({r.erased} erased)"
    )
    return dg.Output(
        None,
        metadata={
            "dagster/row_count": dg.MetadataValue.int(r.examples),
            "dagster/uri": dg.MetadataValue.path(r.path),
            "teacher_answers": dg.MetadataValue.int(r.candidates),
            "duplicate_keys": dg.MetadataValue.int(r.duplicates),
            "erased": dg.MetadataValue.int(r.erased),
            "from_audits": dg.MetadataValue.int(r.by_source.get("audit", 0)),
            "key_ranges": dg.MetadataValue.int(plan.shards),
            "peak_rss_mb": dg.MetadataValue.float(round(peak, 1)),
            "by_task": dg.MetadataValue.md(
                markdown_table(["task", "examples"], [[t, n] for t, n in sorted(r.by_task.items())])
            ),
        },
    )


@dg.graph_asset(
    partitions_def=daily_partitions,
    group_name="night",
    kinds={"duckdb", "parquet"},
    ins={"traffic": dg.AssetIn(dagster_type=dg.Nothing)},
)
def examples(traffic):
    """Teacher-labelled examples of the day, deduplicated by example key."""
    plan, shards = examples_prepare(traffic)
    parts = shards.map(lambda shard: examples_range(plan, shard))
    return examples_merge(plan, parts.collect())
