"""Asset ``training_set``: non-golden examples of the window as train.jsonl, committed by two Merkle roots."""

import dagster as dg

from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ControlDB, NightConfig, RatchetPaths, Signer
from ratchet_assets.night import markdown_table
from ratchet_assets.night.budget import PeakRSS
from ratchet_assets.night.erasures import load_erasures
from ratchet_assets.night.labels import load_labels
from ratchet_assets.night.training_set import (
    TrainingSetError,
    build_training_set,
    disjoint_from_golden,
    window,
)
from ratchet_core.artifact_store import publishes_artifacts

DISJOINT_CHECK = "training_set_disjoint_from_golden"


@dg.asset(
    partitions_def=daily_partitions,
    group_name="night",
    kinds={"duckdb", "json"},
    deps=["examples", "golden_split"],
    check_specs=[dg.AssetCheckSpec(DISJOINT_CHECK, asset="training_set", blocking=True)],
)
@publishes_artifacts  # what it wrote goes to RATCHET_ARTIFACTS_URL (a no-op without it)
def training_set(
    context: dg.AssetExecutionContext,
    paths: RatchetPaths,
    control_db: ControlDB,
    night: NightConfig,
    signer: Signer,
) -> dg.MaterializeResult:
    """The night's training rows (chat fine-tuning format), never a golden key; people's labels first."""
    from ratchet_core.manifest import current_policies

    day = context.partition_key
    rss = PeakRSS()
    engine = control_db.engine()
    erasures = load_erasures(engine)
    policies = current_policies(engine, signer.public_key())
    labels = load_labels(engine, policies, erasures, paths.artifacts_root(), window(day, night.window_days))
    try:
        r = build_training_set(
            paths.artifacts_root(),
            day,
            window_days=night.window_days,
            erasures=erasures,
            budget=night.budget(),
            labels=labels,
        )
    except TrainingSetError as exc:
        raise dg.Failure(description=str(exc)) from None
    ok, overlap, sample = disjoint_from_golden(paths.artifacts_root(), day)
    context.log.info(f"{day}: {r.rows} training rows over {r.window_days} days; rows root {r.rows_root}")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": dg.MetadataValue.int(r.rows),
            "dagster/uri": dg.MetadataValue.path(r.path),
            "rows_root": dg.MetadataValue.text(r.rows_root),
            "keys_root": dg.MetadataValue.text(r.keys_root),
            "window_days": dg.MetadataValue.int(r.window_days),
            "peak_rss_mb": dg.MetadataValue.float(round(rss.mb(), 1)),
            "erased": dg.MetadataValue.int(r.erased),
            "labels_root": dg.MetadataValue.text(r.labels_root),
            "people_labelled": dg.MetadataValue.int(r.by_label.get("people", 0)),
            "bad_feedback_left_out": dg.MetadataValue.int(r.bad_left_out),
            "by_task": dg.MetadataValue.md(
                markdown_table(["task", "rows"], [[t, n] for t, n in sorted(r.by_task.items())])
            ),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=DISJOINT_CHECK,
                passed=ok,
                description="No training key is in the golden registry (every key ever assigned golden).",
                metadata={
                    "overlap": dg.MetadataValue.int(overlap),
                    "examples": dg.MetadataValue.text(", ".join(sample) or "none"),
                },
            )
        ],
    )
