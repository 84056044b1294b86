"""Asset ``daily_receipt``: the day's signed, chained receipt (teacher-equivalent cost vs paid, per client).

The metadata is for the operator (the receipt itself signs no client's totals): overall and per-client amounts,
the measured/estimated split of the teacher-equivalent, the prices and each task's completion estimate."""

import dagster as dg

from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ControlDB, ModelEndpoints, NightConfig, RatchetPaths, Signer
from ratchet_assets.night import markdown_table
from ratchet_assets.night.budget import PeakRSS
from ratchet_assets.night.receipts import ReceiptConflict, build_receipt
from ratchet_core.artifact_store import publishes_artifacts
from ratchet_stats import teacher_equivalent as te

EFFECTS_CHECK = "no_indeterminate_effects"


@dg.asset(
    partitions_def=daily_partitions,
    group_name="night",
    kinds={"duckdb", "json"},
    deps=["traffic"],
    check_specs=[dg.AssetCheckSpec(EFFECTS_CHECK, asset="daily_receipt")],
)
@publishes_artifacts  # what it wrote goes to RATCHET_ARTIFACTS_URL (a no-op without it)
def daily_receipt(
    context: dg.AssetExecutionContext,
    paths: RatchetPaths,
    control_db: ControlDB,
    signer: Signer,
    models: ModelEndpoints,
    night: NightConfig,
) -> dg.MaterializeResult:
    """Signed receipt of the day's requests at the teacher's prices: Merkle roots over rows, clients and estimates."""
    day = context.partition_key
    ledger = control_db.effects()
    rss = PeakRSS()
    try:
        # The receipt's sort and aggregates run in the night's memory budget (RATCHET_NIGHT_MEMORY_MB).
        r = build_receipt(
            paths.artifacts_root(),
            day,
            signer.private_key(),
            ledger,
            teacher_model=models.teacher(),
            budget=night.budget(),
        )
    except ReceiptConflict as exc:
        raise dg.Failure(description=str(exc)) from None
    context.log.info(f"{day}: receipt {r.outcome} ({r.size} requests, root {r.root})")
    t = r.totals
    stuck = ledger.indeterminate()
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": dg.MetadataValue.int(r.size),
            "dagster/uri": dg.MetadataValue.path(r.path),
            "root": dg.MetadataValue.text(r.root),
            "peak_rss_mb": dg.MetadataValue.float(round(rss.mb(), 1)),
            "envelope_digest": dg.MetadataValue.text(r.envelope_digest),
            "previous": dg.MetadataValue.text(r.previous["digest"] if r.previous else "none (first receipt)"),
            "signature": dg.MetadataValue.text("new" if r.outcome == "execute" else "reused"),
            "teacher_equivalent_usd": dg.MetadataValue.float(t["teacher_cost_micro_usd"] / 1e6),
            "teacher_equivalent_measured_usd": dg.MetadataValue.float(
                t["teacher_cost_measured_micro_usd"] / 1e6
            ),
            "teacher_equivalent_estimated_usd": dg.MetadataValue.float(
                t["teacher_cost_estimated_micro_usd"] / 1e6
            ),
            "teacher_prices": dg.MetadataValue.text(
                f"{r.prices['teacher_model']}: ${r.prices['input_usd_per_token'] * 1e6:g}/M prompt, "
                f"${r.prices['output_usd_per_token'] * 1e6:g}/M completion tokens"
            ),
            "completion_estimates": dg.MetadataValue.md(
                markdown_table(
                    ["task", "source", "from day", "teacher answers", "mean completion tokens"],
                    [
                        [e["task"], e["source"], e["day"] or "-", k, f"{c / k:.2f}" if k else "-"]
                        for e in r.estimates[:20]
                        for k, c in [te.answers_of(e)]
                    ],
                )
            ),
            "paid_usd": dg.MetadataValue.float(t["actual_cost_micro_usd"] / 1e6),
            # Of which the day's audit and shadow calls (receipt v3: committed in pairs.jsonl).
            "pair_calls": dg.MetadataValue.int(t["pairs"]),
            "pair_calls_usd": dg.MetadataValue.float(t["pair_cost_micro_usd"] / 1e6),
            "saved_usd": dg.MetadataValue.float(t["saved_micro_usd"] / 1e6),
            "student_requests": dg.MetadataValue.int(t["served_by"].get("student", 0)),
            "clients": dg.MetadataValue.md(
                markdown_table(
                    [
                        "client",
                        "requests",
                        "teacher-equivalent $ (estimated part)",
                        "paid $ (pair calls)",
                        "saved $",
                    ],
                    [
                        [
                            c,
                            e["requests"],
                            f"{e['teacher_cost_micro_usd'] / 1e6:.6f} "
                            f"({e['teacher_cost_estimated_micro_usd'] / 1e6:.6f})",
                            f"{e['actual_cost_micro_usd'] / 1e6:.6f} ({e['pair_cost_micro_usd'] / 1e6:.6f})",
                            f"{e['saved_micro_usd'] / 1e6:.6f}",
                        ]
                        for c, e in sorted(r.clients.items())[:20]
                    ],
                )
            ),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=EFFECTS_CHECK,
                passed=not stuck,
                severity=dg.AssetCheckSeverity.WARN,
                description="No effect in the ledger has an unknown outcome (lapsed lease, no report).",
                metadata={
                    "indeterminate": dg.MetadataValue.int(len(stuck)),
                    "effects": dg.MetadataValue.text(
                        ", ".join(f"{e.effect_type} {e.key}" for e in stuck[:10]) or "none"
                    ),
                },
            )
        ],
    )
