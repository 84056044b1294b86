"""The CI workflow example (infra/ci/github-night.yaml) against a deployment: Dagster storage and the control DB in
PostgreSQL, a lake of fixture traffic, a loopback student server. Its script materialises a night (exit 0, the run
recorded in the deployment's instance) and stays green for a night that ran and did not certify (an adapter trained
for a few steps cannot reach the certification target: a signed not-certified certificate, no BOM, a successful
run): "not certified" is an outcome, a red job means the night broke."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import psycopg
import pytest
import yaml

from ratchet_assets.defs.lora_adapter import lora_adapter
from ratchet_assets.defs.resources import night_resources
from ratchet_assets.night.fixtures import write_day
from ratchet_core.settings import unknown_variables
from ratchet_stats.keys import generate_private_key, save_private_key

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "infra" / "ci" / "github-night.yaml"
SCRIPT = ROOT / "infra" / "ci" / "materialize-night.sh"
DAY = "2026-01-01"


def test_workflow_runs_the_script_with_the_deployments_settings() -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    (job,) = doc["jobs"].values()
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert runs[-1] == "infra/ci/materialize-night.sh"
    assert "'.[scale]'" in runs[0]  # dagster-postgres for the deployment's instance
    env = job["env"]
    assert unknown_variables(env) == []
    script = SCRIPT.read_text()
    for name in ("DAGSTER_PG_HOST", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB"):
        assert name in env and name in (ROOT / "infra" / "dagster" / "dagster.yaml").read_text()
    for name in ("RATCHET_CONTROL_DB", "RATCHET_LAKE", "RATCHET_SIGNING_KEY", "RATCHET_STUDENT_BASE_URL"):
        assert name in env
    assert "dagster asset materialize -m ratchet_assets.definitions" in script and "--partition" in script


def _script(env: dict[str, str], select: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT)],
        env={**env, "NIGHT_SELECT": select, "DAY": DAY},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _runs(server, db: str) -> list[tuple[str, str]]:
    with psycopg.connect(host=server.host, port=server.port, user=server.user, dbname=db) as conn:
        return [tuple(r) for r in conn.execute("SELECT status, run_body FROM runs ORDER BY id").fetchall()]


def test_script_materialises_a_night_and_a_not_certified_night_stays_green(
    postgres_server, tmp_path: Path
) -> None:
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_gateway.student_server.app import create_app
    from tests.serve import serve_in_thread

    control_url = postgres_server.url(postgres_server.create_database("control"))
    dagster_db = postgres_server.create_database("dagster")
    home = tmp_path / "home"
    save_private_key(generate_private_key(), home / "keys" / "signing.key")
    write_day(home / "lake", DAY, 90, seed=5, workload="tickets", student_share=0.0, seal_next_day=False)
    base = ensure_demo_base(home / "models" / "demo-base")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("RATCHET_", "DAGSTER_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
        DAGSTER_HOME=str(tmp_path / "dagster_home"),
        DAGSTER_PG_HOST=postgres_server.host,
        DAGSTER_PG_PORT=str(postgres_server.port),
        DAGSTER_PG_USER=postgres_server.user,
        DAGSTER_PG_PASSWORD="unused-with-trust-auth",
        DAGSTER_PG_DB=dagster_db,
        RATCHET_HOME=str(home),
        RATCHET_CONTROL_DB=control_url,
        RATCHET_STUDENT_BASE_MODEL=str(base),
    )
    (tmp_path / "dagster_home").mkdir()

    night = _script(env, "traffic,examples,golden_split,training_set,daily_receipt")
    assert night.returncode == 0, night.stdout[-3000:] + night.stderr[-3000:]
    assert [status for status, _ in _runs(postgres_server, dagster_db)] == ["SUCCESS"]

    # An adapter of a few steps (the real asset, tiny config) stands in for a night whose training went wrong.
    trained = dg.materialize(
        [lora_adapter],
        partition_key=DAY,
        instance=dg.DagsterInstance.ephemeral(),
        resources=night_resources(home, control_db_url=control_url),
        run_config={"ops": {"lora_adapter": {"config": {"epochs": 1, "min_steps": 0, "num_threads": 2}}}},
    )
    assert trained.success
    with serve_in_thread(create_app(base)) as url:
        env["RATCHET_STUDENT_BASE_URL"] = url + "/v1"
        not_certified = _script(env, "evaluation_certificate,bom")
    output = not_certified.stdout + not_certified.stderr
    assert not_certified.returncode == 0, output[-3000:]
    assert [status for status, _ in _runs(postgres_server, dagster_db)] == ["SUCCESS", "SUCCESS"]
    assert list((home / "artifacts" / "certificates").glob("*.dsse.json"))  # the signed not-certified outcome
    assert not (home / "artifacts" / "boms").exists() or not any((home / "artifacts" / "boms").iterdir())
