"""Asset ``golden_split``: permanent golden/train assignment of example keys and the golden set to date."""

import dagster as dg

from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ControlDB, NightConfig, RatchetPaths, Signer
from ratchet_assets.night import markdown_table
from ratchet_assets.night.budget import PeakRSS
from ratchet_assets.night.erasures import load_erasures
from ratchet_assets.night.labels import load_labels, settle_from_traffic
from ratchet_assets.night.split import split_golden
from ratchet_core.artifact_store import publishes_artifacts
from ratchet_stats.bounds import rows_to_certify


def certification_floor(night: NightConfig) -> int:
    """Least golden rows per task that can certify the target with zero errors (`ratchet stats plan`)."""
    return rows_to_certify(night.certify_target, night.certify_delta)[0].rows


def _task_policies(control_db: ControlDB, signer: Signer, night: NightConfig) -> tuple[dict, dict, dict]:
    """(task -> golden share, task -> floor from the task's own target/delta, the policies) from signed policies."""
    from ratchet_core.manifest import current_policies
    from ratchet_core.task_policy import certification_floors

    policies = current_policies(control_db.engine(), signer.public_key())
    shares = {t: p.golden_share for t, p in policies.items() if p.golden_share is not None}
    floors = certification_floors(policies, target=night.certify_target, delta=night.certify_delta)
    return shares, floors, policies


@dg.asset(
    partitions_def=daily_partitions,
    group_name="night",
    kinds={"duckdb", "parquet"},
    deps=["examples"],
    check_specs=[dg.AssetCheckSpec("golden_floor_met", asset="golden_split")],
)
@publishes_artifacts  # what it wrote goes to RATCHET_ARTIFACTS_URL (a no-op without it)
def golden_split(
    context: dg.AssetExecutionContext,
    paths: RatchetPaths,
    control_db: ControlDB,
    night: NightConfig,
    signer: Signer,
) -> dg.MaterializeResult:
    """Golden (held-out) example keys: once golden, always golden; Merkle root over the sorted keys."""
    day = context.partition_key
    floor = certification_floor(night)
    task_shares, task_floors, policies = _task_policies(control_db, signer, night)
    rss = PeakRSS()
    engine, erasures = control_db.engine(), load_erasures(control_db.engine())
    # feedback the gateway could not settle (another replica's unsealed request) meets its sealed request here
    settled = settle_from_traffic(engine, paths.artifacts_root(), day, policies)
    labels = load_labels(engine, policies, erasures)
    context.log.info(
        f"{day}: feedback: {settled} pending items settled; {len(labels.demonstrations)} demonstrations"
    )
    r = split_golden(
        paths.artifacts_root(),
        day,
        share=night.golden_share,
        salt=night.golden_salt,
        floor=floor,
        erasures=erasures,
        budget=night.budget(),
        task_shares=task_shares,
        task_floors=task_floors,
        labels=labels,
    )
    context.log.info(
        f"{day}: {r.new_keys} new keys, {r.new_golden} golden; golden to date {r.golden_size}, root {r.golden_root}"
    )
    short = {t: n for t, n in r.golden_by_task.items() if n < task_floors.get(t, floor)}
    metadata: dict[str, dg.MetadataValue] = {
        "dagster/row_count": dg.MetadataValue.int(r.golden_size),
        "dagster/uri": dg.MetadataValue.path(r.path),
        "golden_root": dg.MetadataValue.text(r.golden_root),
        "golden_size": dg.MetadataValue.int(r.golden_size),
        "new_keys": dg.MetadataValue.int(r.new_keys),
        "new_golden": dg.MetadataValue.int(r.new_golden),
        "floor_per_task": dg.MetadataValue.int(floor),
        "people_labelled": dg.MetadataValue.int(r.labels_by_source.get("people", 0)),
        "feedback_settled": dg.MetadataValue.int(settled),
        "peak_rss_mb": dg.MetadataValue.float(round(rss.mb(), 1)),
        "by_task": dg.MetadataValue.md(
            markdown_table(
                ["task", "golden", "topped up today"],
                [[t, n, r.floor_topped_up.get(t, 0)] for t, n in sorted(r.golden_by_task.items())],
            )
        ),
    }
    for task, n in sorted(r.golden_by_task.items()):
        metadata[f"golden/{task}"] = dg.MetadataValue.int(n)
    for task, n in sorted(task_floors.items()):
        metadata[f"floor/{task}"] = dg.MetadataValue.int(n)
    return dg.MaterializeResult(
        metadata=metadata,
        check_results=[
            dg.AssetCheckResult(
                check_name="golden_floor_met",
                passed=not short,
                severity=dg.AssetCheckSeverity.WARN,
                description=f"Every task has at least {floor} golden rows (enough to certify "
                f"{night.certify_target:.0%} at delta {night.certify_delta}; a task whose policy sets its own target: "
                f"its own floor {task_floors or ''}).",
                metadata={"short": dg.MetadataValue.text(str(short) if short else "none")},
            )
        ],
    )
