"""The gateway's own pages in a real headless browser (Debian's Chromium via playwright, as the dashboard's test).

A real gateway on loopback with the demo teacher; a signed manifest with a live task, a canary beside a live
version, and a task and version whose names are markup (signed before the name rule, still served). The landing
page shows the APIs to anyone and the tasks, models and evidence (a real signed receipt, a BOM) once the key is
entered; its links answer. Scout's page runs a question through the gateway to the report that Scout's Python
team writes for it. No page breaks its Content-Security-Policy (the check is shown catching a violation).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.gateway.conftest import API_KEY, running_gateway
from tests.gateway.conftest import teacher_url as teacher_url  # noqa: F401 (fixture)
from tests.system_packages import CHROMIUM, require

pytestmark = pytest.mark.slow

LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
DAY = "2026-01-02"
HOSTILE_TASK = "<img src=x onerror=\"document.title='pwned'\">"
HOSTILE_VERSION = '"><script>document.title="pwned"</script>'
QUESTION = "how do heat pumps compare with gas boilers?"


@pytest.fixture(scope="module")
def g(tmp_path_factory, teacher_url):  # noqa: F811 (the fixture imported above)
    with running_gateway(tmp_path_factory.mktemp("pages"), teacher_url) as gateway:
        yield gateway


class Browser:
    """One Chromium page that records every console message and page error."""

    def __init__(self, page) -> None:
        self.page = page
        self.console: list[str] = []
        self.errors: list[str] = []
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def csp_violations(self) -> list[str]:
        return [m for m in self.console if "Content Security Policy" in m]

    def shot(self, path: Path) -> Path:
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 10_000  # a rendered page, not a blank one
        return path

    def assert_clean(self) -> None:
        assert self.csp_violations() == [] and self.errors == []
        # The check sees violations: an inline style is refused and reported.
        with self.page.expect_console_message(lambda m: "Content Security Policy" in m.text, timeout=10_000):
            self.page.evaluate("document.body.setAttribute('style', 'color: red')")
        assert self.csp_violations(), "a CSP violation went unseen"


@contextmanager
def browser() -> Iterator[Browser]:
    require("chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            context = chromium.new_context(viewport={"width": 1200, "height": 900}, accept_downloads=True)
            yield Browser(context.new_page())
        finally:
            chromium.close()


def _evidence(g) -> None:
    """A real signed receipt for DAY (the night's own functions over a written day) and a BOM for v1-live."""
    from ratchet_assets.effects import EffectLedger
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.receipts import build_receipt
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_core.control_db import make_engine
    from ratchet_stats.dsse import sign_envelope

    art = g.settings.artifacts_root
    write_day(g.settings.lake_root, DAY, 40, seed=4, clients=("app1", "app2"), student_share=0.5)
    consolidate_traffic(g.settings.lake_root, art, DAY)
    ledger = EffectLedger(make_engine(f"sqlite:///{(g.settings.home / 'night.db').as_posix()}"))
    build_receipt(art, DAY, g.private_key, ledger, teacher_model="openai/demo-teacher")
    bom = g.gw.artifacts.bom("v1-live")
    bom.parent.mkdir(parents=True, exist_ok=True)
    bom.write_text(json.dumps(sign_envelope(b'{"bomFormat": "CycloneDX"}', g.private_key)))


def test_landing_page_shows_the_apis_to_anyone_and_the_tasks_with_the_key(g, tmp_path) -> None:
    g.publish(
        tickets={"stage": "live", "version": "v1-live", "threshold": 0.5},
        extract={"stage": "canary", "version": "v2-cand", "previous_live": "v1-prev", "canary_percent": 25},
        **{HOSTILE_TASK: {"stage": "shadow", "version": HOSTILE_VERSION}},
    )
    assert HOSTILE_TASK in g.gw.manifest.tasks  # signed before the name rule: still followed
    _evidence(g)
    with browser() as b:
        page = b.page
        page.goto(g.url + "/")
        page.wait_for_selector("#api-table:not([hidden])")
        paths = page.eval_on_selector_all("#api-table tr[data-path]", "rows => rows.map(r => r.dataset.path)")
        assert {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings"} <= set(paths)
        chat_row = page.locator('#api-table tr[data-path="/v1/chat/completions"]').inner_text()
        assert "client key" in chat_row
        # Without a key: no task, version or model name anywhere on the page.
        text = page.inner_text("body")
        assert "tickets" not in text and "v1-live" not in text and page.locator("#tasks").is_hidden()
        b.shot(tmp_path / "landing-public.png")

        page.fill("#key", API_KEY)
        page.click("#login button")
        page.wait_for_selector("body[data-loaded=true]")
        rows = page.locator("#tasks tbody tr")
        assert rows.count() == 3
        tickets = page.locator("#tasks tr[data-task=tickets]").inner_text()
        assert "live" in tickets and "v1-live" in tickets and "0.500" in tickets
        extract = page.locator("#tasks tr[data-task=extract]").inner_text()
        assert "canary" in extract and "25%" in extract and "v2-cand" in extract and "v1-prev" in extract
        # The markup names are shown as text and never run.
        cells = page.eval_on_selector_all("#tasks tbody tr", "rows => rows.map(r => r.cells[0].textContent)")
        assert HOSTILE_TASK in cells
        assert HOSTILE_VERSION in page.inner_text("#tasks")
        assert page.locator("#tasks img, #tasks script").count() == 0 and page.title() != "pwned"
        assert "ratchet" in page.inner_text("#model-names")
        assert page.inner_text("#who") == "client app1 · manifest #1"

        # Evidence opened with the key: the client's own line of a real signed receipt, and the BOM.
        page.click(f"#evidence-links a:text-is('receipt {DAY}')")
        page.wait_for_selector(f"body[data-viewed='/ratchet/receipts/{DAY}']")
        receipt = json.loads(page.inner_text("#viewer-body"))
        assert receipt["client"] == "app1" and "app2" not in page.inner_text("#viewer-body")
        page.click("#evidence-links a:text-is('BOM v1-live')")
        page.wait_for_selector("body[data-viewed='/ratchet/boms/v1-live']")
        assert "payloadType" in page.inner_text("#viewer-body")
        b.shot(tmp_path / "landing.png")
        b.assert_clean()

        # Every link of the page answers; the key entered here serves the dashboard too (the same tab).
        for href in page.eval_on_selector_all(
            "nav#links a", "links => links.map(a => a.getAttribute('href'))"
        ):
            assert page.goto(g.url + href).status == 200, href
        page.goto(g.url + "/ratchet/dashboard")
        page.wait_for_selector("body[data-loaded=true]")
        assert page.locator("section.task[data-task=tickets]").count() == 1
        assert API_KEY not in page.url


def _python_scout_report(g, question: str) -> str:
    """The report Scout's Python team writes for `question` through the same gateway (not filed)."""
    from ratchet_agents.scout import GateClient, Scout
    from ratchet_agents.scout.team import render

    scout = Scout(g.url + "/v1", API_KEY, GateClient("http://127.0.0.1:9", API_KEY), Path("unused"))
    plan = scout.plan(question)
    notes = {s: scout.research(s) for s in plan["subjects"]}
    return render(question, scout.write(question, plan, notes), notes)


def test_scout_page_runs_a_question_to_the_report_through_the_gateway(g, tmp_path) -> None:
    with browser() as b:
        page = b.page
        page.goto(f"{g.url}/ratchet/scout#key={API_KEY}")
        assert API_KEY not in page.url  # the fragment is read once and dropped
        page.fill("#question", QUESTION)
        page.click("#run")
        page.wait_for_selector("body[data-state=filed]", timeout=60_000)

        steps = page.locator("#steps li.step")
        agents = page.eval_on_selector_all(
            "#steps li.step", "s => s.map(e => e.dataset.agent + ':' + e.dataset.state)"
        )
        assert agents == ["planner:done", "researcher:done", "researcher:done", "writer:done"]
        assert "comparison: heat pumps, gas boilers" in steps.nth(0).inner_text()
        assert "3-4 units of heat" in steps.nth(1).inner_text()  # the researcher's tool call ran the search
        served = page.eval_on_selector_all("#steps .served", "s => s.map(e => e.textContent)")
        assert served == ["served by teacher"] * 4
        rids = page.eval_on_selector_all("#steps .rid", "s => s.map(e => e.textContent)")
        assert len(set(rids)) == 4 and all(r.startswith("request req_") for r in rids)
        assert page.inner_text("#calls") == "4 model calls through the gateway: 4 by the teacher"

        # The page's report is the one Scout's Python team writes, byte for byte, and Save hands it over.
        report = page.inner_text("#report-text")
        expected = _python_scout_report(g, QUESTION)
        assert report.strip() == expected.strip() and "# Comparison: heat pumps and gas boilers" in report
        with page.expect_download() as download:
            page.click("#save")
        saved = tmp_path / "scout-report.md"
        download.value.save_as(saved)
        assert saved.read_text() == expected
        b.shot(tmp_path / "scout.png")
        b.assert_clean()


def test_scout_page_says_what_to_do_with_a_wrong_key(g) -> None:
    with browser() as b:
        page = b.page
        page.goto(g.url + "/ratchet/scout")
        page.click("#run")
        assert "Enter your API key" in page.inner_text("#status")
        page.fill("#key", "sk-not-a-key-0000000000")
        page.click("#login button")
        page.click("#run")
        page.wait_for_selector("body[data-state=failed]")
        assert "API key" in page.inner_text("#status")
        assert page.locator("#steps li.step[data-state=failed]").count() == 1
        assert page.locator("#report").is_hidden()


def test_a_key_in_a_link_never_replaces_a_signed_in_key_unasked(g) -> None:
    from tests.gateway.conftest import OTHER_KEY

    stored = "sessionStorage.getItem('ratchet-key')"
    with browser() as b:
        page = b.page
        asked: list[str] = []

        def answer(accept: bool):
            def handle(dialog) -> None:
                asked.append(dialog.message)
                dialog.accept() if accept else dialog.dismiss()

            return handle

        page.goto(f"{g.url}/ratchet/scout#key={API_KEY}")  # signed in by a link: nobody to ask
        assert page.evaluate(stored) == API_KEY and asked == [] and "key=" not in page.url
        page.once("dialog", answer(False))
        page.goto(f"{g.url}/#key={OTHER_KEY}")  # someone else's link: asked, and "cancel" keeps the key
        assert len(asked) == 1 and "different API key" in asked[0]
        assert page.evaluate(stored) == API_KEY and "key=" not in page.url
        page.once("dialog", answer(False))
        page.goto(f"{g.url}/ratchet/dashboard#key={OTHER_KEY}")  # the dashboard asks the same
        assert len(asked) == 2 and page.evaluate(stored) == API_KEY
        page.once("dialog", answer(True))
        page.goto(f"{g.url}/ratchet/scout#key={OTHER_KEY}")  # accepted: the link's key
        assert len(asked) == 3 and page.evaluate(stored) == OTHER_KEY
        page.goto(f"{g.url}/ratchet/scout#key={OTHER_KEY}")  # the same key again: nothing to ask
        assert len(asked) == 3
        b.assert_clean()
