"""`ratchet config check` connects to what is configured and reports each: a real PostgreSQL control DB, the lake
and artifacts folders, and OpenAI-compatible student and teacher servers on loopback (the demo teacher's app,
with an API key); a refused key and a closed port are failures, exit 1 under --strict; no secret is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app
from tests.serve import free_port, serve_in_thread

RATCHET = [sys.executable, "-m", "ratchet_cli.main"]
pytestmark = pytest.mark.slow  # each `ratchet config check` is a fresh process (~8 s on the shared machine)


def _check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("RATCHET_")}
    return subprocess.run(
        [*RATCHET, "config", "check", *args], env={**base, **env}, capture_output=True, text=True, timeout=120
    )


def test_config_check_connects_to_each_configured_part(postgres_server, tmp_path: Path) -> None:
    db = postgres_server.create_database("control")
    # trust auth ignores the password: it is there to prove it never reaches the output
    control_db = f"postgresql+psycopg://ratchet:pg-s3cret@{postgres_server.host}:{postgres_server.port}/{db}"
    (tmp_path / "lake" / "traffic" / "day=2026-01-01").mkdir(parents=True)
    app = create_app(DemoTeacherConfig(api_key="sk-right-key"))
    with serve_in_thread(app) as url:
        env = {
            "RATCHET_HOME": str(tmp_path),
            "RATCHET_CONTROL_DB": control_db,
            "RATCHET_STUDENT_BASE_URL": url + "/v1",
            "RATCHET_STUDENT_API_KEY": "sk-right-key",
            "RATCHET_TEACHER_API_BASE": url + "/v1",
            "RATCHET_TEACHER_API_KEY": "sk-wrong-key",
        }
        res = _check(env, "--json")
        strict = _check(env, "--strict")
        offline = _check(
            {**env, "RATCHET_STUDENT_BASE_URL": f"http://127.0.0.1:{free_port()}/v1"}, "--offline"
        )
        closed = _check({**env, "RATCHET_STUDENT_BASE_URL": f"http://127.0.0.1:{free_port()}/v1"}, "--json")

    assert res.returncode == 0, res.stderr  # reachability is reported; only --strict fails on it
    report = json.loads(res.stdout)
    by_name = {c["name"]: c for c in report["connections"]}
    assert set(by_name) == {"control_db", "lake", "artifacts", "student", "teacher"}
    assert by_name["control_db"]["ok"] is True and by_name["control_db"]["detail"].startswith("postgresql 15")
    assert by_name["lake"]["ok"] is True and "1 day folders" in by_name["lake"]["detail"]
    assert by_name["student"]["ok"] is True and "demo-teacher" in by_name["student"]["detail"]
    assert by_name["teacher"]["ok"] is False and "refused" in by_name["teacher"]["detail"]
    assert report["unreachable"] == ["teacher: the API key was refused"]
    for out in (res, strict, offline, closed):
        text = out.stdout + out.stderr
        assert "pg-s3cret" not in text and "sk-right-key" not in text and "sk-wrong-key" not in text

    assert strict.returncode == 1 and "(connect) teacher" in strict.stdout and "FAILED" in strict.stdout
    assert offline.returncode == 0 and "(connect)" not in offline.stdout
    student = {c["name"]: c for c in json.loads(closed.stdout)["connections"]}["student"]
    assert student["ok"] is False and "unreachable" in student["detail"]


def test_unreachable_control_db_is_reported_not_raised(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://ratchet:pw@127.0.0.1:{free_port()}/ratchet"
    res = _check({"RATCHET_HOME": str(tmp_path), "RATCHET_CONTROL_DB": url}, "--json", "--strict")
    assert res.returncode == 1
    control = {c["name"]: c for c in json.loads(res.stdout)["connections"]}["control_db"]
    assert (
        control["ok"] is False and control["detail"].startswith("cannot connect") and "pw@" not in res.stdout
    )
