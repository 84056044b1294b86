"""Dagster on PostgreSQL: a real `dagster-daemon` with infra/dagster/dagster.yaml runs a night and a promotion.

Run, event-log and schedule storage live in one PostgreSQL database, Ratchet's control DB in another. The night
sensor (started with `dagster sensor start`, its state stored in Postgres) sees a complete day of fixture traffic
and launches the night through the queued run coordinator; the release sensor admits a certified version to
shadow and promotes it to a 5% canary on the day's audits. Training is paused by the signed manifest so the night
stays CPU-light here: it materialises traffic -> examples -> golden_split -> training_set and the daily receipt.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import psycopg
import pytest

from ratchet_assets.night.fixtures import write_day
from ratchet_assets.release import registry
from ratchet_core import manifest as mf
from ratchet_core.control_db import make_engine
from ratchet_stats.keys import generate_private_key, save_private_key

from .conftest import sign_certificate

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DAY, VERSION, TASK = "2026-01-01", "v1-abcdef12", "tickets"  # the fixture's student-served rows carry VERSION
NIGHT_ASSETS = ("traffic", "examples", "golden_split", "training_set", "daily_receipt")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the daemon's process group (its code server and run workers too), then SIGKILL what is left."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_daemon_on_postgres_runs_the_night_and_the_release_sensor(
    postgres_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control_url = postgres_server.url(postgres_server.create_database("control"))
    dagster_db = postgres_server.create_database("dagster")
    home = tmp_path / "home"
    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    # Most requests student-served and every one audited: the day carries the evidence a canary needs.
    write_day(
        home / "lake",
        DAY,
        320,
        seed=3,
        workload=TASK,
        student_share=0.95,
        audit_share=1.0,
        failure_share=0.0,
        seal_next_day=False,  # one night: the day is complete by the grace period (real time is long past it)
    )
    sign_certificate(home / "artifacts", key, VERSION, TASK, correct=300, n=300, day=DAY)
    engine = make_engine(control_url)
    mf.publish(
        engine, key, lambda m: setattr(m.flags, "training_paused", True), "no GPU in this test", "test:setup"
    )

    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(REPO / "infra" / "dagster" / "dagster.yaml", dagster_home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("RATCHET_", "DAGSTER_"))}
    instance_env = {
        "DAGSTER_HOME": str(dagster_home),
        "DAGSTER_PG_HOST": postgres_server.host,
        "DAGSTER_PG_PORT": str(postgres_server.port),
        "DAGSTER_PG_USER": postgres_server.user,
        "DAGSTER_PG_PASSWORD": "unused-with-trust-auth",
        "DAGSTER_PG_DB": dagster_db,
        "DAGSTER_STORAGE_DIR": str(tmp_path / "dagster_storage"),
    }
    env.update(
        instance_env,
        RATCHET_HOME=str(home),
        RATCHET_CONTROL_DB=control_url,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    started = subprocess.run(
        [str(BIN / "dagster"), "sensor", "start", "night_segments_sensor", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert started.returncode == 0, started.stdout + started.stderr

    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen(
        [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    for name, value in instance_env.items():
        monkeypatch.setenv(name, value)
    try:
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
            run, manifest = _await_night_and_canary(instance, engine, key, daemon, tmp_path / "daemon.log")
            assert run.status == dg.DagsterRunStatus.SUCCESS, _failure(instance, run)
            assert manifest is not None
            assert run.tags["dagster/run_key"] == f"night-{DAY}"
            assert run.tags["dagster/sensor_name"] == "night_segments_sensor"
            for asset in NIGHT_ASSETS:
                event = instance.get_latest_materialization_event(dg.AssetKey(asset))
                assert event is not None and event.run_id == run.run_id, asset
                assert event.dagster_event.partition == DAY
    finally:
        _stop(daemon)
        log.close()

    # Promoted out of shadow (the day's audits may carry it further than 5% before the night ends).
    assert manifest.task(TASK).stage == "canary" and manifest.task(TASK).version == VERSION
    assert manifest.task(TASK).canary_percent >= 5.0 and manifest.flags.training_paused is True
    actions = {(r["actor"], r["action"], r["target"]) for r in registry.read_audit_log(engine)}
    for action in ("admit", "promote"):
        assert ("release-sensor", action, f"{VERSION}/{TASK}") in actions
    assert (home / "artifacts" / "receipts").is_dir()
    # The instance really is Postgres: the run is a row of Dagster's `runs` table, and no SQLite files appeared.
    with psycopg.connect(
        host=postgres_server.host, port=postgres_server.port, user=postgres_server.user, dbname=dagster_db
    ) as conn:
        assert conn.execute("SELECT count(*) FROM runs WHERE run_id = %s", (run.run_id,)).fetchone() == (1,)
    assert not list(dagster_home.rglob("*.db"))


def _await_night_and_canary(instance, engine, key, daemon, log_path: Path, timeout: float = 300.0):
    """Poll the instance and the control DB until the night's run ends and the canary manifest is published."""
    deadline = time.monotonic() + timeout
    run, manifest = None, None
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            pytest.fail(f"dagster-daemon exited {daemon.returncode}:\n{log_path.read_text()[-4000:]}")
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": DAY}))
        if runs and runs[0].is_finished:
            run = runs[0]
        latest, _ = mf.latest_verified(engine, key.public_key())
        if latest is not None and latest.task(TASK).stage == "canary":
            manifest = latest
        if run is not None and (manifest is not None or run.status != dg.DagsterRunStatus.SUCCESS):
            return run, manifest
        time.sleep(2)
    pytest.fail(
        f"after {timeout:.0f} s: night run {run and run.status}, manifest {manifest and manifest.sequence}; "
        f"daemon log:\n{log_path.read_text()[-4000:]}"
    )


def _failure(instance, run) -> str:
    records = instance.all_logs(run.run_id)
    return "\n".join(r.message for r in records if r.dagster_event and r.dagster_event.is_failure)[-4000:]
