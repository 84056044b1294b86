"""Safety-only admin routes (bearer ``RATCHET_ADMIN_KEY``): they can only narrow what the student serves.

- ``POST /ratchet/admin/student-disabled`` ``{"disabled": true, "reason": "..."}``: the teacher answers everything.
- ``POST /ratchet/admin/pin`` ``{"task": "...", "reason": "..."}``: the task is answered by the teacher.

Applied in this process at once and recorded in ``gateway_safety_events`` (every replica applies it on its next
poll). Anything that would widen serving (``"disabled": false``, unpinning) is 403: that takes a signed manifest
from the control plane (``ratchet admin``).
"""

from __future__ import annotations

import asyncio
import hmac

import orjson
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from ratchet_gateway import safety


def add_admin_routes(app: FastAPI, gw) -> None:
    from ratchet_gateway.app import json_response, openai_error

    def check(request: Request) -> Response | None:
        key = gw.settings.admin_key
        if not key:
            return openai_error(
                403,
                "admin routes are off: set RATCHET_ADMIN_KEY on the gateway to use them",
                "admin_disabled",
            )
        auth = request.headers.get("authorization") or ""
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            return openai_error(
                403, "admin routes need 'Authorization: Bearer <RATCHET_ADMIN_KEY>'", "forbidden"
            )
        return None

    async def body_of(request: Request) -> dict | Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return openai_error(400, 'body must be JSON, e.g. {"reason": "..."}')
        if not isinstance(body, dict):
            return openai_error(400, "body must be a JSON object")
        reason = body.get("reason")
        if not isinstance(reason, str) or len(reason.strip()) < 3:
            return openai_error(400, "say why in 'reason' (at least 3 characters); it goes to the audit log")
        return body

    @app.post("/ratchet/admin/student-disabled")
    async def student_disabled(request: Request) -> Response:
        if (denied := check(request)) is not None:
            return denied
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        if body.get("disabled") is not True:
            return openai_error(
                403,
                "the gateway can only disable the student; re-enabling needs a signed manifest "
                "(ratchet admin flag ...)",
                "widening_forbidden",
            )
        gw.apply_local_safety(student_disabled=True)
        await asyncio.to_thread(
            safety.record_event,
            gw.engine,
            "student_disabled",
            body["reason"].strip(),
            f"gateway:{gw.ledger.replica}",
        )
        return json_response({"student_disabled": True, "applied": True})

    @app.post("/ratchet/admin/pin")
    async def pin(request: Request) -> Response:
        if (denied := check(request)) is not None:
            return denied
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        task = body.get("task")
        if not isinstance(task, str) or not task.strip():
            return openai_error(400, "name the task to pin in 'task'")
        if body.get("pinned", True) is not True:
            return openai_error(
                403,
                "the gateway can only pin a task to the teacher; unpinning needs a signed "
                "manifest (ratchet admin unpin ...)",
                "widening_forbidden",
            )
        gw.apply_local_safety(pin=task.strip())
        await asyncio.to_thread(
            safety.record_event,
            gw.engine,
            "pin",
            body["reason"].strip(),
            f"gateway:{gw.ledger.replica}",
            task.strip(),
        )
        return json_response({"task": task.strip(), "pinned": True, "applied": True})

    @app.api_route("/ratchet/admin/{rest:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def other_admin(rest: str) -> Response:
        return openai_error(
            403,
            "the gateway only offers safety switches (student-disabled, pin); use "
            "`ratchet admin` for anything else",
            "forbidden",
        )
