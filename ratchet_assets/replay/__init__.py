"""``ratchet replay``: what the stored traffic would have been served and paid under another policy.

Over the sealed lake (``ratchet_core.lake``), for one task and a day range, every request row is replayed through
the gateway's own decisions, with nothing but what its ledger rows recorded:

- **Who serves.** The student answers on the request path when its route named a version; the row records the
  student's confidence (``confidence``, NULL when the student was not asked or failed) and the threshold it was held
  to. It serves iff ``confidence >= threshold`` (no threshold: always) and its answer kept the request's contract
  (``contract_violation == ''``), exactly the cascade of ``ratchet_gateway.chat.student`` (``Student.attempt``).
  At the real thresholds the replay must say "student" for exactly the rows that say ``served_by = 'student'``:
  that reproduction is checked row by row and reported (``reproduced``, ``mismatches``).
- **At another threshold** (``--threshold``, or ``--target``: the threshold Learn-then-Test calibrates at that
  target from the version's signed certificate rows, ``ratchet_stats.ltt``): a row the student answered is served
  iff its confidence reaches the new threshold. Rows where the student was never asked (the task on the teacher,
  pinned, outside a canary, the student down) cannot be answered from the data: they are counted as
  ``unanswerable`` and stay with the teacher. Shadow pairs (``pair_role='shadow'``) carry a candidate's confidence
  and its agreement with the teacher's answer: ``--candidate`` replays the candidate as if it served them.
- **Paid.** Teacher-served rows pay ``teacher_cost_usd`` (the gateway's price of the teacher's usage); a student
  answer pays the student's cost: ``actual_cost_usd`` of a student-served row, ``actual - teacher`` of a cascaded
  one (the gateway paid both). A cascaded row that the what-if serves saves its teacher cost; a served row that the
  what-if cascades adds it.
- **Audits** (``--audit-rate``): the audit draw is deterministic in the request id
  (``ratchet_core.routing.unit_hash("audit", id) < rate``), so which student-served requests a rate audits, and
  what their teacher answers cost (``teacher_cost_usd``), is known exactly for every rate.
- **Quality.** Audit pairs say whether the student agreed with the teacher (``pair_outcome``); the what-if's error
  count is over the served rows whose outcome is known (``known_outcomes``), and says how many it is not known for.
- **Feedback.** What the application said about the answers (``ratchet_core.feedback``, :func:`load_feedback`: bad
  or good by the task's ``bad_when``, or a demonstration the served answer agreed with or not) is counted for the
  model that served each request: the student's agreement with feedback is the share of its answers with feedback
  that feedback did not call bad, beside the teacher's. A what-if counts it only where it serves a request with the
  model that really answered it (feedback is about that answer).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

COLUMNS = [
    "request_id",
    "kind",
    "day",
    "task",
    "stage",
    "version",
    "served_by",
    "confidence",
    "threshold",
    "pair_role",
    "pair_outcome",
    "teacher_cost_usd",
    "actual_cost_usd",
    "status_code",
    "contract_violation",
]


class ReplayError(ValueError):
    """The replay cannot run as asked; the message says what to do."""


@dataclass
class ReplayScenario:
    """What the replay applies. None = what the gateway really applied (the row's threshold, the real audits)."""

    threshold: float | None = None
    audit_rate: float | None = None
    candidate: str | None = (
        None  # replay this shadowed version as if it served (its shadow pairs' confidences)
    )


@dataclass
class Outcome:
    requests: int = 0
    student_served: int = 0
    teacher_served: int = 0
    cost_usd: float = 0.0
    teacher_only_cost_usd: float = 0.0  # everything on the teacher
    audits: int = 0
    audit_cost_usd: float = 0.0
    served_known_outcomes: int = 0
    served_known_errors: int = 0
    student_feedback: int = 0  # student answers with feedback that says good or bad
    student_feedback_bad: int = 0
    teacher_feedback: int = 0
    teacher_feedback_bad: int = 0

    @property
    def student_share(self) -> float:
        return self.student_served / self.requests if self.requests else 0.0

    def feedback(self, served: str, bad: bool | None) -> None:
        if bad is None:
            return
        if served == "student":
            self.student_feedback += 1
            self.student_feedback_bad += bad
        else:
            self.teacher_feedback += 1
            self.teacher_feedback_bad += bad

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["student_share"] = self.student_share
        for who in ("student", "teacher"):
            n, bad = d[f"{who}_feedback"], d[f"{who}_feedback_bad"]
            d[f"{who}_feedback_agreement"] = round((n - bad) / n, 9) if n else None
        d["saved_usd"] = self.teacher_only_cost_usd - self.cost_usd - self.audit_cost_usd
        for k, v in list(d.items()):
            if isinstance(v, float):
                d[k] = round(v, 9)
        return d


@dataclass
class Replay:
    task: str
    days: list[str]
    actual: Outcome
    replayed: Outcome  # the real thresholds and audits, replayed from the rows
    what_if: Outcome | None
    policy: dict[str, Any]
    answerable: (
        int  # request rows the student answered (a confidence is stored): any threshold can be replayed
    )
    unanswerable: int  # request rows the student never answered: they stay with the teacher in every what-if
    mismatches: list[str] = field(
        default_factory=list
    )  # request ids the replay serves differently than the gateway
    notes: list[str] = field(default_factory=list)

    @property
    def reproduced(self) -> bool:
        return not self.mismatches and self.replayed.student_served == self.actual.student_served

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "days": self.days,
            "policy": self.policy,
            "answerable": self.answerable,
            "unanswerable": self.unanswerable,
            "reproduced": self.reproduced,
            "mismatches": self.mismatches[:20],
            "actual": self.actual.as_dict(),
            "replayed": self.replayed.as_dict(),
            "what_if": self.what_if.as_dict() if self.what_if else None,
            "notes": self.notes,
        }


def day_range(start: str, end: str | None) -> list[str]:
    a = date.fromisoformat(start)
    b = date.fromisoformat(end or start)
    if b < a:
        raise ReplayError(f"the day range ends ({b}) before it starts ({a})")
    return [(a + timedelta(days=i)).isoformat() for i in range((b - a).days + 1)]


def load_rows(lake: str | Path, days: Iterable[str], task: str) -> list[dict[str, Any]]:
    """The task's ledger rows of the sealed segments of `days` (only the columns the replay reads)."""
    import pyarrow as pa

    from ratchet_core.lake import Lake

    lk = Lake(lake)
    tables = [t for day in days for t in lk.day_tables(day, COLUMNS)]
    if not tables:
        return []
    rows = pa.concat_tables(tables, promote_options="permissive").to_pylist()
    return [r for r in rows if r["task"] == task]


def _serves(conf: float | None, threshold: float | None, violation_free: bool = True) -> bool:
    if conf is None:
        return False
    return violation_free and (threshold is None or conf >= threshold)


def load_feedback(engine: Any, task: str, policy: Any = None) -> dict[str, bool]:
    """request id -> whether the application's feedback on its answer says bad (any item) or good; requests whose
    feedback says neither are left out (module docstring, "Feedback")."""
    from ratchet_core import feedback
    from ratchet_core.control_db import feedback as table

    out: dict[str, bool] = {}
    if engine is None:
        return out
    for r in feedback.rows(engine, (table.c.task == task) & (table.c.target == "request")):
        bad = feedback.verdict(r, policy)
        if bad is not None:
            out[r["request_id"]] = out.get(r["request_id"], False) or bad
    return out


def replay(
    rows: list[dict[str, Any]],
    task: str,
    days: list[str],
    scenario: ReplayScenario | None = None,
    feedback: dict[str, bool] | None = None,
) -> Replay:
    """Replay `rows` (one task's ledger rows, :func:`load_rows`) as served, and under `scenario` when given;
    `feedback`: :func:`load_feedback`."""
    from ratchet_core.routing import unit_hash

    scenario = scenario or ReplayScenario()
    requests = [r for r in rows if r["kind"] == "request" and r["status_code"] == 200]
    audits = {r["request_id"]: r for r in rows if r["kind"] == "pair" and r["pair_role"] == "audit"}
    shadows = {
        r["request_id"]: r
        for r in rows
        if r["kind"] == "pair" and r["pair_role"] == "shadow" and r["version"] == scenario.candidate
    }
    actual, replayed = Outcome(), Outcome()
    what_if = (
        Outcome()
        if (scenario.threshold, scenario.audit_rate, scenario.candidate) != (None, None, None)
        else None
    )
    answerable = unanswerable = 0
    mismatches: list[str] = []
    notes: list[str] = []
    violations = _violations(rows)
    for r in sorted(requests, key=lambda r: r["request_id"]):
        rid = r["request_id"]
        teacher = float(r["teacher_cost_usd"] or 0.0)
        paid = float(r["actual_cost_usd"] or 0.0)
        conf = r["confidence"]
        student_asked = conf is not None
        answerable += student_asked
        unanswerable += not student_asked
        ok = rid not in violations
        # the student's own cost: all of it when it served, the part above the teacher's when it cascaded
        student_cost = (
            (paid if r["served_by"] == "student" else max(0.0, paid - teacher)) if student_asked else 0.0
        )
        audit_pair = audits.get(rid)
        outcome = None if audit_pair is None else audit_pair["pair_outcome"] == "agree"
        for out in (actual, replayed, what_if):
            if out is not None:
                out.requests += 1
                out.teacher_only_cost_usd += teacher
        # what the gateway did
        _add(actual, r["served_by"] == "student", teacher, student_cost, student_asked, outcome)
        verdict = (feedback or {}).get(rid)
        actual.feedback(r["served_by"], verdict)
        if audit_pair is not None:
            actual.audits += 1
            actual.audit_cost_usd += float(audit_pair["actual_cost_usd"] or 0.0)
        # the same decisions, replayed from the row
        again = _serves(conf, r["threshold"], ok)
        if again != (r["served_by"] == "student"):
            mismatches.append(rid)
        _add(replayed, again, teacher, student_cost, student_asked, outcome)
        if again == (r["served_by"] == "student"):
            replayed.feedback(r["served_by"], verdict)
        if again and audit_pair is not None:
            replayed.audits += 1
            replayed.audit_cost_usd += float(audit_pair["actual_cost_usd"] or 0.0)
        if what_if is None:
            continue
        w_conf, w_outcome, w_cost, w_asked = conf, outcome, student_cost, student_asked
        if scenario.candidate is not None:
            sh = shadows.get(rid)
            w_asked = sh is not None
            w_conf = None if sh is None else sh["confidence"]
            w_outcome = None if sh is None else sh["pair_outcome"] == "agree"
            w_cost = 0.0 if sh is None else float(sh["actual_cost_usd"] or 0.0)
        threshold = scenario.threshold if scenario.threshold is not None else r["threshold"]
        if scenario.candidate is not None and scenario.threshold is None:
            threshold = None if sh is None else sh["threshold"]
        served = _serves(w_conf, threshold, ok)
        _add(what_if, served, teacher, w_cost, w_asked, w_outcome)
        if served == (r["served_by"] == "student") and scenario.candidate is None:
            what_if.feedback(r["served_by"], verdict)
        if served:
            rate = scenario.audit_rate
            audited = (audit_pair is not None) if rate is None else unit_hash("audit", rid) < rate
            if audited:
                what_if.audits += 1
                what_if.audit_cost_usd += teacher
    if scenario.candidate is not None:
        notes.append(
            f"{len(shadows)} request(s) have a shadow answer of {scenario.candidate}: only those can be replayed as "
            "served by it"
        )
    if scenario.audit_rate is not None:
        notes.append(
            "audits: the gateway's deterministic draw (unit_hash('audit', request_id) < rate), exact"
        )
    return Replay(
        task=task,
        days=days,
        actual=actual,
        replayed=replayed,
        what_if=what_if,
        policy={k: v for k, v in asdict(scenario).items() if v is not None},
        answerable=answerable,
        unanswerable=unanswerable,
        mismatches=mismatches,
        notes=notes,
    )


def _violations(rows: list[dict[str, Any]]) -> set[str]:
    """Request ids whose student answer broke the request's contract (read from the lake when recorded)."""
    return {r["request_id"] for r in rows if r.get("contract_violation")}


def _add(
    out: Outcome, served: bool, teacher: float, student_cost: float, student_asked: bool, outcome: bool | None
) -> None:
    if served:
        out.student_served += 1
        out.cost_usd += student_cost
        if outcome is not None:
            out.served_known_outcomes += 1
            out.served_known_errors += not outcome
    else:
        out.teacher_served += 1
        out.cost_usd += teacher + (student_cost if student_asked else 0.0)


def threshold_at_target(
    certificate: str | Path, task: str, target: float, delta: float | None = None
) -> float:
    """The threshold Learn-then-Test calibrates for `task` at `target` from a certificate's signed rows."""
    import base64
    import json

    from ratchet_stats.ltt import ltt_calibrate

    env = json.loads(Path(certificate).read_text())
    predicate = json.loads(base64.b64decode(env["payload"]))["predicate"]
    section = (predicate.get("tasks") or {}).get(task)
    if not section:
        raise ReplayError(f"{certificate} does not evaluate {task}")
    rows = section["rows"]
    d = float(delta if delta is not None else section.get("delta", predicate["delta"]))
    result = ltt_calibrate([r[0] for r in rows], [r[1] for r in rows], list(predicate["grid"]), target, d)
    threshold = getattr(result, "threshold", None)
    if threshold is None and isinstance(result, dict):
        threshold = result.get("threshold")
    if threshold is None:
        raise ReplayError(f"no threshold certifies {task} at target {target} on {certificate}'s rows")
    return float(threshold)
