"""The streamed path (``stream: true``): the teacher's chunks relayed as they come, or a student's answer replayed
as a stream.

A stream is recorded when it ends, before its end marker (``[DONE]``): the row is built from the chunks relayed
(:class:`StreamAccumulator`) and committed, then the marker goes out; the ledger never delays a first byte. Any fault after the headers went out (an
upstream error event, a malformed chunk, an early close, a timeout) ends the stream with one error event in the
caller's format and no end marker; its row is stored failed and truncated. A student's answer is complete before
its first byte is sent: its row is committed first, then the answer is replayed as chunks
(``StreamFormat.replay``).

Every answered stream is billed. A client that hangs up does not stop the teacher's stream at once: the gateway
keeps reading it (sending nothing) for at most :data:`HANGUP_DRAIN_S`, so the upstream's own usage (its last chunk)
is usually recorded (``usage_source='reported'``). When it does not come in time, or a stream breaks before it,
or an upstream sends none, the row's usage is counted (``usage_source='counted'``): the prompt and the completion
received so far, with the teacher's tokenizer (``TeacherEquivalent.counted_usage``, in a worker thread). Either way
the row is truncated (never training data) and its tokens and dollars count against the client's limits.

:class:`RelayResponse` sends it with as few socket writes as the upstream allows (the head with the first bytes,
the chunks that arrived together in one write, the end marker with the end of the body), and notices a client that
hangs up with one plain task instead of Starlette's task group per response (measured: ~65 us of CPU less per
streamed request).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ratchet_gateway import http1
from ratchet_gateway.chat.completion import reported
from ratchet_gateway.chat.context import ChatCall
from ratchet_gateway.chat.failures import log_5xx
from ratchet_gateway.chat.formats import StreamFormat
from ratchet_gateway.chat.parts import Parts
from ratchet_gateway.chat.teacher import check_teacher_schema, teacher_body
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.serve_http import hold_head_of

log = logging.getLogger("ratchet.gateway")

# How long the teacher's stream is still read after its client hung up, for the usage in its last chunk (seconds;
# the upstream's idle timeout still applies). Bounded so an abandoned stream costs a task for at most this long.
HANGUP_DRAIN_S = 2.0


class Hangup:
    """Whether a stream's client hung up (set by :class:`RelayResponse`, read by the relay), and the deadline that
    stops the drain after it."""

    __slots__ = ("gone", "_deadline")

    def __init__(self) -> None:
        self.gone = False
        self._deadline: asyncio.TimerHandle | None = None

    def left(self, task: asyncio.Task, drain_s: float) -> None:
        """The client hung up: stop `task` now, or after `drain_s` seconds of draining its upstream."""
        self.gone = True
        if drain_s > 0:
            self._deadline = asyncio.get_running_loop().call_later(drain_s, task.cancel)
        else:
            task.cancel()

    def drained(self) -> None:
        """The upstream ended within the drain: nothing to stop any more."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


class Last(bytes):
    """A stream's last bytes (its end marker or error event): sent with the end of the body, in one write."""


class RelayResponse(StreamingResponse):
    """A streamed answer (see the module): the same messages as Starlette's ``StreamingResponse``, fewer writes.

    A client that hangs up stops the send loop (so the generator stores its row truncated), as Starlette's
    response does, after `drain_s` seconds in which the generator may still read its upstream (nothing is sent);
    the cancellation ends here. Under ``ratchet gateway``'s server the head waits for the first bytes
    (``ratchet.hold_head``, ``ratchet_gateway.serve_http``)."""

    def __init__(self, content: Any, hangup: Hangup | None = None, drain_s: float = 0.0, **kwargs: Any):
        super().__init__(content, **kwargs)
        self.hangup = hangup if hangup is not None else Hangup()
        self.drain_s = drain_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hold_head = hold_head_of(scope)
        if hold_head is not None:
            hold_head()
        task = asyncio.current_task()
        assert task is not None
        hangup = self.hangup

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            hangup.left(task, self.drain_s)

        listener = asyncio.get_running_loop().create_task(listen())
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            if not hangup.gone:
                raise
            task.uncancel()  # the client left: nothing more to send, nothing to report
        finally:
            hangup.drained()
            listener.cancel()

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        ended = False
        hangup = self.hangup
        async for chunk in self.body_iterator:  # to its end: the generator's own clean-up runs here
            if ended or hangup.gone:  # nobody to send it to: the generator is draining its upstream
                continue
            ended = type(chunk) is Last
            await send({"type": "http.response.body", "body": bytes(chunk), "more_body": not ended})
        if not ended and not hangup.gone:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class StreamPath:
    """Answers a streamed request (one per app and API)."""

    def __init__(self, parts: Parts):
        self.parts = parts

    async def __call__(self, call: ChatCall) -> Response:
        p = self.parts
        out = p.api.stream(call.received)
        if call.decision.route.student_version:
            resp = await p.student.attempt(call)
            if resp is not None:
                call.outcome.served_by = "student"
                row = p.recorder.request_row(call, resp)
                return RelayResponse(
                    self._replay(call, resp, row, out),
                    media_type=out.media_type,
                    headers=p.recorder.answer_headers(call),
                )
        t = time.perf_counter()
        rec = call.received
        body = teacher_body(call, p.gw.settings.teacher_json_schema)
        agen = p.gw.teacher.stream_batches(body, task=rec.task, timeouts=p.teacher_timeouts, large=rec.large)
        try:
            first = await agen.__anext__()
        except StopAsyncIteration:
            first = None
        except GatewayError as err:  # nothing sent yet: the client gets an HTTP error
            call.outcome.upstream_ms += (time.perf_counter() - t) * 1000
            await p.recorder.teacher_failed(call, err)
            raise
        hangup = Hangup()
        return RelayResponse(
            self._relay(call, agen, first, t, out, hangup),
            hangup,
            HANGUP_DRAIN_S,
            media_type=out.media_type,
            headers=p.recorder.answer_headers(call),
        )

    async def _relay(
        self,
        call: ChatCall,
        agen: AsyncIterator[list[tuple[bytes, dict]]],
        first: list[tuple[bytes, dict]] | None,
        t: float,
        out: StreamFormat,
        hangup: Hangup,
    ) -> AsyncIterator[bytes]:
        """Relay the teacher's checked chunks (``Upstream.stream_batches``: those that arrived together, in one
        write), record the row, then the end marker. A client gone (`hangup`) reads on for the usage (module)."""
        p = self.parts
        acc = StreamAccumulator()
        add, render, next_batch = acc.add, out.chunk, agen.__anext__  # looked up once, not per chunk
        done = False
        try:
            batch = first
            while batch is not None:
                events = []
                for raw, obj in batch:
                    add(obj)
                    event = render(raw, obj)
                    if event is not None:
                        events.append(event)
                if events:
                    yield events[0] if len(events) == 1 else b"".join(events)
                try:
                    batch = await next_batch()
                except StopAsyncIteration:
                    batch = None
            call.outcome.upstream_ms += (time.perf_counter() - t) * 1000
            hangup.drained()  # the upstream ended within the drain: nothing to cut short
            if hangup.gone:  # nobody waits for the end marker: recorded without waiting (finally)
                return
            resp = acc.response()
            source = "reported"
            if not reported(acc.usage):  # an upstream that sends no usage: counted, never free
                resp["usage"] = await self._count(call, resp)
                source = "counted"
            await check_teacher_schema(call, resp)
            # [DONE] without a finish_reason: the answer may be incomplete, so it is never a training example
            row = p.recorder.request_row(call, resp, truncated=not acc.finish, usage_source=source)
            await p.recorder.commit(call, row)
            done = True
            p.pairs.after(call, resp)
            yield Last(out.end())
        except Exception as exc:  # the stream broke after its headers: tell the client in the stream itself
            if isinstance(exc, GatewayError):
                err = exc
            else:
                # transport faults reach here as GatewayError (``Upstream.stream`` maps them); anything else is a bug
                if not isinstance(exc, http1.Http1Error | TimeoutError):
                    log.exception("request %s: the stream relay failed", call.received.request_id)
                err = GatewayError(502, "the model stream broke; retry", "upstream_stream_broken")
                err.__cause__ = exc
            log_5xx(call.received.request_id, err)
            if not done:
                call.outcome.error = err
                p.gw.metrics.upstream_faults.labels("teacher", err.code or "").inc()
            p.gw.metrics.errors.labels(err.type).inc()
            yield Last(out.error(err))
        finally:
            if not done and reported(acc.usage):  # the upstream's usage came: recorded as it reported it
                row = p.recorder.request_row(call, acc.response(), truncated=True)
                row["teacher_prompt_tokens"] = row["prompt_tokens"]  # the teacher's own count of its prompt
                p.recorder.commit_nowait(call, row)
            elif not done:  # abandoned or broken before the usage chunk: counted off the event loop
                p.gw.spawn(self._record_counted(call, acc.response()))
            await agen.aclose()

    async def _record_counted(self, call: ChatCall, resp: dict) -> None:
        """Record a stream that ended without its upstream's usage: the prompt and the completion received so
        far, counted with the teacher's tokenizer in a worker thread (module docstring)."""
        recorder = self.parts.recorder
        resp["usage"] = usage = await self._count(call, resp)
        row = recorder.request_row(call, resp, truncated=True, usage_source="counted")
        row["teacher_prompt_tokens"] = usage["prompt_tokens"]  # the prompt as the teacher bills it
        recorder.commit_nowait(call, row)

    async def _count(self, call: ChatCall, resp: dict) -> dict[str, int]:
        """The usage of `resp` (an answer its upstream reported none for) counted with the teacher's tokenizer, in
        a worker thread (the large-body lane for a large request: its prompt may be megabytes)."""
        gw = self.parts.gw
        args = (call.received.body, resp["choices"][0]["message"])
        if call.received.large:
            return await gw.offload.run(gw.teacher_equivalent.counted_usage, *args)
        return await asyncio.to_thread(gw.teacher_equivalent.counted_usage, *args)

    async def _replay(self, call: ChatCall, resp: dict, row: dict, out: StreamFormat) -> AsyncIterator[bytes]:
        """The student's answer as a stream: committed first, then its events, then the end marker."""
        recorder = self.parts.recorder
        committed = False
        try:
            await recorder.commit(call, row)
            committed = True
            events = out.replay(resp, call.received.request_id)
            self.parts.pairs.after(call, resp)
            yield Last(b"".join(events) + out.end())  # complete already: one write
        finally:
            if not committed:
                recorder.commit_nowait(call, recorder.request_row(call, resp, truncated=True))


class StreamAccumulator:
    """Rebuilds the assistant message, finish reason and usage from streamed chunks (for the ledger row)."""

    def __init__(self) -> None:
        self.id = ""
        self.model = ""
        self.content: list[str] = []
        self.tool_calls: dict[int, dict] = {}
        self.finish = ""
        self.usage: dict = {}

    def add(self, obj: dict) -> None:
        if not self.id:
            self.id = obj.get("id", "")
        if not self.model:
            self.model = obj.get("model", "")
        if obj.get("usage"):
            self.usage = obj["usage"]
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                slot = self.tool_calls.setdefault(
                    int(tc.get("index") or 0),
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    slot["function"]["arguments"] += fn["arguments"]
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def response(self) -> dict:
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.tool_calls:
            msg["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return {
            "id": self.id,
            "model": self.model,
            "choices": [{"index": 0, "message": msg, "finish_reason": self.finish}],
            "usage": self.usage,
        }
