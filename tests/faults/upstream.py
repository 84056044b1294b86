"""A misbehaving OpenAI-compatible upstream for tests: each request gets the fault the test chose.

The server speaks HTTP/1.1 by hand on an asyncio socket (loopback, a free port, its own thread) so it can do what
a framework would not let it: close mid-stream, send half a body, accept and never answer.

    with faulty_upstream() as up:              # up.url == "http://127.0.0.1:<port>/v1"
        up.set("sse_error", chunks_before=2)   # every request from now on
        up.queue("hang", "ok")                 # the next two requests, then the default again
        ...                                    # point a gateway (teacher or student) at up.url
        assert up.wait_for_requests(3)         # no sleeps: wait for the event
        up.requests[-1].body                   # what the upstream received

A request can also pick its own fault with a marker anywhere in a message's text, ``[[fault:<mode>]]``, which
passes through a gateway unchanged (queue first, then marker, then the default).

Modes (:data:`MODES`):

- ``ok``: a normal completion, JSON or SSE as the request asks; with ``logprobs: true`` every token carries
  ``logprob`` (the **student mode**: choose ``content``/``tool_calls``/``finish_reason``/``logprob`` to make a
  confident student that breaks a contract, or a doubtful one);
- ``sse_error``: ``chunks_before`` content chunks, an SSE ``error`` event (OpenAI's shape), then ``[DONE]``;
- ``malformed_chunk`` / ``list_chunk``: a chunk that is not JSON / a JSON list, then the rest and ``[DONE]``;
- ``early_close``: ``chunks_before`` chunks, then the connection closes without ending the stream;
- ``cut_body``: a non-streaming body cut at half its ``Content-Length``, then close;
- ``bad_usage``: ``usage`` with non-numeric counts; ``string_choices``: ``"choices": "oops"``;
- ``not_json``: a 200 whose body is HTML; ``empty_body``: a 200 with no body;
- ``status``: HTTP ``status`` with an OpenAI error body;
- ``hang``: read the request and never answer (until the server stops or :meth:`FaultyUpstream.release`);
- ``slow_stream``: ``tokens`` chunks, one every ``interval_ms`` (use it to outlast a total timeout while
  never going idle).

``delay_ms`` delays any mode's response headers (time to first byte).
"""

from __future__ import annotations

import asyncio
import math
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

MODES = (
    "ok",
    "sse_error",
    "malformed_chunk",
    "list_chunk",
    "early_close",
    "cut_body",
    "bad_usage",
    "string_choices",
    "not_json",
    "empty_body",
    "status",
    "hang",
    "slow_stream",
)
_MARKER = re.compile(r"\[\[fault:([a-z_]+)\]\]")
_PIECE = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")
_REASONS = {
    200: "OK",
    400: "Bad Request",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Unavailable",
}


@dataclass(frozen=True)
class Behaviour:
    """What the upstream does with one request (see the module docstring for the modes)."""

    mode: str = "ok"
    content: str | None = "The faulty upstream says hello."
    tool_calls: list[dict] | None = None
    finish_reason: str | None = None  # default: "tool_calls" when tool_calls, else "stop"
    logprob: float = -0.01  # per token, when the request asks for logprobs
    chunks_before: int = 2
    interval_ms: float = 50.0
    tokens: int = 20
    delay_ms: float = 0.0
    status: int = 500
    usage: dict | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown fault mode {self.mode!r}; choose one of {', '.join(MODES)}")


@dataclass
class Received:
    """One request as the upstream saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    mode: str
    at: float = field(default_factory=time.monotonic)


class FaultyUpstream:
    """The server's control panel (thread-safe); made by :func:`faulty_upstream`."""

    def __init__(self) -> None:
        self.url = ""
        self.requests: list[Received] = []
        self.counts: Counter[str] = Counter()
        self.pauses: list[float] = []  # every wait it made on purpose (delay_ms, slow_stream), in seconds
        self.stopped = False  # set when the server's thread has ended
        self._default = Behaviour()
        self._queue: list[Behaviour] = []
        self._cond = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    # the test's side ----------------------------------------------------------------------------------------
    def set(self, mode: str = "ok", **params: Any) -> None:
        """The behaviour of every request not queued or marked."""
        with self._cond:
            self._default = Behaviour(mode, **params)

    def queue(self, *behaviours: str | Behaviour, **params: Any) -> None:
        """Behaviours for the next requests, in order (strings take `params`)."""
        items = [b if isinstance(b, Behaviour) else Behaviour(b, **params) for b in behaviours]
        with self._cond:
            self._queue.extend(items)

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> bool:
        """Block until at least `n` chat requests have arrived (True) or `timeout` passes (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.requests) >= n, timeout)

    def release(self) -> None:
        """Close every hung connection now (the clients see the connection drop)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._release_now)

    def _release_now(self) -> None:
        assert self._release is not None
        self._release.set()
        self._release = asyncio.Event()

    # the server's side --------------------------------------------------------------------------------------
    async def pause(self, seconds: float) -> None:
        """Wait on purpose, on the record: tests check the upstream's schedule here, not on a wall clock."""
        with self._cond:
            self.pauses.append(seconds)
        await asyncio.sleep(seconds)

    def _choose(self, body: Any) -> Behaviour:
        with self._cond:
            if self._queue:
                return self._queue.pop(0)
            default = self._default
        marker = _MARKER.search(_message_text(body))
        return replace(default, mode=marker.group(1)) if marker and marker.group(1) in MODES else default

    def _record(self, received: Received) -> None:
        with self._cond:
            self.requests.append(received)
            self.counts[received.mode] += 1
            self._cond.notify_all()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                method, path, headers, raw = request
                keep_open = await self._answer(writer, method, path, headers, raw)
                if not keep_open or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(
        self, writer: asyncio.StreamWriter, method: str, path: str, headers: dict, raw: bytes
    ) -> bool:
        """Answer one request; False when the connection must close afterwards."""
        if method == "GET" and path.rstrip("/").endswith("/models"):
            return await _send_json(
                writer, 200, {"object": "list", "data": [{"id": "any", "object": "model"}]}
            )
        if method == "GET" and path.startswith("/healthz"):
            return await _send_json(writer, 200, {"status": "ok"})
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            return await _send_json(writer, 404, _error(f"{method} {path} is not served here", "not_found"))
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            body = None
        b = self._choose(body)
        self._record(Received(method, path, headers, body, b.mode))
        if not isinstance(body, dict):
            return await _send_json(writer, 400, _error("the body is not a JSON object", "invalid_request"))
        if b.delay_ms:
            await self.pause(b.delay_ms / 1000)
        if b.mode == "hang":
            assert self._release is not None
            await self._release.wait()
            return False
        if b.mode == "status":
            return await _send_json(writer, b.status, _error(f"injected {b.status}", "injected"))
        if b.mode == "not_json":
            await _send(writer, 200, "text/html", b"<html><body>502 Bad Gateway</body></html>")
            return True
        if b.mode == "empty_body":
            await _send(writer, 200, "application/json", b"")
            return True
        if body.get("stream"):
            return await _stream(writer, body, b, self.pause)
        payload = orjson.dumps(_completion(body, b))
        if b.mode == "cut_body":
            head = _head(200, "application/json", length=len(payload))
            writer.write(head + payload[: len(payload) // 2])
            await writer.drain()
            return False
        await _send(writer, 200, "application/json", payload)
        return True


# HTTP/1.1 by hand -----------------------------------------------------------------------------------------------
async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            data = await reader.readexactly(size + 2)
            if size == 0:
                break
            parts.append(data[:-2])
        return method, path, headers, b"".join(parts)
    length = int(headers.get("content-length") or 0)
    return method, path, headers, (await reader.readexactly(length)) if length else b""


def _head(status: int, content_type: str, length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", f"content-type: {content_type}"]
    lines.append(f"content-length: {length}" if length is not None else "transfer-encoding: chunked")
    if length is None:
        lines.append("cache-control: no-cache")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _send(writer: asyncio.StreamWriter, status: int, content_type: str, payload: bytes) -> None:
    writer.write(_head(status, content_type, len(payload)) + payload)
    await writer.drain()


async def _send_json(writer: asyncio.StreamWriter, status: int, obj: Any) -> bool:
    await _send(writer, status, "application/json", orjson.dumps(obj))
    return True


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(obj: Any) -> bytes:
    return _chunk(b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n")


# OpenAI shapes --------------------------------------------------------------------------------------------------
def _error(message: str, code: str) -> dict:
    return {"error": {"message": message, "type": "server_error", "param": None, "code": code}}


def _message_text(body: Any) -> str:
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return ""
    out = []
    for m in body["messages"]:
        content = m.get("content") if isinstance(m, dict) else None
        out.append(content if isinstance(content, str) else orjson.dumps(content).decode())
    return "\n".join(out)


def _usage(body: dict, text: str, b: Behaviour) -> dict:
    if b.usage is not None:
        return b.usage
    if b.mode == "bad_usage":
        return {"prompt_tokens": "many", "completion_tokens": None, "total_tokens": "NaN"}
    prompt = max(1, math.ceil(len(_message_text(body)) / 4))
    completion = max(1, math.ceil(len(text) / 4))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _logprobs(pieces: list[str], b: Behaviour) -> dict:
    entries = [
        {"token": p, "logprob": b.logprob, "bytes": list(p.encode()), "top_logprobs": []} for p in pieces
    ]
    return {"content": entries, "refusal": None}


def _produced(b: Behaviour) -> str:
    if b.tool_calls:
        return "".join(c["function"]["name"] + c["function"]["arguments"] for c in b.tool_calls)
    return b.content or ""


def _completion(body: dict, b: Behaviour) -> dict:
    text = _produced(b)
    finish = b.finish_reason or ("tool_calls" if b.tool_calls else "stop")
    message = {
        "role": "assistant",
        "content": None if b.tool_calls else b.content,
        "tool_calls": b.tool_calls,
    }
    choice = {
        "index": 0,
        "message": message,
        "logprobs": _logprobs(_PIECE.findall(text), b) if body.get("logprobs") else None,
        "finish_reason": finish,
    }
    return {
        "id": "chatcmpl-faulty",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or "faulty",
        "choices": "oops" if b.mode == "string_choices" else [choice],
        "usage": _usage(body, text, b),
    }


_STREAM_FAULTS = ("sse_error", "malformed_chunk", "list_chunk", "early_close")


async def _stream(writer: asyncio.StreamWriter, body: dict, b: Behaviour, pause) -> bool:
    """OpenAI's chunk sequence (role, content or tool-call deltas, finish, optional usage, ``[DONE]``), with the
    behaviour's fault after ``chunks_before`` content chunks. False when the connection must close."""
    base = {
        "id": "chatcmpl-faulty",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": body.get("model"),
    }
    want_logprobs = bool(body.get("logprobs"))

    def chunk(delta: dict, finish: str | None = None, pieces: list[str] | None = None) -> bytes:
        lp = _logprobs(pieces, b) if want_logprobs and pieces else None
        choices: Any = [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}]
        return _event({**base, "choices": "oops" if b.mode == "string_choices" else choices})

    writer.write(_head(200, "text/event-stream"))
    writer.write(chunk({"role": "assistant", "content": ""}))
    await writer.drain()
    if b.mode == "slow_stream":
        pieces = [f" t{i}" for i in range(b.tokens)]
    else:
        pieces = [] if b.tool_calls else _PIECE.findall(b.content or "")
    fault_at = min(b.chunks_before, len(pieces)) if b.mode in _STREAM_FAULTS else -1
    for i in range(len(pieces) + 1):
        if i == fault_at:
            if b.mode == "early_close":
                await writer.drain()
                return False
            if b.mode == "sse_error":
                writer.write(_event(_error("the upstream failed mid-stream; retry", "upstream_stream_error")))
                writer.write(_event(b"[DONE]") + _chunk(b""))
                await writer.drain()
                return True
            bad = b'{"id": "chatcmpl-faulty", "choices": [{"delta": {"content": "oo'
            writer.write(_event(bad if b.mode == "malformed_chunk" else [1, 2, 3]))
        if i == len(pieces):
            break
        if b.mode == "slow_stream" and i:
            await pause(b.interval_ms / 1000)
        writer.write(chunk({"content": pieces[i]}, pieces=[pieces[i]]))
        await writer.drain()
    for k, call in enumerate(b.tool_calls or []):
        fn = call["function"]
        name = {"name": fn["name"], "arguments": ""}
        head = {"index": k, "id": call.get("id", f"call_{k}"), "type": "function", "function": name}
        writer.write(chunk({"tool_calls": [head]}, pieces=[fn["name"]]))
        args = {"index": k, "function": {"arguments": fn["arguments"]}}
        writer.write(chunk({"tool_calls": [args]}, pieces=[fn["arguments"]]))
    writer.write(chunk({}, b.finish_reason or ("tool_calls" if b.tool_calls else "stop")))
    opts = body.get("stream_options")
    if isinstance(opts, dict) and opts.get("include_usage"):
        text = "".join(pieces) if b.mode == "slow_stream" else _produced(b)
        writer.write(_event({**base, "choices": [], "usage": _usage(body, text, b)}))
    writer.write(_event(b"[DONE]") + _chunk(b""))
    await writer.drain()
    return True


# Running it -----------------------------------------------------------------------------------------------------
@contextmanager
def faulty_upstream() -> Iterator[FaultyUpstream]:
    """Serve a :class:`FaultyUpstream` on 127.0.0.1 (a free port) in a thread until the block exits."""
    up = FaultyUpstream()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound here and handed over: no other process can take the port meanwhile
    port = sock.getsockname()[1]
    ready = threading.Event()
    stop: dict[str, Any] = {}

    async def main() -> None:
        up._loop = asyncio.get_running_loop()
        up._release = asyncio.Event()
        server = await asyncio.start_server(up.handle, sock=sock)
        stop["event"] = asyncio.Event()
        ready.set()
        async with server:
            await stop["event"].wait()
            up._release.set()
            for w in list(up._writers):
                w.close()
            server.close()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name=f"faulty-upstream-{port}", daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("the faulty upstream did not start")
    up.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield up
    finally:
        assert up._loop is not None
        up._loop.call_soon_threadsafe(stop["event"].set)
        thread.join(timeout=10)
        up.stopped = not thread.is_alive()
