"""Asset ``retention``: deletes what is older than its data class's retention window, on a schedule.

Receipts, certificates and BOMs are kept; a golden set that certifies a version not yet retired is kept until it is
(``ratchet_assets.governance.retention``). Today is Ratchet's clock (``ratchet_core.clock``: accelerated in demos).
"""

import dagster as dg

from ratchet_assets.defs.resources import ControlDB, RatchetPaths, Retention
from ratchet_assets.governance.retention import CLASSES, RetentionWindows, enforce
from ratchet_core.artifact_store import publishes_artifacts


@dg.asset(group_name="governance", kinds={"python"})
@publishes_artifacts  # deletions reach RATCHET_ARTIFACTS_URL too (a no-op without it)
def retention(
    context: dg.AssetExecutionContext, paths: RatchetPaths, control_db: ControlDB, retention: Retention
) -> dg.MaterializeResult:
    """Expired traffic, examples, training sets, golden sets and adapters deleted; counts per data class."""
    from ratchet_core.clock import today

    windows = RetentionWindows(*(getattr(retention, f"{c}_days") or None for c in CLASSES))
    report = enforce(
        str(paths.lake_root()), str(paths.artifacts_root()), windows, today(), engine=control_db.engine()
    )
    for line in report.kept:
        context.log.info(f"retention kept {line}")
    for kind, days in report.deleted_days.items():
        context.log.info(f"retention deleted {kind} of {', '.join(days)}")
    metadata = {f"deleted_{c}": dg.MetadataValue.int(report.deleted[c]) for c in CLASSES}
    metadata["today"] = dg.MetadataValue.text(report.today)
    metadata["windows_days"] = dg.MetadataValue.json({c: getattr(windows, c) for c in CLASSES})
    metadata["kept"] = dg.MetadataValue.md("\n".join(f"- {k}" for k in report.kept) or "nothing held back")
    return dg.MaterializeResult(metadata=metadata)
