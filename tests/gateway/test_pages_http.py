"""The gateway's own pages over HTTP (their browser tests are tests/pages/): strict headers on every page file, no
inline script or style to allow, what the landing page's data route tells a client and refuses without a key, and
that Scout's page is told exactly what Scout's Python team sends."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import httpx
import pytest

from .conftest import API_KEY, running_gateway

PAGES = ("/", "/ratchet/scout")
FILES = ("pages.css", "common.js", "landing.js", "scout.js")


@pytest.fixture(scope="module")
def g(tmp_path_factory, teacher_url):
    with running_gateway(tmp_path_factory.mktemp("pages"), teacher_url) as gateway:
        yield gateway


class _Tags(HTMLParser):
    """Every tag and its attributes, to find inline script, inline style and anything loaded from elsewhere."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.inline_script = False
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script and data.strip():
            self.inline_script = True


def _csp(headers: httpx.Headers) -> dict[str, str]:
    return {
        d.split()[0]: d.split(None, 1)[1] if " " in d.strip() else ""
        for d in (p.strip() for p in headers["content-security-policy"].split(";"))
        if d
    }


@pytest.mark.parametrize("path", [*PAGES, *(f"/ratchet/pages/static/{f}" for f in FILES)])
def test_every_page_file_has_a_strict_csp_nosniff_and_no_framing(g, path) -> None:
    r = httpx.get(g.url + path)
    assert r.status_code == 200
    csp = _csp(r.headers)
    assert csp["default-src"] == "'self'" and csp["frame-ancestors"] == "'none'"
    assert csp["script-src"] == "'self'" and csp["style-src"] == "'self'" and csp["connect-src"] == "'self'"
    assert "unsafe" not in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
    expected = {"css": "text/css", "js": "text/javascript"}.get(path.rsplit(".", 1)[-1], "text/html")
    assert r.headers["content-type"].split(";")[0] == expected


@pytest.mark.parametrize("path", PAGES)
def test_pages_hold_no_inline_script_or_style_and_load_only_their_own_files(g, path) -> None:
    tags = _Tags()
    tags.feed(httpx.get(g.url + path).text)
    assert not tags.inline_script
    assert not [t for t, a in tags.tags if t == "style" or "style" in a or any(k.startswith("on") for k in a)]
    loaded = [a.get("src") or a.get("href") for t, a in tags.tags if t in ("script", "link")]
    assert loaded and all(u.startswith("/ratchet/pages/static/") for u in loaded)
    for url in loaded:  # each one is served
        assert httpx.get(g.url + url).status_code == 200


def test_static_files_are_a_fixed_list(g) -> None:
    for name in ("landing.html", "nope.js", "..%2F..%2Frouters%2Fpages.py", "%2E%2E%2Fpages.css"):
        r = httpx.get(f"{g.url}/ratchet/pages/static/{name}")
        assert r.status_code == 404 and "PAGE_HEADERS" not in r.text and "body {" not in r.text


def test_serving_needs_a_key_and_tells_stage_version_and_what_narrows_it(g) -> None:
    assert httpx.get(g.url + "/ratchet/serving").status_code == 401
    g.publish(
        tickets={"stage": "live", "version": "v1-live", "threshold": 0.5},
        extract={"stage": "canary", "version": "v2-cand", "previous_live": "v1-prev", "canary_percent": 25},
        classify={"stage": "live", "version": "v3-pin"},
    )
    g.gw.apply_local_safety(pin="classify")  # this replica's own switch narrows it to the teacher
    (bom := g.gw.artifacts.bom("v1-live")).parent.mkdir(parents=True, exist_ok=True)
    bom.write_text("{}")
    data = httpx.get(g.url + "/ratchet/serving", headers={"Authorization": f"Bearer {API_KEY}"}).json()
    tasks = {t["task"]: t for t in data["tasks"]}
    assert data["client"] == "app1" and "ratchet" in data["models"]
    assert tasks["tickets"] == {
        "task": "tickets",
        "stage": "live",
        "serving_stage": "live",
        "version": "v1-live",
        "live_version": "v1-live",
        "canary_percent": 0.0,
        "threshold": 0.5,
        "pinned": False,
    }
    assert tasks["extract"]["stage"] == "canary" and tasks["extract"]["live_version"] == "v1-prev"
    assert tasks["extract"]["canary_percent"] == 25.0
    assert tasks["classify"]["stage"] == "live" and tasks["classify"]["serving_stage"] == "teacher"
    assert tasks["classify"]["pinned"]
    assert data["bom_versions"] == ["v1-live"] and data["receipt_days"] == []


def test_scout_page_is_told_what_the_python_team_sends(g) -> None:
    from ratchet_agents.scout import team

    got = httpx.get(g.url + "/ratchet/scout/team").json()  # public: the built-in workload's own prompts
    assert got["corpus"] == team.CORPUS
    assert got["researcher"]["tools"] == [team.SEARCH_TOOL]
    for role, task in (("planner", team.RESEARCH_PLAN), ("writer", team.RESEARCH_WRITE)):
        assert got[role]["task"] == task.name and got[role]["system"] == task.system_prompt
        assert got[role]["response_format"] == task.response_format


def test_pages_and_their_data_are_in_the_openapi_document(g) -> None:
    """The pages and their data routes are documented; the static files are not routes a client calls."""
    paths = httpx.get(g.url + "/openapi.json").json()["paths"]
    assert {"/", "/ratchet/scout", "/ratchet/serving", "/ratchet/scout/team"} <= set(paths)
    assert not [p for p in paths if re.match(r"/ratchet/pages/", p)]
