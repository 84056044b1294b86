"""The gateway's lean HTTP/1.1 client against hand-written loopback servers: framing, keep-alive, the stale
connection race, failures, and no header injection."""

from __future__ import annotations

import asyncio

import pytest

from ratchet_gateway import http1
from tests.serve import free_port

HEADERS = http1.header_block({"Content-Type": "application/json"})


async def _server(answer, log: list):
    """Serve `answer(request_index, writer)` for each request read; log (connection id, request head)."""
    conns = 0

    async def handle(reader, writer):
        nonlocal conns
        conns += 1
        me = conns
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
                log.append((me, head, body))
                if not await answer(len(log), writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    port = free_port()
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    return server, f"http://127.0.0.1:{port}/v1"


def _run(coro):
    return asyncio.run(coro)


def test_framings_and_keep_alive():
    async def answer(i, w):
        if i == 1:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        elif i == 2:
            w.write(
                b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
            )
        else:
            w.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
            await w.drain()
            return False
        await w.drain()
        return True

    async def main():
        log: list = []
        server, url = await _server(answer, log)
        pool = http1.Pool(url)
        out = []
        for _ in range(3):
            r = await pool.post("/chat/completions", b'{"a": 1}', HEADERS, 5)
            out.append((r.status, await r.read()))
            r.release()
        pool.close()
        server.close()
        return out, log

    out, log = _run(main())
    assert out == [(200, b"hello"), (201, b"abcde"), (200, b"until the end")]
    assert [c for c, _, _ in log] == [1, 1, 1]  # one connection, kept alive
    assert (
        log[0][1].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
        and log[0][2] == b'{"a": 1}'
    )


def test_a_connection_the_server_closed_is_replaced_and_the_request_sent_once():
    async def answer(i, w):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await w.drain()
        return False  # closes after each answer without saying so (keep-alive by default in HTTP/1.1)

    async def main():
        log: list = []
        server, url = await _server(answer, log)
        pool = http1.Pool(url)
        bodies = []
        for _ in range(3):
            r = await pool.post("/x", b"{}", HEADERS, 5)
            bodies.append(await r.read())
            r.release()  # back to the pool: the close may not have been seen yet
        pool.close()
        server.close()
        return bodies, log

    bodies, log = _run(main())
    assert bodies == [b"ok"] * 3 and len(log) == 3  # each request reached the server exactly once


def test_failures_are_typed():
    async def answer(i, w):
        if i == 1:
            w.write(b"NOT HTTP AT ALL\r\n\r\n")
        else:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")
        await w.drain()
        return False

    async def main():
        log: list = []
        server, url = await _server(answer, log)
        pool = http1.Pool(url)
        with pytest.raises(http1.BadResponse):
            await pool.post("/x", b"{}", HEADERS, 5)
        r = await pool.post("/x", b"{}", HEADERS, 5)
        with pytest.raises(http1.Disconnected) as cut:
            await r.read()
        assert not cut.value.before_headers
        r.release()
        server.close()
        await server.wait_closed()
        with pytest.raises(http1.ConnectFailed):
            await http1.Pool(url).post("/x", b"{}", HEADERS, 5)

    _run(main())


def test_a_cancelled_exchange_never_returns_its_connection():
    async def answer(i, w):
        if i == 1:
            return True  # never answers the first request
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await w.drain()
        return True

    async def main():
        log: list = []
        server, url = await _server(answer, log)
        pool = http1.Pool(url)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await pool.post("/x", b"{}", HEADERS, 5)
        r = await pool.post("/x", b"{}", HEADERS, 5)
        assert await r.read() == b"ok"
        r.release()
        pool.close()
        server.close()
        return log

    log = _run(main())
    assert [c for c, _, _ in log] == [1, 2]  # the second request went on a new connection


@pytest.mark.parametrize("value", ["a\r\nX-Evil: 1", "a\nb", "nul\x00", "caf\u00e9"])
def test_header_values_that_could_split_a_request_are_refused(value):
    with pytest.raises(ValueError):
        http1.header_block({"X-Ratchet-Task": value})
