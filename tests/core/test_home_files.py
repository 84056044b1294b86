"""$RATCHET_HOME is private (files 0600, folders 0700) and `ratchet init` makes the student server key that the
gateway, the night and `ratchet student-server` use (issue 13 item 7)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ratchet_core.home_files import read_student_key, student_key_path, tighten
from ratchet_core.settings import Settings
from tests.serve import free_port

REPO = Path(__file__).resolve().parents[2]


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    env.update(RATCHET_HOME=str(home), LITELLM_LOCAL_MODEL_COST_MAP="True", **extra)
    return env


def _ratchet(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ratchet_cli.main", *args],
        env=_env(home, **extra),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _loose(home: Path) -> list[str]:
    """Everything under `home` that a group or other user could read, write or enter."""
    bad = []
    for root, dirs, files in os.walk(home):
        for name in [*dirs, *files]:
            p = Path(root) / name
            mode = stat.S_IMODE(os.lstat(p).st_mode)
            want = 0o700 if p.is_dir() else 0o600
            if mode & 0o077 or (p.is_dir() and mode != want):
                bad.append(f"{p.relative_to(home)} {oct(mode)}")
    return bad


@pytest.mark.slow
def test_init_makes_a_private_home_and_a_student_key(tmp_path):
    home = tmp_path / "home"
    res = _ratchet(home, "init", "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    key_file = Path(info["student_key"])
    assert key_file == student_key_path(home) and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = read_student_key(home)
    assert key.startswith("sk-student-") and len(key) > 40
    assert _loose(home) == [] and stat.S_IMODE(home.stat().st_mode) == 0o700
    assert (home / "control.db").exists()
    # idempotent: the key is kept; a file an older version left world-readable is fixed
    (home / "artifacts" / "old.json").write_text("{}")
    os.chmod(home / "artifacts" / "old.json", 0o644)
    os.chmod(home / "lake", 0o755)
    assert _ratchet(home, "init", "--json").returncode == 0
    assert read_student_key(home) == key and _loose(home) == []
    # the settings (gateway, night) read it unless RATCHET_STUDENT_API_KEY says otherwise
    assert Settings(home=home).student_api_key == key
    assert Settings(home=home, student_api_key="sk-explicit").student_api_key == "sk-explicit"
    assert Settings(home=tmp_path / "nohome").student_api_key == ""


def test_tighten_keeps_owner_bits_and_skips_links(tmp_path):
    (tmp_path / "d").mkdir()
    os.chmod(tmp_path / "d", 0o755)  # whatever the process umask is (loading the code location sets 077)
    f = tmp_path / "d" / "run.sh"
    f.write_text("#!/bin/sh\n")
    os.chmod(f, 0o755)
    (tmp_path / "link").symlink_to("/etc/hostname")
    assert tighten(tmp_path) >= 2
    assert stat.S_IMODE(f.stat().st_mode) == 0o700
    assert stat.S_IMODE(os.stat("/etc/hostname").st_mode) & 0o044  # the link's target is untouched


def test_student_server_requires_the_home_key_by_default(tmp_path, monkeypatch):
    """`ratchet student-server` with no --api-key serves with the home's key (created when absent)."""
    import uvicorn
    from click.testing import CliRunner

    import ratchet_gateway.student_server.app as student_app
    from ratchet_gateway.student_server.cli import student_server

    seen: dict = {}
    monkeypatch.setattr(student_app, "create_app", lambda base, **kw: seen.update(kw) or object())
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    home = tmp_path / "home"
    env = {"RATCHET_HOME": str(home), "RATCHET_STUDENT_API_KEY": ""}
    res = CliRunner().invoke(student_server, ["--base", str(tmp_path)], env=env)
    assert res.exit_code == 0, res.output
    assert seen["api_key"] == read_student_key(home) and seen["api_key"].startswith("sk-student-")
    res = CliRunner().invoke(student_server, ["--base", str(tmp_path), "--api-key", "sk-given"], env=env)
    assert res.exit_code == 0 and seen["api_key"] == "sk-given"


@pytest.mark.slow
def test_a_gateway_keeps_its_home_private(tmp_path):
    """A real `ratchet gateway` process records a request, seals its ledger on SIGTERM: ledger, journal, lock,
    DuckDB, pepper, segments and control DB under the home are all 0600 in 0700 folders."""
    home = tmp_path / "home"
    assert _ratchet(home, "init").returncode == 0
    port = free_port()
    env = _env(
        home,
        RATCHET_API_KEYS="app:sk-app-0123456789",
        RATCHET_TEACHER_API_BASE=f"http://127.0.0.1:{free_port()}/v1",  # nobody there: a failed row
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ratchet_cli.main", "gateway", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "ratchet", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": "Bearer sk-app-0123456789"},
            timeout=30,
        )
        assert r.status_code >= 500
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert list(home.glob("lake/traffic/day=*/*.parquet")), err.decode()[-2000:]
    assert list(home.glob("ledger/*"))
    assert _loose(home) == []


def test_a_dagster_process_loading_the_code_location_writes_private_files(tmp_path: Path) -> None:
    """`dagster dev`/`dagster-daemon`/a run worker are not started by `ratchet`: loading the code location itself
    sets umask 077, so what the night writes under the home is born 0600/0700."""
    probe = (
        "import os; os.umask(0o022); import ratchet_assets.definitions; "
        "p = os.path.join(os.environ['PROBE_DIR'], 'f'); open(p, 'w').close(); os.mkdir(p + 'd'); "
        "print(oct(os.stat(p).st_mode & 0o777), oct(os.stat(p + 'd').st_mode & 0o777))"
    )
    env = dict(os.environ, PROBE_DIR=str(tmp_path), LITELLM_LOCAL_MODEL_COST_MAP="True")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["0o600", "0o700"]


def test_a_gateway_served_by_plain_uvicorn_writes_private_files(tmp_path: Path) -> None:
    """`uvicorn ratchet_gateway.app:app_from_env --factory` is not started by `ratchet`: the factory sets umask 077."""
    probe = (
        "import os; os.umask(0o022); from ratchet_gateway.app import app_from_env; app_from_env(); "
        "p = os.path.join(os.environ['PROBE_DIR'], 'f'); open(p, 'w').close(); "
        "print(oct(os.stat(p).st_mode & 0o777))"
    )
    env = dict(
        os.environ,
        PROBE_DIR=str(tmp_path),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        RATCHET_HOME=str(tmp_path / "home"),
        RATCHET_API_KEYS="app:sk-app-0123456789",
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "0o600"
