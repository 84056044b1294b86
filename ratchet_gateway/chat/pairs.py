"""Audit and shadow pairs: answers asked for off the request path once a request is answered, compared, and
written as ``pair`` rows (the release evidence).

``ratchet_core.routing.pairs`` decides what runs: when the student served and the request is audited, the teacher
is asked again (``audit`` row: does the served answer agree with the teacher's?); when a candidate version is
shadowed, it answers too and is compared with the teacher's answer (``shadow`` row, with the candidate's own
threshold and what the contract guard would have said). An audited request may also shadow a candidate, compared
with the teacher's audit answer. A request the live version served while a candidate is in the slot is also
*mirrored* (``Pairs.mirror``): the candidate answers and is compared with the answer live served (``mirror`` row,
the candidate's confidence, threshold and contract verdict; free evidence for the carried bound,
``ratchet_assets.release.decision``); when the request is also audited, the candidate's one answer makes both its
shadow and its mirror row. Where the candidate's mirror answer differs from live's and the request is in the
targeted audit stream (``Pairs.targeted``), the teacher judges it after the mirror row is written: a ``targeted``
row (the teacher's answer against the candidate's; its audit answer when the request was audited, else a new call,
none when the candidate's answer is one its cascade would not keep). Mirror calls share the shadow cap below. Nothing here delays or fails the client's answer: the calls run as background
tasks (``Gateway.spawn``) and a failed call is a pair with outcome ``error``.

Shadows are capped (``RATCHET_SHADOW_MAX_IN_FLIGHT`` calls at once per gateway worker): the others wait their
turn (their student timeout starts when their call does), at most :data:`SHADOW_BACKLOG` of them; a request that
finds the backlog full is not shadowed (``ratchet_pairs_total{role="shadow",outcome="skipped"}``). So a burst of
traffic is shadowed at the student's own pace instead of queueing the student into timeouts, and which requests
are skipped depends on load, never on their answers: the shadow pairs stay an unbiased sample.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ratchet_core.routing import differs, pairs
from ratchet_gateway import answer_guard
from ratchet_gateway.chat.completion import confidence, message_of
from ratchet_gateway.chat.context import ChatCall
from ratchet_gateway.chat.redaction import restore_answer, student_body
from ratchet_gateway.chat.rows import Recorder
from ratchet_gateway.chat.student import Student
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.schema_prompt import for_teacher
from ratchet_gateway.upstream import Timeouts

if TYPE_CHECKING:
    from ratchet_gateway.state import Gateway

# Shadows waiting for a place under the cap, per gateway worker (each holds its request until its turn).
SHADOW_BACKLOG = 256


class Pairs:
    """Starts a request's off-path calls and records their pair rows (one per app)."""

    def __init__(self, gw: Gateway, student: Student, recorder: Recorder, teacher_timeouts: Timeouts):
        self.gw = gw
        self.student = student
        self.recorder = recorder
        self.teacher_timeouts = teacher_timeouts
        self.shadows_in_flight = 0  # running or waiting for a place
        self.backlog = SHADOW_BACKLOG
        self._places: asyncio.Semaphore | None = None  # made on the event loop, at the first shadow

    def after(self, call: ChatCall, served: dict) -> None:
        """Start what runs off the path now that `served` answered `call` (nothing when nothing is due)."""
        p = pairs(call.decision.route, call.outcome.served_by)
        if p.audit:
            self.gw.spawn(self._audit(call, served, p.shadow_version, p.mirror, p.targeted))
        elif p.shadow_version and self._take_shadow():
            self.gw.spawn(self._shadow(call, served, p.shadow_version))
        elif p.mirror and self._take_shadow():
            self.gw.spawn(self._shadow(call, None, p.mirror, served, p.targeted))

    def _take_shadow(self) -> bool:
        """A shadow's place in the cap's queue (given back when its row is written), or False: skipped."""
        cap = self.gw.settings.shadow_max_in_flight
        if cap == 0 or self.shadows_in_flight >= cap + self.backlog:
            self.gw.metrics.pairs.labels("shadow", "skipped").inc()
            return False
        if self._places is None:
            self._places = asyncio.Semaphore(cap)
        self.shadows_in_flight += 1
        return True

    async def _audit(
        self,
        call: ChatCall,
        served: dict,
        candidate: str | None,
        mirror: str | None = None,
        targeted: bool = False,
    ) -> None:
        """Re-ask the teacher about a student-served request -> ``audit`` pair row; then, when a candidate is
        shadowed, have it answer too and compare it with the teacher's audit answer -> ``shadow`` pair row, and
        with the answer live served -> ``mirror`` pair row."""
        gw = self.gw
        t = time.perf_counter()
        teacher, error = await self._ask_teacher(call)
        served_msg, _, _ = message_of(served)
        outcome = "error"
        if teacher is not None:
            teacher_msg, _, _ = message_of(teacher)
            outcome = "agree" if gw.compare(call.received.task, teacher_msg, served_msg) else "disagree"
        row = self.recorder.pair_row(
            call, "audit", call.student.version, teacher, error, outcome, None, call.student.threshold, _ms(t)
        )
        await self._write(call, row)
        # no teacher answer: the candidate is compared with live's answer only
        version = candidate or mirror
        if version and (teacher is not None or mirror) and self._take_shadow():
            await self._shadow(
                call,
                teacher if candidate else None,
                version,
                served if mirror else None,
                targeted,
                audit_answer=teacher,
            )

    async def _ask_teacher(self, call: ChatCall) -> tuple[dict | None, GatewayError | None]:
        """The teacher's answer to `call`'s request off the path (an audit), or the error that stopped it."""
        gw = self.gw
        try:
            body, _ = for_teacher(call.received.body, gw.settings.teacher_json_schema)
            teacher = await gw.teacher.complete(
                body, task=call.received.task, timeouts=self.teacher_timeouts, large=call.received.large
            )
        except GatewayError as err:
            return None, err
        return teacher, None

    async def _shadow(
        self,
        call: ChatCall,
        teacher: dict | None,
        version: str,
        live: dict | None = None,
        targeted: bool = False,
        audit_answer: dict | None = None,
    ) -> None:
        """Have candidate `version` answer off the path; compare it with the teacher's answer (when given) ->
        ``shadow`` row, and with the answer live served (when given) -> ``mirror`` row, each with the candidate's
        own threshold (``Route.shadow_threshold``). Holds a place under the cap (:meth:`_take_shadow`), waits for
        its turn under the cap, and gives the place back."""
        try:
            assert self._places is not None
            async with self._places:
                await self._shadow_row(call, teacher, version, live, targeted, audit_answer)
        finally:
            self.shadows_in_flight -= 1

    async def _shadow_row(
        self,
        call: ChatCall,
        teacher: dict | None,
        version: str,
        live: dict | None = None,
        targeted: bool = False,
        audit_answer: dict | None = None,
    ) -> None:
        gw = self.gw
        t = time.perf_counter()
        conf = None
        try:
            body = {**student_body(call, gw.settings.redact_pii), "logprobs": True}
            student = await self.student.ask(body, version, call.received.task, call.received.large)
            conf = confidence(student)
            restore_answer(student, call.redaction.pii_map or {})
            error = None
        except GatewayError as err:
            student, error = None, err
        violation = None
        student_msg = None
        if student is not None:
            student_msg, student_finish, _ = message_of(student)
            # what the guard would have done had this candidate served: the release evidence reads it
            violation = await answer_guard.check(call.received.body, student_msg, student_finish)
        for role, other in (("shadow", teacher), ("mirror", live)):
            if other is None:
                continue
            outcome = "error"
            if student_msg is not None:
                other_msg, _, _ = message_of(other)
                outcome = "agree" if gw.compare(call.received.task, other_msg, student_msg) else "disagree"
            threshold = call.decision.route.shadow_threshold
            kind = violation.kind if violation else ""
            row = self.recorder.pair_row(
                call, role, version, student, error, outcome, conf, threshold, _ms(t), contract_violation=kind
            )
            if role == "mirror" and teacher is not None:
                row["actual_cost_usd"] = 0.0  # the shadow row already bills this one answer of the candidate
            await self._write(call, row)
            if role == "mirror" and targeted and differs(outcome, conf, threshold, kind):
                # written after its mirror row, whose place in the stream it fills (release.decision)
                await self._targeted_row(call, version, student_msg, conf, kind, audit_answer, t)

    async def _targeted_row(
        self,
        call: ChatCall,
        version: str,
        student_msg: dict | None,
        conf: float | None,
        violation: str,
        audit_answer: dict | None,
        t: float,
    ) -> None:
        """The targeted stream (``ratchet_core.routing``): the candidate's answer differs from live's and the
        request is in it, so the teacher judges it (its audit answer when the request was audited, else a new
        call) -> ``targeted`` row after the mirror row: the teacher's answer, the candidate's confidence,
        threshold and contract verdict, ``agree`` when the teacher's answer equals the candidate's."""
        gw = self.gw
        threshold = call.decision.route.shadow_threshold
        teacher, error = audit_answer, None
        # an answer its cascade would not keep is wrong for the bound whatever the teacher says: no call for it
        kept = student_msg is not None and not differs("agree", conf, threshold, violation)
        if teacher is None and kept:
            teacher, error = await self._ask_teacher(call)
        outcome = "error"
        if teacher is not None and student_msg is not None:
            teacher_msg, _, _ = message_of(teacher)
            outcome = "agree" if gw.compare(call.received.task, teacher_msg, student_msg) else "disagree"
        row = self.recorder.pair_row(
            call,
            "targeted",
            version,
            teacher,
            error,
            outcome,
            conf,
            threshold,
            _ms(t),
            contract_violation=violation,
        )
        if audit_answer is not None:
            row["actual_cost_usd"] = 0.0  # the audit row already bills this one answer of the teacher
        await self._write(call, row)

    async def _write(self, call: ChatCall, row: dict) -> None:
        self.gw.metrics.pairs.labels(row["pair_role"], row["pair_outcome"]).inc()
        if row["pair_role"] == "audit":
            self.gw.teacher_equivalent.observe(row)
        await self.recorder.append_quietly(row, call)


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000
