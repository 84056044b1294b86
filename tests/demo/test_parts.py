"""The demo's parts without the services: clock file, state, Dagster instance config, supervisor, settings shim."""

from __future__ import annotations

import os
import stat
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from ratchet_cli.demo.state import DemoState, set_accelerated_clock
from ratchet_cli.demo.supervisor import Service, ServiceError, Supervisor, port_is_free
from tests.serve import free_port


def test_the_clock_file_the_demo_writes_is_the_day_ratchet_core_clock_reports(tmp_path, monkeypatch) -> None:
    from ratchet_core import clock

    monkeypatch.setenv("RATCHET_HOME", str(tmp_path))
    monkeypatch.setenv("RATCHET_DAY_SECONDS", "20")
    # Day 2026-03-10 started 50 real seconds ago with 20-second days: 2.5 days later it is 2026-03-12, noon
    # (plus however long reading the clock took: bounded by the real time before and after it).
    started = time.time() - 50
    set_accelerated_clock(tmp_path, "2026-03-10", 20, real_now=started)
    before = time.time()
    now = clock.now()
    after = time.time()
    midnight = datetime(2026, 3, 10, tzinfo=UTC)
    assert now.date() == date(2026, 3, 12)
    assert (
        midnight + timedelta(days=(before - started) / 20)
        <= now
        <= midnight + timedelta(days=(after - started) / 20)
    )
    # Moving the clock to a later day is seen at once (no restart of the reader).
    set_accelerated_clock(tmp_path, "2026-04-01", 20)
    assert clock.today() == date(2026, 4, 1)


def test_state_survives_a_restart_and_keeps_the_api_key_private(tmp_path) -> None:
    state = DemoState.load(tmp_path)
    assert state.api_key.startswith("sk-ratchet-demo-") and len(state.api_key) > 30
    state.days_done.append("2026-01-01")
    state.open_day = "2026-01-02"
    assert state.index_of("2026-01-01") == 0 and state.index_of("2026-01-02") == 1
    state.save(tmp_path)
    again = DemoState.load(tmp_path)
    assert (again.api_key, again.days_done, again.open_day, again.last_day()) == (
        state.api_key,
        ["2026-01-01"],
        "2026-01-02",
        "2026-01-02",
    )
    assert stat.S_IMODE(DemoState.path(tmp_path).stat().st_mode) == 0o600
    DemoState.path(tmp_path).write_text("{not json")
    with pytest.raises(ValueError, match="delete it"):
        DemoState.load(tmp_path)


def test_instance_config_keeps_run_storage_in_dagster_home_whatever_the_cwd(tmp_path, monkeypatch) -> None:
    import dagster as dg

    from ratchet_cli.demo.runner import write_instance_config

    dagster_home = tmp_path / "dh"
    dagster_home.mkdir()
    write_instance_config(dagster_home)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        instance.get_runs()  # touches the run storage
    assert list(dagster_home.rglob("runs.db"))
    assert list(elsewhere.iterdir()) == []
    assert "enabled: false" in (dagster_home / "dagster.yaml").read_text()  # no telemetry


def _service(tmp_path: Path, name: str, code: str, port: int) -> Service:
    return Service(
        name,
        [sys.executable, "-c", code],
        dict(os.environ),
        f"http://127.0.0.1:{port}/",
        f"http://127.0.0.1:{port}",
        tmp_path / "logs" / f"{name}.log",
        port,
        ready_timeout_s=30,
    )


def test_a_service_that_dies_is_named_with_its_log_and_last_lines(tmp_path) -> None:
    sup = Supervisor()
    svc = _service(
        tmp_path, "broken", "import sys; print('cannot bind: boom', flush=True); sys.exit(3)", free_port()
    )
    sup.start(svc)
    with pytest.raises(ServiceError) as err:
        sup.wait_ready(svc)
    msg = str(err.value)
    assert "broken exited with code 3" in msg and str(svc.log_path) in msg and "cannot bind: boom" in msg
    sup.stop_all()


def test_ready_service_then_stop_all_ends_its_whole_process_group(tmp_path) -> None:
    port = free_port()
    pidfile = tmp_path / "grandchild.pid"
    code = (
        "import http.server, subprocess, sys\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(g.pid))\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler).serve_forever()\n"
    )
    sup = Supervisor()
    svc = _service(tmp_path, "server", code, port)
    sup.start(svc)
    sup.wait_ready(svc)
    assert not port_is_free(port)
    with pytest.raises(ServiceError, match="port .* is in use"):
        sup.start(_service(tmp_path, "second", "pass", port))
    grandchild = int(pidfile.read_text())
    sup.stop_all(timeout_s=10)
    assert port_is_free(port)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{grandchild}").exists() and time.monotonic() < deadline:
        # A zombie is gone for the user (it holds nothing); anything else must not survive.
        status = (
            Path(f"/proc/{grandchild}/status").read_text() if Path(f"/proc/{grandchild}").exists() else ""
        )
        if "State:\tZ" in status:
            break
        time.sleep(0.05)
    status = Path(f"/proc/{grandchild}/status").read_text() if Path(f"/proc/{grandchild}").exists() else ""
    assert status == "" or "State:\tZ" in status


def test_clock_variables_are_accepted_for_the_gateway_and_typos_still_refused(monkeypatch) -> None:
    from ratchet_cli.demo.child import accept_clock_variables
    from ratchet_core import settings

    monkeypatch.setattr(settings, "unknown_variables", settings.unknown_variables)  # restored after the test
    monkeypatch.setenv("RATCHET_DAY_SECONDS", "20")
    monkeypatch.setenv("RATCHET_CLOCK_START", "2026-01-01")
    accept_clock_variables()
    settings.load_settings()
    monkeypatch.setenv("RATCHET_DAY_SECONDSS", "20")
    with pytest.raises(settings.SettingsError, match="RATCHET_DAY_SECONDSS"):
        settings.load_settings()


def test_the_demo_passes_no_run_config_the_nightly_job_defaults_are_its_training_settings() -> None:
    import dagster as dg

    from ratchet_assets.definitions import defs
    from ratchet_cli.demo.night import NIGHT_JOB, night_run_config

    assert night_run_config(None, None, None) is None and night_run_config(0, None, None) is None
    job = defs().resolve_job_def(NIGHT_JOB)
    # With no run config the job trains with one epoch, PII surrogates and one torch thread (what the demo
    # certifies with), and min_steps keeps the trainer's floor, so one epoch still means at least that many steps.
    defaults = dg.validate_run_config(job, {})["ops"]["lora_adapter"]["config"]
    from ratchet_assets.night.adapter import config_hash
    from ratchet_assets.night.lora_trainer import LoraTrainConfig

    assert (defaults["epochs"], defaults["pii_surrogates"], defaults["num_threads"]) == (1, 0.5, 1)
    assert defaults["min_steps"] == LoraTrainConfig().min_steps > 0
    # by default the demo passes the thread count only (every CPU), which is not part of the training config's
    # hash: a UI rerun without run config reuses the night's adapter
    passed = dg.validate_run_config(job, night_run_config())["ops"]["lora_adapter"]["config"]
    assert {k: v for k, v in passed.items() if v != defaults[k]} == {"num_threads": 0}
    assert config_hash(passed) == config_hash(defaults) != config_hash({**defaults, "min_steps": 0})
    # an option given on the command line is the only thing the demo passes
    override = dg.validate_run_config(job, night_run_config(2, 0, None))["ops"]["lora_adapter"]["config"]
    assert (override["epochs"], override["min_steps"], override["pii_surrogates"]) == (2, 0, 0.5)
