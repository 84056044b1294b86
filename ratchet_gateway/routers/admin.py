"""Safety-only admin routes (bearer ``RATCHET_ADMIN_KEY``): they can only narrow what the student serves.

- ``POST /ratchet/admin/student-disabled`` ``{"disabled": true, "reason": "..."}``: the teacher answers everything.
- ``POST /ratchet/admin/pin`` ``{"task": "...", "reason": "..."}``: the task is answered by the teacher.

Applied in this process at once and recorded in ``gateway_safety_events`` (``ratchet_gateway.safety``; every
replica applies it on its next poll). Anything that would widen serving (``"disabled": false``, unpinning) is 403:
that takes a signed manifest from the control plane (``ratchet admin``). Every other ``/ratchet/admin/...`` path
is 403 too.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator
from starlette.responses import Response

from ratchet_core.names import check, rule
from ratchet_core.reasons import check_reason
from ratchet_gateway import safety
from ratchet_gateway.deps import AdminDep, GatewayDep
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.responses import error_docs, json_response

router = APIRouter(prefix="/ratchet/admin", tags=["admin"])


class _Reasoned(BaseModel):
    model_config = ConfigDict(extra="allow")

    reason: str = Field(description="Why, 3-500 characters; it goes to the audit log.")

    @field_validator("reason")
    @classmethod
    def _says_why(cls, v: str) -> str:
        return check_reason(
            v
        )  # the one rule for reasons (a ReasonError is a ValueError: a 400 naming 'reason')


class StudentDisabledBody(_Reasoned):
    disabled: StrictBool = Field(False, description="Must be true: the gateway can only disable the student.")


class PinBody(_Reasoned):
    task: str = Field(description=f"The task to answer with the teacher only ({rule('task')}).")
    pinned: StrictBool = Field(True, description="Must be true: unpinning needs a signed manifest.")

    @field_validator("task")
    @classmethod
    def _named(cls, v: str) -> str:
        return check(
            "task", v, "task"
        )  # the one name rule (a NameRuleError is a ValueError: a 400 naming 'task')


_DOCS = error_docs(400, 403)


@router.post(
    "/student-disabled",
    dependencies=[AdminDep],
    summary="Disable the student on every replica (the teacher answers everything)",
    responses=_DOCS,
)
async def student_disabled(body: StudentDisabledBody, gw: GatewayDep) -> Response:
    if body.disabled is not True:
        raise GatewayError(
            403,
            "the gateway can only disable the student; re-enabling needs a signed manifest (ratchet admin flag ...)",
            "widening_forbidden",
        )
    gw.apply_local_safety(student_disabled=True)
    await asyncio.to_thread(
        safety.record_event, gw.engine, "student_disabled", body.reason, f"gateway:{gw.ledger.replica}"
    )
    return json_response({"student_disabled": True, "applied": True})


@router.post(
    "/pin", dependencies=[AdminDep], summary="Pin a task to the teacher on every replica", responses=_DOCS
)
async def pin(body: PinBody, gw: GatewayDep) -> Response:
    task = body.task
    if body.pinned is not True:
        raise GatewayError(
            403,
            "the gateway can only pin a task to the teacher; unpinning needs a signed manifest "
            "(ratchet admin unpin ...)",
            "widening_forbidden",
        )
    gw.apply_local_safety(pin=task)
    await asyncio.to_thread(
        safety.record_event, gw.engine, "pin", body.reason, f"gateway:{gw.ledger.replica}", task
    )
    return json_response({"task": task, "pinned": True, "applied": True})


@router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"], include_in_schema=False)
async def other_admin(rest: str) -> Response:
    raise GatewayError(
        403,
        "the gateway only offers safety switches (student-disabled, pin); use `ratchet admin` for anything else",
        "forbidden",
    )
