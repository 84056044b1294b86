"""Per-request routing from the signed release manifest (``ratchet_core.manifest``) and local safety switches.

For a task whose release (``Manifest.serving``, which already applies signed pins and ``student_disabled``) is:

- ``teacher``: the teacher serves.
- ``shadow``: ``previous_live`` (at ``previous_threshold``) serves when set, else the teacher; ``version`` also
  answers off the request path -> a ``pair`` row with ``pair_role='shadow'``.
- ``canary``: a request is in the canary when ``u(request_id) * 100 < canary_percent``, with
  ``u = int(sha256("canary:" + request_id)[:8], 16) / 2**32`` (deterministic, uniform); canary requests go to
  ``version`` at ``threshold``, the rest as in shadow.
- ``live``: ``version`` at ``threshold`` serves every request.

A student answer is kept only when its confidence (``ratchet_core.confidence.answer_confidence``) >= threshold
(a threshold of None means the version was published without one: its answers are kept). A student-served
request is audited (the teacher answers it too, off the request path) when
``int(sha256("audit:" + request_id)[:8], 16) / 2**32 < flags.audit_rate``.
Local safety switches (``ratchet_gateway.safety``) only ever move a task towards the teacher.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ratchet_core.manifest import Manifest
from ratchet_gateway.safety import SafetyState


def unit_hash(salt: str, request_id: str) -> float:
    """Uniform in [0, 1) from sha256(salt ':' request_id)."""
    h = hashlib.sha256(f"{salt}:{request_id}".encode()).digest()
    return int.from_bytes(h[:4], "big") / 2**32


@dataclass(frozen=True)
class Route:
    stage: str  # release stage of the task: teacher|shadow|canary|live
    version: str  # the task's published version ('' when none)
    student_version: str | None  # version that should answer on the request path (None: teacher)
    threshold: float | None
    shadow_version: str | None  # version that answers off the path (shadow)
    audit: bool  # if the student serves, also ask the teacher off the path


def route(manifest: Manifest, safety: SafetyState, task: str, request_id: str) -> Route:
    rel = manifest.serving(task)
    if safety.student_disabled or task in safety.pins:
        return Route("teacher", rel.version, None, None, None, False)
    audit = unit_hash("audit", request_id) < manifest.flags.audit_rate
    stage = rel.stage
    fallback = (rel.previous_live, rel.previous_threshold) if rel.previous_live else (None, None)
    if stage == "live" and rel.version:
        return Route(stage, rel.version, rel.version, rel.threshold, None, audit)
    if stage == "canary" and rel.version:
        if unit_hash("canary", request_id) * 100.0 < rel.canary_percent:
            return Route(stage, rel.version, rel.version, rel.threshold, None, audit)
        return Route(stage, rel.version, fallback[0], fallback[1], None, audit and fallback[0] is not None)
    if stage == "shadow" and rel.version:
        return Route(
            stage, rel.version, fallback[0], fallback[1], rel.version, audit and fallback[0] is not None
        )
    return Route("teacher", rel.version, None, None, None, False)
