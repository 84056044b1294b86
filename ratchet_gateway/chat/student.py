"""The student on the request path: its endpoint behind a circuit breaker, and the cascade that decides whether
its answer is served.

:meth:`Student.attempt` serves the student's answer only when it came back in time, with confidence >= the
version's calibrated threshold, and inside the request's own contract (``ratchet_gateway.answer_guard``); any
other outcome returns None and the teacher answers (a cascade: the row records both costs). The breaker
(``ratchet_gateway.breaker``, one per base URL) stops asking an endpoint that keeps failing: while it is open
nothing is sent and the teacher answers at once.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ratchet_gateway import answer_guard
from ratchet_gateway.breaker import STATE_VALUES, Breaker
from ratchet_gateway.chat.completion import confidence, message_of, token_counts
from ratchet_gateway.chat.context import ChatCall
from ratchet_gateway.chat.redaction import restore_answer, student_body
from ratchet_gateway.chat.student_format import read_tool_calls, student_request
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.upstream import student_timeouts

if TYPE_CHECKING:
    from ratchet_gateway.state import Gateway

log = logging.getLogger("ratchet.gateway")


def endpoint_label(base: str) -> str:
    """A base URL as a metrics label: scheme, host, port and path, never credentials in it."""
    scheme, sep, rest = base.partition("://")
    return scheme + sep + rest.rsplit("@", 1)[-1] if sep else base


class Student:
    """The student endpoint as the pipeline calls it (one per app)."""

    def __init__(self, gw: Gateway):
        self.gw = gw
        self.timeouts = student_timeouts(gw.settings)
        self._breakers: dict[str, Breaker] = {}

    def breaker(self) -> Breaker:
        """The circuit breaker of the student endpoint (one per base URL)."""
        gw = self.gw
        endpoint = gw.student.base
        b = self._breakers.get(endpoint)
        if b is None:
            label = endpoint_label(endpoint)
            m = gw.metrics

            def changed(state: str) -> None:
                m.breaker_state.labels(label).set(STATE_VALUES[state])
                m.breaker_transitions.labels(label, state).inc()
                log.warning("student endpoint %s: circuit breaker %s", label, state.replace("_", "-"))

            s = gw.settings
            b = Breaker(s.student_breaker_failures, s.student_breaker_probe_s, on_change=changed)
            self._breakers[endpoint] = b
            m.breaker_state.labels(label).set(0)
        return b

    async def ask(self, body: dict, version: str | None, task: str, large: bool = False) -> dict:
        """The student's answer through its endpoint's breaker; GatewayError when it fails or the breaker is open
        (then nothing is sent: the caller turns to the teacher at once)."""
        gw = self.gw
        breaker = self.breaker()
        ticket = breaker.allow()
        if ticket is None:
            gw.metrics.breaker_bypassed.labels(endpoint_label(gw.student.base)).inc()
            raise GatewayError(503, "the student endpoint's circuit breaker is open", "student_circuit_open")
        try:
            resp = await gw.student.complete(
                student_request(body), model=version, task=task, timeouts=self.timeouts, large=large
            )
            read_tool_calls(body, resp)  # an endpoint without a tool parser answers tool calls as text
        except GatewayError as err:
            gw.metrics.upstream_faults.labels("student", err.code or "").inc()
            # a 4xx is an answer (an adapter not loaded, a request it refuses): the endpoint itself is healthy
            (breaker.failure if err.status >= 500 else breaker.success)(ticket)
            raise
        except BaseException:  # cancelled (the client went away): no verdict on the endpoint
            breaker.abandon(ticket)
            raise
        breaker.success(ticket)
        return resp

    async def attempt(self, call: ChatCall) -> dict | None:
        """The student's answer if it came back in time with confidence >= threshold and inside the request's
        contract, else None (-> teacher); ``call.student`` records what it was judged on."""
        gw = self.gw
        attempt, route = call.student, call.decision.route
        if attempt.teacher_prompt is None:  # the teacher-equivalent's prompt count, while the student answers
            attempt.teacher_prompt = gw.teacher_equivalent.start_count(call.received.body)
        body = {**student_body(call, gw.settings.redact_pii), "logprobs": True}
        t = time.perf_counter()
        try:
            resp = await self.ask(body, route.student_version, call.received.task, call.received.large)
        except GatewayError as err:
            attempt.error = err.message
            call.outcome.upstream_ms += (time.perf_counter() - t) * 1000
            return None
        call.outcome.upstream_ms += (time.perf_counter() - t) * 1000
        attempt.confidence = confidence(resp)
        attempt.threshold = route.threshold
        p, c, _, _ = token_counts(resp.get("usage") or {})
        attempt.cost = gw.student_prices.cost(p, c)
        attempt.version = route.student_version or ""
        if attempt.threshold is not None and attempt.confidence < attempt.threshold:
            return None  # cascade: not confident enough
        restore_answer(resp, call.redaction.pii_map or {})
        msg, finish, _ = message_of(resp)
        violation = await answer_guard.check(call.received.body, msg, finish)
        if violation is not None:  # cascade: the answer breaks the request's own contract
            attempt.violation = violation.kind
            gw.metrics.contract_violations.labels(violation.kind).inc()
            return None
        if not call.received.req.logprobs:
            for choice in resp.get("choices") or []:
                if isinstance(choice, dict):
                    choice["logprobs"] = None
        return resp
