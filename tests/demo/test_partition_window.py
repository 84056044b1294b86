"""The demo's home records its days, so the code location loaded on that home (the README's UI command, long after
the demo) lists exactly the demo's days as partitions, not every day up to today."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet_cli.demo.runner import DemoOptions, DemoRunner
from ratchet_core.partition_window import (
    PartitionWindow,
    PartitionWindowError,
    read_window,
    widen_window,
    write_window,
)

DEMO_DAYS = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"]

LIST_PARTITIONS = (
    "import json; from ratchet_assets.definitions import defs; d = defs(); "
    "print(json.dumps({'nightly': d.resolve_job_def('nightly').partitions_def.get_partition_keys(), "
    "'cost_report': d.resolve_assets_def('cost_report').partitions_def.get_partition_keys()}))"
)


def _loaded_partitions(home: Path, env: dict[str, str]) -> dict[str, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", LIST_PARTITIONS],
        env={**env, "RATCHET_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_definitions_loaded_on_a_demo_home_list_exactly_its_days(tmp_path, clean_env) -> None:
    home = tmp_path / "home"
    home.mkdir()
    runner = DemoRunner(DemoOptions(home=home, days=4, day_seconds=60.0, clock_start=DEMO_DAYS[0]), print)
    window = runner.partitions_window()
    assert window == PartitionWindow(DEMO_DAYS[0], DEMO_DAYS[-1])
    write_window(home, window)

    loaded = _loaded_partitions(home, clean_env)
    assert loaded == {"nightly": DEMO_DAYS, "cost_report": DEMO_DAYS}

    # A night run for a later day (the night runner widens the window) makes that day a partition too.
    widen_window(home, "2026-01-05")
    assert _loaded_partitions(home, clean_env)["nightly"] == [*DEMO_DAYS, "2026-01-05"]


def test_a_home_without_a_window_or_with_a_broken_one(tmp_path) -> None:
    assert read_window(tmp_path) is None
    assert widen_window(tmp_path, "2026-01-05") is None and read_window(tmp_path) is None
    (tmp_path / "partitions.json").write_text('{"start": "2026-01-01"}')
    with pytest.raises(PartitionWindowError, match="partitions.json.*delete it"):
        read_window(tmp_path)
    (tmp_path / "partitions.json").write_text('{"start": "2026-01-04", "end": "2026-01-01"}')
    with pytest.raises(PartitionWindowError, match="before start"):
        read_window(tmp_path)
