"""The streamed path's sending (``ratchet_gateway.chat.relay.RelayResponse``) and reading
(``Upstream.stream_batches``): the chunks of one upstream read leave in one write, the head with the first bytes,
the end marker with the end of the body; a client that hangs up stops the stream without an error; a bad chunk
after good ones in the same read still lets the good ones out first.

The upstream here is a raw loopback socket server that writes exactly the bytes a test gives it, one ``write`` per
piece, waiting for the test between pieces, so which chunks arrive together is decided by the test, not by timing.
"""

from __future__ import annotations

import asyncio

import pytest

from ratchet_gateway.chat.relay import Last, RelayResponse
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.serve_http import EXTENSION as HOLD_HEAD
from ratchet_gateway.upstream import Upstream


def _event(i: int) -> bytes:
    chunk = (
        b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"content":"t%d"},"finish_reason":null}]}' % i
    )
    return b"data: " + chunk + b"\n\n"


async def _upstream(pieces: list[bytes], step: asyncio.Event | None = None):
    """A loopback server answering one POST with a chunked SSE body: each piece one write (and one HTTP chunk);
    with `step`, it waits for the event before each piece after the first."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        for n, piece in enumerate(pieces):
            if step is not None and n:
                await step.wait()
                step.clear()
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


async def _batches(pieces: list[bytes], step: asyncio.Event | None = None) -> list[list[bytes]]:
    server, url = await _upstream(pieces, step)
    up = Upstream("m", url, None, 5, resolve=False)
    await up.start()
    got: list[list[bytes]] = []
    try:
        async for batch in up.stream_batches({"messages": []}):
            got.append([raw for raw, _ in batch])
            if step is not None:
                step.set()
    finally:
        await up.close()
        server.close()
    return got


def test_the_chunks_of_one_read_are_one_batch_and_later_reads_are_their_own() -> None:
    async def main() -> None:
        together = await _batches([_event(0) + _event(1) + _event(2), b"data: [DONE]\n\n"])
        assert [len(b) for b in together] == [3]
        step = asyncio.Event()
        apart = await _batches(
            [_event(0), _event(1) + _event(2)[:10], _event(2)[10:] + b"data: [DONE]\n\n"], step
        )
        assert [len(b) for b in apart] == [1, 1, 1]  # an event split across reads waits for its end
        assert [raw for b in apart for raw in b] == [e[6:-2] for e in (_event(0), _event(1), _event(2))]

    asyncio.run(main())


def test_good_chunks_before_a_bad_one_in_the_same_read_are_yielded_before_the_error() -> None:
    async def main() -> None:
        server, url = await _upstream([_event(0) + _event(1) + b'data: {"error":{"message":"boom"}}\n\n'])
        up = Upstream("m", url, None, 5, resolve=False)
        await up.start()
        got = []
        try:
            with pytest.raises(GatewayError) as err:
                async for batch in up.stream_batches({"messages": []}):
                    got.append(len(batch))
        finally:
            await up.close()
            server.close()
        assert got == [2] and err.value.code == "upstream_stream_error"

    asyncio.run(main())


def test_the_flat_stream_is_the_batches_one_chunk_at_a_time() -> None:
    async def main() -> None:
        server, url = await _upstream([_event(0) + _event(1), _event(2) + b"data: [DONE]\n\n"])
        up = Upstream("m", url, None, 5, resolve=False)
        await up.start()
        try:
            raws = [raw async for raw, _ in up.stream({"messages": []})]
        finally:
            await up.close()
            server.close()
        assert raws == [e[6:-2] for e in (_event(0), _event(1), _event(2))]

    asyncio.run(main())


class _Asgi:
    """An ASGI server's side of one request: the messages sent, the head held, a disconnect on demand."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.held = 0
        self.gone = asyncio.Event()
        self.scope = {"type": "http", "extensions": {HOLD_HEAD: self.hold}}

    def hold(self) -> None:
        self.held += 1

    async def receive(self) -> dict:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.sent.append(message)


def test_relay_response_holds_the_head_and_ends_the_body_with_its_last_bytes() -> None:
    async def body():
        yield b"a"
        yield b"bc"
        yield Last(b"[DONE]")

    async def main() -> None:
        asgi = _Asgi()
        await RelayResponse(body(), media_type="text/event-stream")(asgi.scope, asgi.receive, asgi.send)
        assert asgi.held == 1
        assert [m["type"] for m in asgi.sent] == ["http.response.start"] + ["http.response.body"] * 3
        assert [(m["body"], m["more_body"]) for m in asgi.sent[1:]] == [
            (b"a", True),
            (b"bc", True),
            (b"[DONE]", False),  # the marker and the end of the body: one message, one write
        ]

    asyncio.run(main())


def test_a_client_that_hangs_up_stops_the_stream_and_its_clean_up_runs() -> None:
    async def main() -> None:
        asgi = _Asgi()
        cleaned = asyncio.Event()
        never = asyncio.Event()

        async def body():
            try:
                yield b"first"
                await never.wait()  # an upstream that has nothing more yet
                yield Last(b"[DONE]")
            finally:
                cleaned.set()

        async def hang_up() -> None:
            while not asgi.sent[1:]:
                await asyncio.sleep(0)
            asgi.gone.set()

        hanger = asyncio.ensure_future(hang_up())
        # returns (no CancelledError escapes), after the generator's own clean-up
        await asyncio.wait_for(
            RelayResponse(body(), media_type="text/event-stream")(asgi.scope, asgi.receive, asgi.send), 10
        )
        await hanger
        assert cleaned.is_set()
        assert [m.get("body") for m in asgi.sent[1:]] == [b"first"]
        assert not asyncio.current_task().cancelling()

    asyncio.run(main())
