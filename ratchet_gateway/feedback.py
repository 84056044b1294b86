"""What the feedback routes (``ratchet_gateway.routers.feedback``) decide: is the target the caller's, is the item
right for its task, and where does it go. The item, its checks and its store are ``ratchet_core.feedback``'s.

Whose request is it? The gateway knows a request's client only from rows: this replica's ledger (the journal's
rows not yet in DuckDB included, ``Ledger.find_rows``), then the sealed request-id index in the control DB
(``ratchet_gateway.sealed_index``: every sealed request's client and segment, kept by the sealers), and only for
the caller's own ids the one segment that holds each. Both lookups ask for the caller's rows only, so the
ownership check comes first: an id of another client (any request, an embeddings call's included) is answered
exactly as an id no request has, and costs the same work (no segment is read for either). A request neither
holds is another replica's row not sealed yet, or no request at all: nobody can tell which until that replica
seals (every ``RATCHET_SEGMENT_SECONDS``). So such an item is accepted as **pending** (202) and settled later
(``ratchet_core.feedback.settle_pending``): when the client sends it again or asks for it
(``GET /ratchet/feedback/{feedback_id}``), and by each night (``ratchet_assets.night.labels``) for requests it
reads. It becomes ``recorded``, or ``rejected`` with the error the route would have given: 404
``unknown_request`` once no row of the caller has appeared for longer than ``ratchet_core.feedback.unknown_after``
(two segment periods and a minute after it was received: by then every live replica has sealed what it held).
A request found at once gets its answer at once: 200, or 404 (the caller's own request holds no answer: erased,
or an embeddings call) / 400.

Episodes are namespaced by client (a client's ``metadata.ratchet_episode`` values), so an episode is always the
caller's own; it is ``recorded`` once one of the caller's requests carries it, ``pending`` until then (and
``rejected`` as ``unknown_episode`` after ``ratchet_core.feedback.unknown_after`` with none).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ratchet_core import feedback as fb
from ratchet_core.lake import Lake
from ratchet_core.names import is_valid
from ratchet_core.task_policy import TaskPolicy

COLUMNS = [
    "request_id",
    "client",
    "task",
    "day",
    "served_by",
    "version",
    "messages",
    "tools",
    "response_format",
    "answer",
    "tool_calls",
]
STATUS = {
    "recorded": 200,
    "pending": 202,
    fb.UNKNOWN_REQUEST: 404,
    fb.UNKNOWN_EPISODE: 404,
    fb.NOT_YOURS: 404,  # rows stored by older versions: answered as an unknown request now
    fb.UNDECLARED: 400,
    fb.WRONG_TYPE: 400,
    fb.CONTRACT: 400,
    "feedback_id_reused": 409,
}


def _stored(row: Mapping[str, Any]) -> fb.StoredRequest:
    return fb.StoredRequest(**{c: row.get(c) or "" for c in COLUMNS})


def segment_rows(lake_root: str, segments: dict[str, str], client: str) -> list[dict]:
    """The request rows of `client` in the segments the index named (request id -> segment): only those files are
    read, with their ids as the filter."""
    import duckdb

    lake = Lake(lake_root)
    by_segment: dict[str, list[str]] = {}
    for rid, rel in segments.items():
        by_segment.setdefault(rel, []).append(rid)
    out: list[dict] = []
    with duckdb.connect() as db:
        lake.attach(db)
        for rel, ids in sorted(by_segment.items()):
            if not lake.exists(rel):  # removed since it was indexed: it holds no row now
                continue
            marks = ", ".join("?" for _ in ids)
            rows = db.execute(
                f"SELECT {', '.join(COLUMNS)} FROM read_parquet(?) "
                f"WHERE kind = 'request' AND request_id IN ({marks}) AND client = ? ORDER BY seq",
                [lake.duckdb_path(rel), *ids, client],
            ).fetchall()
            out.extend(dict(zip(COLUMNS, r, strict=True)) for r in rows)
    return out


def find_requests(ledger: Any, index: Any, client: str, ids: Iterable[str]) -> dict[str, fb.StoredRequest]:
    """Request id -> its row, for the ids that are `client`'s own requests: this replica's ledger, else the sealed
    request-id index (``ratchet_gateway.sealed_index``) and then only the segments it names. Another client's id
    is left out by both queries, as an unknown one is: the caller learns nothing about it, and no segment is read
    for it (module docstring)."""
    want = sorted(set(ids))
    found: dict[str, fb.StoredRequest] = {}
    if not want:
        return found
    for row in ledger.find_rows("request_id", want, COLUMNS, client):
        found.setdefault(row["request_id"], _stored(row))
    rest = [i for i in want if i not in found]
    segments = index.segments_of(client, rest) if rest else {}
    if segments:
        for row in segment_rows(ledger.lake_root, segments, client):
            found.setdefault(row["request_id"], _stored(row))
    return found


def episode_seen(ledger: Any, index: Any, client: str, episode: str) -> bool:
    """Whether one of `client`'s requests carries `episode` (this replica's ledger, else the sealed index)."""
    if ledger.find_rows("episode", [episode], ["request_id"], client):
        return True
    return index.episode_seen(client, episode)


def fingerprint(item: Mapping[str, Any]) -> str:
    """What an item says, hashed (``ratchet_core.feedback.fingerprint``): a retry must say the same."""
    rid = item.get("request_id")
    target, target_id = ("request", rid) if rid else ("episode", item.get("episode_id"))
    return fb.fingerprint(target, target_id, item["metric"], item.get("value"), item.get("task"))


# One item -------------------------------------------------------------------------------------------------------
def item_row(
    client: str,
    item: Mapping[str, Any],
    found: Mapping[str, fb.StoredRequest],
    policies: Mapping[str, TaskPolicy],
    redact: Callable[[Any], Any],
    seen_episode: Callable[[str, str], bool],
) -> dict[str, Any]:
    """The row to store for one validated item (module docstring); FeedbackError for an item refused now."""
    rid, episode, task, metric = (
        item.get("request_id"),
        item.get("episode_id"),
        item.get("task"),
        item["metric"],
    )
    target = "request" if rid else "episode"
    row: dict[str, Any] = {
        "client": client,
        "feedback_id": item["feedback_id"],
        "target": target,
        "request_id": rid,
        "episode": episode,
        "task": task,
        "metric": metric,
        "fingerprint": fingerprint(item),
        "received_at": fb.now_iso(),
    }
    request = found.get(rid) if rid else None
    if request is not None and request.client != client:  # ownership first: another's id is an unknown one
        request = None
    if rid and request is None:  # not visible here yet: checked as far as the item alone allows
        checked = _pending_check(policies.get(task) if task else None, metric, item.get("value"), task)
        return {**row, **_columns(checked, redact), "state": "pending"}
    if request is not None:
        if not request.messages:  # an erased request (its row blanked), or an embeddings request: no answer
            raise fb.FeedbackError(
                404,
                fb.UNKNOWN_REQUEST,
                f"request {rid} holds no answer (erased, or an embeddings call)",
                "request_id",
            )
        if task and task != request.task:
            raise fb.FeedbackError(
                400,
                fb.WRONG_TYPE,
                f"request {rid} is of task {request.task!r}, not {task!r}: leave 'task' out or send its own",
                "task",
            )
        task = request.task
    policy = policies.get(task or "")
    checked = fb.check_value(policy, metric, item.get("value"), task or "")
    if request is None:  # an episode
        if checked.kind == "demonstration":
            raise fb.FeedbackError(
                400,
                fb.WRONG_TYPE,
                "a demonstration is the answer to one request: send it with that request's request_id",
                "metric",
            )
        state = "recorded" if seen_episode(client, episode) else "pending"
        return {**row, **_columns(checked, redact), "state": state}
    out = {**row, **_columns(checked, redact), **fb.resolved_columns(request), "state": "recorded"}
    if checked.kind == "demonstration":
        assert checked.message is not None
        fb.check_demonstration(checked.message, request)
        out["agrees"] = fb.agrees(request.task, policy, json.loads(out["text"]), request)
    return out


def _pending_check(policy: TaskPolicy | None, metric: str, value: Any, task: str | None) -> fb.Checked:
    """An item whose request is not visible yet: checked against the task's policy when the item names a task,
    else by its value's JSON type (checked against the policy when it settles)."""
    if task:
        return fb.check_value(policy, metric, value, task)
    if metric in ("comment", "demonstration"):
        return fb.check_value(None, metric, value, "")
    if isinstance(value, bool):
        return fb.Checked("boolean", float(value))
    if isinstance(value, int | float) and value == value and abs(value) != float("inf"):
        return fb.Checked("float", float(value))
    raise fb.FeedbackError(
        400, fb.WRONG_TYPE, f"metric {metric!r}: send true/false or a finite number", "value"
    )


def _columns(checked: fb.Checked, redact: Callable[[Any], Any]) -> dict[str, Any]:
    return {"kind": checked.kind, "value": checked.value, "text": fb.stored_text(checked, redact)}


def check_item(item: Mapping[str, Any]) -> None:
    """FeedbackError 400 for an item whose ids break the name rules or that names no single target."""
    if not is_valid("feedback id", item.get("feedback_id")):
        raise fb.FeedbackError(
            400,
            "invalid_feedback_id",
            "feedback_id: 1-128 characters of A-Z, a-z, 0-9, '.', '_', '-'",
            "feedback_id",
        )
    rid, episode = item.get("request_id"), item.get("episode_id")
    if bool(rid) == bool(episode):
        raise fb.FeedbackError(
            400,
            "invalid_target",
            "name exactly one of request_id (x-ratchet-request-id) or episode_id",
            "request_id",
        )
    if rid and not is_valid("request id", rid):
        raise fb.FeedbackError(
            400, "invalid_request_id", "request_id must be an x-ratchet-request-id value", "request_id"
        )
    if episode and not is_valid("episode", episode):
        raise fb.FeedbackError(
            400,
            "invalid_episode",
            "episode_id: 1-128 characters of A-Z, a-z, 0-9, '.', '_', '-'",
            "episode_id",
        )
    if episode and not item.get("task"):
        raise fb.FeedbackError(400, "task_required", "feedback on an episode names its task ('task')", "task")
    if not is_valid(
        "metric", item.get("metric")
    ):  # stored and echoed even while pending: the name rule first
        raise fb.FeedbackError(
            400,
            "invalid_metric",
            "metric: a declared metric name (1-64 of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter), "
            "'comment' or 'demonstration'",
            "metric",
        )
    if item.get("task") and not is_valid("task", item["task"]):
        raise fb.FeedbackError(
            400, "invalid_task", "task: a task name (A-Z, a-z, 0-9, '.', '_', '-')", "task"
        )
