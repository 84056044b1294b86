"""Feedback routes (client key; errors in OpenAI's shape; the item and its store: ``ratchet_core.feedback``):

- ``POST /ratchet/feedback``: one item; 200 ``recorded`` (also when the same item is sent again), 202 ``pending``
  (the request is not visible to this replica yet: ``ratchet_gateway.feedback`` says how it settles), 400 for an
  undeclared metric, a value of the wrong type or a demonstration outside the request's contract, 404 for a
  request none of the caller's rows holds (once that is known; another client's request is answered exactly so),
  409 for a feedback id reused with other content, 413 for a body over :data:`MAX_ITEM_BYTES`;
- ``POST /ratchet/feedback:batch``: ``{"items": [...]}``, at most :data:`ratchet_core.feedback.MAX_BATCH` items in
  one body of at most ``RATCHET_MAX_BODY_BYTES``, each item at most :data:`MAX_ITEM_BYTES` of JSON; 200 with one
  result per item, in order (``status`` and, for a refused item, ``error`` with the code and message the single
  route would have answered);
- ``GET /ratchet/feedback/{feedback_id}``: the caller's stored item and its state (a pending one is settled
  first, when its request has become visible).

Feedback is handled like a chat body (ARCHITECTURE.md, "The path of a request"): each request counts against the
client's requests per minute (``ClientLimiter.admit_request``: a 429 before the body is read), a body over
``request_body.LARGE_BODY_BYTES`` is parsed in pieces and its items validated on the large-body lane
(``ratchet_gateway.offload``), never on the event loop, and the lookups of a whole batch are one query each: the
items sent again that are still pending are settled together, from the sealed request-id index, never by reading
the lake per item.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from ratchet_core import feedback as fb
from ratchet_core import json_pieces
from ratchet_core.names import is_valid
from ratchet_gateway import feedback as gf
from ratchet_gateway.deps import ClientDep, GatewayDep
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.request_body import LARGE_BODY_BYTES, describe_errors, parse_chat_body, read_body
from ratchet_gateway.responses import error_docs, json_response
from ratchet_gateway.state import Gateway

router = APIRouter(prefix="/ratchet", tags=["feedback"])


class FeedbackItem(BaseModel):
    """One thing said about one request (or episode)."""

    model_config = ConfigDict(extra="forbid")

    feedback_id: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._-]{1,128}$",
        description="Your own id of this item: sending it again is answered as the first time.",
    )
    request_id: str | None = Field(None, max_length=128, description="An x-ratchet-request-id your key got.")
    episode_id: str | None = Field(
        None, max_length=128, description="An episode you set on requests as metadata.ratchet_episode."
    )
    task: str | None = Field(
        None,
        max_length=64,
        description="The task (required with episode_id; a request's own task otherwise).",
    )
    metric: str = Field(
        min_length=1,
        max_length=64,
        description="A metric the task's policy declares, or 'comment', or 'demonstration'.",
    )
    value: bool | float | str | dict[str, Any] = Field(
        description="true/false (boolean metric), a number (float metric), text (comment), or the correct answer "
        "(demonstration: its text, or an assistant message with content and/or tool_calls)."
    )


class FeedbackResult(BaseModel):
    feedback_id: str
    status: str = Field(description="recorded | pending | rejected")
    request_id: str | None = None
    episode_id: str | None = None
    metric: str | None = None
    task: str | None = None
    received_at: str | None = None
    error: Any = None
    http_status: int | None = Field(None, description="In a batch: the status the single route would answer.")


class BatchAnswer(BaseModel):
    results: list[FeedbackResult]


_ITEM_SCHEMA = FeedbackItem.model_json_schema()
_BATCH_SCHEMA = {
    "type": "object",
    "required": ["items"],
    "additionalProperties": False,
    "properties": {
        "items": {"type": "array", "minItems": 1, "maxItems": fb.MAX_BATCH, "items": _ITEM_SCHEMA}
    },
}


def _body_doc(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


# The most bytes one item's JSON may take: its value is at most MAX_TEXT_CHARS characters of text or of a
# demonstration's JSON, and even written with a 6-byte escape per character it fits; anything larger is refused
# before it is parsed (a single item) or validated (an item of a batch).
MAX_ITEM_BYTES = 6 * fb.MAX_TEXT_CHARS + 4096


async def _body_items(
    request: Request, gw: Gateway, client: str, batch: bool
) -> list[dict[str, Any] | GatewayError]:
    """Count the request against the client's requests per minute, read the body (size-limited), then parse and
    validate it: inline when small, on the large-body lane when over ``LARGE_BODY_BYTES``."""
    gw.limits.admit_request(client)
    limit = gw.settings.max_body_bytes if batch else min(gw.settings.max_body_bytes, MAX_ITEM_BYTES)
    try:
        raw = await read_body(request, limit)
    except GatewayError as exc:
        if exc.status != 413 or batch:
            raise
        raise GatewayError(
            413,
            f"a feedback item is at most {limit} bytes of JSON (a value of at most {fb.MAX_TEXT_CHARS} "
            "characters); send a shorter comment or demonstration",
            "body_too_large",
        ) from None
    if len(raw) > LARGE_BODY_BYTES:
        return await gw.offload.run(_parse_items, raw, batch)
    return _parse_items(raw, batch)


def _parse_items(raw: bytes, batch: bool) -> list[dict[str, Any] | GatewayError]:
    """The body parsed (``request_body.parse_chat_body``: nesting, value count, in pieces when large) and its
    items validated."""
    data = parse_chat_body(raw, '"items" (feedback items)' if batch else "a feedback item's fields")
    return _items(data, batch, large=len(raw) > LARGE_BODY_BYTES)


def _item_size(item: Any) -> int:
    """An item's JSON size in bytes (in pieces: a large one never holds the GIL for long)."""
    return len(json_pieces.dumps(item))


def _items(data: Any, batch: bool, large: bool = False) -> list[dict[str, Any] | GatewayError]:
    """The body's items, each validated (a GatewayError in its place when it is not an item); in a large batch,
    an item over :data:`MAX_ITEM_BYTES` is refused before it is validated."""
    if batch:
        if not isinstance(data, dict) or set(data) != {"items"} or not isinstance(data["items"], list):
            raise GatewayError(400, 'send {"items": [...]} (feedback items)', "invalid_body", param="items")
        raw = data["items"]
        if not 1 <= len(raw) <= fb.MAX_BATCH:
            raise GatewayError(
                400,
                f"a batch holds 1 to {fb.MAX_BATCH} items, not {len(raw)}; split it",
                "batch_too_large" if raw else "invalid_body",
                param="items",
            )
    else:
        raw = [data]
    out: list[dict[str, Any] | GatewayError] = []
    for item in raw:
        if not isinstance(item, dict):
            out.append(GatewayError(400, "a feedback item is a JSON object", "invalid_body"))
            continue
        if large and batch and _item_size(item) > MAX_ITEM_BYTES:
            out.append(
                GatewayError(
                    400,
                    f"a feedback item is at most {MAX_ITEM_BYTES} bytes of JSON (a value of at most "
                    f"{fb.MAX_TEXT_CHARS} characters); send a shorter one",
                    "item_too_large",
                    param="value",
                )
            )
            continue
        try:
            model = FeedbackItem.model_validate(item)
            parsed = model.model_dump()
            gf.check_item(parsed)
            out.append(parsed)
        except ValidationError as exc:
            out.append(GatewayError(400, describe_errors(exc.errors()), "invalid_request"))
        except fb.FeedbackError as exc:
            out.append(_error(exc))
    return out


def _error(exc: fb.FeedbackError) -> GatewayError:
    return GatewayError(exc.status, exc.message, exc.code, param=exc.param)


_MESSAGES = {
    fb.UNKNOWN_REQUEST: "no request with this id was made through Ratchet (no replica's ledger holds it); check "
    "the x-ratchet-request-id",
    fb.UNKNOWN_EPISODE: "none of your requests carries this episode id (metadata.ratchet_episode)",
    fb.NOT_YOURS: "no request with this id was made through Ratchet (no replica's ledger holds it); check "
    "the x-ratchet-request-id",  # rows stored by older versions: answered as an unknown request
    fb.UNDECLARED: "the metric is not declared for the request's task (ratchet admin task set TASK --metric ...)",
    fb.WRONG_TYPE: "the value does not have the metric's type, or the task is not the request's own",
    fb.CONTRACT: "the demonstration breaks the request's own answer contract",
    "feedback_id_reused": "the feedback id was already used for another item; send a new id for new feedback",
}


def _answer(row: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) for a stored row: 200 recorded, 202 pending, the route's 4xx for a rejected one."""
    body = fb.public(row)
    if row["state"] == "rejected":
        code = row.get("error") or ""
        code = fb.UNKNOWN_REQUEST if code == fb.NOT_YOURS else code
        status = gf.STATUS.get(code, 400)
        body["error"] = {"code": code, "message": _MESSAGES.get(code, code)}
        return status, body
    return gf.STATUS[row["state"]], body


def _take(gw: Gateway, client: str, items: list[dict[str, Any] | GatewayError]) -> list[tuple[int, dict]]:
    """Decide and store every item: one ledger and lake lookup for all their request ids, one read of the ids
    stored before, one transaction for the new ones."""
    before = fb.stored(gw.engine, client, [i["feedback_id"] for i in items if isinstance(i, dict)])
    # ids of the items not stored before (a re-sent item is looked up only if it is still pending, below)
    ids = [
        i["request_id"]
        for i in items
        if isinstance(i, dict) and i.get("request_id") and i["feedback_id"] not in before
    ]
    found = gf.find_requests(gw.ledger, gw.sealed_index, client, ids)
    seen = _episodes(gw, client)

    answers: list[tuple[int, dict] | str] = []  # an answer, or the feedback id of a row to store first
    new: dict[str, dict[str, Any]] = {}
    for item in items:
        if isinstance(item, GatewayError):
            answers.append((item.status, _refusal(item)))
            continue
        fid = item["feedback_id"]
        try:
            if fid in before or fid in new:  # sent before (or twice in this batch): the same answer
                if (before.get(fid) or new[fid])["fingerprint"] != gf.fingerprint(item):
                    raise fb.reused(fid)
                answers.append(fid)
                continue
            new[fid] = gf.item_row(client, item, found, gw.manifest.policies, gw.redact, seen)
            answers.append(fid)
        except fb.FeedbackError as exc:
            answers.append((exc.status, _refusal(_error(exc), fid)))
    for row, _ in fb.take_many(gw.engine, list(new.values())):
        before[row["feedback_id"]] = row
    waiting = [
        before[a]
        for a in dict.fromkeys(a for a in answers if isinstance(a, str))
        if a not in new and before[a]["state"] == "pending"
    ]
    if waiting:  # items sent again that are still pending: settled together, one lookup for all
        before.update(_settle(gw, client, waiting))
    out: list[tuple[int, dict]] = []
    for answer in answers:
        out.append(_answer(before[answer]) if isinstance(answer, str) else answer)
    return out


def _episodes(gw: Gateway, client: str) -> Any:
    """``seen(client, episode)``, each episode looked up once (this replica's ledger, else the sealed index)."""
    known: dict[tuple[str, str], bool] = {}

    def seen(c: str, e: str) -> bool:
        assert c == client
        if (c, e) not in known:
            known[(c, e)] = gf.episode_seen(gw.ledger, gw.sealed_index, c, e)
        return known[(c, e)]

    return seen


def _refusal(err: GatewayError, feedback_id: str | None = None) -> dict[str, Any]:
    return {
        "feedback_id": feedback_id or "",
        "status": "rejected",
        "error": {"code": err.code, "message": err.message, "param": err.param},
    }


def _settle(gw: Gateway, client: str, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The caller's pending rows, settled now where their target has become visible (or is known to be unknown):
    one ledger query and one index query for all of them, one read of the rows back. While the index is still
    catching up with older segments, a miss is not yet taken as unknown."""
    ids = [r["request_id"] for r in rows if r["target"] == "request"]
    found = gf.find_requests(gw.ledger, gw.sealed_index, client, ids)
    late = None
    if not gw.sealed_index.behind:
        late = datetime.now(UTC) - fb.unknown_after(gw.settings.segment_seconds)
    if fb.settle_pending(
        gw.engine, rows, found, gw.manifest.policies, _episodes(gw, client), unknown_before=late
    ):
        return fb.stored(gw.engine, client, [r["feedback_id"] for r in rows])
    return {}


_DOCS = error_docs(400, 401, 404, 409, 413, 429)


@router.post(
    "/feedback",
    summary="Say what was right about one of your requests (a metric, a comment, or the correct answer)",
    openapi_extra=_body_doc(_ITEM_SCHEMA),
    response_model=FeedbackResult,
    responses={
        202: {"model": FeedbackResult, "description": "Pending: the request is not visible yet"},
        **_DOCS,
    },
)
async def feedback(request: Request, gw: GatewayDep, client: ClientDep) -> Response:
    [item] = await _body_items(request, gw, client, batch=False)
    if isinstance(item, GatewayError):
        raise item
    [(status, body)] = await asyncio.to_thread(_take, gw, client, [item])
    if status >= 400:
        err = body["error"]
        raise GatewayError(status, err["message"], err["code"], param=err.get("param"))
    return json_response(body, status)


@router.post(
    "/feedback:batch",
    summary=f"Up to {fb.MAX_BATCH} feedback items at once; one result per item, in order",
    openapi_extra=_body_doc(_BATCH_SCHEMA),
    response_model=BatchAnswer,
    responses=error_docs(400, 401, 413, 429),
)
async def feedback_batch(request: Request, gw: GatewayDep, client: ClientDep) -> Response:
    items = await _body_items(request, gw, client, batch=True)
    answers = await asyncio.to_thread(_take, gw, client, items)
    return json_response({"results": [{**body, "http_status": status} for status, body in answers]})


@router.get(
    "/feedback/{feedback_id}",
    summary="One of your feedback items and its state (recorded, pending or rejected)",
    response_model=FeedbackResult,
    responses=error_docs(400, 401, 404),
)
async def feedback_item(
    gw: GatewayDep,
    client: ClientDep,
    feedback_id: str = PathParam(max_length=128, description="The feedback_id you sent."),
) -> Response:
    if not is_valid("feedback id", feedback_id):
        raise GatewayError(
            400, "feedback_id: 1-128 characters of A-Z, a-z, 0-9, '.', '_', '-'", "invalid_feedback_id"
        )
    row = await asyncio.to_thread(fb.get, gw.engine, client, feedback_id)
    if row is None:
        raise GatewayError(404, f"you sent no feedback with id {feedback_id!r}", "feedback_not_found")
    if row["state"] == "pending":
        row = (await asyncio.to_thread(_settle, gw, client, [row])).get(feedback_id, row)
    status, body = _answer(row)
    return json_response(body, 200 if status >= 400 else status)
