"""The Dagster UI tells the story: partitions start at the first day with traffic (or the configured start), the
night's schedule runs by default, and the numeric metadata series plot per partition (screenshot-checked in
Debian Chromium: the plots' canvases hold drawn pixels)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ratchet_core.settings import Settings
from tests.system_packages import CHROMIUM, require

DAYS = ["2026-04-01", "2026-04-02", "2026-04-03"]


def test_partitions_start_at_the_first_day_with_traffic_or_the_configured_start(tmp_path: Path) -> None:
    from ratchet_assets.defs.partitions import DEFAULT_START, partitions_start
    from ratchet_assets.night.fixtures import write_day

    home = tmp_path / "home"
    assert partitions_start(Settings(home=home)) == DEFAULT_START  # no traffic yet
    write_day(home / "lake", DAYS[1], 10, seed=1)
    write_day(home / "lake", DAYS[0], 10, seed=2)
    assert partitions_start(Settings(home=home)) == DAYS[0]
    assert partitions_start(Settings(home=home, partitions_start="2026-03-15")) == "2026-03-15"


def test_the_nightly_schedule_runs_by_default() -> None:
    import dagster as dg

    from ratchet_assets.definitions import defs
    from ratchet_assets.defs.jobs import nightly_schedule

    assert nightly_schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    loaded = defs()
    assert loaded.get_schedule_def("nightly_schedule").default_status == dg.DefaultScheduleStatus.RUNNING
    assert loaded.resolve_assets_def("cost_report") is not None


NIGHT_PATH = [
    "traffic", "examples", "golden_split", "training_set", "lora_adapter", "evaluation_certificate", "bom",
    "daily_receipt", "cost_report",
]  # fmt: skip


def test_the_nightly_path_is_one_group_and_the_nightly_job_runs_all_of_it() -> None:
    from ratchet_assets.definitions import defs

    loaded = defs()
    graph = loaded.resolve_asset_graph()
    groups = {k.to_user_string(): graph.get(k).group_name for k in graph.get_all_asset_keys()}
    assert groups == {**dict.fromkeys(NIGHT_PATH, "night"), "retention": "governance"}
    nightly = loaded.resolve_job_def("nightly")
    assert sorted(k.to_user_string() for k in nightly.asset_layer.executable_asset_keys) == sorted(NIGHT_PATH)


def test_the_partitions_window_setting_and_the_schedule_skip_days_outside_it(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    import dagster as dg

    from ratchet_assets.definitions import defs
    from ratchet_assets.defs.partitions import UI_PLOT_PARTITIONS, build_daily_partitions

    window = build_daily_partitions(
        Settings(home=tmp_path, partitions_start=DAYS[0], partitions_end=DAYS[-1])
    )
    assert window.get_partition_keys() == DAYS
    # Without an end, the newest 120 keys (what the UI's Partitions plots graph) end at yesterday: in this
    # wall-clock year, far past these days, so the plots would show none of them.
    open_ended = build_daily_partitions(Settings(home=tmp_path, partitions_start=DAYS[0]))
    newest = open_ended.get_partition_keys()[-UI_PLOT_PARTITIONS:]
    assert newest[-1] == (datetime.now(UTC).date() - timedelta(days=1)).isoformat()
    assert not set(DAYS) & set(newest)

    loaded = defs()
    sched = loaded.get_schedule_def("nightly_schedule")

    def tick(when: str):
        ctx = dg.build_schedule_context(
            scheduled_execution_time=datetime.fromisoformat(when).replace(tzinfo=UTC),
            repository_def=loaded.get_repository_def(),
        )
        return sched.evaluate_tick(ctx)

    ran = tick("2026-04-03T02:00:00")
    assert [(r.run_key, r.partition_key) for r in ran.run_requests] == [("2026-04-02", "2026-04-02")]
    before = tick("2025-06-02T02:00:00")  # the day before the tick is before the partitions' start
    assert not before.run_requests and "not a night partition" in before.skip_message


def test_the_accelerated_demo_sets_the_partitions_to_its_own_days(tmp_path: Path, monkeypatch) -> None:
    from ratchet_cli.demo.runner import DemoOptions, DemoRunner
    from ratchet_core.partition_window import PartitionWindow

    real = DemoRunner(DemoOptions(home=tmp_path, days=4), echo=print)
    assert real.partitions_window() is None
    fast = DemoRunner(
        DemoOptions(home=tmp_path, days=4, day_seconds=60, clock_start="2026-01-01"), echo=print
    )
    assert fast.partitions_window() == PartitionWindow("2026-01-01", "2026-01-04")
    # the window is the home's (tests/demo/test_partition_window.py), not the services' environment
    assert "RATCHET_PARTITIONS_END" not in fast.base_env()
    # the release sensor ticks a tenth of an accelerated day (6 s of a 60 s day), real days keep its 15 s, and an
    # operator's own tick is kept
    monkeypatch.delenv("RATCHET_RELEASE_TICK_SECONDS", raising=False)
    assert fast.base_env()["RATCHET_RELEASE_TICK_SECONDS"] == "6"
    assert "RATCHET_RELEASE_TICK_SECONDS" not in real.base_env()
    monkeypatch.setenv("RATCHET_RELEASE_TICK_SECONDS", "30")
    assert fast.base_env()["RATCHET_RELEASE_TICK_SECONDS"] == "30"
    # resumed with --days 6 after two nights and an interrupted third day: the window covers all six
    fast.o.days = 6
    fast.state.days_done, fast.state.open_day = ["2026-01-01", "2026-01-02"], "2026-01-03"
    assert fast.partitions_window() == PartitionWindow("2026-01-01", "2026-01-06")


def _drawn_series_pixels(page) -> list[int]:
    """Per chart canvas, the pixels drawn in the series' blue (points and the lines between them; the axes, grid and
    labels are grey). A series of one point draws ~30 such pixels; a line between two partitions hundreds."""
    return page.evaluate(
        """() => [...document.querySelectorAll('canvas')].map(c => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4)
                if (d[i + 3] > 100 && d[i + 2] > 150 && d[i + 2] - d[i] > 60 && d[i + 2] - d[i + 1] > 25) n++;
            return n; })"""
    )


@pytest.mark.slow
def test_the_numeric_series_plot_per_partition_in_the_ui(tmp_path: Path, monkeypatch) -> None:
    """The asset's Plots, Partitions view (the default for a partitioned asset): one point per partition, joined by a
    line, for three nights of 2026-04 (far before the wall clock: the window setting puts them in the view)."""
    require("chromium")
    import os

    import dagster as dg
    from playwright.sync_api import sync_playwright

    from ratchet_assets.defs.cost_report import cost_report
    from ratchet_assets.defs.resources import night_resources
    from ratchet_assets.night.fixtures import write_day
    from ratchet_cli.demo.runner import write_instance_config
    from ratchet_cli.demo.supervisor import Service, Supervisor
    from ratchet_stats.keys import generate_private_key, save_private_key
    from tests.serve import free_port

    home = tmp_path / "home"
    save_private_key(generate_private_key(), home / "keys" / "signing.key")
    for i, day in enumerate(DAYS):
        write_day(home / "lake", day, 40 + 40 * i, seed=i, student_share=0.2 + 0.2 * i)
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    write_instance_config(dagster_home)
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        for day in DAYS:
            assert dg.materialize(
                [cost_report], partition_key=day, instance=instance, resources=night_resources(home)
            ).success

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_") and k != "DAGSTER_HOME"}
    env.update(DAGSTER_HOME=str(dagster_home), RATCHET_HOME=str(home), LITELLM_LOCAL_MODEL_COST_MAP="True",
               RATCHET_PARTITIONS_START=DAYS[0], RATCHET_PARTITIONS_END=DAYS[-1])  # fmt: skip
    web = Service(
        "dagster webserver",
        [str(Path(sys.executable).with_name("dagster-webserver")), "-f", str(Path(__file__).with_name("ui_defs.py")),
         "-h", "127.0.0.1", "-p", str(port)],
        env, f"http://127.0.0.1:{port}/server_info", f"http://127.0.0.1:{port}", tmp_path / "webserver.log", port,
        ready_timeout_s=120, cwd=dagster_home,
    )  # fmt: skip
    sup = Supervisor()
    shots = {view: tmp_path / f"cost-plots-{view}.png" for view in ("partitions", "events")}
    drawn: dict[str, list[int]] = {}
    bodies: dict[str, str] = {}
    try:
        sup.start(web)
        sup.wait_ready(web)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
            )
            try:
                page = browser.new_page(viewport={"width": 1600, "height": 2400})
                for _ in range(24):  # until the code location has loaded (the asset shows its tabs)
                    page.goto(f"{web.url}/assets/cost_report?view=overview")
                    page.wait_for_timeout(5000)
                    if "External Asset" not in page.inner_text("body"):
                        break
                skip = page.get_by_role("button", name="Skip")  # Dagster's first-visit newsletter prompt
                if skip.count() and skip.first.is_visible():
                    skip.first.click()
                try:
                    page.get_by_text("Plots", exact=True).first.click(
                        timeout=60_000
                    )  # metadata: Table | Plots
                    # the Partitions view is the default; its footnote only shows when it graphs something
                    page.get_by_text("When graphing values by partition").first.wait_for(timeout=90_000)
                    page.get_by_text("saved_usd").first.wait_for(timeout=30_000)
                    page.wait_for_timeout(2000)
                    drawn["partitions"] = _drawn_series_pixels(page)
                    bodies["partitions"] = page.inner_text("body")
                    page.screenshot(path=str(shots["partitions"]), full_page=True)
                    page.get_by_role("button", name="Events").first.click(timeout=30_000)  # series over time
                    page.get_by_text("When graphing values by partition").first.wait_for(
                        state="detached", timeout=30_000
                    )
                    page.get_by_text("saved_usd").first.wait_for(timeout=90_000)
                    page.wait_for_timeout(2000)
                    drawn["events"] = _drawn_series_pixels(page)
                    bodies["events"] = page.inner_text("body")
                    page.screenshot(path=str(shots["events"]), full_page=True)
                except Exception:
                    page.screenshot(path=str(tmp_path / "ui-failure.png"), full_page=True)
                    raise AssertionError(page.inner_text("body")[:3000]) from None
            finally:
                browser.close()
    finally:
        sup.stop_all(timeout_s=20)
    for view in ("partitions", "events"):
        assert shots[view].stat().st_size > 20_000
        for name in ("saved_usd", "student_share", "training_seconds", "total_cost_usd"):
            assert name in bodies[view], bodies[view][:3000]
        # every numeric series is a chart whose points are joined by lines: >= 2 partitions (events) drawn in each
        assert len(drawn[view]) >= 4 and all(n > 150 for n in drawn[view]), (view, drawn[view])
