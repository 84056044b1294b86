"""A lean HTTP/1.1 client for the gateway's hot path: keep-alive connections to one upstream, parsed by httptools.

Why (measured here against the shared bench mock, CPU per sequential request): aiohttp's ``ClientSession`` costs
170-270 us, a hand-written request on a kept-alive connection 25-30 us. The gateway makes one or two upstream
calls per request, so this is the largest single part of its own CPU time, and at concurrency 16 every request
waits for the others' CPU on the one event loop.

Scope: what the gateway sends and nothing more. ``POST`` with a body and a few fixed headers to one origin
(``http`` or ``https``, the system's CA store), responses framed by ``Content-Length``, chunked encoding or the
connection's end, at most ``max_response_bytes`` of them; no redirects, no compression (``Accept-Encoding`` is not
sent, so servers answer identity). The proxy the environment names is used as curl and httpx use it:
``HTTPS_PROXY`` for an ``https`` origin (a ``CONNECT`` tunnel, TLS inside it), ``HTTP_PROXY`` for an ``http`` one
(absolute-form requests), none for a host ``NO_PROXY`` lists (lower-case names too; credentials in the proxy URL
become ``Proxy-Authorization: Basic``).

A request is never sent twice when the server may have read it (a paid model would bill it twice). A kept-alive
connection the server closed while it was idle is noticed before anything is written (the loop saw the close, or
a peek at the socket finds its end), and the request goes on a new connection. Once the request is written it is
sent again only when the connection was reset with not one byte of an answer back: TCP resets a connection when
it is closed with data unread, so the server never read the request (it closed the idle connection as the request
went out). A server that reads the request and then closes (a clean end) gets it once: :class:`Disconnected`.

Errors: :class:`ConnectFailed` (refused, no route, DNS, TLS, a proxy that refuses the tunnel),
:class:`ConnectTimeout`, :class:`Disconnected` (the connection ended before the response did; ``.before_headers``
says when, ``.sent`` whether the server may have read the request), :class:`BadResponse` (not HTTP/1.1),
:class:`TooLarge` (the response passed ``max_response_bytes``).
Time limits are the caller's (``asyncio.timeout`` around :meth:`Pool.post` and the reads): a cancelled exchange
closes its connection, it is never reused.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import ssl
import time
import urllib.request
from collections import deque
from urllib.parse import unquote, urlsplit

import httptools

# Header values the gateway sends must never split the request (CR, LF, NUL) or carry non-Latin-1 text.
_SAFE_VALUE = re.compile(r"[\x20-\x7e\t]*")


class Http1Error(Exception):
    """Any failure of an exchange with the upstream."""


class ConnectFailed(Http1Error):
    pass


class ConnectTimeout(Http1Error):
    pass


class Disconnected(Http1Error):
    """The connection ended before the response did. `sent`: the server may have read the request (it was
    written and the connection ended cleanly), so it must not be sent again."""

    def __init__(self, message: str, before_headers: bool, sent: bool = True):
        super().__init__(message)
        self.before_headers = before_headers
        self.sent = sent


class BadResponse(Http1Error):
    pass


class TooLarge(Http1Error):
    """The response is larger than the pool's ``max_response_bytes``."""


DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024


def header_block(headers: dict[str, str]) -> bytes:
    """``Name: value\\r\\n`` lines for `headers`; a value that could split the request is a ValueError."""
    out = []
    for name, value in headers.items():
        if not _SAFE_VALUE.fullmatch(name) or not _SAFE_VALUE.fullmatch(value):
            raise ValueError(f"header {name!r} has a value that cannot be sent")
        out.append(f"{name}: {value}\r\n")
    return "".join(out).encode("latin-1")


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection; one exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES):
        self.loop = loop
        self.max_bytes = max_bytes
        self.received = 0  # bytes of the current response
        self.written = False  # the current request went out (the server may read it)
        self.reset = False  # the connection ended with a reset: the peer closed with our bytes unread
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser: httptools.HttpResponseParser | None = None
        self._head: asyncio.Future | None = None
        self._waiter: asyncio.Future | None = None
        self._chunks: deque[bytes] = deque()
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = False
        self.complete = False
        self.answered = False  # a byte of the response arrived
        self._until_close = False  # no Content-Length, not chunked: the body ends with the connection
        self.error: Http1Error | None = None

    # asyncio.Protocol --------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._parser is None:  # bytes nobody asked for: the connection cannot be trusted any more
            self.close()
            return
        self.answered = True
        self.received += len(data)
        if self.received > self.max_bytes:
            self._fail(TooLarge(f"the upstream's response is larger than {self.max_bytes} bytes"))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(BadResponse("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(BadResponse(f"the upstream's response is not HTTP/1.1 ({type(exc).__name__})"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reset = isinstance(exc, ConnectionResetError | BrokenPipeError)
        if self._parser is None or self.complete or self.error is not None:
            return
        if self._head is not None and self._head.done() and self._until_close:
            self.complete = True  # a close-delimited body ends here
            self.keep_alive = False
            self._wake()
            return
        before = self._head is None or not self._head.done()
        # a reset before any answer byte: the server closed with the request unread (module docstring)
        sent = self.written and not (self.reset and not self.answered)
        self._fail(Disconnected("the upstream closed the connection", before_headers=before, sent=sent))

    # httptools callbacks -----------------------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        p = self._parser
        assert p is not None
        self.status = p.get_status_code()
        self.keep_alive = p.should_keep_alive()
        self.headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in self._raw_headers}
        self._until_close = (
            "content-length" not in self.headers
            and "chunked" not in self.headers.get("transfer-encoding", "").lower()
        )
        if self._head is not None and not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # the exchange ------------------------------------------------------------------------------------------
    async def exchange(self, request: bytes) -> None:
        """Send `request` (head and body) and wait for the response's headers."""
        self._parser = httptools.HttpResponseParser(self)
        self._head = self.loop.create_future()
        self._chunks.clear()
        self._raw_headers = []
        self.complete = self.answered = self.written = False
        self.received = 0
        self.error = None
        if self.closed or self.transport is None or self.transport.is_closing():
            raise Disconnected("the connection was closed", before_headers=True, sent=False)
        self.transport.write(request)
        self.written = True
        await self._head

    async def chunk(self) -> bytes:
        """Every byte of the body that has arrived and was not read yet (all the pieces one socket read brought,
        e.g. the several HTTP chunks an upstream wrote together: one stream read, so one relayed write, for them
        all), waiting for more when none has; b"" at its end."""
        while True:
            if self._chunks:
                if len(self._chunks) == 1:
                    return self._chunks.popleft()
                pieces = b"".join(self._chunks)
                self._chunks.clear()
                return pieces
            if self.complete:
                return b""
            if self.error is not None:
                raise self.error
            self._waiter = self.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and not self._chunks

    def peer_closed(self) -> bool:
        """Whether the server ended this idle connection (its FIN, or any byte: an idle connection gets none) before
        the loop noticed: a non-blocking peek at the socket, so nothing is written to a closed connection."""
        if self.closed or self.transport is None or self.transport.is_closing():
            return True
        raw = self.transport.get_extra_info("socket")
        if raw is None:
            return False
        sock = socket.socket(fileno=raw.fileno())
        try:
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) is not None
        except BlockingIOError:
            return False  # nothing there: still open
        except OSError:
            return True
        finally:
            sock.detach()  # the fd stays the transport's

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, error: Http1Error) -> None:
        self.error = error
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)
        self._wake()
        self.close()


class Response:
    """A response whose headers arrived; read the body with :meth:`chunk` or :meth:`read`, then :meth:`release`."""

    __slots__ = ("status", "headers", "_conn", "_pool")

    def __init__(self, conn: _Connection, pool: Pool):
        self.status = conn.status
        self.headers = conn.headers
        self._conn: _Connection | None = conn
        self._pool = pool

    async def chunk(self) -> bytes:
        assert self._conn is not None, "the response was released"
        return await self._conn.chunk()

    async def read(self) -> bytes:
        parts = []
        while piece := await self.chunk():
            parts.append(piece)
        return b"".join(parts)

    def release(self) -> None:
        """Give the connection back (kept alive when the body was read to its end), else close it. Idempotent."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.put(conn)


class _Tunnel(asyncio.Protocol):
    """The proxy's answer to ``CONNECT``: the bytes up to the end of its head."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.head: asyncio.Future[bytes] = loop.create_future()
        self._buf = b""

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if b"\r\n\r\n" in self._buf and not self.head.done():
            self.head.set_result(self._buf)
        elif len(self._buf) > 65536 and not self.head.done():
            self.head.set_exception(ConnectFailed("the proxy's answer to CONNECT is not HTTP"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.head.done():
            self.head.set_exception(ConnectFailed("the proxy closed the connection during CONNECT"))


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (``HTTPS_PROXY`` / ``HTTP_PROXY``, not for ``NO_PROXY`` hosts)."""
    u = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(u.scheme)
    if not proxy or not u.hostname or urllib.request.proxy_bypass_environment(u.hostname, proxies):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


class Pool:
    """Kept-alive connections to the origin of `base_url` (its path is the prefix of every request path), through
    the proxy the environment names for it (``proxy=False``: none; a URL: that one)."""

    def __init__(
        self,
        base_url: str,
        idle_s: float = 30.0,
        max_idle: int = 256,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        proxy: str | bool | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ):
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/").encode()
        default_port = (u.scheme == "https" and self.port == 443) or (u.scheme == "http" and self.port == 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self._ssl = (ssl_context or ssl.create_default_context()) if u.scheme == "https" else None
        self.idle_s = idle_s
        self.max_idle = max_idle
        self.max_response_bytes = max_response_bytes
        self._idle: list[_Connection] = []
        proxy_url = proxy_for(base_url) if proxy is None else (proxy or None)
        self.proxy: tuple[str, int] | None = None
        self._proxy_auth = b""
        self._target = self.prefix  # what follows the method: the path, or the absolute URL through a proxy
        if proxy_url:
            pu = urlsplit(proxy_url)
            if pu.scheme != "http" or not pu.hostname:
                raise ValueError(f"only http:// proxies are supported, not {proxy_url.split('@')[-1]!r}")
            self.proxy = (pu.hostname, pu.port or 80)
            if pu.username is not None:
                token = base64.b64encode(f"{unquote(pu.username)}:{unquote(pu.password or '')}".encode())
                self._proxy_auth = b"Proxy-Authorization: Basic " + token + b"\r\n"
            if self._ssl is None:  # plain HTTP through a proxy: absolute-form requests (RFC 9112 §3.2.2)
                self._target = f"http://{self.host_header}".encode() + self.prefix

    async def post(self, path: str, body: bytes, headers: bytes, connect_timeout: float) -> Response:
        """Send ``POST <prefix><path>`` with `body` and the header block `headers` (:func:`header_block`)."""
        extra = self._proxy_auth if self.proxy is not None and self._ssl is None else b""
        request = b"".join(
            (
                b"POST ",
                self._target,
                path.encode(),
                b" HTTP/1.1\r\nHost: ",
                self.host_header.encode(),
                b"\r\nContent-Length: %d\r\n" % len(body),
                extra,
                headers,
                b"\r\n",
                body,
            )
        )
        conn = self._take()
        if conn is None:
            conn = await self._connect(connect_timeout)
        for attempt in (0, 1):
            try:
                await conn.exchange(request)
            except Disconnected as exc:
                conn.close()
                if attempt == 0 and exc.before_headers and not exc.sent:
                    # the server cannot have read it (closed before it went out, or reset with it unread)
                    conn = await self._connect(connect_timeout)
                    continue
                raise
            except BaseException:  # cancelled (a timeout) or a bad response: the connection is done for
                conn.close()
                raise
            return Response(conn, self)
        raise AssertionError("unreachable")  # pragma: no cover

    def put(self, conn: _Connection) -> None:
        if conn.reusable() and len(self._idle) < self.max_idle:
            conn._parser = None
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()

    def _take(self) -> _Connection | None:
        """A kept-alive connection the server has not closed (checked before anything is written to it)."""
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.idle_since < self.idle_s and not conn.peer_closed():
                return conn
            conn.close()
        return None

    async def _connect(self, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        where = self.host_header if self.proxy is None else f"{self.host_header} through the proxy"
        try:
            async with asyncio.timeout(timeout):
                if self.proxy is not None and self._ssl is not None:
                    return await self._tunnel(loop)
                host, port = self.proxy or (self.host, self.port)
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop, self.max_response_bytes),
                    host,
                    port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl else None,
                )
        except TimeoutError:
            raise ConnectTimeout(f"no connection to {where} within {timeout:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"cannot connect to {where} ({type(exc).__name__})") from exc
        return conn

    async def _tunnel(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        """A TLS connection to the origin inside a ``CONNECT`` tunnel through the proxy."""
        assert self.proxy is not None and self._ssl is not None
        transport, tunnel = await loop.create_connection(lambda: _Tunnel(loop), *self.proxy)
        try:
            authority = (
                self.host_header if ":" in self.host_header.rsplit("]", 1)[-1] else f"{self.host_header}:443"
            )
            transport.write(
                b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n"
                % (authority.encode(), authority.encode(), self._proxy_auth)
            )
            head = await tunnel.head
            status = head.split(b"\r\n", 1)[0].split(b" ")
            if len(status) < 2 or not status[1].startswith(b"2"):
                raise ConnectFailed(f"the proxy refused the tunnel to {self.host_header} ({status[1:2]!r})")
            conn = _Connection(loop, self.max_response_bytes)
            tls = await loop.start_tls(transport, tunnel, self._ssl, server_hostname=self.host)
        except BaseException:
            transport.close()
            raise
        tls.set_protocol(conn)
        conn.connection_made(tls)
        return conn

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
