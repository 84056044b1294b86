"""Request hooks registered the documented way (``GatewayOptions.hooks``, ``ratchet_gateway.hooks``) run for every
route of a running gateway: the chat fast path streamed and not, its errors, the routers' routes; they can refuse a
request before its body or once it is validated; a client gone mid-body is a 499, not a 500."""

from __future__ import annotations

import logging
import socket
import threading
from urllib.parse import urlsplit

import httpx
import pytest

from ratchet_gateway.errors import GatewayError
from ratchet_gateway.hooks import RequestHook, RequestInfo

from .conftest import API_KEY, OTHER_KEY, running_gateway, sealed_rows

CHAT = {"model": "ratchet", "messages": [{"role": "user", "content": "Say hello."}]}


class Recorder(RequestHook):
    """Records every stage it sees; refuses what the test asks it to."""

    def __init__(self) -> None:
        self.before: list[str] = []
        self.validated_seen: list[tuple[str, str, str]] = []
        self.done: list[RequestInfo] = []
        self._cv = threading.Condition()

    async def before_body(self, info: RequestInfo) -> None:
        self.before.append(f"{info.method} {info.path}")
        if info.header("X-Test-Refuse") == "early":
            raise GatewayError(429, "slow down", "rate_limited", headers={"retry-after": "7"})

    async def validated(self, info: RequestInfo, received) -> None:
        self.validated_seen.append((info.client, info.task, received.request_id))
        if info.client == "app2":
            raise GatewayError(
                429, "app2 spent its budget", "budget_exhausted", headers={"retry-after": "60"}
            )

    def completed(self, info: RequestInfo) -> None:
        with self._cv:
            self.done.append(info)
            self._cv.notify_all()

    def wait_done(self, path: str, status: int | None = None, timeout: float = 20) -> RequestInfo:
        """The completed request for `path` (and `status`), waiting until the gateway reports it."""

        def find():
            for info in self.done:
                if info.path == path and (status is None or info.status == status):
                    return info
            return None

        with self._cv:
            assert self._cv.wait_for(find, timeout), f"no completed {path} {status}: {self.done}"
            found = find()
            self.done.remove(found)
            return found


class Broken(RequestHook):
    """A hook whose completion stage fails: logged, never the client's problem."""

    def completed(self, info: RequestInfo) -> None:
        raise RuntimeError("metrics backend down")


@pytest.fixture(scope="module")
def hook() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, teacher_url, hook):
    options = {
        "hooks": [Broken(), hook]
    }  # Broken first: its failure is logged before the recorder sees the end
    with running_gateway(tmp_path_factory.mktemp("gw"), teacher_url, options=options) as g:
        yield g


def _auth(key: str = API_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_chat_answer_streamed_and_not_goes_through_every_stage(gateway, hook, caplog):
    r = httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, headers=_auth(), timeout=20)
    assert r.status_code == 200
    info = hook.wait_done("/v1/chat/completions", 200)
    # the other hook's completion stage failed: logged, and the answer went out all the same
    assert any("request hook Broken failed in completed" in m for m in caplog.messages)
    assert (info.method, info.client, info.task, info.served_by) == ("POST", "app1", "default", "teacher")
    assert info.request_id == r.headers["x-ratchet-request-id"] and info.seconds > 0
    assert ("app1", "default", info.request_id) in hook.validated_seen

    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        json={**CHAT, "stream": True},
        headers={**_auth(), "X-Ratchet-Task": "greetings"},
        timeout=20,
    ) as s:
        body = b"".join(s.iter_bytes())
    assert s.status_code == 200 and body.endswith(b"data: [DONE]\n\n")
    info = hook.wait_done("/v1/chat/completions", 200)
    assert (info.task, info.request_id) == ("greetings", s.headers["x-ratchet-request-id"])


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (CHAT, {}, 401),  # no key: refused before the body is read
        ({**CHAT, "stream": True}, {"Authorization": "Bearer sk-wrong"}, 401),
        ({"model": "ratchet", "messages": []}, _auth(), 400),
        ({**CHAT, "model": "gpt-unknown", "stream": True}, _auth(), 404),
    ],
)
def test_chat_errors_complete_with_their_status(gateway, hook, body, headers, status):
    seen = len(hook.validated_seen)
    r = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=20)
    assert r.status_code == status
    info = hook.wait_done("/v1/chat/completions", status)
    assert info.request_id == r.headers["x-ratchet-request-id"]
    assert len(hook.validated_seen) == seen  # never validated: the hooks of that stage did not run


def test_other_routes_run_the_hooks_too(gateway, hook):
    assert httpx.get(gateway.url + "/v1/models", headers=_auth()).status_code == 200
    assert hook.wait_done("/v1/models", 200).method == "GET"
    assert httpx.get(gateway.url + "/healthz").status_code == 200
    hook.wait_done("/healthz", 200)
    assert httpx.get(gateway.url + "/v1/nowhere").status_code == 404
    hook.wait_done("/v1/nowhere", 404)
    assert "GET /v1/models" in hook.before and "GET /v1/nowhere" in hook.before


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/chat/completions"), ("GET", "/v1/models")])
def test_a_hook_refuses_before_the_body_with_retry_after(gateway, hook, method, path):
    r = httpx.request(
        method, gateway.url + path, json=CHAT, headers={**_auth(), "X-Test-Refuse": "early"}, timeout=20
    )
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert r.json()["error"] == {
        "message": "slow down",
        "type": "rate_limit_error",
        "param": None,
        "code": "rate_limited",
    }
    assert hook.wait_done(path, 429).request_id == r.headers["x-ratchet-request-id"]


def test_a_validated_hook_refuses_before_any_model_call_and_no_row_is_written(gateway, hook):
    r = httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, headers=_auth(OTHER_KEY), timeout=20)
    assert r.status_code == 429 and r.headers["retry-after"] == "60"
    assert r.json()["error"]["code"] == "budget_exhausted"
    rid = r.headers["x-ratchet-request-id"]
    assert hook.wait_done("/v1/chat/completions", 429).client == "app2"
    ok = httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, headers=_auth(), timeout=20)
    hook.wait_done("/v1/chat/completions", 200)
    gateway.drain()
    ids = {row["request_id"] for row in sealed_rows(gateway.settings.lake_root)}
    assert ok.headers["x-ratchet-request-id"] in ids and rid not in ids


def _send_half_a_body(url: str, path: str, key: str) -> None:
    """A request that promises 1000 bytes of body, sends 20 and closes the connection."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n".encode()
            + b'{"model": "ratchet",'
        )


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/ratchet/proofs/v1-abc123"])
def test_a_client_gone_mid_body_is_a_499_not_a_500(gateway, hook, caplog, path):
    caplog.set_level(logging.INFO, logger="ratchet.gateway")
    _send_half_a_body(gateway.url, path, API_KEY)
    info = hook.wait_done(path)
    assert info.status == 499
    bugs = [
        r
        for r in caplog.records
        if r.levelno >= logging.ERROR and "request hook Broken" not in r.getMessage()
    ]
    assert not bugs
    assert any("499" in r.getMessage() for r in caplog.records if r.name == "ratchet.gateway")
    if path == "/v1/chat/completions":
        metrics = httpx.get(gateway.url + "/metrics").text
        assert 'ratchet_requests_total{served_by="teacher",status="499"} 1.0' in metrics
        assert 'status="500"' not in metrics


def test_starlette_middleware_is_refused_with_what_to_do_instead(gateway):
    with pytest.raises(TypeError, match="RequestHook"):
        gateway.app.add_middleware(object)

    with pytest.raises(TypeError, match="skip the chat route"):

        @gateway.app.middleware("http")
        async def timing(request, call_next):  # pragma: no cover - never registered
            return await call_next(request)
