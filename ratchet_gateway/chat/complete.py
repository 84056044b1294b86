"""The non-streamed path: the student when the route names one and its answer passes the cascade
(``ratchet_gateway.chat.student``), else the teacher; the row is committed before the answer is released."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starlette.responses import Response

from ratchet_gateway.chat.context import ChatCall
from ratchet_gateway.chat.formats import ApiFormat
from ratchet_gateway.chat.pairs import Pairs
from ratchet_gateway.chat.rows import Recorder
from ratchet_gateway.chat.student import Student
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.upstream import Timeouts

if TYPE_CHECKING:
    from ratchet_gateway.state import Gateway


class CompletePath:
    """Answers a non-streamed request (one per app and API)."""

    def __init__(
        self,
        gw: Gateway,
        api: ApiFormat,
        student: Student,
        recorder: Recorder,
        pairs: Pairs,
        teacher_timeouts: Timeouts,
    ):
        self.gw = gw
        self.api = api
        self.student = student
        self.recorder = recorder
        self.pairs = pairs
        self.teacher_timeouts = teacher_timeouts

    async def __call__(self, call: ChatCall) -> Response:
        resp = None
        if call.decision.route.student_version:
            resp = await self.student.attempt(call)
        if resp is not None:
            call.outcome.served_by = "student"
        else:
            resp = await self._teacher(call)
        out = self.api.answer(resp)
        await self.recorder.commit(call, self.recorder.request_row(call, resp))
        self.pairs.after(call, resp)
        return Response(out, media_type="application/json", headers=self.recorder.answer_headers(call))

    async def _teacher(self, call: ChatCall) -> dict:
        t = time.perf_counter()
        try:
            resp = await self.gw.teacher.complete(
                call.received.body, task=call.received.task, timeouts=self.teacher_timeouts
            )
        except GatewayError as err:
            call.outcome.upstream_ms += (time.perf_counter() - t) * 1000
            await self.recorder.teacher_failed(call, err)
            raise
        call.outcome.upstream_ms += (time.perf_counter() - t) * 1000
        return resp
