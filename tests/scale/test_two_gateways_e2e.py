"""End to end beyond one machine: two gateways -> an S3 lake -> a Postgres-backed Dagster night -> a receipt
that verifies.

Two gateway processes (distinct replica ids, their own homes, one PostgreSQL control DB, one S3 lake on moto's
server) serve tickets traffic from the demo teacher through the real openai client. Both follow a newly signed
manifest within the poll interval. After they drain and seal, the CI script (infra/ci/materialize-night.sh)
materialises the day's traffic and receipt on a Dagster instance stored in PostgreSQL; the signed receipt
verifies with the auditor's CLI and covers every acknowledged request of both gateways exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai
import pyarrow.parquet as pq
import pytest

from ratchet_core import manifest as mf
from ratchet_core.control_db import make_engine
from ratchet_core.lake import Lake, parse_segment_relpath
from ratchet_core.workloads import get_workload
from ratchet_gateway.demo_teacher.app import create_app as teacher_app
from ratchet_stats.keys import generate_private_key, public_key_b64, public_key_pem, save_private_key
from tests.serve import free_port, serve_in_thread

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DAY = "2026-01-01"
POLL_S = 0.5
PER_GATEWAY = 12
SERVE = """
import sys, uvicorn
from ratchet_core.settings import load_settings
from ratchet_gateway.app import create_app
from ratchet_gateway.state import GatewayOptions
app = create_app(load_settings(), GatewayOptions(replica=sys.argv[1]))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", timeout_graceful_shutdown=30)
"""


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def _ready(url: str) -> dict | None:
    try:
        return _get(url + "/readyz")
    except OSError:  # not listening yet, or 503 until ready
        return None


def _start_gateway(name: str, home: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    out = log.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, name, str(port)], env={**env, "RATCHET_HOME": str(home)}, stdout=out,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    return proc, f"http://127.0.0.1:{port}"


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # drain, flush, seal the ledger
        try:
            return proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(timeout=30)
    return proc.returncode


def test_two_gateways_s3_lake_postgres_night_receipt_verifies(
    postgres_server, s3_env, tmp_path: Path
) -> None:
    control_url = postgres_server.url(postgres_server.create_database("control"))
    dagster_db = postgres_server.create_database("dagster")
    lake_url = f"s3://{s3_env.new_bucket()}/lake"
    key = generate_private_key()
    control_home = tmp_path / "control-plane"
    save_private_key(key, control_home / "keys" / "signing.key")
    # Both gateways count days on one accelerated clock (one epoch), so every request lands on DAY.
    clock = {"real_epoch": time.time(), "start": f"{DAY}T00:00:00+00:00", "day_seconds": 3600.0}
    homes = {}
    for name in ("gw-a", "gw-b"):
        homes[name] = tmp_path / name
        (homes[name] / "keys").mkdir(parents=True)
        (homes[name] / "keys" / "signing.pub").write_text(public_key_pem(key))  # public key only
        (homes[name] / "clock.json").write_text(json.dumps(clock))

    base_env = {
        k: v for k, v in os.environ.items() if not k.upper().startswith(("RATCHET_", "DAGSTER_", "AWS_"))
    }
    base_env.update(s3_env.env, LITELLM_LOCAL_MODEL_COST_MAP="True")
    with serve_in_thread(teacher_app()) as teacher:
        gw_env = {
            **base_env,
            "RATCHET_CONTROL_DB": control_url,
            "RATCHET_LAKE": lake_url,
            "RATCHET_API_KEYS": "acme:sk-acme-1234,globex:sk-globex-5678",
            "RATCHET_TEACHER_API_BASE": teacher + "/v1",
            "RATCHET_STUDENT_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",  # no student: the teacher serves
            "RATCHET_SEGMENT_SECONDS": "1",
            "RATCHET_MANIFEST_POLL_SECONDS": str(POLL_S),
            "RATCHET_DAY_SECONDS": "3600",
            "RATCHET_CLOCK_START": DAY,
        }
        gateways = {n: _start_gateway(n, homes[n], gw_env, tmp_path / f"{n}.log") for n in homes}
        try:
            deadline = time.monotonic() + 180
            while not all(_ready(url) for _, url in gateways.values()):
                for name, (proc, _) in gateways.items():
                    if proc.poll() is not None:
                        pytest.fail(f"{name} exited: {(tmp_path / f'{name}.log').read_text()[-3000:]}")
                assert time.monotonic() < deadline, "gateways not ready after 180 s"
                time.sleep(0.3)
            assert {_ready(url)["replica"] for _, url in gateways.values()} == {"gw-a-0", "gw-b-0"}

            # A newly signed manifest reaches both (each polls the control DB every POLL_S).
            published = time.monotonic()
            new = mf.publish(
                make_engine(control_url),
                key,
                lambda m: setattr(m.flags, "audit_rate", 0.25),
                "audit more while a host joins",
                "test:ops",
            )
            followed = {}
            for _ in range(1200):  # a minute at most
                for name, (_, url) in gateways.items():
                    if name not in followed and (_ready(url) or {}).get("manifest_sequence") == new.sequence:
                        followed[name] = round(time.monotonic() - published, 2)
                if len(followed) == 2:
                    break
                time.sleep(0.05)
            print(f"manifest {new.sequence} followed after {followed} s (poll {POLL_S} s)")
            assert set(followed) == {"gw-a", "gw-b"}, followed

            acked: list[str] = []
            examples = get_workload("tickets").generate(2 * PER_GATEWAY, seed=7, day=0)
            for i, ex in enumerate(examples):
                name = ("gw-a", "gw-b")[i % 2]
                api_key = ("sk-acme-1234", "sk-globex-5678")[(i // 2) % 2]
                client = openai.OpenAI(base_url=gateways[name][1] + "/v1", api_key=api_key, max_retries=0)
                raw = client.chat.completions.with_raw_response.create(
                    model="ratchet", messages=ex.messages, extra_headers={"X-Ratchet-Task": "tickets"}
                )
                assert raw.http_response.status_code == 200
                assert raw.parse().choices[0].message.content
                acked.append(raw.headers["x-ratchet-request-id"])
        finally:
            codes = {name: _stop(proc) for name, (proc, _) in gateways.items()}
        # uvicorn re-raises the SIGTERM it handled once it has shut down (drained, sealed): -15 is a clean stop
        assert set(codes.values()) <= {0, -signal.SIGTERM}, codes

    lake = Lake(lake_url)
    segments = lake.segments(DAY)
    assert {parse_segment_relpath(s.rel).replica for s in segments} == {"gw-a-0", "gw-b-0"}

    night_env = {
        **base_env,
        "PATH": f"{Path(sys.executable).parent}:{base_env.get('PATH', '/usr/bin:/bin')}",
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "DAGSTER_PG_HOST": postgres_server.host,
        "DAGSTER_PG_PORT": str(postgres_server.port),
        "DAGSTER_PG_USER": postgres_server.user,
        "DAGSTER_PG_PASSWORD": "unused-with-trust-auth",
        "DAGSTER_PG_DB": dagster_db,
        "RATCHET_HOME": str(control_home),
        "RATCHET_CONTROL_DB": control_url,
        "RATCHET_LAKE": lake_url,
        "NIGHT_SELECT": "traffic,daily_receipt",
        "DAY": DAY,
    }
    (tmp_path / "dagster_home").mkdir()
    night = subprocess.run(
        ["bash", str(ROOT / "infra" / "ci" / "materialize-night.sh")],
        env=night_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert night.returncode == 0, night.stdout[-3000:] + night.stderr[-3000:]

    receipt_dir = control_home / "artifacts" / "receipts" / DAY
    from ratchet_stats.cli import main as auditor

    code = auditor(
        [
            "verify",
            "receipt",
            str(receipt_dir / "receipt.dsse.json"),
            "--key",
            public_key_b64(key),
            "--rows",
            str(receipt_dir / "rows.parquet"),
        ]
    )
    assert code == 0
    leaves = pq.read_table(receipt_dir / "rows.parquet", columns=["request_id", "client"]).to_pylist()
    ids = [r["request_id"] for r in leaves]
    assert len(ids) == len(set(ids)) == 2 * PER_GATEWAY  # exactly once each
    assert set(ids) == set(acked)
    assert {r["client"] for r in leaves} == {"acme", "globex"}
