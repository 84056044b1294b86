"""Browser check: a night materialised into a DAGSTER_HOME shows in the Dagster UI's global asset lineage, the whole
nightly path unfolded in one view.

Materialises traffic -> examples -> golden_split -> training_set and daily_receipt for one day of fixture traffic
into the instance of a temp DAGSTER_HOME, starts `dagster-webserver -w workspace.yaml` on a free loopback port
over that instance, opens the global lineage (Lineage in the left bar) in headless Debian Chromium (playwright, no
browser download) with the `night` group expanded, and asserts every asset from traffic to the receipt, the BOM and
the cost report is drawn as its own node in that one view (the materialised ones with a latest event), then saves a
screenshot.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from ratchet_cli.demo.runner import REPO_ROOT, write_instance_config
from ratchet_cli.demo.supervisor import Service, Supervisor
from tests.system_packages import CHROMIUM, require

DAY = "2026-01-01"
NIGHT_ASSETS = ["traffic", "examples", "golden_split", "training_set", "daily_receipt"]  # materialised here
NIGHT_PATH = [*NIGHT_ASSETS, "lora_adapter", "evaluation_certificate", "bom", "cost_report"]  # group `night`
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.slow


def _materialise_night(home: Path, dagster_home: Path) -> None:
    import dagster as dg

    from ratchet_assets.defs.daily_receipt import daily_receipt
    from ratchet_assets.defs.examples import examples
    from ratchet_assets.defs.golden_split import golden_split
    from ratchet_assets.defs.resources import night_resources
    from ratchet_assets.defs.traffic import traffic
    from ratchet_assets.defs.training_set import training_set

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        result = dg.materialize(
            [traffic, examples, golden_split, training_set, daily_receipt],
            partition_key=DAY,
            instance=instance,
            resources=night_resources(home),
        )
        assert result.success
        # Stored in the instance the webserver will read (not an ephemeral one).
        assert {k.to_user_string() for k in instance.get_asset_keys()} >= set(NIGHT_ASSETS)


def _node_events(body: str) -> dict[str, str]:
    """Asset name -> the text after its node's 'Latest event' label, from the lineage page's text."""
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    out = {}
    for i, line in enumerate(lines[:-2]):
        if line in NIGHT_PATH and lines[i + 1] == "Latest event":
            out[line] = lines[i + 2]
    return out


def _skip_newsletter(page) -> None:
    """Dismiss Dagster's first-visit newsletter prompt (it opens a moment after the first page)."""
    skip = page.get_by_role("button", name="Skip")
    try:
        skip.first.wait_for(state="visible", timeout=5000)
        skip.first.click()
    except Exception:  # playwright's TimeoutError: not shown this time
        pass


def _drawn_nodes(body: str) -> set[str]:
    """Names of the nightly path's nodes drawn in the page's text; zoomed out, the UI shortens a long name in the
    middle ("evalu…_certificate")."""
    lines = {line.strip() for line in body.splitlines() if line.strip()}
    out = set()
    for name in NIGHT_PATH + ["retention"]:
        for line in lines:
            head, sep, tail = line.partition("…")
            if line == name or (sep and head and name.startswith(head) and name.endswith(tail)):
                out.add(name)
    return out


def _wait_for_nodes(page, deadline_s: float) -> str:
    """The page text once every node of the nightly path is drawn."""
    deadline = time.monotonic() + deadline_s
    while True:
        body = page.inner_text("body")
        if _drawn_nodes(body) >= set(NIGHT_PATH) or time.monotonic() > deadline:
            return body
        page.wait_for_timeout(500)


def _wait_for_materialised(page, deadline_s: float) -> str:
    """The page text once every node of the night is drawn and the materialised ones show a latest event time
    (statuses load after the nodes)."""
    deadline = time.monotonic() + deadline_s
    while True:
        body = page.inner_text("body")
        events = _node_events(body)
        if set(events) == set(NIGHT_PATH) and all(events[n].endswith("ago") for n in NIGHT_ASSETS):
            return body
        if time.monotonic() > deadline:
            return body  # the assertions below say what is missing
        page.wait_for_timeout(500)


def test_the_nights_assets_show_materialised_in_the_asset_graph(
    keyed_home, clean_env, ports, tmp_path, monkeypatch
) -> None:
    require("chromium")
    from playwright.sync_api import sync_playwright

    from ratchet_assets.night.fixtures import write_day

    write_day(keyed_home / "lake", DAY, 40, seed=1)
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    write_instance_config(dagster_home)
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))  # the instance file may read it
    _materialise_night(keyed_home, dagster_home)

    port = ports[0]
    workspace = REPO_ROOT / "workspace.yaml"
    where = ["-w", str(workspace)] if workspace.exists() else ["-m", "ratchet_assets.definitions"]
    location = "ratchet" if workspace.exists() else "ratchet_assets.definitions"
    env = {**clean_env, "DAGSTER_HOME": str(dagster_home), "RATCHET_HOME": str(keyed_home)}
    webserver = Service(
        "dagster webserver",
        [
            str(Path(sys.executable).with_name("dagster-webserver")),
            *where,
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        env,
        f"http://127.0.0.1:{port}/server_info",
        f"http://127.0.0.1:{port}",
        tmp_path / "webserver.log",
        port,
        ready_timeout_s=120,
        cwd=dagster_home,
    )
    sup = Supervisor()
    try:
        sup.start(webserver)
        sup.wait_ready(webserver)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1600, "height": 1000})
                # 1. The global lineage (Lineage in the left bar) draws each group as a box; the nightly path is
                # one group, expanded here as a click on its box does (the group id is global@global:night, or
                # repo@location:night with per-location groups). Zoomed to fit, nodes show their names only.
                expanded = f"global@global:night,__repository__@{location}:night"
                page.goto(f"{webserver.url}/asset-groups?expanded={expanded}")
                page.get_by_text("traffic", exact=True).first.wait_for(timeout=120_000)  # the location loaded
                global_body = _wait_for_nodes(page, deadline_s=60)
                _skip_newsletter(page)
                global_shot = tmp_path / "global-lineage.png"
                page.screenshot(path=str(global_shot))
                # 2. The group's own lineage, wide enough that every node shows its latest event.
                page.set_viewport_size({"width": 2400, "height": 1000})
                page.goto(f"{webserver.url}/locations/{location}/asset-groups/night/lineage")
                for name in NIGHT_PATH:
                    page.get_by_text(name, exact=True).first.wait_for(timeout=120_000)
                body = _wait_for_materialised(page, deadline_s=90)
                _skip_newsletter(page)
                shot = tmp_path / "night-lineage.png"
                page.screenshot(path=str(shot))
            finally:
                browser.close()
    finally:
        sup.stop_all(timeout_s=20)

    assert global_shot.stat().st_size > 10_000 and shot.stat().st_size > 10_000
    # The global lineage: every asset of the nightly path is a node of the one expanded group, retention stays in
    # the folded governance box.
    drawn = _drawn_nodes(global_body)
    assert drawn >= set(NIGHT_PATH), (sorted(set(NIGHT_PATH) - drawn), global_body[:2000])
    assert "governance" in global_body and "retention" not in drawn
    events = _node_events(body)
    # Every asset of the nightly path is its own node in the one view, from traffic to receipt, BOM and cost.
    assert set(events) == set(NIGHT_PATH), body[:2000]
    # A materialised node shows when ("12 seconds ago"); a never-materialised one shows a dash.
    for name, when in events.items():
        assert when.endswith("ago") == (name in NIGHT_ASSETS), f"{name}: latest event {when!r}"
    assert "retention" not in events  # governance: not a node of the night


def test_node_name_parser_reads_shortened_names() -> None:
    body = "night\ntraffic\nevalu…_certificate\nbom\nevalu…_x\n"
    assert _drawn_nodes(body) == {"traffic", "evaluation_certificate", "bom"}


def test_node_event_parser_reads_the_lineage_text() -> None:
    body = "night\ntraffic\nLatest event\n31 seconds ago\nAsset checks\nexamples\nLatest event\n–\n"
    assert _node_events(body) == {"traffic": "31 seconds ago", "examples": "–"}
