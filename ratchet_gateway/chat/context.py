"""What one chat request carries through the pipeline: a :class:`ChatCall`, one small typed record per concern,
so each step reads what it needs and writes only its own record.

- :class:`Received`: the request as received and validated (ids, arrival time, caller, task, the body sent on,
  the API it came in through);
- :class:`Decision`: who should answer (``ratchet_core.routing.route``) and the manifest that decided it;
- :class:`StudentAttempt`: what the student's answer was judged on (version, confidence, threshold, cost,
  contract violation, error);
- :class:`Outcome`: who served, the time spent waiting on models, the error a failed request ended with;
- :class:`Redaction`: the body as the student gets it and the ledger stores it, and the map back to the
  client's own text.

Records are plain slotted dataclasses, built once per request (no validation: every value comes from code that
already checked it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    from ratchet_core.routing import Route
    from ratchet_gateway.errors import GatewayError
    from ratchet_gateway.request_body import ChatRequest


@dataclass(slots=True)
class Received:
    """The request as received and validated; nothing after validation changes it."""

    request_id: str
    t0: float  # time.perf_counter() when it arrived (latency and overhead are measured from here)
    ts: int  # microseconds since the epoch: the row's ``ts``
    day: str  # the row's ``day`` (UTC, or the accelerated clock's)
    client: str  # the authenticated client's name
    task: str
    # the validated view of the body (the fields the gateway reads; a large body's keeps its first message only)
    req: ChatRequest
    body: dict  # the body the teacher gets: as sent (or its chat translation), less Ratchet's metadata keys
    api: str = "chat.completions"  # the API it came in through (``ApiFormat.api``; the row's ``api``)
    origin: Any = None  # the request as that API wrote it, what its answer echoes (``ApiFormat.parse``)
    # a large body: every step proportional to it runs in the lane (``ratchet_gateway.offload``)
    large: bool = False
    # ``metadata.ratchet_episode``: the client's id grouping requests (``ratchet_core.feedback``)
    episode: str = ""
    # the caller's name of a chat field its API translated (``ApiFormat.fields``), for errors raised after parsing
    fields: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Decision:
    """Who should answer on the request path and who answers off it."""

    route: Route
    manifest_seq: int  # the manifest ``route`` was decided with (``x-ratchet-manifest``)


@dataclass(slots=True)
class StudentAttempt:
    """The student's answer on the request path, as judged (empty when the student was not asked)."""

    version: str = ""  # the version that answered ('' until one did)
    confidence: float | None = None
    threshold: float | None = None
    cost: float | None = None  # what the student's answer cost, at the student's prices
    violation: str = (
        ""  # kind (``ratchet_core.contract``) of a confident answer that broke the request's contract
    )
    error: str | None = None  # why it gave no answer (its endpoint's error, or its circuit breaker open)
    # the teacher-equivalent's prompt count, started while the student answers (``ratchet_gateway.teacher_equivalent``)
    teacher_prompt: asyncio.Future[int] | None = None


@dataclass(slots=True)
class Outcome:
    """How the request ended."""

    served_by: str = "teacher"
    upstream_ms: float = 0.0  # time spent waiting on models (the rest of the latency is the gateway's own)
    error: GatewayError | None = None  # the error a stream ended with after its headers went out
    # ``json_object`` when the teacher got the request's json_schema in its system message (``chat.teacher``)
    teacher_schema: str = ""
    teacher_schema_violation: str = ""  # then: the guard's kind when the teacher's answer broke that schema
    # ``counted`` when the answer's model reported no usage and Ratchet counted it (the row's ``usage_source``)
    usage_source: str = "reported"


@dataclass(slots=True)
class Redaction:
    """The body as the student gets it and the ledger stores it (``ratchet_gateway.chat.redaction``)."""

    student_body: dict | None = None  # None until computed (once per request)
    pii_map: dict[str, str] | None = None  # placeholder -> the client's original text
    messages: Any = None  # the redacted messages (the row's ``messages``)
    columns: BodyColumns | None = None  # the row's columns of the request, as text (computed once)


@dataclass(slots=True, frozen=True)
class BodyColumns:
    """The ledger row's columns that come from the (redacted) request, as the ledger stores them."""

    messages: str
    tools: str
    response_format: str
    params: str


@dataclass(slots=True)
class ChatCall:
    """One chat request on its way through the pipeline."""

    received: Received
    decision: Decision
    headers: dict[str, str]  # the answer's ``x-ratchet-*`` headers (``ratchet_gateway.responses``)
    student: StudentAttempt = field(init=False, default_factory=StudentAttempt)
    outcome: Outcome = field(init=False, default_factory=Outcome)
    redaction: Redaction = field(init=False, default_factory=Redaction)
