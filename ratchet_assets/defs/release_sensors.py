"""Release sensors: promote or roll back adapters on audit evidence, and record failed nights.

``release_promotion_sensor`` runs one ``ratchet_assets.release.control.release_tick`` per evaluation: new
certificates put versions into shadow; pair rows of sealed traffic feed betting e-processes; a decision publishes a
new signed release manifest through the effect ledger (type ``release.publish``, key = version/task/target
stage/evidence digest). It publishes INSIDE the sensor evaluation rather than requesting a run: the manifest is the
sensor's only side effect, it is guarded by the effect ledger, and the sensor's state is committed in the same
control-DB transaction as the manifest (so a tick that dies before Dagster stores its cursor resumes exactly). A
run per decision would add launch latency on the path that rolls back a bad adapter, and a run that failed after
the cursor moved would leave cursor and manifest disagreeing. It requests no runs; when nothing changes it
returns a SkipReason saying what it has and needs (audits so far, e-value vs 1/alpha). Each tick reports every
version's stage as an ``AssetObservation`` on ``lora_adapter`` (the partition of the night that trained it), so
the lineage page shows what is serving.

Cursor: JSON ``{"tracks": {version|task: e-process states}, "watermark": segments read, "generation": n}``.
Policy: promote on evidence precision > ``night.certify_target``; roll back on evidence precision < target - 0.05;
alpha 0.05 each.

``failed_night_sensor`` records each failed run of this code location in the control-DB table ``failed_nights``
(run id, job, partition, message), idempotent by run id.
"""

from __future__ import annotations

import json

import dagster as dg

from ratchet_assets.defs.resources import ControlDB, NightConfig, RatchetPaths, Signer

LORA_ADAPTER = dg.AssetKey("lora_adapter")


def _policy(night: NightConfig):
    from ratchet_assets.release.policy import ReleasePolicy

    target = float(night.certify_target)
    return ReleasePolicy(target=target, floor=max(0.5, round(target - 0.05, 6)))


@dg.sensor(
    name="release_promotion_sensor",
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Promote (shadow -> canary 5/25/50% -> live) or roll back adapters on audit evidence.",
)
def release_promotion_sensor(
    context: dg.SensorEvaluationContext,
    paths: RatchetPaths,
    control_db: ControlDB,
    signer: Signer,
    night: NightConfig,
) -> dg.SensorResult:
    from ratchet_assets.release.control import release_tick

    result = release_tick(
        control_db.engine(),
        signer.private_key(),
        paths.lake_root(),
        paths.artifacts_root(),
        context.cursor or None,
        policy=_policy(night),
    )
    observations = [
        dg.AssetObservation(
            asset_key=LORA_ADAPTER,
            partition=s["day"] or None,
            metadata={
                "version": dg.MetadataValue.text(s["version"]),
                "task": dg.MetadataValue.text(s["task"]),
                "release_stage": dg.MetadataValue.text(s["stage"]),
                "canary_percent": dg.MetadataValue.float(float(s["canary_percent"])),
                "manifest_sequence": dg.MetadataValue.int(int(s["manifest_sequence"])),
            },
        )
        for s in result.stages
    ]
    for line in result.notes:
        context.log.info(line)
    cursor = json.dumps(result.state, sort_keys=True, separators=(",", ":"))
    if result.acted:
        context.log.info(result.summary())
        return dg.SensorResult(cursor=cursor, asset_events=observations)
    return dg.SensorResult(
        cursor=cursor, asset_events=observations, skip_reason=dg.SkipReason(result.summary())
    )


@dg.run_failure_sensor(
    name="failed_night_sensor",
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Record every failed night run in the control DB (table failed_nights).",
)
def failed_night_sensor(context: dg.RunFailureSensorContext, control_db: ControlDB) -> None:
    from ratchet_assets.release.registry import record_failed_night

    run = context.dagster_run
    message = context.failure_event.message or "run failed"
    partition = run.tags.get("dagster/partition", "")
    if record_failed_night(control_db.engine(), run.run_id, run.job_name, partition, message):
        context.log.warning(f"night run {run.run_id} ({run.job_name} {partition}) failed: {message}")
