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
Release rule: promote on evidence precision > ``night.certify_target``; roll back on evidence precision < target - 0.05;
alpha 0.05 each.

``adapter_reconciler`` keeps every student endpoint holding exactly the adapter versions the current manifest
serves (``ratchet_assets.release.adapters``): every 30 s it loads what is missing (also after an endpoint
restarted), unloads retired versions, and reports drift as its SkipReason and, when something changed or is
missing, as an ``AssetObservation`` on ``lora_adapter`` (``adapters_missing`` is plotted per evaluation).
Endpoints: resource ``student_endpoints`` (comma-separated base URLs; default ``RATCHET_STUDENT_BASE_URL``).

``failed_night_sensor`` records each failed run of this code location in the control-DB table ``failed_nights``
(run id, job, partition, message), idempotent by run id. A failed run means the night broke: a night whose adapter
certified no task is a successful run with a signed not-certified certificate (``evaluation_certificate``), which
the release tick registers as rejected and never promotes, so this sensor does not see it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import dagster as dg

from ratchet_assets.defs.resources import ControlDB, NightConfig, RatchetPaths, Signer

LORA_ADAPTER = dg.AssetKey("lora_adapter")


def _release_rule(night: NightConfig):
    from ratchet_assets.release.decision import ReleaseRule

    target = float(night.certify_target)
    return ReleaseRule(target=target, floor=max(0.5, round(target - 0.05, 6)))


def release_tick_seconds() -> int:
    """Seconds between the release sensor's evaluations: ``RATCHET_RELEASE_TICK_SECONDS`` (15 by default), read when
    the code location loads. The accelerated demo sets a tenth of its day (5 s at 50 s a day): at 15 s its ladder
    moved one step per 15 s, a third of a demo day, and a step's evidence waited hours of the day it stands for."""
    from ratchet_core.settings import load_settings

    return load_settings().release_tick_seconds


@dg.sensor(
    name="release_promotion_sensor",
    minimum_interval_seconds=release_tick_seconds(),
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
        rule=_release_rule(night),
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


class StudentEndpoints(dg.ConfigurableResource):
    """Student endpoints (vLLM or ``ratchet student-server``) the adapter reconciler keeps loaded.

    ``urls``: comma-separated OpenAI base URLs (``http://host:8102/v1``); empty = ``RATCHET_STUDENT_BASE_URL``.
    ``api_key``: empty = ``RATCHET_STUDENT_API_KEY``. ``base_model``: the base folder they serve, which an adapter
    is checked against before it is loaded into vLLM; empty = ``RATCHET_STUDENT_BASE_MODEL``, else the demo base
    under ``$RATCHET_HOME``. ``max_lora_rank``: their ``--max-lora-rank``; 0 = ``RATCHET_STUDENT_MAX_LORA_RANK``."""

    urls: str = ""
    api_key: str = ""
    base_model: str = ""
    max_lora_rank: int = 0

    def base_and_rank(self, home: Path) -> tuple[Path, int]:
        from ratchet_core.settings import load_settings

        settings = load_settings()
        base = self.base_model or settings.student_base_model or str(Path(home) / "models" / "demo-base")
        return Path(base).expanduser(), self.max_lora_rank or settings.student_max_lora_rank

    def endpoints(self) -> list[tuple[str, str]]:
        from ratchet_core.settings import load_settings

        urls, key = self.urls, self.api_key
        if not urls or not key:
            settings = load_settings()
            urls = urls or settings.student_base_url or ""
            key = key or settings.student_api_key
        return [(u.strip(), key) for u in urls.split(",") if u.strip()]


RECONCILE_SECONDS = 30


@dg.sensor(
    name="adapter_reconciler",
    minimum_interval_seconds=RECONCILE_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Keep every student endpoint holding exactly the adapters the current release manifest serves.",
)
def adapter_reconciler(
    context: dg.SensorEvaluationContext,
    paths: RatchetPaths,
    control_db: ControlDB,
    signer: Signer,
    student_endpoints: StudentEndpoints,
) -> dg.SensorResult:
    from ratchet_assets.release.adapters import reconcile

    endpoints = student_endpoints.endpoints()
    if not endpoints:
        return dg.SensorResult(
            skip_reason=dg.SkipReason(
                "no student endpoint: set RATCHET_STUDENT_BASE_URL or student_endpoints.urls"
            )
        )
    base, max_rank = student_endpoints.base_and_rank(paths.home_path())
    manifest, reports = reconcile(
        control_db.engine(),
        [signer.public_key()],
        endpoints,
        paths.artifacts_root(),
        paths.artifact_store(),  # adapters the cache lacks come from RATCHET_ARTIFACTS_URL
        paths.student_adapters_from_store,
        base,  # what an adapter must fit before it is loaded into vLLM
        max_rank,
    )
    seen = {
        "sequence": manifest.sequence,
        "endpoints": {r.endpoint: [sorted(r.missing), r.stale, r.extra, r.error] for r in reports},
    }
    cursor = hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()[:16]
    events = []
    for r in reports:
        if r.acted:
            context.log.info(r.summary())
        if r.drift:
            context.log.warning(r.summary())
        if r.acted or r.drift or cursor != context.cursor:
            events.append(
                dg.AssetObservation(
                    asset_key=LORA_ADAPTER,
                    metadata={
                        "endpoint": dg.MetadataValue.text(r.endpoint),
                        "manifest_sequence": dg.MetadataValue.int(manifest.sequence),
                        "adapters_desired": dg.MetadataValue.int(len(r.desired)),
                        "adapters_missing": dg.MetadataValue.int(len(r.missing)),
                        "adapters_loaded_now": dg.MetadataValue.int(len(r.loaded) + len(r.reloaded)),
                        "adapters_unloaded_now": dg.MetadataValue.int(len(r.unloaded)),
                        "reconcile": dg.MetadataValue.text(r.summary()),
                    },
                )
            )
    return dg.SensorResult(
        cursor=cursor,
        asset_events=events,
        skip_reason=dg.SkipReason(" | ".join(r.summary() for r in reports)),
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


@dg.definitions
def release_sensors() -> dg.Definitions:
    """This module's sensors and the reconciler's ``student_endpoints`` resource."""
    return dg.Definitions(
        sensors=[release_promotion_sensor, adapter_reconciler, failed_night_sensor],
        resources={"student_endpoints": StudentEndpoints()},
    )
