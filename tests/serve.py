"""Run an ASGI app on loopback in a background thread, for tests and benchmarks."""

from __future__ import annotations

import random
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

_draw = random.SystemRandom()


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out by itself (Linux: ip_local_port_range; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, for a server another process will bind.

    Drawn at random below the kernel's ephemeral range: the kernel never gives such a port to a bind(0) or an
    outgoing connection, so between this probe and the server's bind only someone drawing the same number (1 in
    ~15,000) could take it, while a port from bind(0) lies in the range the kernel keeps handing out. The draw
    uses the OS's randomness, not `random`'s global state (a test that seeds it must not make two workers agree).
    """
    high = _ephemeral_low()
    low = max(1024, high - 15_000)
    for _ in range(200):
        port = _draw.randrange(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # that range is full: any port the kernel finds
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_in_thread(app, port: int | None = None, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve `app` until the block exits; yields its base URL (http://host:port). Waits until it accepts.

    The socket is bound here and handed to uvicorn: with no port given, the kernel's free one is held from the
    start, so a server starting beside it (another test worker) cannot take it between a probe and the bind.
    """
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port or 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True
    )
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
        sock.close()


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
