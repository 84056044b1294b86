"""Audit evidence from sealed traffic: pair rows of ``<lake>/traffic/day=*/*.parquet``, read once each, in order.

The lake is a folder or any fsspec URL (``ratchet_core.lake.Lake``: listing and DuckDB reads, one code path).

A pair row (``kind='pair'``, ledger schema in ``ratchet_core.schema``) compares the student's answer with the
teacher's for one request: ``pair_role`` audit (student served, teacher re-asked) or shadow (teacher served, the
student answered off the path); ``pair_outcome`` agree | disagree | error. As evidence about a version's precision:

- ``disagree`` -> an error, ``agree`` -> a correct answer;
- ``error`` (one side failed) -> no evidence; a shadow answer whose confidence is below the threshold, or that
  broke its request's contract (``contract_violation``, ``ratchet_core.contract``) -> no evidence either (the
  gateway would have sent that request to the teacher).

A ``mirror`` pair row (the candidate's answer to a request the live version served, compared with the answer live
served) says nothing about precision on its own (``error`` is None); :attr:`PairRow.disagrees` is what it says
about the candidate against live, for the carried bound (``decision``): ``agree`` with the candidate's answer kept
(confidence at or above its threshold, no contract violation) -> False; anything else -> True (a disagreement,
an answer its cascade would not keep, or a failed call: all counted against the candidate, which keeps the bound
a lower bound).

A ``targeted`` pair row follows a mirror row where the candidate's answer differed from live's (as
:attr:`PairRow.disagrees` says) and the request fell in the targeted audit stream (``ratchet_core.routing``:
``unit_hash("audit", request_id) < target_audit_rate``, the release's signed inclusion probability): the teacher's
answer compared with the candidate's, for the same ``request_id``. :attr:`PairRow.differs_wrong` is the teacher's
verdict, the carried bound's X for that request (``decision``): 1 unless the candidate's answer is kept and agrees
with the teacher (a failed teacher call: 1). It is never an audit of the candidate's precision (``error`` is None):
the stream is not a uniform sample.

Segments are immutable once sealed (written under a temp name, then renamed), so a watermark over segment names is
exact: :class:`Watermark` holds, per day, the segments fully read, plus the position inside the segment where the
last evaluation stopped. Days more than ``SETTLE_DAYS`` before the newest day seen are considered settled and
dropped from the watermark (a segment sealed that late is ignored, and counted in ``late_ignored``).

Feedback (``ratchet_core.feedback``, in the control DB) is read by :func:`feedback_observations`: per (version,
task), what the application said about the student's answers of that version and about the teacher's answers of the
task received since the version's first one, in arrival order (``decision.feedback_evidence`` tests them).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratchet_core.lake import Lake, day_of
from ratchet_core.routing import differs

SETTLE_DAYS = 2


@dataclass(frozen=True)
class PairRow:
    segment: str  # lake-relative path of the segment
    index: int  # position among the segment's pair rows (ordered by seq)
    version: str
    task: str
    role: str
    outcome: str
    confidence: float | None
    threshold: float | None
    contract_violation: str = ""  # schema version 3; '' in older segments
    request_id: str = ""  # the request it pairs with (a targeted row resolves its request's mirror row)

    @property
    def disagrees(self) -> bool | None:
        """A mirror row: whether the candidate's answer is not one its cascade keeps and equal to live's (module
        docstring); None for the other roles."""
        if self.role != "mirror":
            return None
        return differs(self.outcome, self.confidence, self.threshold, self.contract_violation)

    @property
    def differs_wrong(self) -> bool | None:
        """A targeted row: the teacher's verdict on the differing answer of its request, the carried bound's X
        (module docstring): True unless the candidate's answer is kept and the teacher agrees with it (a failed
        or skipped teacher call counts as True); None for the other roles."""
        if self.role == "targeted":  # outcome: against the teacher's answer
            return differs(self.outcome, self.confidence, self.threshold, self.contract_violation)
        return None

    @property
    def error(self) -> bool | None:
        """True = the student was wrong, False = right, None = this row says nothing about precision."""
        if self.role in ("mirror", "targeted") or self.outcome not in ("agree", "disagree"):
            return None
        if self.role == "shadow" and (
            self.contract_violation
            or (
                self.confidence is not None
                and self.threshold is not None
                and self.confidence < self.threshold
            )
        ):
            return None
        return self.outcome == "disagree"


@dataclass
class Watermark:
    done: dict[str, list[str]] = field(default_factory=dict)  # day -> segment file names fully read
    partial: dict[str, int] = field(default_factory=dict)  # segment relpath -> pair rows already read
    min_day: str = ""  # days before this are settled

    def to_dict(self) -> dict[str, Any]:
        return {
            "done": {d: sorted(v) for d, v in sorted(self.done.items())},
            "partial": dict(sorted(self.partial.items())),
            "min_day": self.min_day,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Watermark:
        d = d or {}
        return cls(
            {k: list(v) for k, v in d.get("done", {}).items()},
            {k: int(v) for k, v in d.get("partial", {}).items()},
            d.get("min_day", ""),
        )

    def is_done(self, rel: str) -> bool:
        day, name = _day_and_name(rel)
        return name in self.done.get(day, ())

    def mark_done(self, rel: str) -> None:
        day, name = _day_and_name(rel)
        names = self.done.setdefault(day, [])
        if name not in names:
            names.append(name)
        self.partial.pop(rel, None)

    def settle(self, newest_day: str) -> None:
        """Forget days more than SETTLE_DAYS before `newest_day` (keeps the cursor small)."""
        cutoff = (dt.date.fromisoformat(newest_day) - dt.timedelta(days=SETTLE_DAYS)).isoformat()
        if cutoff <= self.min_day:
            return
        self.min_day = cutoff
        self.done = {d: v for d, v in self.done.items() if d >= cutoff}
        self.partial = {p: n for p, n in self.partial.items() if _day_and_name(p)[0] >= cutoff}


def feedback_observations(engine: Any, task: str, version: str, policy: Any) -> list[tuple[str, bool]]:
    """(served_by, bad) of the recorded feedback on `version`'s answers of `task`, and on the teacher's answers of
    `task` received since the first of those, in arrival order; items whose verdict says neither are left out."""
    from ratchet_core import feedback
    from ratchet_core.control_db import feedback as table

    rows = feedback.rows(
        engine, (table.c.task == task) & (table.c.state == "recorded") & (table.c.target == "request")
    )
    out: list[tuple[str, bool]] = []
    started = False
    for r in rows:  # oldest first
        mine = r["served_by"] == "student" and r["version"] == version
        started = started or mine
        if not started or not (mine or r["served_by"] == "teacher"):
            continue
        bad = feedback.verdict(r, policy)
        if bad is not None:
            out.append((r["served_by"], bad))
    return out


def _day_and_name(rel: str) -> tuple[str, str]:
    return day_of(rel), rel.rsplit("/", 1)[-1]  # traffic/day=YYYY-MM-DD/<name>.parquet


def pending_segments(lake: str | Path, wm: Watermark) -> tuple[list[str], int]:
    """Segments not yet fully read, oldest day first; plus how many late segments of settled days exist.

    ``lake``: a folder or an fsspec URL (``ratchet_core.lake``)."""
    store = Lake(lake)
    out: list[str] = []
    late = 0
    for day in store.days():
        try:
            dt.date.fromisoformat(day)
        except ValueError:
            continue
        for seg in store.segments(day):
            rel = seg.rel
            if wm.min_day and day < wm.min_day:
                late += 1 if seg.name not in wm.done.get(day, ()) else 0
                continue
            if not wm.is_done(rel):
                out.append(rel)
    return out, late


def read_pairs(lake: str | Path, segments: list[str], wm: Watermark) -> Iterator[tuple[str, list[PairRow]]]:
    """For each segment (in order), its pair rows not yet read, ordered by seq."""
    import duckdb

    store = Lake(lake)
    con = duckdb.connect()
    try:
        store.attach(con)
        for rel in segments:
            # contract_violation was added in ledger schema version 3: older segments lack it
            cv = "contract_violation" if "contract_violation" in store.read_schema(rel).names else "''"
            rows = con.execute(
                f"SELECT version, task, pair_role, pair_outcome, confidence, threshold, {cv}, request_id "
                "FROM read_parquet(?) "
                "WHERE kind = 'pair' ORDER BY seq, request_id",
                [store.duckdb_path(rel)],
            ).fetchall()
            start = wm.partial.get(rel, 0)
            yield (
                rel,
                [
                    PairRow(
                        rel,
                        i,
                        r[0] or "",
                        r[1] or "",
                        r[2] or "",
                        r[3] or "",
                        r[4],
                        r[5],
                        r[6] or "",
                        r[7] or "",
                    )
                    for i, r in enumerate(rows)
                    if i >= start
                ],
            )
    finally:
        con.close()


def task_traffic(lake: str | Path, today: str) -> dict[str, tuple[float, float]]:
    """task -> (requests, the teacher's mean price of one answer in USD) on the newest day before `today` with
    sealed segments: the evidence budget's traffic (``release.budget``). {} when there is none."""
    import duckdb

    store = Lake(lake)
    days = [d for d in store.days() if _is_day(d) and d < today]
    if not days:
        return {}
    paths = [store.duckdb_path(seg.rel) for seg in store.segments(days[-1])]
    if not paths:
        return {}
    con = duckdb.connect()
    try:
        store.attach(con)
        rows = con.execute(
            "SELECT task, count(*), avg(teacher_cost_usd) FROM read_parquet(?, union_by_name = true) "
            "WHERE kind = 'request' GROUP BY task ORDER BY task",
            [paths],
        ).fetchall()
    finally:
        con.close()
    return {str(t): (float(n), float(c or 0.0)) for t, n, c in rows if t}


def _is_day(day: str) -> bool:
    try:
        dt.date.fromisoformat(day)
    except ValueError:
        return False
    return True
