"""The Dagster sensors: promotion sensor ticks (SkipReason / cursor / manifests) and the failed-night recorder."""

from __future__ import annotations

import json

import dagster as dg
import sqlalchemy as sa

from ratchet_assets.defs.release_sensors import failed_night_sensor, release_promotion_sensor
from ratchet_assets.defs.resources import night_resources
from ratchet_assets.release import registry
from ratchet_core import manifest as mf
from ratchet_stats.keys import private_key_b64

from .conftest import write_certificate, write_pairs


def _defs(tmp_path, key):
    return dg.Definitions(
        sensors=[release_promotion_sensor, failed_night_sensor],
        resources=night_resources(home=tmp_path, signing_key=private_key_b64(key)),
    )


def _tick(defs, instance, cursor):
    ctx = dg.build_sensor_context(
        instance=instance, cursor=cursor, definitions=defs, resources=defs.resources
    )
    return release_promotion_sensor(ctx), ctx


def test_promotion_sensor_holds_then_promotes_with_deterministic_cursor(tmp_path, key):
    defs = _defs(tmp_path, key)
    engine = defs.resources["control_db"].engine()
    write_certificate(tmp_path / "artifacts", key, "v1-aaa", "tickets", correct=300, n=300, day="2026-01-01")
    with dg.DagsterInstance.ephemeral() as instance:
        first, _ = _tick(defs, instance, None)
        assert first.skip_reason is None and not first.run_requests  # admitted to shadow: acted, no runs
        obs = [e for e in first.asset_events if isinstance(e, dg.AssetObservation)]
        assert obs and obs[0].metadata["release_stage"].value == "shadow" and obs[0].partition == "2026-01-01"

        write_pairs(tmp_path / "lake", "2026-01-02", 1, "v1-aaa", "tickets", [False] * 25)
        hold, _ = _tick(defs, instance, first.cursor)
        assert hold.skip_reason and "25 audits" in hold.skip_reason.skip_message
        assert "of 20 needed" in hold.skip_reason.skip_message
        assert json.loads(hold.cursor)["tracks"]["v1-aaa|tickets"]["step"] == 0

        write_pairs(tmp_path / "lake", "2026-01-02", 2, "v1-aaa", "tickets", [False] * 150)
        promoted, _ = _tick(defs, instance, hold.cursor)
        assert promoted.skip_reason is None
        m, rejected = mf.latest_verified(engine, key.public_key())
        assert (m.task("tickets").stage, m.task("tickets").canary_percent, rejected) == ("canary", 5.0, 0)
        # The same evidence from the same cursor decides the same way (replay is idempotent, no new manifest).
        replay, _ = _tick(defs, instance, hold.cursor)
        assert json.loads(replay.cursor)["generation"] == json.loads(promoted.cursor)["generation"]
        assert mf.latest_verified(engine, key.public_key())[0].sequence == m.sequence


def test_failed_night_sensor_records_failed_runs_once(tmp_path, key):
    @dg.op
    def boom():
        raise RuntimeError("the night broke")

    @dg.job(tags={"dagster/partition": "2026-01-05"})
    def night_job():
        boom()

    defs = _defs(tmp_path, key)
    with dg.DagsterInstance.ephemeral() as instance:
        result = night_job.execute_in_process(instance=instance, raise_on_error=False)
        assert not result.success
        event = next(e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE")
        run = instance.get_run_by_id(result.run_id)
        ctx = dg.build_run_status_sensor_context(
            sensor_name="failed_night_sensor",
            dagster_event=event,
            dagster_instance=instance,
            dagster_run=run,
            resources={"control_db": defs.resources["control_db"]},
        ).for_run_failure()
        failed_night_sensor(ctx)
        failed_night_sensor(ctx)
    engine = defs.resources["control_db"].engine()
    with engine.connect() as conn:
        rows = conn.execute(sa.select(registry.failed_nights)).mappings().all()
    assert len(rows) == 1 and rows[0]["partition"] == "2026-01-05" and rows[0]["job_name"] == "night_job"
