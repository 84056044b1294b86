"""``ratchet gateway``'s HTTP protocol (``ratchet_gateway.serve_http``): with ``ratchet.hold_head`` the head of a
response leaves with its body (one socket write); without it uvicorn's behaviour is unchanged."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn

from ratchet_gateway.serve_http import EXTENSION, GatewayHttpProtocol

# The client says "I have read the first bytes" here; the app waits for it before the body of /plain, so that a
# head sent at once arrives alone, whatever the machine's load. /hold waits for it too, but only briefly: with the
# head held back the client cannot read anything before the body exists.
_first_read = threading.Event()


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/hold":
        scope["extensions"][EXTENSION]()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    wait_s = 0.5 if scope["path"] == "/hold" else 30.0  # does the head wait for the body?
    await asyncio.get_running_loop().run_in_executor(None, _first_read.wait, wait_s)
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


def _first_bytes(port: int, path: str) -> bytes:
    """What the first read on a fresh connection returns (the rest of the response is read and dropped)."""
    _first_read.clear()
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
        first = c.recv(65536)
        _first_read.set()
        data = first
        while not data.endswith(b"hello"):
            data += c.recv(65536)
        return first


def test_hold_head_sends_head_and_body_together_and_plain_responses_are_unchanged():
    server, thread, port = _serve()
    try:
        got = _first_bytes(port, "/hold")
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"\r\n\r\nhello")  # one write: head and body
        got = _first_bytes(port, "/plain")
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"\r\n\r\n")  # the head went out alone
    finally:
        _first_read.set()
        server.should_exit = True
        thread.join(10)
