"""The settings contract (``ratchet_core.settings``): clear errors naming the variable, locations that follow the
home, the accelerated clock, and no module reading a ``RATCHET_*`` variable around the settings.

(`ratchet config check`, which reports the same errors, is tested in tests/cli/test_console_script.py.)
"""

from __future__ import annotations

import pytest

from ratchet_core.settings import SettingsError, load_settings


def test_invalid_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv("RATCHET_SEGMENT_SECONDS", "soon")
    monkeypatch.setenv("RATCHET_SEGMNT_SECONDS", "5")
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert "RATCHET_SEGMENT_SECONDS" in message
    assert "RATCHET_SEGMNT_SECONDS: unknown setting" in message


def test_derived_locations_follow_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "h"))
    s = load_settings()
    assert s.lake_root == str(tmp_path / "h" / "lake")
    assert s.control_db_url == f"sqlite:///{tmp_path / 'h' / 'control.db'}"
    monkeypatch.setenv("RATCHET_LAKE", "s3://bucket/lake")
    assert load_settings().lake_root == "s3://bucket/lake"


def test_the_accelerated_clock_is_configured_through_the_settings(tmp_path, monkeypatch):
    from ratchet_core import clock
    from ratchet_core.settings import clock_settings

    monkeypatch.setenv("RATCHET_HOME", str(tmp_path))
    monkeypatch.setenv("RATCHET_DAY_SECONDS", "0")
    with pytest.raises(SettingsError, match="RATCHET_DAY_SECONDS"):
        load_settings()
    with pytest.raises(SettingsError, match="RATCHET_DAY_SECONDS"):
        clock.now()
    monkeypatch.setenv("RATCHET_DAY_SECONDS", "86400")
    monkeypatch.setenv("RATCHET_CLOCK_START", "2026-05-01")
    s = load_settings()  # known settings now, not "unknown variable" typos
    assert (s.day_seconds, s.clock_start) == (86400.0, "2026-05-01")
    assert clock_settings() == (86400.0, "2026-05-01", tmp_path)
    assert clock.today().isoformat() == "2026-05-01"  # a real-time-speed day that started just now


def test_no_module_reads_a_ratchet_variable_around_the_settings():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    read = re.compile(
        r"""os\.environ\.get\(\s*["']RATCHET_|os\.getenv\(\s*["']RATCHET_|os\.environ\[["']RATCHET_\w*["']\](?!\s*=)"""
    )
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for package in ("ratchet_core", "ratchet_gateway", "ratchet_assets", "ratchet_stats", "ratchet_cli")
        for path in sorted((root / package).rglob("*.py"))
        if path.name != "settings.py" or path.parent.name != "ratchet_core"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if read.search(line)
    ]
    assert offenders == [], "read RATCHET_* through ratchet_core.settings, not os.environ"


def test_service_tiers_are_tier_names(tmp_path, monkeypatch):
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("RATCHET_SERVICE_TIERS", " priority, flex ,priority")
    assert load_settings().allowed_service_tiers == {"flex", "priority"}
    monkeypatch.setenv("RATCHET_SERVICE_TIERS", "priority,../x")
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert "RATCHET_SERVICE_TIERS" in str(info.value)


@pytest.mark.parametrize("value", ["0", "-5", "3601", "1.5", "soon", ""])
def test_the_release_tick_refuses_what_is_no_interval(tmp_path, monkeypatch, value):
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path))
    monkeypatch.setenv("RATCHET_RELEASE_TICK_SECONDS", value)
    with pytest.raises(SettingsError, match="RATCHET_RELEASE_TICK_SECONDS"):
        load_settings()


def test_the_release_sensor_ticks_as_configured_when_the_code_location_loads(tmp_path):
    import os
    import subprocess
    import sys

    probe = "from ratchet_assets.defs.release_sensors import release_promotion_sensor as s; print(s.minimum_interval_seconds)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    env["RATCHET_HOME"] = str(tmp_path)
    default = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    env["RATCHET_RELEASE_TICK_SECONDS"] = "5"
    fast = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert (default.stdout.strip(), fast.stdout.strip()) == ("15", "5")
