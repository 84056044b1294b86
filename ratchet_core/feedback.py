"""Feedback: what an application says about answers, its checks and its store (one home; ARCHITECTURE.md,
"Contracts and their homes").

An item (``POST /ratchet/feedback``, or one of the ``items`` of ``POST /ratchet/feedback:batch``, routed by
``ratchet_gateway.routers.feedback``) says one thing about one target:

- the target: ``request_id`` (an ``x-ratchet-request-id`` the client itself got) or ``episode_id`` (an id the
  client set on its requests as ``metadata.ratchet_episode``; an episode is the client's own by construction,
  since episodes are namespaced by client);
- ``metric`` and ``value``: a metric the task's signed policy declares (``ratchet_core.task_policy``:
  ``boolean`` takes true/false, ``float`` a finite number), or ``comment`` (text), or ``demonstration`` (the
  correct answer, in the request's own answer format: text, or an assistant message ``{"content",
  "tool_calls"}``, checked against the request's contract by ``ratchet_core.contract.check_answer``; only on a
  request, not an episode);
- ``feedback_id``: the client's own id (name rule ``feedback id``). The store is keyed by (client, feedback_id):
  sending the same item again answers what the first answer said; the same id with other content is refused.

Text (comments, demonstrations) is PII: it is stored through the gateway's redaction rules
(``ratchet_core.redact``), like the ledger's rows, and an erasure removes it (``delete``).

A row's ``state`` is ``recorded`` (the request was found and is the caller's), ``pending`` (the request was not
visible to the replica that took the item: another replica's unsealed row; settled later by :func:`settle`) or
``rejected`` (``error`` says why: ``unknown_request`` (also for another client's request: an id that is not the
caller's is answered exactly as one that does not exist), ``undeclared_metric``, ``wrong_type``,
``contract_violation``; ``request_of_another_client`` only in rows stored by older versions). How a recorded item counts: :func:`verdict` (the policy's ``bad_when``, and
a demonstration's disagreement with the answer served) for release evidence, replay and the dashboard; the night's
labels (``ratchet_assets.night.labels``) take demonstrations as labels and keep bad teacher answers out of training.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ratchet_core.task_policy import RESERVED_METRICS, TaskPolicy

MAX_BATCH = 1000
MAX_TEXT_CHARS = 65_536
TARGETS = ("request", "episode")
KINDS = ("boolean", "float", "comment", "demonstration")
STATES = ("recorded", "pending", "rejected")
# Why an item was rejected (the ``error`` column; the route's error ``code`` too).
UNKNOWN_REQUEST = "unknown_request"
NOT_YOURS = "request_of_another_client"
UNDECLARED = "undeclared_metric"
WRONG_TYPE = "wrong_type"
CONTRACT = "contract_violation"
UNKNOWN_EPISODE = "unknown_episode"


class FeedbackError(Exception):
    """An item that cannot be taken: ``status`` (HTTP), ``code`` (stable), ``message`` (what to send instead)."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param


@dataclass(frozen=True)
class StoredRequest:
    """What the ledger holds about one request row (redacted texts), as the gateway or the night found it."""

    request_id: str
    client: str
    task: str
    day: str
    served_by: str
    version: str
    messages: str
    tools: str
    response_format: str
    answer: str
    tool_calls: str
    episode: str = ""

    def example_key(self) -> str:
        """The row's example key (``ratchet_core.example_key``), as the night computes it."""
        from ratchet_core.example_key import redacted_example_key, split_tools_column

        rf = json.loads(self.response_format) if self.response_format else None
        return redacted_example_key(
            self.task, json.loads(self.messages), split_tools_column(self.tools)[0], rf or None
        )

    def contract_body(self) -> dict[str, Any]:
        """The parts of the request its answer contract is read from (tools, tool_choice, response_format)."""
        body: dict[str, Any] = {}
        if self.tools:
            stored = json.loads(self.tools)
            body["tools"] = stored.get("tools") or []
            if stored.get("tool_choice") is not None:
                body["tool_choice"] = stored["tool_choice"]
        if self.response_format:
            body["response_format"] = json.loads(self.response_format)
        return body

    def served_message(self) -> dict[str, Any]:
        """The assistant message the request was answered with (redacted, as stored)."""
        calls = json.loads(self.tool_calls) if self.tool_calls else None
        return {"role": "assistant", "content": self.answer or None, "tool_calls": calls or None}


@dataclass(frozen=True)
class Checked:
    """A metric value checked against the task's policy: its kind, number and text (the text not yet redacted)."""

    kind: str
    value: float | None = None
    message: dict[str, Any] | None = None  # a demonstration, as an assistant message
    text: str | None = None  # a comment


def check_value(policy: TaskPolicy | None, metric: str, value: Any, task: str) -> Checked:
    """`value` for `metric` under `task`'s `policy`; FeedbackError (400 undeclared_metric / wrong_type) else."""
    if metric == "comment":
        if not isinstance(value, str) or not value.strip():
            raise FeedbackError(400, WRONG_TYPE, "a comment's value is non-empty text", "value")
        if len(value) > MAX_TEXT_CHARS:
            raise FeedbackError(400, WRONG_TYPE, f"a comment is at most {MAX_TEXT_CHARS} characters", "value")
        return Checked("comment", text=value)
    if metric == "demonstration":
        return Checked("demonstration", message=demonstration_message(value))
    spec = ((policy.metrics if policy is not None else None) or {}).get(metric)
    if spec is None:
        declared = sorted((policy.metrics or {}) if policy is not None else {})
        raise FeedbackError(
            400,
            UNDECLARED,
            f"metric {metric!r} is not declared for task {task!r} (declared: "
            f"{', '.join(declared) or 'none'}; plus {' and '.join(RESERVED_METRICS)}); an operator declares it "
            f"with `ratchet admin task set {task} --metric {metric}:boolean|float:higher|lower`",
            "metric",
        )
    if spec.type == "boolean":
        if not isinstance(value, bool):
            raise FeedbackError(400, WRONG_TYPE, f"metric {metric!r} is boolean: send true or false", "value")
        return Checked("boolean", float(value))
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FeedbackError(400, WRONG_TYPE, f"metric {metric!r} is a float: send a finite number", "value")
    return Checked("float", float(value))


def demonstration_message(value: Any) -> dict[str, Any]:
    """The assistant message a demonstration's value gives (text is its content); FeedbackError 400 otherwise."""
    if isinstance(value, str):
        if not value.strip() or len(value) > MAX_TEXT_CHARS:
            raise FeedbackError(
                400, WRONG_TYPE, f"a demonstration is 1-{MAX_TEXT_CHARS} characters of the answer", "value"
            )
        return {"role": "assistant", "content": value, "tool_calls": None}
    if isinstance(value, Mapping) and set(value) <= {"role", "content", "tool_calls"}:
        content, calls = value.get("content"), value.get("tool_calls")
        if value.get("role", "assistant") == "assistant" and (
            (isinstance(content, str) and content) or (isinstance(calls, list) and calls)
        ):
            if content is not None and not isinstance(content, str):
                raise FeedbackError(400, WRONG_TYPE, "a demonstration's content is text", "value")
            if len(json.dumps(value)) <= MAX_TEXT_CHARS:
                return {"role": "assistant", "content": content or None, "tool_calls": calls or None}
    raise FeedbackError(
        400,
        WRONG_TYPE,
        "a demonstration is the correct answer: its text, or an assistant message with content and/or "
        'tool_calls ({"content": ..., "tool_calls": [...]})',
        "value",
    )


def check_demonstration(message: Mapping[str, Any], request: StoredRequest) -> None:
    """FeedbackError 400 ``contract_violation`` when `message` breaks the contract `request` declared."""
    from ratchet_core.contract import check_answer

    violation = check_answer(request.contract_body(), message, "stop")
    if violation is not None:
        raise FeedbackError(
            400,
            CONTRACT,
            f"the demonstration breaks the request's own answer contract ({violation}); send the correct answer "
            "in the format the request asked for",
            "value",
        )


def agrees(
    task: str, policy: TaskPolicy | None, demonstration: Mapping[str, Any], request: StoredRequest
) -> bool:
    """Whether the answer `request` was served agrees with the demonstration (the task's comparator)."""
    from ratchet_core.workloads import compare

    comparator = (policy.comparator if policy is not None else None) or task
    try:
        return bool(compare(comparator, demonstration, request.served_message()))
    except Exception:  # a comparator that cannot read the served answer: it is not the demonstrated one
        return False


def fingerprint(target: str, target_id: str, metric: str, value: Any, task: str | None) -> str:
    """SHA-256 of what an item says (a retry under the same feedback id must say the same)."""
    from ratchet_stats.canonical import canonical_json

    doc = {"target": target, "id": target_id, "metric": metric, "value": value, "task": task}
    return hashlib.sha256(canonical_json(doc)).hexdigest()


def stored_text(checked: Checked, redact: Callable[[Any], Any]) -> str | None:
    """The text column of an item: a redacted comment, or the canonical JSON of the redacted demonstration."""
    from ratchet_stats.canonical import canonical_json

    if checked.kind == "comment":
        return redact(checked.text)
    if checked.kind == "demonstration":
        return canonical_json(redact(checked.message)).decode("utf-8")
    return None


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def resolved_columns(request: StoredRequest) -> dict[str, Any]:
    """The columns a found request fills in."""
    return {
        "task": request.task,
        "example_key": request.example_key(),
        "request_day": request.day,
        "served_by": request.served_by,
        "version": request.version,
    }


# The store -------------------------------------------------------------------------------------------------------
def take(engine: Any, row: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Insert `row` unless (client, feedback_id) is stored; return (the stored row, whether it was new).

    FeedbackError 409 when the stored row's fingerprint differs (the same id used for another item)."""
    from ratchet_core.control_db import feedback

    key = (feedback.c.client == row["client"]) & (feedback.c.feedback_id == row["feedback_id"])
    for _ in range(2):
        try:
            with engine.begin() as conn:
                old = conn.execute(sa.select(feedback).where(key)).mappings().first()
                if old is None:
                    conn.execute(feedback.insert().values(**row))
                    return dict(row), True
        except sa.exc.IntegrityError:  # another replica took the same id at once: read it again
            continue
        if old["fingerprint"] != row["fingerprint"]:
            raise reused(row["feedback_id"])
        return dict(old), False
    raise FeedbackError(
        409, "feedback_id_reused", "the feedback id is being written by another request; retry"
    )


def take_many(engine: Any, rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], bool]]:
    """:func:`take` for many rows (unique feedback ids of one client) in one transaction: one read of the ids
    stored, one insert of the rest; when another replica inserts one of them meanwhile, row by row instead."""
    from ratchet_core.control_db import feedback

    if not rows:
        return []
    client = rows[0]["client"]
    assert all(r["client"] == client for r in rows) and len({r["feedback_id"] for r in rows}) == len(rows)
    try:
        with engine.begin() as conn:
            old = {
                r["feedback_id"]: dict(r)
                for r in conn.execute(
                    sa.select(feedback).where(
                        (feedback.c.client == client)
                        & feedback.c.feedback_id.in_([r["feedback_id"] for r in rows])
                    )
                ).mappings()
            }
            # every column in every row: an executemany takes one set of parameters
            new = [
                {c.name: r.get(c.name) for c in feedback.columns} for r in rows if r["feedback_id"] not in old
            ]
            if new:
                conn.execute(feedback.insert(), new)
    except sa.exc.IntegrityError:
        out = []
        for r in rows:
            try:
                out.append(take(engine, r))
            except FeedbackError as exc:
                out.append(({**r, "state": "rejected", "error": exc.code}, False))
        return out
    result = []
    for r in rows:
        if r["feedback_id"] not in old:
            result.append((dict(r), True))
        elif old[r["feedback_id"]]["fingerprint"] != r["fingerprint"]:
            result.append(({**r, "state": "rejected", "error": "feedback_id_reused"}, False))
        else:
            result.append((old[r["feedback_id"]], False))
    return result


def stored(engine: Any, client: str, feedback_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The client's stored items of these ids, by id (one query)."""
    from ratchet_core.control_db import feedback

    ids = sorted(set(feedback_ids))
    out: dict[str, dict[str, Any]] = {}
    with engine.connect() as conn:
        for i in range(0, len(ids), 500):
            query = sa.select(feedback).where(
                (feedback.c.client == client) & feedback.c.feedback_id.in_(ids[i : i + 500])
            )
            out.update({r["feedback_id"]: dict(r) for r in conn.execute(query).mappings()})
    return out


def reused(feedback_id: str) -> FeedbackError:
    """The 409 for a feedback id sent again with other content."""
    return FeedbackError(
        409,
        "feedback_id_reused",
        f"feedback id {feedback_id!r} was already used for another item; a feedback id names one item: send a "
        "new id for new feedback",
        "feedback_id",
    )


def get(engine: Any, client: str, feedback_id: str) -> dict[str, Any] | None:
    from ratchet_core.control_db import feedback

    with engine.connect() as conn:
        row = (
            conn.execute(
                sa.select(feedback).where(
                    (feedback.c.client == client) & (feedback.c.feedback_id == feedback_id)
                )
            )
            .mappings()
            .first()
        )
    return dict(row) if row is not None else None


def pending(engine: Any, limit: int = 1000) -> list[dict[str, Any]]:
    """Pending items, oldest first."""
    from ratchet_core.control_db import feedback

    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(feedback)
            .where(feedback.c.state == "pending")
            .order_by(feedback.c.received_at, feedback.c.client, feedback.c.feedback_id)
            .limit(limit)
        ).mappings()
        return [dict(r) for r in rows]


def settle(engine: Any, client: str, feedback_id: str, state: str, **columns: Any) -> None:
    """Move a pending item to `state` (recorded or rejected) with the columns found; a settled one stays."""
    from ratchet_core.control_db import feedback

    assert state in ("recorded", "rejected")
    with engine.begin() as conn:
        conn.execute(
            feedback.update()
            .where(
                (feedback.c.client == client)
                & (feedback.c.feedback_id == feedback_id)
                & (feedback.c.state == "pending")
            )
            .values(state=state, settled_at=now_iso(), **columns)
        )


def rows(engine: Any, where: Any = None) -> list[dict[str, Any]]:
    """Stored items (all, or those matching SQLAlchemy condition `where`), in a stable order."""
    from ratchet_core.control_db import ensure_schema, feedback

    ensure_schema(engine)
    query = sa.select(feedback).order_by(feedback.c.received_at, feedback.c.client, feedback.c.feedback_id)
    if where is not None:
        query = query.where(where)
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def delete(
    engine: Any,
    *,
    request_ids: Iterable[str] = (),
    clients: Iterable[str] = (),
    text_matches: Callable[[str], bool] | None = None,
    text_clients: Iterable[str] = (),
    dry_run: bool = False,
) -> int:
    """Remove the items of erased requests, of erased clients, and those whose text an erasure's text matches (of
    `text_clients` only, when given); return how many were (``dry_run``: would be) removed
    (``ratchet_assets.governance.erase``). Nothing signed commits to an item, so it is removed whole: no
    tombstone is needed."""
    from ratchet_core.control_db import ensure_schema, feedback

    ensure_schema(engine)
    ids, names, scoped = set(request_ids), set(clients), set(text_clients)
    c = feedback.c
    with engine.begin() as conn:
        stored = conn.execute(sa.select(c.client, c.feedback_id, c.request_id, c.text)).all()
        gone = [
            (client, fid)
            for client, fid, rid, text in stored
            if rid in ids
            or client in names
            or (
                text_matches is not None
                and text is not None
                and (not scoped or client in scoped)
                and text_matches(text)
            )
        ]
        if not dry_run:
            for client, fid in gone:
                conn.execute(feedback.delete().where((c.client == client) & (c.feedback_id == fid)))
    return len(gone)


# What an item says about the answer ------------------------------------------------------------------------------
def verdict(row: Mapping[str, Any], policy: TaskPolicy | None) -> bool | None:
    """True = the answer served was bad, False = good, None = the item says neither (a comment; a metric the
    policy's ``bad_when`` does not name). A demonstration says bad when the served answer disagrees with it."""
    if row["state"] != "recorded":
        return None
    if row["kind"] == "demonstration":
        return None if row.get("agrees") is None else not row["agrees"]
    rule = policy.bad_rule() if policy is not None else None
    if rule is None or row["metric"] != rule.metric or row["value"] is None:
        return None
    return rule.bad(float(row["value"]))


def demonstration(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """A recorded demonstration's (redacted) assistant message, else None."""
    if row["state"] != "recorded" or row["kind"] != "demonstration" or not row.get("text"):
        return None
    return json.loads(row["text"])


def public(row: Mapping[str, Any]) -> dict[str, Any]:
    """What the route answers about a stored item (never another client's)."""
    out = {
        "feedback_id": row["feedback_id"],
        "status": row["state"],
        "metric": row["metric"],
        "task": row.get("task"),
        "received_at": row["received_at"],
    }
    out["request_id" if row["target"] == "request" else "episode_id"] = (
        row["request_id"] if row["target"] == "request" else row["episode"]
    )
    if row.get("error"):
        out["error"] = row["error"]
    return out


def by_request(items: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for r in items:
        if r.get("request_id"):
            out.setdefault(r["request_id"], []).append(r)
    return out


def unknown_after(segment_seconds: float) -> timedelta:
    """How long after it was received a pending item's target may still be an unsealed row somewhere: two
    segment periods and a minute (every live replica seals what it holds every ``RATCHET_SEGMENT_SECONDS``)."""
    return timedelta(seconds=2 * segment_seconds + 60)


# Settling pending items -----------------------------------------------------------------------------------------
def settle_pending(
    engine: Any,
    items: list[dict[str, Any]],
    found: Mapping[str, StoredRequest],
    policies: Mapping[str, TaskPolicy],
    seen_episode: Callable[[str, str], bool] | None = None,
    unknown_before: datetime | None = None,
) -> int:
    """Settle pending `items` whose request is in `found` (recorded, or rejected as the route would have
    answered); with `unknown_before`, reject as unknown those received before it whose target no row holds.
    `seen_episode(client, episode)` settles episode items. Returns how many were settled."""
    settled = 0
    for item in items:
        if item["state"] != "pending":
            continue
        received = datetime.fromisoformat(item["received_at"])
        late = unknown_before is not None and received < unknown_before
        if item["target"] == "episode":
            if seen_episode is not None and seen_episode(item["client"], item["episode"]):
                settle(engine, item["client"], item["feedback_id"], "recorded")
                settled += 1
            elif late:
                settle(engine, item["client"], item["feedback_id"], "rejected", error=UNKNOWN_EPISODE)
                settled += 1
            continue
        request = found.get(item["request_id"])
        if request is None:
            if late:
                settle(engine, item["client"], item["feedback_id"], "rejected", error=UNKNOWN_REQUEST)
                settled += 1
            continue
        state, columns = settled_columns(item, request, policies)
        settle(engine, item["client"], item["feedback_id"], state, **columns)
        settled += 1
    return settled


def settled_columns(
    item: Mapping[str, Any], request: StoredRequest, policies: Mapping[str, TaskPolicy]
) -> tuple[str, dict[str, Any]]:
    """(state, columns) of a pending request item now that its request row is known."""
    if request.client != item["client"]:  # another client's request is answered as an unknown one
        return "rejected", {"error": UNKNOWN_REQUEST}
    if not request.messages:  # erased since: its row is blanked
        return "rejected", {"error": UNKNOWN_REQUEST}
    if item.get("task") and item["task"] != request.task:
        return "rejected", {"error": WRONG_TYPE}
    policy = policies.get(request.task)
    value: Any = {
        "boolean": lambda: bool(item["value"]),
        "float": lambda: item["value"],
        "comment": lambda: item["text"],
        "demonstration": lambda: json.loads(item["text"]),
    }[item["kind"]]()
    try:
        checked = check_value(policy, item["metric"], value, request.task)
        if checked.kind == "demonstration":
            assert checked.message is not None
            check_demonstration(checked.message, request)
    except FeedbackError as exc:
        return "rejected", {"error": exc.code, **resolved_columns(request)}
    columns = resolved_columns(request)
    if checked.kind == "demonstration":
        columns["agrees"] = agrees(request.task, policy, checked.message or {}, request)
    return "recorded", columns
