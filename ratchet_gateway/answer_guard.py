"""The answer-contract guard on the request path: :func:`ratchet_core.contract.check_answer`, never a stall.

A request without schemas (no ``json_schema`` response format, no tools or functions) is checked inline: a
finish-reason test and at most one JSON parse, a few microseconds. A request with schemas is checked on a small
dedicated thread pool, within :data:`CHECK_TIMEOUT_S`: the schemas are the client's own (their regular
expressions are time-limited, ``ratchet_core.schema_regex``, but a schema can still ask for much work), and a check
that does not finish in time is a violation (``schema_unusable``: the guard cannot vouch for the answer, so the
teacher answers). The pool is the guard's own, so a slow check never takes a thread the ledger or the event loop's
default executor needs, and the check's searches stop at the same deadline (``schema_regex.deadline``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ratchet_core import schema_regex
from ratchet_core.contract import SCHEMA_UNUSABLE, Violation, check_answer

CHECK_TIMEOUT_S = 1.0
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ratchet-contract")


def _check_in_time(
    body: Mapping[str, Any], message: Mapping[str, Any], finish_reason: str | None
) -> Violation | None:
    """check_answer with the client's patterns under the check's deadline: a check given up on stops soon after,
    so it never keeps one of the pool's two threads from other requests."""
    with schema_regex.deadline(CHECK_TIMEOUT_S):
        return check_answer(body, message, finish_reason)


def _has_schemas(body: Mapping[str, Any]) -> bool:
    rf = body.get("response_format")
    return bool(body.get("tools") or body.get("functions")) or (
        isinstance(rf, Mapping) and rf.get("type") == "json_schema"
    )


async def check(
    body: Mapping[str, Any], message: Mapping[str, Any], finish_reason: str | None
) -> Violation | None:
    """The first way `message` breaks `body`'s contract, or None (see the module docstring for where it runs)."""
    if not _has_schemas(body):
        return check_answer(body, message, finish_reason)
    future = asyncio.get_running_loop().run_in_executor(_POOL, _check_in_time, body, message, finish_reason)
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return await future
    except TimeoutError:
        return Violation(SCHEMA_UNUSABLE, f"checking the answer took longer than {CHECK_TIMEOUT_S:g} s")
