"""kill -9 during load, restart: every request that got a 200 is in the sealed segments exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import httpx
import pytest

from tests.serve import free_port

from .conftest import API_KEY, sealed_rows


def _start(home: Path, port: int, teacher_url: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    env.update(
        RATCHET_HOME=str(home),
        RATCHET_API_KEYS=f"app1:{API_KEY}",
        RATCHET_TEACHER_API_BASE=teacher_url,
        RATCHET_STUDENT_BASE_URL="http://127.0.0.1:9/v1",
        RATCHET_SEGMENT_SECONDS="0.5",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    ratchet = Path(sys.executable).with_name("ratchet")
    proc = subprocess.Popen(
        [str(ratchet), "gateway", "--port", str(port)], env=env, cwd=home.parent, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "gateway exited during start-up"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)  # polling readiness of another process: there is no event to await
    proc.kill()
    raise TimeoutError("gateway did not become ready in 60 s")


async def _load(url: str, ok: list[str], stop_after: int | None, concurrency: int = 16) -> None:
    body = {"model": "ratchet", "messages": [{"role": "user", "content": "hello"}]}
    headers = {"Authorization": f"Bearer {API_KEY}"}
    done = asyncio.Event()

    async def worker(session: aiohttp.ClientSession, i: int) -> None:
        n = 0
        while not done.is_set():
            n += 1
            body_i = {**body, "messages": [{"role": "user", "content": f"hello {i}-{n}"}]}
            try:
                async with session.post(url, json=body_i, headers=headers) as resp:
                    await resp.read()
                    if resp.status == 200:
                        ok.append(resp.headers["x-ratchet-request-id"])
                        if stop_after is not None and len(ok) >= stop_after:
                            done.set()
            except (TimeoutError, aiohttp.ClientError):
                done.set()  # the gateway died under us
                return

    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(worker(session, i) for i in range(concurrency)))


@pytest.mark.slow
def test_kill_9_under_load_loses_no_acknowledged_request(tmp_path, teacher_url):
    home = tmp_path / "home"
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    ok: list[str] = []
    proc = _start(home, port, teacher_url)
    try:
        killer_fired = asyncio.Event()

        async def load_then_kill() -> None:
            async def killer() -> None:
                while len(ok) < 150:
                    await asyncio.sleep(0.005)
                os.killpg(proc.pid, signal.SIGKILL)  # mid-load: requests are in flight
                killer_fired.set()

            await asyncio.gather(_load(url, ok, None), killer())

        asyncio.run(load_then_kill())
        proc.wait(10)
        assert proc.returncode == -signal.SIGKILL and len(ok) >= 150
        first_run = len(ok)
        proc = _start(home, port, teacher_url)  # restart: replays the journal tail
        asyncio.run(_load(url, ok, first_run + 50, concurrency=4))
        proc.send_signal(signal.SIGTERM)  # graceful: seals what is left
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    rows = [r for r in sealed_rows(home / "lake") if r["kind"] == "request"]
    ids = [r["request_id"] for r in rows]
    assert len(ids) == len(set(ids)), "a row was sealed twice"
    missing = set(ok) - set(ids)
    assert not missing, f"{len(missing)} acknowledged requests lost"
    seqs = sorted(r["seq"] for r in rows)
    assert seqs == list(range(1, len(seqs) + 1))  # gap-free, no duplicates, one replica slot reused
    assert {r["replica"] for r in rows} == {rows[0]["replica"]}
