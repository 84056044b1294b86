"""A lean HTTP/1.1 client for the gateway's hot path: keep-alive connections to one upstream, parsed by httptools.

Why (measured here against the shared bench mock, CPU per sequential request): aiohttp's ``ClientSession`` costs
170-270 us, a hand-written request on a kept-alive connection 25-30 us. The gateway makes one or two upstream
calls per request, so this is the largest single part of its own CPU time, and at concurrency 16 every request
waits for the others' CPU on the one event loop.

Scope: what the gateway sends and nothing more. ``POST`` with a body and a few fixed headers to one origin
(``http`` or ``https``, the system's CA store), responses framed by ``Content-Length``, chunked encoding or the
connection's end; no redirects, no proxies, no compression (``Accept-Encoding`` is not sent, so servers answer
identity). A kept-alive connection that the server closed while it was idle is noticed (the loop sees the close)
or, in the race where it closes as the request goes out, the request is sent again once on a new connection,
only when not one byte of an answer came back (the server never saw it).

Errors: :class:`ConnectFailed` (refused, no route, DNS, TLS), :class:`ConnectTimeout`, :class:`Disconnected` (the
connection ended before the response did; ``.before_headers`` says when), :class:`BadResponse` (not HTTP/1.1).
Time limits are the caller's (``asyncio.timeout`` around :meth:`Pool.post` and the reads): a cancelled exchange
closes its connection, it is never reused.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections import deque
from urllib.parse import urlsplit

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
    def __init__(self, message: str, before_headers: bool):
        super().__init__(message)
        self.before_headers = before_headers


class BadResponse(Http1Error):
    pass


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

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
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
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(BadResponse("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(BadResponse(f"the upstream's response is not HTTP/1.1 ({type(exc).__name__})"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._parser is None or self.complete or self.error is not None:
            return
        if self._head is not None and self._head.done() and self._until_close:
            self.complete = True  # a close-delimited body ends here
            self.keep_alive = False
            self._wake()
            return
        before = self._head is None or not self._head.done()
        self._fail(Disconnected("the upstream closed the connection", before_headers=before))

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
        self.complete = self.answered = False
        self.error = None
        if self.closed or self.transport is None or self.transport.is_closing():
            raise Disconnected("the connection was closed", before_headers=True)
        self.transport.write(request)
        await self._head

    async def chunk(self) -> bytes:
        """The next piece of the body, b"" at its end."""
        while True:
            if self._chunks:
                return self._chunks.popleft()
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


class Pool:
    """Kept-alive connections to the origin of `base_url` (its path is the prefix of every request path)."""

    def __init__(self, base_url: str, idle_s: float = 30.0, max_idle: int = 256):
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/").encode()
        default_port = (u.scheme == "https" and self.port == 443) or (u.scheme == "http" and self.port == 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self._ssl = ssl.create_default_context() if u.scheme == "https" else None
        self.idle_s = idle_s
        self.max_idle = max_idle
        self._idle: list[_Connection] = []

    async def post(self, path: str, body: bytes, headers: bytes, connect_timeout: float) -> Response:
        """Send ``POST <prefix><path>`` with `body` and the header block `headers` (:func:`header_block`)."""
        request = b"".join(
            (
                b"POST ",
                self.prefix,
                path.encode(),
                b" HTTP/1.1\r\nHost: ",
                self.host_header.encode(),
                b"\r\nContent-Length: %d\r\n" % len(body),
                headers,
                b"\r\n",
                body,
            )
        )
        for attempt in (0, 1):
            conn = self._take()
            reused = conn is not None
            if conn is None:
                conn = await self._connect(connect_timeout)
            try:
                await conn.exchange(request)
            except Disconnected:
                conn.close()
                if reused and attempt == 0 and not conn.answered:
                    continue  # the server had closed this idle connection: it never saw the request
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
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < self.idle_s:
                return conn
            conn.close()
        return None

    async def _connect(self, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop),
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl else None,
                )
        except TimeoutError:
            raise ConnectTimeout(f"no connection to {self.host_header} within {timeout:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"cannot connect to {self.host_header} ({type(exc).__name__})") from exc
        return conn

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
