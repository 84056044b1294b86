"""The non-streamed path: the student when the route names one and its answer passes the cascade
(``ratchet_gateway.chat.student``), else the teacher; the row is committed before the answer is released. A teacher
answer whose upstream reported no usage is counted with the teacher's tokenizer (the row's ``usage_source``)."""

from __future__ import annotations

import asyncio
import time

from starlette.responses import Response

from ratchet_gateway.chat.completion import message_of, reported
from ratchet_gateway.chat.context import ChatCall
from ratchet_gateway.chat.parts import Parts
from ratchet_gateway.chat.teacher import check_teacher_schema, teacher_body
from ratchet_gateway.errors import GatewayError


class CompletePath:
    """Answers a non-streamed request (one per app and API)."""

    def __init__(self, parts: Parts):
        self.parts = parts

    async def __call__(self, call: ChatCall) -> Response:
        p = self.parts
        resp = None
        if call.decision.route.student_version:
            resp = await p.student.attempt(call)
        if resp is not None:
            call.outcome.served_by = "student"
        else:
            resp = await self._teacher(call)
        try:
            out = p.api.answer(resp, call.received)
        except GatewayError as err:  # an answer the caller's API cannot carry: recorded as the failure it is
            await p.recorder.append_quietly(p.recorder.request_row(call, resp, err=err), call)
            raise
        await p.recorder.commit(call, p.recorder.request_row(call, resp))
        p.pairs.after(call, resp)
        return Response(out, media_type="application/json", headers=p.recorder.answer_headers(call))

    async def _teacher(self, call: ChatCall) -> dict:
        p = self.parts
        t = time.perf_counter()
        try:
            body = teacher_body(call, p.gw.settings.teacher_json_schema)
            resp = await p.gw.teacher.complete(
                body, task=call.received.task, timeouts=p.teacher_timeouts, large=call.received.large
            )
        except GatewayError as err:
            call.outcome.upstream_ms += (time.perf_counter() - t) * 1000
            await p.recorder.teacher_failed(call, err)
            raise
        call.outcome.upstream_ms += (time.perf_counter() - t) * 1000
        if not reported(resp.get("usage")):  # an upstream that reports no usage: counted, never free
            equivalent, msg = p.gw.teacher_equivalent, message_of(resp)[0]
            if call.received.large:
                resp["usage"] = await p.gw.offload.run(equivalent.counted_usage, call.received.body, msg)
            else:
                resp["usage"] = await asyncio.to_thread(equivalent.counted_usage, call.received.body, msg)
            call.outcome.usage_source = "counted"
        await check_teacher_schema(call, resp)
        return resp
