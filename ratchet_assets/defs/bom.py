"""``bom``: the certified adapter's signed CycloneDX 1.6 ML-BOM, its NOTICE.md and its training-set proofs.

Dagster wiring only. The step (documents, proofs, the auditor's verification before anything is written, the
files under ``<artifacts>/boms/<version>/``) is ``ratchet_assets.night.bom_writer.write_bom``. When the night's
signed certificate certifies no task, the asset materialises nothing (a BOM is for an adapter that will serve) and
the run still succeeds: "not certified" is the certificate's outcome, not a broken night. When the night's adapter is
an earlier night's version re-certified (``bom_writer.KeepsItsBom``), that version's BOM stands: the asset
materialises it again (``reused``) and writes nothing.
"""

from collections.abc import Iterator

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
    output_required=False,  # a night that certified no task has no BOM, and is still a successful run
)
@publishes_artifacts  # what it wrote goes to RATCHET_ARTIFACTS_URL (a no-op without it)
def bom(
    context: dg.AssetExecutionContext, paths: RatchetPaths, signer: Signer, models: ModelEndpoints
) -> Iterator[dg.MaterializeResult]:
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
    except step.NotCertifiedNoBom as exc:
        context.log.info(f"no BOM: {exc}")
        return  # nothing materialised; the run stays successful
    except step.KeepsItsBom as exc:
        context.log.info(str(exc))
        yield dg.MaterializeResult(
            metadata={
                "version": exc.bom.parent.name,
                "reused": True,
                "dagster/uri": dg.MetadataValue.path(str(exc.bom)),
            }
        )
        return
    except (AdapterError, CommitmentMissing, step.BomStepError) as exc:
        raise dg.Failure(str(exc)) from exc
    yield dg.MaterializeResult(
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
