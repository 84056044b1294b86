"""Run an ASGI app on loopback in a background thread, for tests and benchmarks."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_in_thread(app, port: int | None = None, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve `app` until the block exits; yields its base URL (http://host:port). Waits until it accepts."""
    port = port or free_port()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"server on port {port} failed to start")
        if time.monotonic() > deadline:
            raise TimeoutError(f"server on port {port} did not start in 30 s")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def wait_healthy(proc: subprocess.Popen, url: str, what: str, seconds: float = 60) -> None:
    """Wait until ``GET url`` answers 200 from the server `proc` started; fail with its output if it exits or
    `seconds` pass."""
    import httpx

    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:
            out = proc.stdout or proc.stderr
            raise AssertionError(f"{what} exited: {out.read()[-2000:] if out else ''}")
        try:
            if httpx.get(url).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{what} did not start in {seconds:g} s"
        time.sleep(0.2)
