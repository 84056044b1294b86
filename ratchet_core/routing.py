"""Per-request routing from the signed release manifest (``ratchet_core.manifest``) and local safety switches.

For a task whose release (``Manifest.serving``, which already applies signed pins and ``student_disabled``) is:

- ``teacher``: the teacher serves.
- ``shadow``: ``previous_live`` (at ``previous_threshold``) serves when set, else the teacher; ``version`` (the
  candidate) also answers off the request path -> a ``pair`` row with ``pair_role='shadow'``.
- ``canary``: a request is in the canary when ``u(request_id) * 100 < canary_percent``, with
  ``u = int(sha256("canary:" + request_id)[:8], 16) / 2**32`` (deterministic, uniform); canary requests go to
  ``version`` at ``threshold``, the rest as in shadow (served by ``previous_live`` or the teacher, and shadowed by
  ``version``).
- ``live``: ``version`` at ``threshold`` serves every request.

A student answer is kept only when its confidence (``ratchet_core.confidence.answer_confidence``) >= threshold
(a threshold of None means the version was published without one: its answers are kept). A student-served
request is audited (the teacher answers it too, off the request path) when
``int(sha256("audit:" + request_id)[:8], 16) / 2**32 < audit rate`` (``Manifest.audit_rate``: the task's policy's
``canary_audit_rate`` while a candidate is in shadow or canary, else its ``audit_rate``, else ``flags.audit_rate``;
``ratchet_core.task_policy``; a task whose policy is disabled is served by the teacher).

Evidence is always against the teacher (:func:`pairs`): a shadowed candidate is compared with the teacher's
answer, so it answers off the path when the teacher served the request (``previous_live`` absent, cascaded or
down) or when the request served by ``previous_live`` is audited (then it is compared with the teacher's audit
answer). Every request ``previous_live`` served (audited or not) is also *mirrored* (``Pairs.mirror``): the
candidate answers it off the path and is compared with the answer live served -> a ``pair`` row with
``pair_role='mirror'`` (free evidence: student compute only; ``ratchet_assets.release.decision``, "carried bound").
So the disagreement between the candidate and live is measured on all of live's traffic.
Where the candidate's mirror answer is not one its cascade keeps equal to live's (``PairRow.disagrees``) and
``u(request_id) < target_audit_rate`` (``Manifest.target_audit_rate``: the targeted audit stream, signed into the
release at admission by the evidence budget, ``Route.targeted``; the same u as the uniform audit, so the streams are
nested when the uniform rate is the smaller), the teacher judges the candidate's answer (its audit answer when the
request is audited, else a new call) -> a ``pair`` row with ``pair_role='targeted'`` after the mirror row: the
carried bound's evidence, each differing answer judged with the signed probability ``target_audit_rate``. A shadow pair records the candidate's own ``threshold`` (``Route.shadow_threshold``), so
``ratchet_assets.release.evidence.PairRow.error`` ignores answers its cascade would have sent to the teacher.

Local safety switches (:class:`SafetyState`, set by a gateway's admin routes and recorded by
``ratchet_gateway.safety``) only ever move a task towards the teacher.

This is the one routing decision: the gateway's chat route (``ratchet_gateway.chat``) and the offline simulator
(``ratchet_assets.sim.engine``) both call :func:`route` and :func:`pairs`; it lives in the shared core so the
simulator never imports the web app.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ratchet_core.manifest import Manifest


@dataclass
class SafetyState:
    """What the active safety switches impose: the student off everywhere, and/or tasks pinned to the teacher."""

    student_disabled: bool = False
    pins: set[str] = field(default_factory=set)

    def merge(self, other: SafetyState) -> SafetyState:
        """Union (narrowing only): a switch set by either side stays set."""
        return SafetyState(self.student_disabled or other.student_disabled, self.pins | other.pins)


def unit_hash(salt: str, request_id: str) -> float:
    """Uniform in [0, 1) from sha256(salt ':' request_id)."""
    h = hashlib.sha256(f"{salt}:{request_id}".encode()).digest()
    return int.from_bytes(h[:4], "big") / 2**32


@dataclass(frozen=True)
class Route:
    stage: str  # release stage of the task: teacher|shadow|canary|live
    version: str  # the task's published version ('' when none)
    student_version: str | None  # version that should answer on the request path (None: teacher)
    threshold: float | None  # threshold of student_version
    shadow_version: str | None  # candidate that answers off the path when a teacher answer exists (see pairs)
    audit: bool  # if the student serves, also ask the teacher off the path
    shadow_threshold: float | None = None  # threshold of shadow_version (recorded on its pair rows)
    # u(request_id) < the targeted stream's rate (Manifest.target_audit_rate): if the candidate's mirror answer
    # differs from live's, the teacher judges it (a ``targeted`` row); the rate itself is never on the route
    targeted: bool = False


@dataclass(frozen=True)
class Pairs:
    """What runs off the request path once it is known who served."""

    audit: bool  # the teacher is re-asked (the student served)
    shadow_version: str | None  # this candidate answers and is compared with the teacher's answer
    mirror: str | None = None  # this candidate answers and is compared with the answer live served
    targeted: bool = (
        False  # where the mirror answer differs from live's, the teacher judges it (targeted row)
    )

    @property
    def role(self) -> str:
        """``pair_role`` of the request row: audit when audited, shadow when only shadowed, else ''."""
        return "audit" if self.audit else "shadow" if self.shadow_version else ""


def route(manifest: Manifest, safety: SafetyState, task: str, request_id: str) -> Route:
    """Who answers request `request_id` of `task` on the request path, and who shadows it (module docstring)."""
    rel = manifest.serving(task)
    if safety.student_disabled or task in safety.pins:
        return Route("teacher", rel.version, None, None, None, False)
    u = unit_hash("audit", request_id)  # one draw for both audit streams: they are nested when p_lo <= p_hi
    audit = u < manifest.audit_rate(task)
    stage = rel.stage
    if stage == "live" and rel.version:
        return Route(stage, rel.version, rel.version, rel.threshold, None, audit)
    if stage in ("shadow", "canary") and rel.version:
        if stage == "canary" and unit_hash("canary", request_id) * 100.0 < rel.canary_percent:
            return Route(stage, rel.version, rel.version, rel.threshold, None, audit)
        fallback = rel.previous_live or None
        target = manifest.target_audit_rate(task)
        return Route(
            stage,
            rel.version,
            fallback,
            rel.previous_threshold if fallback else None,
            rel.version,
            audit and fallback is not None,
            rel.threshold,
            fallback is not None and target is not None and u < target,
        )
    return Route("teacher", rel.version, None, None, None, False)


def differs(outcome: str, confidence: float | None, threshold: float | None, contract_violation: str) -> bool:
    """Whether a candidate's mirror answer is not one its cascade keeps and equal to live's: `outcome` of the
    comparison with live's answer, the candidate's confidence and threshold, its contract verdict. Where it differs
    and the request is in the targeted stream, the teacher judges it (module docstring;
    ``ratchet_assets.release.evidence.PairRow.disagrees`` reads the same on the row)."""
    kept = not contract_violation and (confidence is None or threshold is None or confidence >= threshold)
    return not (outcome == "agree" and kept)


def pairs(r: Route, served_by: str) -> Pairs:
    """Off-path work for a request routed by `r` and served by ``teacher`` | ``student`` (module docstring)."""
    audit = served_by == "student" and r.audit
    shadow = r.shadow_version if served_by == "teacher" or audit else None
    if served_by == "student" and shadow == r.student_version:
        shadow = None  # the served version is not its own candidate
    mirror = (
        r.shadow_version
        if served_by == "student" and r.shadow_version and r.shadow_version != r.student_version
        else None
    )
    return Pairs(audit, shadow, mirror, bool(mirror) and r.targeted)
