"""The teacher's copy of a request on the request path, and whether the teacher's answer kept a schema its
provider no longer enforces.

With ``RATCHET_TEACHER_JSON_SCHEMA=json_object`` a ``json_schema`` request reaches the teacher as ``json_object``
with the schema in the system message (``ratchet_gateway.schema_prompt``); the call records that
(``Outcome.teacher_schema``) and the answer-contract guard checks the teacher's answer against the client's schema
(``Outcome.teacher_schema_violation``). The answer is served either way (the teacher is the last resort); the row
says both (``Recorder.request_row``: ``params.ratchet_teacher_schema``), so the night can tell such labels apart.
"""

from __future__ import annotations

from ratchet_gateway import answer_guard
from ratchet_gateway.chat.completion import message_of
from ratchet_gateway.chat.context import ChatCall
from ratchet_gateway.schema_prompt import JSON_OBJECT, for_teacher


def teacher_body(call: ChatCall, mode: str | None) -> dict:
    """The body the teacher gets for `call` (`mode`: the setting), noted on ``call.outcome``."""
    body, moved = for_teacher(call.received.body, mode)
    call.outcome.teacher_schema = JSON_OBJECT if moved else ""
    return body


async def check_teacher_schema(call: ChatCall, resp: dict) -> None:
    """When the teacher got the schema as text, whether its answer `resp` kept it (the guard's violation kind)."""
    if call.outcome.teacher_schema:
        msg, finish, _ = message_of(resp)
        violation = await answer_guard.check(call.received.body, msg, finish)
        call.outcome.teacher_schema_violation = violation.kind if violation else ""
