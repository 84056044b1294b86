"""Gateway fixtures: the real demo teacher (as teacher, and as a stand-in student that returns logprobs) on
loopback, a gateway built by ``create_app`` on a free port, signed manifests through ``ratchet_core.manifest``."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ratchet_core.settings import Settings
from tests.serve import free_port, serve_in_thread, wait_healthy

API_KEY = "sk-app1-0123456789abcdef"
OTHER_KEY = "sk-app2-fedcba9876543210"
ADMIN_KEY = "admin-key-for-tests"
STUDENT_VERSION = "v1-abc123"


@pytest.fixture(scope="module")
def teacher_url() -> Iterator[str]:
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app

    with serve_in_thread(create_app(DemoTeacherConfig(model="demo-teacher"))) as url:
        yield url + "/v1"


@pytest.fixture(scope="module")
def student_url() -> Iterator[str]:
    """A demo teacher serving model STUDENT_VERSION: correct answers with logprobs, like a well-trained student."""
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app

    with serve_in_thread(create_app(DemoTeacherConfig(model=STUDENT_VERSION))) as url:
        yield url + "/v1"


def _by_model(apps: dict[str, Any]):
    """One ASGI app serving several demo models: each request goes to the app named by its body's ``model``."""
    import orjson

    first = next(iter(apps.values()))

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                kind = msg["type"].rsplit(".", 1)[-1]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        body, replay = await buffered(receive)
        try:
            model = orjson.loads(body).get("model") if body else None
        except (orjson.JSONDecodeError, AttributeError):
            model = None
        await apps.get(model, first)(scope, replay, send)

    return app


async def buffered(receive):
    """(the whole request body read from ASGI `receive`, a receive that hands it on again, then goes on)."""
    chunks, more = [], True
    while more:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        more = msg.get("more_body", False)
    body = b"".join(chunks)
    replayed = False

    async def replay():
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


@contextmanager
def two_version_student(good: str, bad: str) -> Iterator[str]:
    """A student server with two versions: `good` answers like the teacher, `bad` is wrong on every request."""
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app

    apps = {
        good: create_app(DemoTeacherConfig(model=good)),
        bad: create_app(DemoTeacherConfig(model=bad, wrong_rate=1.0)),
    }
    with serve_in_thread(_by_model(apps)) as url:
        yield url + "/v1"


@dataclass
class RunningGateway:
    url: str
    settings: Settings
    app: Any
    private_key: Any
    engine: Any

    @property
    def gw(self):
        return self.app.state.gateway

    def publish(self, **tasks: dict) -> None:
        """Sign and store a manifest with these task releases, then make the gateway apply it now."""
        from tests.evidence.manifests import write_signed_manifest

        flags = tasks.pop("_flags", None)
        write_signed_manifest(self.engine, self.private_key, tasks=tasks, flags=flags)
        self.poll()

    def poll(self) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self.gw.poll_once(), self._loop()).result(10)

    def _loop(self):
        return self.gw._poller.get_loop()

    def drain(self) -> None:
        """Wait for off-path pair calls, then load and seal everything written so far."""
        import asyncio

        async def wait_bg():
            if self.gw._bg:
                await asyncio.wait(list(self.gw._bg), timeout=20)

        asyncio.run_coroutine_threadsafe(wait_bg(), self._loop()).result(30)
        self.gw.ledger.seal_now()


def sealed_rows(lake: Path | str) -> list[dict]:
    rows: list[dict] = []
    for path in sorted(glob.glob(f"{lake}/traffic/day=*/*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


@contextmanager
def running_gateway(
    tmp_path: Path, teacher_url: str, student_url: str | None = None, options: dict | None = None, **overrides
) -> Iterator[RunningGateway]:
    from ratchet_core.control_db import make_engine
    from ratchet_gateway.app import GatewayOptions, create_app
    from ratchet_stats.keys import generate_private_key

    home = tmp_path / "home"
    values = dict(
        home=home,
        api_keys=f"app1:{API_KEY},app2:{OTHER_KEY}",
        admin_key=ADMIN_KEY,
        teacher_model="openai/demo-teacher",
        teacher_api_base=teacher_url,
        teacher_api_key="sk-teacher-upstream",
        student_base_url=student_url or "http://127.0.0.1:9/v1",
        segment_seconds=3600,
        manifest_poll_seconds=0.2,
        student_timeout_s=5,
        upstream_timeout_s=10,
    )
    values.update(overrides)
    settings = Settings(**values)
    key = generate_private_key()
    app = create_app(
        settings,
        GatewayOptions(replica="gw", public_keys=[key.public_key()], load_interval=0.05, **(options or {})),
    )
    with serve_in_thread(app) as url:
        yield RunningGateway(url, settings, app, key, make_engine(settings.control_db_url))


@contextmanager
def gateway_process(home: Path, teacher_url: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``ratchet gateway`` in a process of its own (uvloop, its HTTP protocol, as deployed) on a free port, in front
    of `teacher_url`; yields its base URL once ``/readyz`` answers, stops it with SIGTERM (drain, seal) after."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    base.update(
        RATCHET_HOME=str(home),
        RATCHET_API_KEYS=f"app1:{API_KEY},app2:{OTHER_KEY}",
        RATCHET_TEACHER_API_BASE=teacher_url,
        RATCHET_STUDENT_BASE_URL="http://127.0.0.1:9/v1",
        RATCHET_MANIFEST_POLL_SECONDS="0.3",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        **(env or {}),
    )
    ratchet = Path(sys.executable).with_name("ratchet")
    with (home / "gateway.log").open("w") as log:
        proc = subprocess.Popen(
            [str(ratchet), "gateway", "--port", str(port), "--log-level", "info"],
            env=base,
            cwd=home,
            start_new_session=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(proc, url + "/readyz", f"gateway in {home}", 90)
            yield url
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
