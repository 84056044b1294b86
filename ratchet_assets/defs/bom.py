"""``bom``: the certified adapter's signed CycloneDX 1.6 ML-BOM, its NOTICE.md and its training-set proofs.

Dagster wiring only. Runs only after ``evaluation_certificate``'s blocking check passed; the step (documents,
proofs, the auditor's verification before anything is written, the files under ``<artifacts>/boms/<version>/``)
is ``ratchet_assets.night.bom_writer.write_bom``.
"""

import dagster as dg

from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ModelEndpoints, RatchetPaths, Signer
from ratchet_assets.night import bom_writer as step
from ratchet_core.artifact_store import publishes_artifacts


@dg.asset(
    partitions_def=daily_partitions,
    deps=["evaluation_certificate"],
    kinds={"json"},
    group_name="night",
)
@publishes_artifacts  # what it wrote goes to RATCHET_ARTIFACTS_URL (a no-op without it)
def bom(
    context: dg.AssetExecutionContext, paths: RatchetPaths, signer: Signer, models: ModelEndpoints
) -> dg.MaterializeResult:
    """The signed ML-BOM (CycloneDX 1.6) and NOTICE.md of the night's certified adapter."""
    from ratchet_assets.night.adapter import AdapterError
    from ratchet_assets.night.commitments import CommitmentMissing

    try:
        r = step.write_bom(
            paths.artifacts_root(),
            context.partition_key,
            private_key=signer.private_key(),
            public_keys=signer.verify_keys(),  # a certificate signed before a key rotation still verifies
            teacher_model=models.teacher(),
        )
    except (AdapterError, CommitmentMissing, step.BomStepError) as exc:
        raise dg.Failure(str(exc)) from exc
    return dg.MaterializeResult(
        metadata={
            "version": r.version,
            "adapter_sha256": dg.MetadataValue.text(r.adapter_sha256),
            "train_key_root": dg.MetadataValue.text(r.train.keys.root),
            "train_rows": dg.MetadataValue.int(r.train.rows.size),
            "golden_key_root": dg.MetadataValue.text(r.golden.keys.root),
            "golden_rows": dg.MetadataValue.int(r.golden.keys.size),
            "base_license": r.license_id,
            "checks": ", ".join(r.checks),
            "dagster/uri": dg.MetadataValue.path(str(r.path)),
        }
    )
