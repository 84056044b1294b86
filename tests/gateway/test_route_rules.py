"""Every route: names follow the one rule (anchored at both ends, so a trailing ``%0a`` fails), every response
carries the x-ratchet-* headers and nosniff, the dashboard's pages a strict CSP, and a client that leaves
mid-body is a 499 (logged and counted, never a 500 with a traceback)."""

from __future__ import annotations

import logging
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from .conftest import ADMIN_KEY, API_KEY, running_gateway

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory, teacher_url):
    with running_gateway(tmp_path_factory.mktemp("routes"), teacher_url) as g:
        yield g


@pytest.mark.parametrize(
    "path",
    [
        "/ratchet/receipts/2026-01-01%0a",
        "/ratchet/receipts/2026-13-45",
        "/ratchet/receipts/2026-01-01/proof/req_1%0a",
        "/ratchet/proofs/v1-abc%0a/req_1",
        "/ratchet/proofs/v1-abc/req_1%0a",
        "/ratchet/boms/v1..x",
    ],
)
def test_names_in_paths_follow_the_one_rule(gw, path: str):
    r = httpx.get(gw.url + path, headers=AUTH)
    assert r.status_code == 400, (path, r.status_code, r.text)
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_the_pin_route_takes_only_task_names(gw):
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    for task in ("a\nb", "<b>x</b>", "", "x" * 65):
        r = httpx.post(
            f"{gw.url}/ratchet/admin/pin", headers=admin, json={"task": task, "reason": "testing it"}
        )
        assert r.status_code == 400, (task, r.text)
        assert r.json()["error"]["param"] == "task"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/healthz"),
        ("GET", "/nope"),
        ("GET", "/ratchet/dashboard/data"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/responses"),
        ("POST", "/v1/messages"),
        ("POST", "/v1/embeddings"),
        ("GET", "/openapi.json"),
    ],
)
def test_every_response_carries_the_ratchet_headers(gw, method: str, path: str):
    r = httpx.request(
        method, gw.url + path, headers=AUTH if path != "/ratchet/dashboard/data" else {}, json={}
    )
    for name in ("x-ratchet-request-id", "x-ratchet-served-by", "x-ratchet-version", "x-ratchet-manifest"):
        assert r.headers.get(name), (path, name, dict(r.headers))
    assert r.headers["x-ratchet-manifest"] == str(gw.gw.manifest.sequence)
    assert r.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    "path", ["/ratchet/dashboard", "/ratchet/dashboard/static/app.js", "/ratchet/dashboard/static/app.css"]
)
def test_the_dashboard_sends_a_strict_csp(gw, path: str):
    r = httpx.get(gw.url + path)
    assert r.status_code == 200
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
    if path == "/ratchet/dashboard":
        assert "<script>" not in r.text and " style=" not in r.text  # nothing inline for the CSP to refuse


def _send_half(url: str, path: str, headers: str) -> None:
    """A request that promises 1000 bytes of body, sends 10 and hangs up."""
    u = urlsplit(url)
    with socket.create_connection((u.hostname, u.port)) as s:
        s.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
            f"{headers}\r\n".encode()
            + b'{"task": "'
        )
        time.sleep(0.05)  # let the server start reading the body before the hang-up


def _closed(gw, route: str) -> float:
    for line in httpx.get(gw.url + "/metrics").text.splitlines():
        if line.startswith(f'ratchet_client_closed_total{{route="{route}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize(
    ("route", "headers"),
    [
        ("/ratchet/admin/pin", f"Authorization: Bearer {ADMIN_KEY}\r\n"),
        ("/v1/chat/completions", f"Authorization: Bearer {API_KEY}\r\n"),
        ("/v1/responses", f"Authorization: Bearer {API_KEY}\r\n"),
        ("/v1/messages", f"x-api-key: {API_KEY}\r\n"),
        ("/v1/embeddings", f"Authorization: Bearer {API_KEY}\r\n"),
    ],
)
def test_a_client_gone_mid_body_is_a_499_on_every_route(gw, caplog, route: str, headers: str):
    before = _closed(gw, route)
    with caplog.at_level(logging.INFO, logger="ratchet.gateway"):
        _send_half(gw.url, route, headers)
        deadline = time.monotonic() + 10
        while _closed(gw, route) == before:  # another process's counter: nothing to await but the scrape
            assert time.monotonic() < deadline, "the hang-up was never counted"
            time.sleep(0.05)
    text = caplog.text
    assert "499" in text and "Traceback" not in text and " 500 " not in text
