"""A hostile tenant with a valid key cannot hurt the others: a real gateway process (``ratchet gateway``, as
deployed) takes the worst bodies found (4 MiB each: unterminated strings of ``\\"``, bracket and value floods, the
redaction rules' worst motifs, a 4 MiB schema, 128 large tools, 16,000 tools, 30,000 messages through the chat,
Messages and Responses APIs, 2,048 embeddings inputs) while another client keeps
talking to it: the other client's ``/healthz`` latency stays under 50 ms (p99 over the run, the one wall-clock check
in the suite), every one of its requests is answered and recorded exactly as sent, and every hostile body gets a
4xx or an answer, never a 5xx.

The teacher (the demo teacher) and the hostile client run in processes of their own, so this process only measures.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from ratchet_core.redact import redact_request
from tests.serve import free_port, wait_healthy

from .conftest import API_KEY, OTHER_KEY, gateway_process, sealed_rows

P99_S = 0.050
LIMIT = 4 * 1024 * 1024  # RATCHET_MAX_BODY_BYTES's default

# The hostile client: builds each body (at most 4 MiB), sends them two at a time, writes what it got back.
HOSTILE = r"""
import json, sys, concurrent.futures, httpx
url, key, out = sys.argv[1], sys.argv[2], sys.argv[3]
LIMIT = 4 * 1024 * 1024
head = b'{"model":"ratchet","messages":[{"role":"user","content":"hi"}],'
msg = lambda content: b'{"model":"ratchet","messages":[{"role":"user","content":' + content + b"}]}"

def fill(prefix, unit, suffix=b""):
    return prefix + unit * ((LIMIT - len(prefix) - len(suffix)) // len(unit)) + suffix

def string(motif):
    return json.dumps(motif * ((LIMIT - 200) // len(json.dumps(motif)))).encode()

def schema():
    props = {}
    i = 0
    while len(json.dumps(props)) < LIMIT - 300_000:
        props.update({f"p{i + j}": {"type": "string", "description": "d" * 900, "pattern": "^(a|aa)+$"} for j in range(200)})
        i += 200
    rf = {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object", "properties": props}}}
    return head + b'"response_format":' + json.dumps(rf).encode() + b"}"

def tools():
    params = {"type": "object", "properties": {f"a{j}": {"type": "string", "description": "x" * 200} for j in range(125)}}
    ts = [{"type": "function", "function": {"name": f"f{i}", "parameters": params}} for i in range(128)]
    return head + b'"tools":' + json.dumps(ts).encode() + b"}"

def turns():
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "m" * 80} for i in range(30_001)]

def messages():
    return b'{"model":"ratchet","messages":' + json.dumps(turns()).encode() + b"}"

def anthropic():
    return b'{"model":"ratchet","max_tokens":20,"messages":' + json.dumps(turns()).encode() + b"}"

def responses():
    return b'{"model":"ratchet","input":' + json.dumps(turns()).encode() + b"}"

def embeddings():
    texts = [f"text {i} " + "e" * 900 for i in range(2048)]
    user = json.dumps("a%" * 1_000_000 + "@").encode()  # redacted into the row's params
    return b'{"model":"demo-teacher","dimensions":8,"input":' + json.dumps(texts).encode() + b',"user":' + user + b"}"

def many_tools():
    return head + b'"tools":' + json.dumps([{"type": "function", "function": {"name": f"f{i}"}} for i in range(16_000)]).encode() + b"}"

BODIES = {
    "unterminated \\\" deep": (fill(b"[" * 65 + b'"', b'\\"'), 400),
    "unterminated \\\" shallow": (fill(b'{"model":"ratchet","messages":[{"role":"user","content":"', b'\\"'), 400),
    "bracket flood": (fill(head + b'"x":', b"["), 400),
    "value flood": (fill(head + b'"x":[', b"[],", b"[]]}"), 400),
    "129 tools": (head + b'"tools":' + json.dumps([{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]).encode() + b"}", 400),
    "a% * n + @": (msg(string("a%")[:-1] + b'@"'), 200),
    "-eyJ * n": (msg(string("-eyJ")), 200),
    "+1 and 40 digits": (msg(string("+1" + "1" * 40 + " ")), 200),
    "escaped quotes": (msg(string('"')), 200),
    "4 MiB schema": (schema(), 200),
    "128 large tools": (tools(), 200),
    "30,000 messages": (messages(), 200),
    "16,000 tools": (many_tools(), 400),
}
BODIES = {name: ("/v1/chat/completions", body, want) for name, (body, want) in BODIES.items()}
BODIES.update({
    "30,000 Anthropic messages": ("/v1/messages", anthropic(), 200),
    "30,000 Responses input items": ("/v1/responses", responses(), 200),
    "2,048 embeddings inputs and a%*n@": ("/v1/embeddings", embeddings(), 200),
})

def send(item):
    name, (path, body, want) = item
    assert len(body) <= LIMIT, (name, len(body))
    with httpx.Client(timeout=300) as c:
        r = c.post(url + path, content=body, headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    return name, want, r.status_code, r.text[:300]

with concurrent.futures.ThreadPoolExecutor(2) as pool:
    results = list(pool.map(send, list(BODIES.items()) * 2))
with open(out, "w") as fh:
    json.dump(results, fh)
"""


class Probe(threading.Thread):
    """Another client's view of the gateway: ``/healthz`` on a kept-alive connection every 5 ms, timed."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        u = urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        self.seconds: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            self.conn.request("GET", "/healthz")
            resp = self.conn.getresponse()
            resp.read()
            assert resp.status == 200
            self.seconds.append(time.perf_counter() - t)
            time.sleep(0.005)


class Neighbour(threading.Thread):
    """Another client's ordinary chat requests, each with its own text: every one must be answered and stored."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = url
        self.sent: dict[str, dict] = {}  # request id -> body
        self.failed: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=60) as c:
            i = 0
            while not self.stop.is_set():
                body = {
                    "model": "ratchet",
                    "messages": [
                        {
                            "role": "user",
                            "content": f"neighbour {i}: my order 4711 is late, mail ann{i}@example.com",
                        }
                    ],
                }
                r = c.post(
                    self.url + "/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {OTHER_KEY}"},
                )
                if r.status_code == 200:
                    self.sent[r.headers["x-ratchet-request-id"]] = body
                else:
                    self.failed.append(f"{r.status_code} {r.text[:200]}")
                i += 1
                time.sleep(0.05)


def _teacher(tmp_path: Path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    log = (tmp_path / "teacher.log").open("w")
    ratchet = Path(sys.executable).with_name("ratchet")
    proc = subprocess.Popen(
        [str(ratchet), "demo-teacher", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url + "/healthz", "demo teacher", 90)
    return proc, url + "/v1"


@pytest.mark.slow
@pytest.mark.timing
def test_a_hostile_tenant_cannot_slow_or_touch_another(tmp_path: Path) -> None:
    teacher, teacher_url = _teacher(tmp_path)
    try:
        env = {
            "RATCHET_SEGMENT_SECONDS": "3600",
            "RATCHET_EMBEDDING_MODEL": "openai/demo-teacher",
            "RATCHET_EMBEDDING_API_BASE": teacher_url,
        }
        with gateway_process(tmp_path / "gw", teacher_url, env) as url:
            home = tmp_path / "gw"
            probe, neighbour = Probe(url), Neighbour(url)
            probe.start()
            neighbour.start()
            time.sleep(0.5)  # a baseline before the hostile client starts
            out = tmp_path / "hostile.json"
            hostile = subprocess.run(
                [sys.executable, "-c", HOSTILE, url, API_KEY, str(out)],
                capture_output=True,
                text=True,
                timeout=900,
            )
            probe.stop.set()
            neighbour.stop.set()
            probe.join(30)
            neighbour.join(60)
            assert hostile.returncode == 0, hostile.stderr[-3000:]
            results = json.loads(out.read_text())
            metrics = httpx.get(url + "/metrics").text
        # the gateway stopped (SIGTERM): everything it acknowledged is sealed
    finally:
        teacher.terminate()
        teacher.wait(30)

    # every hostile body: refused with a 4xx or answered, never a 5xx, in the expected way
    for name, want, got, text in results:
        assert got == want, (name, got, text)
    assert 'status="500"' not in metrics

    # the other client's latency: p99 of /healthz over the whole run
    times = sorted(probe.seconds)
    assert len(times) > 200, "the probe hardly ran"
    p99 = times[int(0.99 * (len(times) - 1))]
    print(f"healthz over {len(times)} probes: p50 {times[len(times) // 2] * 1000:.1f} ms, "
          f"p99 {p99 * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms")  # fmt: skip
    assert p99 < P99_S, f"p99 {p99 * 1000:.1f} ms"

    # the other client's data: every request answered, and recorded as sent (redacted), once
    assert not neighbour.failed, neighbour.failed[:3]
    assert len(neighbour.sent) >= 10
    rows = {r["request_id"]: r for r in sealed_rows(home / "lake") if r["kind"] == "request"}
    for rid, body in neighbour.sent.items():
        row = rows[rid]
        assert row["client"] == "app2" and row["status_code"] == 200
        assert (
            row["messages"]
            == orjson.dumps(redact_request(body).body["messages"], option=orjson.OPT_SORT_KEYS).decode()
        )
    assert all(r["client"] in ("app1", "app2") for r in rows.values())


# --------------------------------------------------------------------------------------------------------------------
# Feedback and /metrics (issue 34, points 4 and 5): a flood of large feedback bodies and of batches of unknown ids
# from one client, and what /metrics tells a caller without the admin key.
# --------------------------------------------------------------------------------------------------------------------

# The hostile client's feedback: 3.8 MB bodies (a demonstration with a huge tool_calls list: many small calls, or
# fewer calls with long arguments) on the single and the batch route, and batches of 1,000 unknown request ids sent
# three times, six requests at a time.
FEEDBACK_FLOOD = r"""
import json, sys, concurrent.futures, httpx
url, key, out = sys.argv[1], sys.argv[2], sys.argv[3]
SIZE = 3_800_000

def demonstration(arguments):
    call = {"id": "c", "type": "function", "function": {"name": "refund", "arguments": arguments}}
    calls = [call] * (SIZE // (len(json.dumps(call)) + 2))
    return {"content": None, "tool_calls": calls}

def item(fid, value, metric="demonstration", rid="req_" + "4" * 24):
    return {"feedback_id": fid, "request_id": rid, "metric": metric, "value": value}

many = demonstration('{"o": 1}')  # ~100,000 small calls
long = demonstration(json.dumps({"note": "x" * 10_000}))  # ~380 calls with long arguments
unknown = {"items": [item(f"u-{i}", "?", "comment", f"req_{i:024d}") for i in range(1000)]}
BODIES = [
    ("single route, many calls", "/ratchet/feedback", item("s-many", many), 413),
    ("single route, long calls", "/ratchet/feedback", item("s-long", long), 413),
    ("batch, many calls", "/ratchet/feedback:batch", {"items": [item("b-many", many)]}, 400),
    ("batch, long calls", "/ratchet/feedback:batch", {"items": [item("b-long", long)]}, 200),
]

def send(entry):
    name, path, body, want = entry
    data = json.dumps(body).encode()
    assert len(data) <= 4 * 1024 * 1024, (name, len(data))
    with httpx.Client(timeout=300) as c:
        r = c.post(url + path, content=data, headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    statuses = sorted({x["http_status"] for x in r.json()["results"]}) if path.endswith(":batch") and r.status_code == 200 else None
    return name, want, r.status_code, statuses, r.text[:300]

entries = BODIES * 3 + [("1,000 unknown ids", "/ratchet/feedback:batch", unknown, 200)] * 3
with concurrent.futures.ThreadPoolExecutor(6) as pool:
    results = list(pool.map(send, entries))
with open(out, "w") as fh:
    json.dump(results, fh)
"""


@pytest.mark.slow
def test_a_feedback_flood_is_refused_or_answered_and_the_other_client_is_measured(tmp_path: Path) -> None:
    teacher, teacher_url = _teacher(tmp_path)
    try:
        with gateway_process(tmp_path / "gw", teacher_url, {"RATCHET_SEGMENT_SECONDS": "1"}) as url:
            # a lake with segments (a scan per unknown id would have something to read): the other client's chats
            body = {"model": "ratchet", "messages": [{"role": "user", "content": "Where is my order?"}]}
            with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {OTHER_KEY}"}) as c:
                for _ in range(40):
                    assert c.post(url + "/v1/chat/completions", json=body).status_code == 200
                    time.sleep(0.05)
            lake = tmp_path / "gw" / "lake"
            deadline = time.monotonic() + 30
            while len(list(lake.glob("traffic/day=*/*.parquet"))) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            probe = Probe(url)
            probe.start()
            time.sleep(0.5)  # a baseline before the hostile client starts
            out = tmp_path / "flood.json"
            hostile = subprocess.run(
                [sys.executable, "-c", FEEDBACK_FLOOD, url, API_KEY, str(out)],
                capture_output=True,
                text=True,
                timeout=900,
            )
            probe.stop.set()
            probe.join(30)
            assert hostile.returncode == 0, hostile.stderr[-3000:]
            results = json.loads(out.read_text())
    finally:
        teacher.terminate()
        teacher.wait(30)

    # the other client's /healthz during the flood: reported, not asserted (the chat flood above holds the bound)
    times = sorted(probe.seconds)
    assert times, "the probe never got an answer"
    print(f"healthz during the feedback flood, {len(times)} probes: p50 {times[len(times) // 2] * 1000:.1f} ms, "
          f"p99 {times[int(0.99 * (len(times) - 1))] * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms")  # fmt: skip
    by_name = {}
    for name, want, got, statuses, text in results:
        assert got == want, (name, got, text)
        by_name.setdefault(name, set()).add(tuple(statuses or ()))
    # the batch of long calls: the 3.8 MB item refused alone (400 item_too_large), the body read on the lane
    assert by_name["batch, long calls"] == {(400,)}
    # unknown ids, three times: pending each time (no request of this client has them)
    assert by_name["1,000 unknown ids"] == {(202,)}


def test_metrics_without_the_admin_key_name_no_client(tmp_path: Path, teacher_url: str) -> None:
    import asyncio

    from ratchet_core import client_limits as cl

    from .conftest import ADMIN_KEY, running_gateway

    with running_gateway(tmp_path, teacher_url) as g:
        with g.engine.begin() as conn:
            cl.set_limits(
                conn, "app1", {"rpm": 1, "budget_usd": 5.0, "budget_period": "day"}, (), "tests", "metrics"
            )
        asyncio.run_coroutine_threadsafe(g.gw.limits.poll(), g._loop()).result(10)
        body = {"model": "ratchet", "messages": [{"role": "user", "content": "Where is my order?"}]}
        chats = [
            httpx.post(
                g.url + "/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {key}"},
                timeout=30,
            )
            for key in (API_KEY, API_KEY, OTHER_KEY)
        ]
        assert [r.status_code for r in chats] == [200, 429, 200]
        asyncio.run_coroutine_threadsafe(g.gw.limits.poll(), g._loop()).result(10)
        admin = httpx.get(g.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30)
        assert admin.status_code == 200 and 'client="app1"' in admin.text  # the scraper with the admin key
        public = httpx.get(g.url + "/metrics", timeout=30)
        assert public.status_code == 200 and "ratchet_requests" in public.text
        assert "app1" not in public.text and "app2" not in public.text and "client=" not in public.text
        for key in (API_KEY, OTHER_KEY, "not-a-key"):  # a client's key is not the admin's
            r = httpx.get(g.url + "/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=30)
            assert r.status_code == 403 and "app1" not in r.text
        # the other client's dashboard names no one else either
        dash = httpx.get(g.url + "/ratchet/dashboard/data", headers={"Authorization": f"Bearer {OTHER_KEY}"})
        assert dash.status_code == 200 and "app1" not in dash.text


# What a client can send (ARCHITECTURE.md, "What reaches a provider") ------------------------------------------
# A hostile tenant adds litellm's own arguments to a body: an endpoint, a credential, a provider, headers, a mocked
# answer, retries, callbacks. Each must be a 400 naming the field, in the caller's API's shape, before any model
# call; the attacker's listener must hear nothing (above all never the operator's teacher key), and the teacher's
# listener must never see a field outside the allow-list.
TEACHER_KEY = "sk-teacher-upstream"  # running_gateway's teacher_api_key


class Recorder:
    """The requests one loopback listener received: (path, headers, body bytes)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        self.lock = threading.Lock()

    def add(self, path: str, headers: dict[str, str], body: bytes) -> None:
        with self.lock:
            self.seen.append((path, headers, body))

    def bodies(self) -> list[dict]:
        return [json.loads(b) for _, _, b in self.seen if b]


class _Attacker:
    """A listener a hostile tenant runs: records whatever reaches it and answers 500."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        rec = self.rec = Recorder()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                rec.add(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                self.send_response(500)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _recording(app, rec: Recorder):
    """The ASGI `app` (the demo teacher), recording every request's path, headers and body first."""
    from .conftest import buffered

    async def recorded(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        body, replay = await buffered(receive)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        rec.add(scope["path"], headers, body)
        await app(scope, replay, send)

    return recorded


@pytest.fixture(scope="module")
def listeners():
    """(the teacher's recorded listener: the demo teacher's URL root, its recorder; the attacker)."""
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app
    from tests.serve import serve_in_thread

    rec = Recorder()
    attacker = _Attacker()
    with serve_in_thread(_recording(create_app(DemoTeacherConfig(model="demo-teacher")), rec)) as url:
        yield url, rec, attacker
    attacker.close()


def _hostile_fields(attacker: str) -> dict[str, object]:
    """litellm arguments a client must never set, each with a value that would hurt if it reached litellm."""
    return {
        "base_url": attacker + "/v1",
        "api_base": attacker + "/v1",
        "api_key": "sk-tenant",
        "custom_llm_provider": "openai",
        "extra_headers": {"x-stolen": "1"},
        "headers": {"x-stolen": "1"},
        "extra_body": {"mock_response": "POISONED LABEL"},
        "mock_response": "POISONED LABEL",
        "mock_tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        "num_retries": 50,
        "fallbacks": [{"model": "openai/x", "api_base": attacker}],
        "timeout": 0.0001,
        "litellm_metadata": {"x": 1},
        "input_cost_per_token": 0,
    }


CHAT = {"model": "ratchet", "messages": [{"role": "user", "content": "hello"}]}
RESPONSES = {"model": "ratchet", "input": "hello"}
MESSAGES = {"model": "ratchet", "max_tokens": 20, "messages": [{"role": "user", "content": "hello"}]}


def _post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)


def _assert_refused(r: httpx.Response, field: str, api: str, attacker: _Attacker) -> None:
    # first what reached the attacker: on a gateway that forwards the field, its listener holds the teacher key
    stolen = [(p, h.get("authorization") or h.get("x-api-key"), b[:80]) for p, h, b in attacker.rec.seen]
    assert not stolen, f"{field} on {api} reached the attacker's listener: {stolen}"
    assert r.status_code == 400, (field, api, r.status_code, r.text[:300])
    doc = r.json()
    if api == "messages":  # Anthropic's error shape
        assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error", doc
        assert field in doc["error"]["message"], doc
    else:  # OpenAI's, with the field as `param`
        assert doc["error"]["param"] == field and field in doc["error"]["message"], doc


@pytest.mark.parametrize(
    "teacher, via_litellm",
    [("openai/demo-teacher", True), ("anthropic/demo-teacher", True), ("openai/demo-teacher", False)],
    ids=["litellm-openai", "litellm-anthropic", "own-http-client"],
)
def test_no_client_field_selects_where_or_how_the_teacher_is_called(
    tmp_path: Path, listeners, teacher: str, via_litellm: bool
) -> None:
    from .conftest import running_gateway

    root, rec, attacker = listeners
    base = root + "/v1" if teacher.startswith("openai/") else root  # litellm appends /v1/messages itself
    with running_gateway(
        tmp_path,
        base,
        options={"teacher_via_litellm": via_litellm},
        teacher_model=teacher,
        teacher_api_base=base,
        embedding_model="openai/demo-teacher",
        embedding_api_base=root + "/v1",
        embedding_api_key=TEACHER_KEY,
    ) as g:
        # litellm's path for both, or the gateway's own HTTP client
        assert g.gw.teacher.fast is g.gw.embedder.fast is not via_litellm
        before = len(rec.seen)
        for field, value in _hostile_fields(attacker.url).items():
            for api, path, body in (
                ("chat", "/v1/chat/completions", CHAT),
                ("chat", "/v1/chat/completions", {**CHAT, "stream": True}),
                ("responses", "/v1/responses", RESPONSES),
                ("responses", "/v1/responses", {**RESPONSES, "stream": True}),
                ("messages", "/v1/messages", MESSAGES),
                ("messages", "/v1/messages", {**MESSAGES, "stream": True}),
                ("embeddings", "/v1/embeddings", {"model": "demo-teacher", "input": "hello"}),
            ):
                _assert_refused(_post(g.url, path, {**body, field: value}), field, api, attacker)
        assert len(rec.seen) == before, "a refused request reached the teacher"

        # what an allowed request sends: only allow-listed fields, the operator's key, no client metadata
        chat = {**CHAT, "temperature": 0.5, "metadata": {"ratchet_task": "qa", "team": "a"}, "user": "u1"}
        for body in (chat, {**chat, "stream": True}):
            r = _post(g.url, "/v1/chat/completions", body)
            assert r.status_code == 200, r.text
        assert _post(g.url, "/v1/responses", {**RESPONSES, "metadata": {"team": "a"}}).status_code == 200
        assert _post(g.url, "/v1/messages", MESSAGES).status_code == 200
        r = _post(g.url, "/v1/embeddings", {"model": "demo-teacher", "input": "hello", "user": "u1"})
        assert r.status_code == 200, r.text
        sent = rec.seen[before:]
        assert len(sent) == 5 and not attacker.rec.seen
        for path, headers, raw in sent:
            assert TEACHER_KEY in (headers.get("authorization", "") + headers.get("x-api-key", ""))
            assert "x-stolen" not in headers
            body = json.loads(raw)
            assert not set(body) & set(_hostile_fields("")), (path, body)
            meta = body.get("metadata") or {}
            if path.endswith("/messages"):  # Anthropic's own metadata carries only user_id
                assert set(meta) <= {"user_id"}, body
            elif via_litellm:  # litellm reads `metadata` as its callbacks' metadata: never given it
                assert "metadata" not in body, body
            else:  # OpenAI's field, on the gateway's own client: the client's own keys, never Ratchet's
                assert "ratchet_task" not in meta, body
        g.drain()
        rows = sealed_rows(g.settings.lake_root)
    # every teacher answer in the ledger is one the teacher gave
    assert rows and all("POISONED" not in (r["answer"] or "") for r in rows)
    assert all(r["status_code"] == 200 for r in rows if r["served_by"] == "teacher")


@pytest.fixture(scope="module")
def recorded_gateway(tmp_path_factory, listeners):
    """A gateway on the gateway's own HTTP client in front of the recorded demo teacher, with the operator's
    extra `top_k` (RATCHET_PROVIDER_EXTRA_FIELDS) and an embedding model."""
    from .conftest import running_gateway

    root, rec, attacker = listeners
    with running_gateway(
        tmp_path_factory.mktemp("recorded"),
        root + "/v1",
        embedding_model="openai/demo-teacher",
        embedding_api_base=root + "/v1",
        provider_extra_fields="top_k",
    ) as g:
        yield g, rec


def _error(r: httpx.Response) -> tuple[str | None, str]:
    """(param, message) of an error in OpenAI's shape, or (None, message) in Anthropic's."""
    doc = r.json()
    if doc.get("type") == "error":
        return None, doc["error"]["message"]
    return doc["error"]["param"], doc["error"]["message"]


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/v1/responses", {**RESPONSES, "mcp_servers": [{"url": "http://x"}]}, "mcp_servers"),
        ("/v1/responses", {**RESPONSES, "container": {"type": "auto"}}, "container"),
        ("/v1/responses", {**RESPONSES, "user_location": {"city": "x"}}, "user_location"),
        ("/v1/messages", {**MESSAGES, "container": "c1"}, "container"),
        ("/v1/messages", {**MESSAGES, "mcp_servers": [{"type": "url", "url": "http://x"}]}, "mcp_servers"),
        ("/v1/messages", {**MESSAGES, "context_management": {"edits": []}}, "context_management"),
        ("/v1/messages", {**MESSAGES, "thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
        (
            "/v1/messages",
            {**MESSAGES, "metadata": {"user_id": "u", "base_url": "http://x"}},
            "metadata.base_url",
        ),
        ("/v1/chat/completions", {**CHAT, "store": True}, "store"),
        ("/v1/chat/completions", {**CHAT, "modalities": ["text", "audio"]}, "modalities"),
        ("/v1/chat/completions", {**CHAT, "web_search_options": {}}, "web_search_options"),
        (
            "/v1/embeddings",
            {"model": "demo-teacher", "input": "x", "top_k": 3, "extra_body": {}},
            "extra_body",
        ),
    ],
)
def test_unsupported_fields_are_a_400_naming_them(recorded_gateway, path, body, field) -> None:
    g, rec = recorded_gateway
    before = len(rec.seen)
    r = _post(g.url, path, body)
    assert r.status_code == 400, (field, r.status_code, r.text[:300])
    param, message = _error(r)
    assert message.startswith(field) and (param is None or param == field), r.text
    assert len(rec.seen) == before  # nothing reached the model


def test_what_is_taken_is_forwarded_and_nothing_else(recorded_gateway) -> None:
    """`store: false` and Messages' `top_k`/`service_tier`/`thinking` disabled are taken and not forwarded; the
    operator's extra `top_k` reaches the teacher on chat and embeddings as sent."""
    g, rec = recorded_gateway
    before = len(rec.seen)
    assert _post(g.url, "/v1/chat/completions", {**CHAT, "store": False, "top_k": 3}).status_code == 200
    messages = {**MESSAGES, "top_k": 3, "service_tier": "auto", "thinking": {"type": "disabled"}}
    assert _post(g.url, "/v1/messages", messages).status_code == 200
    r = _post(g.url, "/v1/embeddings", {"model": "demo-teacher", "input": "x", "top_k": 3})
    assert r.status_code == 200
    sent = [json.loads(b) for _, _, b in rec.seen[before:]]
    assert [b.get("top_k") for b in sent] == [
        3,
        3,
        3,
    ]  # the operator's extra, as sent (Messages' own top_k too)
    assert not any({"store", "service_tier", "thinking"} & set(b) for b in sent), sent


@pytest.mark.parametrize("path, base", [("/v1/chat/completions", CHAT), ("/v1/responses", RESPONSES)])
def test_a_pricier_service_tier_is_refused_unless_the_operator_allows_it(
    recorded_gateway, tmp_path, listeners, path, base
) -> None:
    """Every request is billed at the model's standard prices, so a client cannot pick `priority` (or `scale`,
    `flex`, a made-up tier, a non-string) and have it billed at those: a 400 naming `service_tier`, nothing sent.
    `auto` and `default` are forwarded; a tier the operator lists in RATCHET_SERVICE_TIERS is forwarded as sent.
    (On the old code `priority` reached the teacher and was billed as standard.)"""
    from .conftest import running_gateway

    g, rec = recorded_gateway
    for tier in ("priority", "scale", "flex", "PRIORITY", "x" * 5_000, {"tier": "priority"}, 1):
        before = len(rec.seen)
        r = _post(g.url, path, {**base, "service_tier": tier})
        assert r.status_code == 400, (tier, r.status_code, r.text[:300])
        err = r.json()["error"]
        assert err["param"] == "service_tier" and len(err["message"]) < 400, err
        if isinstance(tier, str):  # (a non-string: Responses' type check says so first)
            assert err["code"] == "unsupported_parameter" and "RATCHET_SERVICE_TIERS" in err["message"], err
        assert len(rec.seen) == before, tier  # nothing reached the model
    before = len(rec.seen)
    for tier in ("auto", "default", None):
        assert _post(g.url, path, {**base, "service_tier": tier}).status_code == 200, tier
    assert [json.loads(b).get("service_tier") for _, _, b in rec.seen[before:]] == ["auto", "default", None]

    root, rec, _ = listeners  # the operator allows priority: forwarded as sent, flex still refused
    with running_gateway(tmp_path, root + "/v1", service_tiers="priority") as allowed:
        before = len(rec.seen)
        assert _post(allowed.url, path, {**base, "service_tier": "priority"}).status_code == 200
        assert json.loads(rec.seen[before][2])["service_tier"] == "priority"
        r = _post(allowed.url, path, {**base, "service_tier": "flex"})
        assert r.status_code == 400 and "'priority'" in r.json()["error"]["message"], r.text


@pytest.mark.parametrize(
    "path, body, param, words",
    [
        (  # a function_call_output answering no call: the item and its call_id, not messages.1.tool_call_id
            "/v1/responses",
            {
                **RESPONSES,
                "input": [
                    {"role": "user", "content": "hi"},
                    {"type": "function_call_output", "call_id": "nope", "output": "x"},
                ],
            },
            "input[1].call_id",
            ("function_call_output item",),
        ),
        (  # a tool_result answering no tool_use: the block and its tool_use_id
            "/v1/messages",
            {
                **MESSAGES,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}],
                    },
                ],
            },
            "messages[2].content[0].tool_use_id",
            ("tool_result block",),
        ),
        (  # a tool_use never answered: the assistant message, in Anthropic's words
            "/v1/messages",
            {
                **MESSAGES,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                    },
                    {"role": "user", "content": "and?"},
                ],
                "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            },
            "messages[1]",
            ("tool_use blocks", "tool_result blocks"),
        ),
        ("/v1/messages", {**MESSAGES, "stop_sequences": ["a", "b", "c", "d", "e"]}, "stop_sequences", ()),
        (
            "/v1/responses",
            {**RESPONSES, "tools": [{"type": "function", "name": "bad name"}]},
            "tools[0].name",
            (),
        ),
    ],
)
def test_errors_name_the_callers_own_fields(recorded_gateway, path, body, param, words) -> None:
    g, _ = recorded_gateway
    r = _post(g.url, path, body)
    assert r.status_code == 400, r.text
    got, message = _error(r)
    assert got in (None, param) and message.startswith(param + ":"), r.text
    for chat_word in ("tool_call_id", "tool_calls", "max_completion_tokens", "messages.", "tool message"):
        assert chat_word not in message, (chat_word, message)
    assert all(w in message for w in words), message


@pytest.mark.parametrize(
    "value, param",
    [
        ("", "input"),
        ([], "input"),
        ([""], "input.0"),
        ([[]], "input.0"),
        (["a", ""], "input.1"),
        ([[1], []], "input.1"),
    ],
)
def test_embeddings_refuse_empty_inputs(recorded_gateway, value, param) -> None:
    g, rec = recorded_gateway
    before = len(rec.seen)
    r = _post(g.url, "/v1/embeddings", {"model": "demo-teacher", "input": value})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert len(rec.seen) == before


def test_an_extra_that_would_choose_the_endpoint_is_a_configuration_error() -> None:
    from ratchet_core.settings import Settings

    for name in (
        "api_base",
        "base_url",
        "mock_response",
        "extra_headers",
        "num_retries",
        "metadata",
        "aws_region",
    ):
        with pytest.raises(ValueError, match=name):
            Settings(provider_extra_fields=f"top_k,{name}")
    assert Settings(provider_extra_fields=" top_k , min_p").provider_extras == {"top_k", "min_p"}


@pytest.mark.parametrize("via_litellm", [True, False], ids=["litellm", "own-http-client"])
def test_the_upstream_sends_only_the_allow_list_whatever_the_body_holds(listeners, via_litellm: bool) -> None:
    """A second line behind the 400: a body that reached ``Upstream`` with litellm's arguments in it (a bug in a
    translation, a future route) still sends only the allow-listed fields, to the operator's endpoint, with the
    operator's key, and gets the teacher's own answer."""
    import asyncio

    from ratchet_core.provider_fields import CHAT_FIELDS, EMBEDDINGS_FIELDS
    from ratchet_gateway.upstream import Timeouts, Upstream

    root, rec, attacker = listeners
    hostile = _hostile_fields(attacker.url)
    chat = {**CHAT, "model": "demo-teacher", **hostile, "metadata": {"team": "a"}, "top_k": 3}
    embed = {"model": "demo-teacher", "input": "hello", **hostile, "top_k": 3}

    async def calls() -> tuple[dict, str, dict]:
        up = Upstream("openai/demo-teacher", root + "/v1", TEACHER_KEY, 10, force_litellm=via_litellm)
        up.extras = frozenset({"top_k"})
        await up.start()
        try:
            answer = await up.complete(chat, timeouts=Timeouts(10))
            streamed = "".join(
                [
                    (c["choices"][0]["delta"].get("content") or "")
                    async for _, c in up.stream(chat)
                    if c.get("choices")
                ]
            )
            return answer, streamed, await up.embed(embed, Timeouts(10))
        finally:
            await up.close()

    before = len(rec.seen)
    answer, streamed, vectors = asyncio.run(calls())
    assert not attacker.rec.seen
    assert "POISONED" not in answer["choices"][0]["message"]["content"] and "POISONED" not in streamed
    assert streamed and vectors["data"]
    sent = rec.seen[before:]
    assert [p for p, _, _ in sent] == ["/v1/chat/completions"] * 2 + ["/v1/embeddings"]
    for path, headers, raw in sent:
        body = json.loads(raw)
        allowed = EMBEDDINGS_FIELDS if path.endswith("embeddings") else CHAT_FIELDS
        assert set(body) <= allowed | {"top_k"} and body["top_k"] == 3, body
        assert headers["authorization"] == f"Bearer {TEACHER_KEY}" and "x-stolen" not in headers
        if via_litellm:
            assert "metadata" not in body  # litellm's callbacks' metadata: never given


# ---------------------------------------------------------------------------------------------------------------
# Billing: a stream abandoned early is billed, and limits admit by reservation (issue 34, points 2 and 3).
# In-process gateways (``running_gateway``) in front of the faulty upstream (tests.faults.upstream) or the demo
# teacher; the clients are the real ``openai`` client and httpx over loopback.
# ---------------------------------------------------------------------------------------------------------------

import asyncio  # noqa: E402
import concurrent.futures  # noqa: E402

import openai  # noqa: E402

from ratchet_core import client_limits as cl  # noqa: E402
from tests.faults.upstream import faulty_upstream  # noqa: E402

from .conftest import running_gateway  # noqa: E402

LONG_ASK = "Tell me about my order 4711, in full detail, please. " * 8


def _limit(gw, client: str, **changes) -> None:
    with gw.engine.begin() as conn:
        cl.set_limits(conn, client, changes, (), "tests", "billing tests")
    asyncio.run_coroutine_threadsafe(gw.gw.limits.poll(), gw._loop()).result(10)


def _row_of(gw, rid: str) -> dict:
    """`rid`'s request row, sealed: an abandoned stream is recorded once its drain ends (at most
    ``relay.HANGUP_DRAIN_S`` after the hang-up), by a task the test cannot await, so it asks the ledger again."""
    deadline = time.monotonic() + 30
    while not gw.gw.ledger.find_rows("request_id", [rid], ["request_id"]):
        assert time.monotonic() < deadline, f"no row for {rid}"
        time.sleep(0.05)
    gw.drain()
    rows = [
        r for r in sealed_rows(gw.settings.lake_root) if r["request_id"] == rid and r["kind"] == "request"
    ]
    assert len(rows) == 1, rows
    return rows[0]


def _stop_clock(gw) -> None:
    """Stop the limiter's clock: its buckets do not refill during the test, so levels and counts are exact."""
    gw.gw.limits.clock = lambda: 1_000.0


def _abandon(url: str, chunks: int = 3) -> str:
    """A real client (``openai``) that reads `chunks` chunks of a stream's content and hangs up; its request id."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=0, timeout=30)
    stream = client.chat.completions.create(
        model="ratchet", messages=[{"role": "user", "content": LONG_ASK}], stream=True
    )
    rid = stream.response.headers["x-ratchet-request-id"]
    seen = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            seen += 1
            if seen == chunks:
                break
    stream.close()  # the connection closes: the gateway sees the client gone
    return rid


def test_a_stream_abandoned_before_its_usage_chunk_is_billed_counted(tmp_path: Path) -> None:
    """The upstream sends usage only in its last chunk, 8 s away; the client hangs up after three chunks. The row
    bills the prompt and the completion received, counted with the teacher's tokenizer, and says so; the client's
    spend and tokens per minute see it. (On the old code: 0 tokens, $0, nothing charged.)"""
    with faulty_upstream() as up, running_gateway(tmp_path, up.url) as gw:
        up.set("slow_stream", tokens=40, interval_ms=200)
        _stop_clock(gw)
        _limit(gw, "app1", tpm=100_000, budget_usd=100.0, budget_period="day")
        rid = _abandon(gw.url)
        row = _row_of(gw, rid)
        assert row["truncated"] and row["status_code"] == 200
        assert row["prompt_tokens"] > 50 and row["completion_tokens"] >= 3, row
        assert row["total_tokens"] == row["prompt_tokens"] + row["completion_tokens"]
        assert row["usage_source"] == "counted"
        assert row["actual_cost_usd"] > 0 and row["teacher_cost_usd"] == row["actual_cost_usd"]
        assert row["teacher_prompt_tokens"] == row["prompt_tokens"]
        # the client's budget and tokens per minute have it (this replica's view, as its next request meets it)
        view = httpx.get(f"{gw.url}/ratchet/dashboard/data", headers={"Authorization": f"Bearer {API_KEY}"})
        limits = view.json()["limits"]
        assert limits["spent_usd"] == pytest.approx(row["actual_cost_usd"])
        assert limits["tokens_available"] == pytest.approx(100_000 - row["total_tokens"])
        assert limits["in_flight_usd"] == 0  # its reservation is settled


def test_a_stream_abandoned_at_a_deployed_gateway_is_billed(tmp_path: Path) -> None:
    """The same hang-up against ``ratchet gateway`` in its own process (uvloop, its HTTP protocol, as deployed):
    the client's budget sees the abandoned stream's dollars, and its sealed row its counted tokens."""
    from ratchet_core.control_db import ensure_schema, make_engine

    control = f"sqlite:///{tmp_path / 'control.db'}"
    engine = make_engine(control)
    ensure_schema(engine)
    with (
        faulty_upstream() as up,
        gateway_process(tmp_path / "gw", up.url, {"RATCHET_CONTROL_DB": control}) as url,
    ):
        up.set("slow_stream", tokens=40, interval_ms=200)
        with engine.begin() as conn:
            cl.set_limits(conn, "app1", {"budget_usd": 100.0, "budget_period": "day"}, (), "tests", "billing")
        auth = {"Authorization": f"Bearer {API_KEY}"}

        def view() -> dict:
            return httpx.get(f"{url}/ratchet/dashboard/data", headers=auth, timeout=30).json()["limits"]

        deadline = time.monotonic() + 30
        while view().get("budget_usd") != 100.0:  # the gateway's next poll applies it: nothing to await
            assert time.monotonic() < deadline, "the gateway never applied the budget"
            time.sleep(0.1)
        rid = _abandon(url)
        while not view().get("spent_usd"):  # recorded once the drain (2 s) ends
            assert time.monotonic() < deadline + 30, "the abandoned stream was never billed"
            time.sleep(0.1)
        spent = view()["spent_usd"]
    rows = [r for r in sealed_rows(tmp_path / "gw" / "lake") if r["request_id"] == rid]
    assert len(rows) == 1 and spent > 0 and rows[0]["actual_cost_usd"] == pytest.approx(spent)
    assert rows[0]["prompt_tokens"] > 50 and rows[0]["completion_tokens"] >= 3
    assert rows[0]["usage_source"] == "counted" and rows[0]["truncated"]


def test_a_stream_abandoned_near_its_end_is_billed_as_the_upstream_reported(tmp_path: Path) -> None:
    """The upstream ends within the drain after the hang-up: its own usage is recorded (``reported``), the whole
    answer's, not the part the client read."""
    with faulty_upstream() as up, running_gateway(tmp_path, up.url) as gw:
        up.set("slow_stream", tokens=8, interval_ms=100)
        rid = _abandon(gw.url, chunks=1)
        row = _row_of(gw, rid)
        assert row["truncated"]
        asked = up.requests[-1].body["stream_options"]
        assert asked == {"include_usage": True}  # the gateway asks for usage
        assert row["completion_tokens"] == 6, row  # " t0" .. " t7": ceil(24 / 4), as the upstream reported
        assert row["prompt_tokens"] > 50 and row["actual_cost_usd"] > 0
        assert row["usage_source"] == "reported"


def test_an_upstream_that_reports_no_usage_is_billed_counted(tmp_path: Path) -> None:
    """A provider that sends no usage (streamed or not) does not make an answer free: it is counted, and says so.
    (On the old code: 0 tokens, $0.)"""
    with faulty_upstream() as up, running_gateway(tmp_path, up.url) as gw:
        up.set("ok", usage={})
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=API_KEY, max_retries=0, timeout=30)
        ask = [{"role": "user", "content": LONG_ASK}]
        plain = client.chat.completions.with_raw_response.create(model="ratchet", messages=ask)
        stream = client.chat.completions.create(model="ratchet", messages=ask, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert streamed == "The faulty upstream says hello."
        rows = [
            _row_of(gw, plain.headers["x-ratchet-request-id"]),
            _row_of(gw, stream.response.headers["x-ratchet-request-id"]),
        ]
        for row in rows:
            assert (
                row["prompt_tokens"] > 50 and row["completion_tokens"] > 3 and row["actual_cost_usd"] > 0
            ), row
            assert row["usage_source"] == "counted" and not row["truncated"] and row["status_code"] == 200


ASK_TOKENS = 150  # max_tokens of the concurrent requests below


def _burst(gw, n: int = 16, **body) -> list[httpx.Response]:
    """`n` chat requests of app1 at once (the teacher answers each after 2 s, so all are in flight together)."""
    ask = {"model": "ratchet", "messages": [{"role": "user", "content": LONG_ASK}], **body}

    def one(_: int) -> httpx.Response:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        return httpx.post(f"{gw.url}/v1/chat/completions", headers=headers, json=ask, timeout=60)

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def _used(answers: list[httpx.Response]) -> int:
    return sum(r.json()["usage"]["total_tokens"] for r in answers if r.status_code == 200)


def test_sixteen_concurrent_requests_are_admitted_by_reservation_within_tokens_per_minute(
    tmp_path: Path,
) -> None:
    """Tokens/min 1,000 and 16 concurrent requests (prompt ~100 tokens, max_tokens 150): only what the limit
    holds is admitted, each reserving its worst case before it is sent. (On the old code all 16 were admitted,
    since an answer's tokens were charged only once it was known.)"""
    with faulty_upstream() as up, running_gateway(tmp_path, up.url) as gw:
        up.set("ok", delay_ms=2_000)
        _stop_clock(gw)
        _limit(gw, "app1", tpm=1_000)
        answers = _burst(gw, max_tokens=ASK_TOKENS)
        admitted = [r for r in answers if r.status_code == 200]
        refused = [r for r in answers if r.status_code == 429]
        assert len(admitted) + len(refused) == 16, [r.text for r in answers]
        reserve = (
            gw.gw.teacher_equivalent.count({"messages": [{"role": "user", "content": LONG_ASK}]}) + ASK_TOKENS
        )
        print(f"tokens/min 1000, 16 concurrent: {len(admitted)} admitted, reserving {len(admitted) * reserve} "
              f"tokens and using {_used(answers)}")  # fmt: skip
        assert len(admitted) >= 1_000 // reserve and refused  # as many as their worst cases fit (more only as
        # answers settle and give back what they did not use)
        assert _used(answers) <= 1_000  # one replica: no overshoot when every request states max_tokens
        for r in refused:
            err = r.json()["error"]
            assert err["type"] == "tokens" and 1 <= int(r.headers["retry-after"]) <= 60, r.text
            assert f"reserves {reserve} tokens" in err["message"]
        # settled: the bucket holds the limit less what was used, not less what was reserved
        view = httpx.get(f"{gw.url}/ratchet/dashboard/data", headers={"Authorization": f"Bearer {API_KEY}"})
        assert view.json()["limits"]["tokens_available"] == pytest.approx(1_000 - _used(answers))


def test_a_request_larger_than_the_limit_is_refused_outright_never_a_lockout(tmp_path: Path) -> None:
    """The issue's tenant: tokens/min 100 and 16 concurrent 3,000-token chats. Each is a 400 that says why (no wait
    would let it through); none reaches the teacher; a small request right after is served: no lockout. (On the
    old code all 16 were served, ~48,000 tokens, and the client was then locked out for hours.)"""
    with faulty_upstream() as up, running_gateway(tmp_path, up.url) as gw:
        up.set("ok", delay_ms=2_000)
        _stop_clock(gw)
        _limit(gw, "app1", tpm=100)
        huge = "word " * 3_000
        answers = _burst(gw, messages=[{"role": "user", "content": huge}])
        print(f"tokens/min 100, 16 concurrent 3,000-token chats: {sum(r.status_code == 200 for r in answers)} "
              f"admitted, {_used(answers)} tokens used")  # fmt: skip
        assert [r.status_code for r in answers] == [400] * 16, [r.text[:200] for r in answers]
        err = answers[0].json()["error"]
        assert (
            err["code"] == "request_too_large"
            and err["param"] == "messages"
            and "100 tokens/min" in err["message"]
        )
        assert not up.requests  # nothing was sent
        small = {"model": "ratchet", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
        r = httpx.post(
            f"{gw.url}/v1/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"}, json=small
        )
        assert r.status_code == 200, r.text


def test_a_refusal_after_a_burst_never_waits_more_than_the_minute_it_is_owed(tmp_path: Path) -> None:
    """However much a burst used (an upstream that reports more than was reserved: here 2,000 completion tokens
    for max_tokens 20), the bucket never goes below empty: the next refusal's retry-after is at most 60 s, and a
    minute later (on the limiter's clock) the client is served. (On the old code: a debt of the whole burst.)"""
    with faulty_upstream() as up, running_gateway(tmp_path, up.url) as gw:
        up.set(
            "ok",
            delay_ms=500,
            usage={"prompt_tokens": 100, "completion_tokens": 2_000, "total_tokens": 2_100},
        )
        now = [1_000.0]
        gw.gw.limits.clock = lambda: now[0]
        _limit(gw, "app1", tpm=600)
        first = _burst(gw, max_tokens=20)
        assert any(r.status_code == 200 for r in first)
        r = _burst(gw, n=1, max_tokens=20)[0]
        assert r.status_code == 429 and int(r.headers["retry-after"]) <= 60, (r.status_code, r.headers)
        now[0] += 60  # the window it is owed
        assert _burst(gw, n=1, max_tokens=20)[0].status_code == 200


def test_a_budget_is_not_overshot_by_concurrent_requests(tmp_path: Path) -> None:
    """A $0.004 daily budget and 16 concurrent requests (each worst case ~$0.0018, each answer ~$0.0003): requests
    are admitted while their worst cases fit; the others wait for those in flight (429 ``budget_in_flight``,
    retry in 1 s); the spend ends within the budget. (On the old code all 16 were admitted: ~$0.0055.)"""
    with faulty_upstream() as up, running_gateway(tmp_path, up.url) as gw:
        up.set("ok", delay_ms=2_000)
        _limit(gw, "app1", budget_usd=0.004, budget_period="day")
        answers = _burst(gw, max_tokens=ASK_TOKENS)
        spent = gw.gw.limits.spent("app1", cl.window("day", gw.gw.limits.today()))
        print(f"budget $0.004, 16 concurrent: {sum(r.status_code == 200 for r in answers)} admitted, "
              f"spent ${spent:.5f}")  # fmt: skip
        assert spent <= 0.004, spent
        waited = [r for r in answers if r.status_code == 429]
        assert waited and all(r.json()["error"]["code"] == "budget_in_flight" for r in waited)
        assert all(r.headers["retry-after"] == "1" for r in waited)
        # one after another, the client spends its budget, passing it by at most one request
        up.set("ok")
        for _ in range(40):
            r = _burst(gw, n=1, max_tokens=ASK_TOKENS)[0]
            if r.status_code == 429:
                break
        spent = gw.gw.limits.spent("app1", cl.window("day", gw.gw.limits.today()))
        print(f"budget $0.004, then one at a time: spent ${spent:.5f} when refused")
        assert r.json()["error"]["code"] == "insufficient_quota" and 0.004 <= spent < 0.004 + 0.0018, spent


# --------------------------------------------------------------------------------------------------------------------
# Nested ways to litellm's arguments (issue 34, point 1, reviewed): what litellm reads inside a body (a content part
# it does not know, a key of its own in a part, a tool or a message) becomes a provider's block or header: a document
# fetched by URL, a code-execution container with a stored file (and `anthropic-beta` headers), raw blocks before an
# assistant message's content. Parts and tools are closed (a 400 naming the key); a message's own extra keys never
# reach litellm.
# --------------------------------------------------------------------------------------------------------------------
def _parts(*parts: dict) -> dict:
    return {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, *parts]}]}


_FN = {"name": "f", "parameters": {"type": "object"}}


@pytest.mark.parametrize(
    "path, body, param",
    [
        (
            "/v1/chat/completions",
            _parts({"type": "document", "source": {"type": "url", "url": "https://x.example/a.pdf"}}),
            "messages.0.content.1.type",
        ),
        (
            "/v1/chat/completions",
            _parts({"type": "search_result", "source": "x"}),
            "messages.0.content.1.type",
        ),
        (
            "/v1/chat/completions",
            _parts({"type": "file", "file": {"file_id": "file-abc"}}),
            "messages.0.content.1.file.file_id",
        ),
        (
            "/v1/chat/completions",
            _parts({"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}}),
            "messages.0.content.1.cache_control",
        ),
        (
            "/v1/chat/completions",
            _parts(
                {
                    "type": "image_url",
                    "image_url": {"url": "https://x.example/a", "format": "application/pdf"},
                }
            ),
            "messages.0.content.1.image_url.format",
        ),
        (
            "/v1/chat/completions",
            {**CHAT, "tools": [{"type": "function", "function": _FN, "defer_loading": True}]},
            "tools.0.defer_loading",
        ),
        (
            "/v1/chat/completions",
            {
                **CHAT,
                "tools": [{"type": "function", "function": {**_FN, "allowed_callers": ["code_execution"]}}],
            },
            "tools.0.function.allowed_callers",
        ),
        (
            "/v1/responses",
            {
                **RESPONSES,
                "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-abc"}]}],
            },
            "input[0].content[0].file_id",
        ),
        (  # a tool's answer is text: litellm makes an image there a fetch from the gateway, a file a document
            "/v1/chat/completions",
            {
                **CHAT,
                "tools": [{"type": "function", "function": _FN}],
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                        ],
                    },
                    {
                        "role": "tool",
                        "tool_call_id": "c1",
                        "content": [{"type": "image_url", "image_url": {"url": "http://x.example/a.png"}}],
                    },
                ],
            },
            "messages.2.content.0.type",
        ),
        (
            "/v1/chat/completions",
            {**CHAT, "functions": [{**_FN, "cache_control": {"type": "ephemeral"}}]},
            "functions.0.cache_control",
        ),
    ],
    ids=[
        "document",
        "search-result",
        "file-id",
        "cache-control",
        "image-format",
        "tool-key",
        "function-key",
        "responses-file-id",
        "tool-image",
        "functions-key",
    ],
)
def test_no_nested_key_reaches_a_litellm_teacher(tmp_path: Path, listeners, path, body, param) -> None:
    from .conftest import running_gateway

    root, rec, attacker = listeners
    with running_gateway(tmp_path, root, teacher_model="anthropic/demo-teacher", teacher_api_base=root) as g:
        before = len(rec.seen)
        r = _post(g.url, path, body)
        assert r.status_code == 400, (param, r.status_code, r.text[:300])
        assert r.json()["error"]["param"] == param and param in r.json()["error"]["message"], r.text
        assert len(rec.seen) == before, f"{param} reached the teacher: {rec.seen[before:]}"


def test_an_echoed_message_smuggles_no_block_to_a_litellm_teacher(tmp_path: Path, listeners) -> None:
    """An assistant message's `provider_specific_fields` (litellm puts its `compaction_blocks` before the content,
    raw), `thinking_blocks` and `cache_control` are taken, as an answer echoed back carries them, and never sent."""
    from .conftest import running_gateway

    root, rec, attacker = listeners
    smuggled = {
        "role": "assistant",
        "content": "b",
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
        "thinking_blocks": [{"type": "thinking", "thinking": "x", "signature": "s"}],
        "provider_specific_fields": {
            "compaction_blocks": [
                {"type": "document", "source": {"type": "url", "url": attacker.url + "/a.pdf"}}
            ]
        },
    }
    body = {
        **CHAT,
        "messages": [{"role": "user", "content": "a"}, smuggled, {"role": "user", "content": "c"}],
    }
    with running_gateway(tmp_path, root, teacher_model="anthropic/demo-teacher", teacher_api_base=root) as g:
        before = len(rec.seen)
        for stream in (False, True):
            r = _post(g.url, "/v1/chat/completions", {**body, "stream": stream})
            assert r.status_code == 200, r.text
        sent = rec.seen[before:]
    assert len(sent) == 2 and not attacker.rec.seen
    for _, headers, raw in sent:
        assert "anthropic-beta" not in headers, headers
        for m in json.loads(raw)["messages"]:
            assert all(b["type"] == "text" and set(b) == {"type", "text"} for b in m["content"]), m


# A service tier billed at other rates than the ledger's (every row is priced at the standard ones): a client's
# `priority` would bill the operator more than its own budget and the receipts see.
@pytest.mark.parametrize("tier", ["priority", "scale", "flex"])
@pytest.mark.parametrize("path, body", [("/v1/chat/completions", CHAT), ("/v1/responses", RESPONSES)])
def test_a_service_tier_priced_otherwise_is_a_400(recorded_gateway, path, body, tier) -> None:
    g, rec = recorded_gateway
    before = len(rec.seen)
    r = _post(g.url, path, {**body, "service_tier": tier})
    assert r.status_code == 400 and r.json()["error"]["param"] == "service_tier", r.text
    assert len(rec.seen) == before
    assert _post(g.url, path, {**body, "service_tier": "default"}).status_code == 200
    assert json.loads(rec.seen[-1][2])["service_tier"] == "default"


# An upstream 401 or 403 is about the operator's key: a client never gets it as its own (its SDK would blame its own
# key), nor the provider's words about the operator's key, whatever the path or the API; a 429 is about the
# operator's account, and its words (the organization, what every client together used) are not passed on either.
class _Refusing:
    """A teacher that refuses the gateway's key as OpenAI and Anthropic do, quoting part of it (or, with 429, names
    the operator's organization and its account's use)."""

    def __init__(self, status: int) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("content-length") or 0))
                key = (self.headers.get("authorization") or self.headers.get("x-api-key") or "").split()[-1]
                body = json.dumps(
                    {
                        "type": "error",
                        "error": {
                            "type": "authentication_error",
                            "message": f"Incorrect API key provided: {key[:6]}****{key[-4:]}."
                            if status != 429
                            else "Rate limit reached in organization org-operator on tokens per min: Limit "
                            "30000, Used 29500, Requested 900.",
                        },
                    }
                ).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.parametrize("status", [401, 403, 429])
@pytest.mark.parametrize(
    "teacher", ["openai/demo-teacher", "anthropic/demo-teacher"], ids=["own-client", "litellm"]
)
def test_an_upstream_refusing_the_operators_account_quotes_nothing(tmp_path: Path, teacher, status) -> None:
    from .conftest import running_gateway

    refusing = _Refusing(status)
    base = refusing.url + "/v1" if teacher.startswith("openai/") else refusing.url
    try:
        with running_gateway(tmp_path, base, teacher_model=teacher, teacher_api_base=base) as g:
            for path, body in (
                ("/v1/chat/completions", CHAT),
                ("/v1/chat/completions", {**CHAT, "stream": True}),
                ("/v1/responses", RESPONSES),
                ("/v1/messages", MESSAGES),
            ):
                r = _post(g.url, path, body)
                assert r.status_code == (429 if status == 429 else 502), (path, r.status_code, r.text)
                for said in (TEACHER_KEY[:6], "Incorrect API key", "org-operator", "29500"):
                    assert said not in r.text, r.text
    finally:
        refusing.server.shutdown()
        refusing.server.server_close()


# A 400 names a client's key safely wherever it is: a key with a bidi override, a line break, a NUL and 5,000
# characters is shown escaped and cut, in `param` and in the message (as a top-level one always was).
_KEY = "\u202eevil\r\nX-Injected: 1\x00" + "A" * 5000


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/chat/completions", {**CHAT, "stream": True, "stream_options": {_KEY: True}}),
        ("/v1/chat/completions", {**CHAT, "response_format": {"type": "text", _KEY: 1}}),
        ("/v1/chat/completions", {**CHAT, "metadata": {"\u202eab\n": "x" * 600}}),
        ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function", "function": _FN, _KEY: 1}]}),
        ("/v1/chat/completions", _parts({"type": "text", "text": "x", _KEY: 1})),
        ("/v1/responses", {**RESPONSES, "metadata": {_KEY: 1}}),
        ("/v1/messages", {**MESSAGES, "metadata": {"user_id": "u", _KEY: "x"}}),
        (_KEY, None),
    ],
    ids=[
        "stream-options",
        "response-format",
        "metadata",
        "tool",
        "part",
        "responses-metadata",
        "messages",
        "top",
    ],
)
def test_an_error_names_a_clients_key_escaped_and_cut(recorded_gateway, path, body) -> None:
    g, rec = recorded_gateway
    if body is None:  # a top-level key
        path, body = "/v1/chat/completions", {**CHAT, _KEY: 1}
    before = len(rec.seen)
    r = _post(g.url, path, body)
    assert r.status_code == 400, r.text
    param, message = _error(r)
    for text in (param or "", message):
        assert "\u202e" not in text and "\r" not in text and "\n" not in text and "\x00" not in text, text
        assert "A" * 100 not in text, text[:200]
    assert len(rec.seen) == before
