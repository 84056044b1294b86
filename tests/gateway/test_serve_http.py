"""``ratchet gateway``'s HTTP protocol (``ratchet_gateway.serve_http``): with ``ratchet.hold_head`` the head of a
response leaves with its body (one socket write); without it uvicorn's behaviour is unchanged."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn

from ratchet_gateway.serve_http import EXTENSION, GatewayHttpProtocol


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/hold":
        scope["extensions"][EXTENSION]()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    await asyncio.sleep(0.5)  # the body comes later: does the head wait for it?
    await send({"type": "http.response.body", "body": b"hello"})


def _serve():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_app, http=GatewayHttpProtocol, loop="uvloop", log_level="error", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, thread, sock.getsockname()[1]


def _first_bytes_after(port: int, path: str) -> tuple[float, bytes]:
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
        t = time.monotonic()
        first = c.recv(65536)
        waited = time.monotonic() - t
        data = first
        while not data.endswith(b"hello"):
            data += c.recv(65536)
        return waited, first if first.endswith(b"hello") else data


def test_hold_head_sends_head_and_body_together_and_plain_responses_are_unchanged():
    server, thread, port = _serve()
    try:
        waited, got = _first_bytes_after(port, "/hold")
        assert waited >= 0.4 and got.startswith(b"HTTP/1.1 200") and got.endswith(b"\r\n\r\nhello")
        waited, _ = _first_bytes_after(port, "/plain")
        assert waited < 0.4  # the head went out at once
    finally:
        server.should_exit = True
        thread.join(10)
