"""The night in Dagster: two consecutive days, safe reruns (one signature), the sensor, and the CI command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from ratchet_assets.defs.daily_receipt import daily_receipt
from ratchet_assets.defs.examples import examples
from ratchet_assets.defs.golden_split import golden_split
from ratchet_assets.defs.resources import night_resources
from ratchet_assets.defs.traffic import traffic
from ratchet_assets.defs.training_set import training_set
from ratchet_core.control_db import make_engine
from ratchet_stats.keys import load_public_key
from ratchet_stats.receipt import verify_receipt

from .conftest import DAY1, DAY2, tree_digest

ASSETS = [traffic, examples, golden_split, training_set, daily_receipt]


def _night(home: Path, day: str, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    return dg.materialize(ASSETS, partition_key=day, instance=instance, resources=night_resources(home))


def _meta(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_the_code_location_loads_without_scipy() -> None:
    """Every process a Dagster run starts (a step of the default executor, the code server, the daemon) loads the
    code location first: it must not import scipy (~0.5 s a process), which only the steps that compute a bound
    use (``ratchet_stats.bounds`` imports it inside those functions)."""
    code = (
        "import sys, ratchet_assets.definitions as d; d.defs(); "
        "print(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout[-2000:]


def test_two_days_then_three_reruns_of_day_one_are_identical_with_one_signature(two_days: Path) -> None:
    home = two_days
    instance = dg.DagsterInstance.ephemeral()
    first = _night(home, DAY1, instance)
    assert first.success
    checks = {e.check_name: e.passed for e in first.get_asset_check_evaluations()}
    assert checks["training_set_disjoint_from_golden"] is True and checks["no_indeterminate_effects"] is True
    assert _meta(first, "daily_receipt")["signature"] == "new"
    artifacts = home / "artifacts"
    snapshot = {
        sub: tree_digest(artifacts, sub) for sub in ("traffic", "examples", "golden", "train", "receipts")
    }
    roots = {
        "golden": _meta(first, "golden_split")["golden_root"],
        "train": _meta(first, "training_set")["rows_root"],
        "receipt": _meta(first, "daily_receipt")["root"],
    }
    assert _night(home, DAY2, instance).success
    day2 = json.loads((artifacts / "receipts" / DAY2 / "receipt.dsse.json").read_bytes())

    for _ in range(3):
        rerun = _night(home, DAY1, instance)
        assert rerun.success
        assert _meta(rerun, "daily_receipt")["signature"] == "reused"
        assert {
            "golden": _meta(rerun, "golden_split")["golden_root"],
            "train": _meta(rerun, "training_set")["rows_root"],
            "receipt": _meta(rerun, "daily_receipt")["root"],
        } == roots
        for sub in ("traffic", "examples", "train", "receipts"):
            now = {k: v for k, v in tree_digest(artifacts, sub).items() if DAY1 in k}
            assert now == {k: v for k, v in snapshot[sub].items() if DAY1 in k}, sub

    engine = make_engine(f"sqlite:///{(home / 'control.db').as_posix()}")
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT key, status, attempts FROM effects ORDER BY key")).all()
    assert [tuple(r) for r in rows] == [(f"receipt:{DAY1}", "done", 1), (f"receipt:{DAY2}", "done", 1)]

    # Day 2 chains to day 1, and both verify offline with the public key alone.
    pub = load_public_key((home / "keys" / "signing.pub").read_text())
    day1 = (artifacts / "receipts" / DAY1 / "receipt.dsse.json").read_bytes()
    clients = (artifacts / "receipts" / DAY2 / "clients.jsonl").read_bytes().splitlines()
    report = verify_receipt(day2, pub, prev_envelope=day1, clients=clients)
    assert report["checks"] == ["signature", "predicate", "chain", "clients"]


def test_changed_traffic_for_a_signed_day_is_refused_not_signed_again(two_days: Path) -> None:
    from ratchet_assets.night.fixtures import write_day

    home = two_days
    instance = dg.DagsterInstance.ephemeral()
    assert _night(home, DAY1, instance).success
    envelope = (home / "artifacts" / "receipts" / DAY1 / "receipt.dsse.json").read_bytes()
    write_day(home / "lake", DAY1, 5, seed=99, replicas=("r9",), seal_next_day=False)  # a late replica
    result = dg.materialize(
        ASSETS, partition_key=DAY1, instance=instance, resources=night_resources(home), raise_on_error=False
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "already signed" in str(failure.event_specific_data.error) and "never signs a day twice" in str(
        failure.event_specific_data.error
    )
    assert (home / "artifacts" / "receipts" / DAY1 / "receipt.dsse.json").read_bytes() == envelope


def test_sensor_starts_complete_days_in_order_with_run_keys_and_cursor(two_days: Path, monkeypatch) -> None:
    from datetime import UTC, datetime

    from ratchet_assets.defs import sensors
    from ratchet_assets.defs.jobs import nightly
    from ratchet_assets.defs.sensors import night_segments_sensor

    monkeypatch.setattr(sensors, "clock_now", lambda: datetime(2026, 1, 3, 0, 30, tzinfo=UTC))

    resources = night_resources(two_days)
    # The night's own definitions (the full code location also holds other teams' assets).
    defs = dg.Definitions(assets=ASSETS, jobs=[nightly], sensors=[night_segments_sensor], resources=resources)
    with dg.build_sensor_context(
        instance=dg.DagsterInstance.ephemeral(), cursor="", definitions=defs, resources=resources
    ) as ctx:
        result = night_segments_sensor(ctx)
    # Day 1 and day 2 are complete (every replica sealed a later segment); day 3 has only just begun.
    assert [r.run_key for r in result.run_requests] == [f"night-{DAY1}", f"night-{DAY2}"]
    assert [r.partition_key for r in result.run_requests] == [DAY1, DAY2]
    assert result.cursor == DAY2
    with dg.build_sensor_context(
        instance=dg.DagsterInstance.ephemeral(), cursor=DAY2, definitions=defs, resources=resources
    ) as ctx:
        idle = night_segments_sensor(ctx)
    assert isinstance(idle, dg.SkipReason) and DAY2 in idle.skip_message


def test_sensor_waits_for_a_replica_that_has_not_rolled_over(home: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from ratchet_assets.defs.sensors import complete_days
    from ratchet_assets.night.fixtures import write_day

    write_day(home / "lake", DAY1, 20, seed=1, seal_next_day=False)
    end = datetime(2026, 1, 2, tzinfo=UTC)
    grace = timedelta(minutes=60)
    assert complete_days(home / "lake", "", end + timedelta(minutes=5), grace, DAY1) == []
    assert complete_days(home / "lake", "", end + timedelta(minutes=61), grace, DAY1) == [DAY1]


@pytest.mark.slow
def test_ci_command_materialises_a_partition_on_a_fresh_dagster_home(two_days: Path, tmp_path: Path) -> None:
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")},
        "DAGSTER_HOME": str(dagster_home),
        "RATCHET_HOME": str(two_days),
    }
    cmd = [
        str(Path(sys.executable).with_name("dagster")),
        "asset",
        "materialize",
        "-m",
        "ratchet_assets.definitions",
        "--select",
        "traffic,examples,golden_split,training_set,daily_receipt",
        "--partition",
        DAY1,
        "--config-json",
        '{"execution": {"config": {"in_process": {}}}}',
    ]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert (
        f"--select '{cmd[6]}' --partition" in readme and f"--config-json '{cmd[-1]}'" in readme
    )  # as it says
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    art = two_days / "artifacts"
    # Small fixture day: the per-task certification floor makes most keys golden; both sets are written.
    assert (art / "train" / f"day={DAY1}" / "train.jsonl").exists()
    assert (art / "golden" / f"day={DAY1}" / "keys.txt").read_text().strip()
    assert (two_days / "artifacts" / "receipts" / DAY1 / "receipt.dsse.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(1800)  # one real training with the night's defaults (150 steps) and two evaluations
def test_a_ui_rerun_without_run_config_reuses_the_demo_nights_adapter(home: Path, tmp_path: Path) -> None:
    """The demo runs a night as ``python -m ratchet_cli.demo.night DAY OUT RUN_CONFIG`` passing only the torch thread
    count (lora_adapter's defaults are its training settings); "Materialize all" from the UI, i.e. ``dagster asset materialize --select
    '*'`` without op config, must then reuse that adapter: one training launch in the effect ledger.

    The rerun's run config names only the executor, in process: what a step computes and which config it gets are
    the same in either executor, and the UI's default (a process per step, each loading the code location) spent
    ~40 of this test's ~100 s starting processes (11 steps, ~4 s each)."""
    from ratchet_assets.effects import EffectLedger
    from ratchet_assets.night.fixtures import write_day
    from ratchet_cli.demo.night import night_run_config
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_gateway.student_server.app import create_app
    from tests.serve import serve_in_thread

    demo_config = night_run_config()  # what the demo passes with its default options: the thread count only
    # A small day (59 golden and 26 training rows): the defaults still train at least min_steps steps, most of them
    # on a small batch, and whether the night certifies does not matter here (the rerun must do what it did)
    write_day(home / "lake", DAY1, 100, seed=5, workload="tickets", student_share=0.0)
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    base = ensure_demo_base(home / "models" / "demo-base")
    summary_path = tmp_path / "night.json"
    with serve_in_thread(create_app(base)) as url:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("RATCHET_") and k != "DAGSTER_HOME"},
            "DAGSTER_HOME": str(dagster_home),
            "RATCHET_HOME": str(home),
            "RATCHET_STUDENT_BASE_URL": f"{url}/v1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        night = subprocess.run(
            [sys.executable, "-m", "ratchet_cli.demo.night", DAY1, str(summary_path), json.dumps(demo_config)],
            env=env, capture_output=True, text=True, timeout=1500, cwd=dagster_home,
        )  # fmt: skip
        summary = json.loads(summary_path.read_text())
        assert "lora_adapter" in summary["materialised"], night.stderr[-3000:]
        assert summary["materialised"]["lora_adapter"]["reused"] is False
        version = summary["materialised"]["lora_adapter"]["version"]
        certificate = (home / "artifacts" / "certificates" / f"{version}.dsse.json").read_bytes()
        in_process = tmp_path / "in_process.yaml"  # the executor only: no op's config
        in_process.write_text(json.dumps({"execution": {"config": {"in_process": {}}}}))
        rerun = subprocess.run(
            [str(Path(sys.executable).with_name("dagster")), "asset", "materialize", "-m",
             "ratchet_assets.definitions", "--select", "*", "--partition", DAY1, "-c", str(in_process)],
            env=env, capture_output=True, text=True, timeout=1500, cwd=dagster_home,
        )  # fmt: skip
    why = f"night failures: {summary['failures']}; rerun: {rerun.stderr[-2000:]}"
    ledger = EffectLedger(make_engine(f"sqlite:///{(home / 'control.db').as_posix()}"))
    launches = ledger.list_effects(effect_type="training.launch")
    assert [(e.status, e.attempts) for e in launches] == [("done", 1)], why
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        records = instance.fetch_materializations(dg.AssetKey("lora_adapter"), limit=10).records
    [again] = [r for r in records if r.run_id != summary["run_id"]] or [None]
    assert again is not None, why  # the UI-equivalent run materialised lora_adapter ...
    meta = again.asset_materialization.metadata
    assert meta["reused"].value is True and meta["version"].value == version  # ... by reusing the adapter
    # The rerun succeeds exactly when the night did (a night that certifies nothing stops at the blocking check),
    # and with the same adapter, golden rows and key its certificate is the night's, byte for byte.
    assert (rerun.returncode == 0) == summary["success"], why
    assert (home / "artifacts" / "certificates" / f"{version}.dsse.json").read_bytes() == certificate
