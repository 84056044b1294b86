"""The gateway's lean HTTP/1.1 client against hand-written loopback servers: framing, keep-alive, the stale
connection race, a request never sent twice when the server may have read it, the response cap, proxies
(CONNECT tunnels for https, absolute-form for http, NO_PROXY), failures, and no header injection."""

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


def test_one_read_returns_every_chunk_that_arrived_together_and_waits_for_later_ones():
    later = asyncio.Event()

    async def answer(i, w):
        # three HTTP chunks in one write, then (once the client has read them) one more and the end
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n1\r\nf\r\n")
        await w.drain()
        await later.wait()
        w.write(b"2\r\ngh\r\n0\r\n\r\n")
        await w.drain()
        return True

    async def main():
        server, url = await _server(answer, [])
        pool = http1.Pool(url)
        r = await pool.post("/chat/completions", b"{}", HEADERS, 5)
        pieces = []
        while b"f" not in b"".join(pieces):
            pieces.append(await r.chunk())
        later.set()
        while piece := await r.chunk():
            pieces.append(piece)
        r.release()
        pool.close()
        server.close()
        return pieces

    pieces = _run(main())
    assert b"".join(pieces) == b"abcdefgh"
    # the first write's three chunks come back in one read (the relay sends them in one write), the later one apart
    assert pieces[-1] == b"gh" and b"abcdef" in pieces


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


def test_a_server_that_reads_the_whole_request_then_closes_gets_it_once():
    """It may have acted on it (a paid model billed it): the client is told, the request is not sent again."""

    async def answer(i, w):
        if i == 1:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await w.drain()
            return True  # kept alive
        return False  # read the whole second request, then close without a word

    async def main():
        log: list = []
        server, url = await _server(answer, log)
        pool = http1.Pool(url)
        r = await pool.post("/x", b'{"n": 1}', HEADERS, 5)
        assert await r.read() == b"ok"
        r.release()  # the second request goes on this kept-alive connection
        with pytest.raises(http1.Disconnected) as cut:
            await pool.post("/x", b'{"n": 2}', HEADERS, 5)
        assert cut.value.before_headers and cut.value.sent
        with pytest.raises(http1.Disconnected):  # on a fresh connection too: once
            await pool.post("/x", b'{"n": 3}', HEADERS, 5)
        pool.close()
        server.close()
        return log

    log = _run(main())
    assert [body for _, _, body in log] == [b'{"n": 1}', b'{"n": 2}', b'{"n": 3}']  # each exactly once


def test_the_upstream_answers_502_and_asks_once(tmp_path):
    from ratchet_gateway.errors import GatewayError
    from ratchet_gateway.upstream import Upstream

    async def answer(i, w):
        return False

    async def main():
        log: list = []
        server, url = await _server(answer, log)
        up = Upstream("m", url, None, 5, resolve=False)
        await up.start()
        with pytest.raises(GatewayError) as err:
            await up.complete({"messages": []})
        await up.close()
        server.close()
        return err.value, log

    err, log = _run(main())
    assert err.status == 502 and err.code == "upstream_bad_response" and "not asked again" in err.message
    assert len(log) == 1


def test_a_response_larger_than_the_cap_is_refused():
    async def answer(i, w):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2000000\r\n\r\n" + b"x" * 2_000_000)
        await w.drain()
        return True

    async def main():
        log: list = []
        server, url = await _server(answer, log)
        pool = http1.Pool(url, max_response_bytes=1_000_000)
        r = await pool.post("/x", b"{}", HEADERS, 5)
        with pytest.raises(http1.TooLarge):
            await r.read()
        r.release()
        pool.close()
        server.close()

    _run(main())


async def _pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def _proxy(seen: list):
    """A forward proxy: CONNECT tunnels, and absolute-form HTTP requests relayed to their origin."""

    async def handle(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head)
        line = head.split(b"\r\n", 1)[0].decode()
        method, target, _ = line.split(" ")
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            up_r, up_w = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            from urllib.parse import urlsplit

            u = urlsplit(target)
            up_r, up_w = await asyncio.open_connection(u.hostname, u.port)
            up_w.write(head.replace(target.encode(), (u.path or "/").encode(), 1))
        await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))

    port = free_port()
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    return server, f"http://user:p%40ss@127.0.0.1:{port}"


def _tls_pair(tmp_path):
    """A self-signed certificate for 127.0.0.1: the origin's context and a client context trusting it."""
    import datetime
    import ipaddress
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(key, hashes.SHA256())
    )
    cert_pem = tmp_path / "cert.pem"
    key_pem = tmp_path / "key.pem"
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert_pem, key_pem)
    client_ctx = ssl.create_default_context(cafile=str(cert_pem))
    return server_ctx, client_ctx


def test_https_proxy_tunnels_and_http_proxy_relays(tmp_path, monkeypatch):
    server_ctx, client_ctx = _tls_pair(tmp_path)

    async def ok(i, w):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await w.drain()
        return True

    async def main():
        log: list = []
        seen: list = []
        plain, plain_url = await _server(ok, log)
        tls_port = free_port()

        async def tls_handle(reader, writer):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            log.append(("tls", head, await reader.readexactly(length)))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntls")
            await writer.drain()
            writer.close()

        tls = await asyncio.start_server(tls_handle, "127.0.0.1", tls_port, ssl=server_ctx)
        proxy, proxy_url = await _proxy(seen)
        monkeypatch.setenv("HTTPS_PROXY", proxy_url)
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        out = []
        for url, ctx in ((f"https://127.0.0.1:{tls_port}/v1", client_ctx), (plain_url, None)):
            pool = http1.Pool(url, ssl_context=ctx)
            r = await pool.post("/chat/completions", b"{}", HEADERS, 5)
            out.append(await r.read())
            r.release()
            pool.close()
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        direct = http1.Pool(plain_url)
        assert direct.proxy is None
        r = await direct.post("/x", b"{}", HEADERS, 5)
        out.append(await r.read())
        r.release()
        direct.close()
        for s in (plain, tls, proxy):
            s.close()
        return out, log, seen

    out, log, seen = _run(main())
    assert out == [b"tls", b"ok", b"ok"]
    assert seen[0].startswith(b"CONNECT 127.0.0.1:") and b"Proxy-Authorization: Basic dXNlcjpwQHNz" in seen[0]
    assert seen[1].startswith(b"POST http://127.0.0.1:") and b"Proxy-Authorization: Basic" in seen[1]
    assert len(seen) == 2  # NO_PROXY: the third went direct
    assert log[0][0] == "tls" and log[0][1].startswith(b"POST /v1/chat/completions HTTP/1.1")
    assert b"Proxy-Authorization" not in log[0][1]  # the proxy's credentials never go inside the tunnel
