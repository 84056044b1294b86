"""The app owner's dashboard in a real headless browser (Debian's Chromium via playwright, as the Dagster UI test).

A real gateway on loopback with the demo teacher as teacher and as the student; a signed manifest puts `tickets`
live on the student; a client sends tickets and extract traffic; the segments are sealed. The page, opened with
the client's key in the URL fragment, shows one card per task with its stage, student share and non-empty
spend charts, and the data route answers only about the caller.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
import pytest

from ratchet_core.settings import Settings
from tests.evidence.certificates import lower_bound, sign_certificate
from tests.serve import serve_in_thread
from tests.system_packages import CHROMIUM, require

LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
KEY, OTHER = "sk-owner-0123456789", "sk-other-0123456789"
STUDENT = "v1-dash"

pytestmark = pytest.mark.slow


def _traffic(url: str) -> None:
    from ratchet_core.workloads import get_workload

    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    for task in ("tickets", "extract"):
        for ex in get_workload(task).generate(6, seed=3):
            client.chat.completions.create(
                model="ratchet", extra_headers={"X-Ratchet-Task": task}, **ex.request_body()
            )


def _certificate(path: Path, key, version: str, task: str, correct: int, n: int) -> float:
    """Sign a real evaluation certificate for one task (``tests.evidence.certificates``); returns its lower bound."""
    return lower_bound(sign_certificate(path.parent, key, version, task, correct, n, path=path), task)


def test_dashboard_shows_each_task_with_non_empty_charts(tmp_path) -> None:
    require("chromium")
    from playwright.sync_api import sync_playwright

    from ratchet_core.control_db import make_engine
    from ratchet_gateway.app import GatewayOptions, create_app
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig
    from ratchet_gateway.demo_teacher.app import create_app as demo_app
    from ratchet_stats.keys import generate_private_key
    from tests.evidence.manifests import write_signed_manifest

    with (
        serve_in_thread(demo_app(DemoTeacherConfig(model="demo-teacher"))) as teacher,
        serve_in_thread(demo_app(DemoTeacherConfig(model=STUDENT))) as student,
    ):
        settings = Settings(
            home=tmp_path / "home",
            api_keys=f"owner:{KEY},other:{OTHER}",
            teacher_model="openai/demo-teacher",
            teacher_api_base=teacher + "/v1",
            teacher_api_key="sk-teacher",
            student_base_url=student + "/v1",
            segment_seconds=3600,
            manifest_poll_seconds=0.2,
        )
        key = generate_private_key()
        app = create_app(settings, GatewayOptions(replica="gw", public_keys=[key.public_key()]))
        from ratchet_core.layout import ArtifactLayout

        bound = _certificate(
            ArtifactLayout(settings.artifacts_root).certificate(STUDENT), key, STUDENT, "tickets", 290, 300
        )
        with serve_in_thread(app) as url:
            gw = app.state.gateway
            write_signed_manifest(
                make_engine(settings.control_db_url),
                key,
                tasks={"tickets": {"stage": "live", "version": STUDENT, "threshold": 0.0}},
                flags={"audit_rate": 0.0},
            )
            deadline = time.monotonic() + 20
            while gw.manifest.task("tickets").stage != "live" and time.monotonic() < deadline:
                time.sleep(0.1)
            _traffic(url)
            gw.ledger.seal_now()
            # the application confirms one student answer: a demonstration equal to it (feedback per task and day)
            from tests.gateway.conftest import sealed_rows

            answered = next(
                r
                for r in sealed_rows(settings.lake_root)
                if r["task"] == "tickets" and r["served_by"] == "student"
            )
            item = {"feedback_id": "ok-1", "request_id": answered["request_id"], "metric": "demonstration"}
            posted = httpx.post(
                f"{url}/ratchet/feedback",
                json={**item, "value": answered["answer"]},
                headers={"Authorization": f"Bearer {KEY}"},
            )
            assert posted.status_code == 200, posted.text

            data = httpx.get(
                f"{url}/ratchet/dashboard/data", headers={"Authorization": f"Bearer {KEY}"}
            ).json()
            by_task = {t["task"]: t for t in data["tasks"]}
            assert by_task["tickets"]["stage"] == "live" and by_task["tickets"]["version"] == STUDENT
            assert (
                by_task["tickets"]["certified_bound"] == pytest.approx(bound)
                and by_task["tickets"]["bound_verified"]
            )
            assert by_task["tickets"]["student_share"] == 1.0 and by_task["extract"]["student_share"] == 0.0
            assert by_task["tickets"]["saved_usd"] > 0 and by_task["extract"]["teacher_equivalent_usd"] > 0
            other = httpx.get(f"{url}/ratchet/dashboard/data", headers={"Authorization": f"Bearer {OTHER}"})
            assert [t["requests"] for t in other.json()["tasks"]] == [
                0
            ]  # only the manifest's task, no traffic
            assert httpx.get(f"{url}/ratchet/dashboard/data").status_code == 401

            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
                try:
                    page = browser.new_page(viewport={"width": 1200, "height": 900})
                    page.goto(f"{url}/ratchet/dashboard#key={KEY}")
                    page.wait_for_selector("body[data-loaded=true]", timeout=30_000)
                    assert page.locator("section.task").count() == 2
                    tickets = page.locator("section.task[data-task=tickets]")
                    assert "live" in tickets.inner_text() and "100.0%" in tickets.inner_text()
                    assert f"{bound:.3f} ✓" in tickets.inner_text()
                    assert "0 of 1 (0.0%)" in tickets.locator("table.feedback").inner_text()
                    # Non-empty charts: every card draws its day's bars with a real height.
                    heights = page.eval_on_selector_all(
                        "svg.chart rect.bar.te", "els => els.map(e => e.getBBox().height)"
                    )
                    assert len(heights) == 2 and min(heights) > 20
                    assert KEY not in page.url  # the key left the address bar
                    shot = tmp_path / "dashboard.png"
                    page.screenshot(path=str(shot), full_page=True)
                    assert shot.stat().st_size > 10_000
                finally:
                    browser.close()
