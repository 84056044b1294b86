"""Evaluation certificate v2: v1, plus where each golden row's label came from, and two bounds beside the main one.

predicateType ``https://ratchet.dev/evaluation-certificate/v2``. The night signs it when people labelled some of the
golden rows it evaluates (a demonstration replaced the teacher's answer, ``ratchet_core.feedback``); a golden set
labelled by the teacher alone keeps v1 and its bytes. Everything v1 says still holds, computed the same way over the
same rows, with ``correct`` meaning "agrees with the row's label" (people's label where there is one). In addition:

- per task, ``rows`` = the sorted list of ``[confidence, correct, baseline_correct, label_source,
  teacher_agrees]``: ``label_source`` is ``teacher`` | ``people`` | ``import``; ``teacher_agrees`` is whether the
  answer agrees with the teacher's own answer (equal to ``correct`` on a teacher-labelled row; ``null`` where the
  teacher never answered: an imported row). v1's numbers are recomputed from the first three fields;
- ``people``: accuracy against people's labels alone, over the rows with ``label_source`` ``people``: ``n``,
  ``correct``, ``precision`` and ``min_rows`` = the least number of rows that can certify the task's target at its
  delta with no error (``ratchet_stats.bounds.rows_to_certify``, as the golden split's floor); ``lower_bound`` =
  the exact Clopper-Pearson lower bound at ``delta`` when ``n >= min_rows``, else ``null`` (too few people-labelled
  rows to bound anything useful);
- ``teacher_agreement``: agreement with the teacher, over the rows whose ``teacher_agrees`` is known: ``n``,
  ``agree``, ``rate`` and its own Clopper-Pearson ``lower_bound`` at ``delta``;
- top level, ``labels``: golden rows per label source across tasks.

``certified`` stays v1's: the bound over every row against its best label. The two extra bounds say what that
rests on: how well the student matches what people said, and how far it still agrees with the teacher.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ratchet_stats.bounds import clopper_pearson_lower, rows_to_certify
from ratchet_stats.certificate.common import (
    TaskOutcomes,
    build_predicate,
    check_predicate,
    check_task_section,
    close,
)
from ratchet_stats.certificate.common import task_section as v1_task_section
from ratchet_stats.certificate.v1 import summary_lines as v1_summary
from ratchet_stats.evidence import DocumentFormat

PREDICATE_TYPE = "https://ratchet.dev/evaluation-certificate/v2"
LABEL_SOURCES = ("teacher", "people", "import")


def _rows(t: TaskOutcomes, v1_rows: list[list[Any]]) -> list[list[Any]]:
    """The v2 rows: v1's triples (rounded) with each row's label source and teacher agreement, sorted."""
    n = len(t.correct)
    sources = list(t.label_sources or ["teacher"] * n)
    agrees = list(t.teacher_agrees or [None] * n)
    if len(sources) != n or len(agrees) != n:
        raise ValueError(f"task {t.task!r}: one label source and one teacher agreement per row")
    rows = []
    for i in range(n):
        if sources[i] not in LABEL_SOURCES:
            raise ValueError(f"task {t.task!r}: label source {sources[i]!r} is not one of {LABEL_SOURCES}")
        base = None if t.baseline_correct is None else bool(t.baseline_correct[i])
        agree = bool(t.correct[i]) if sources[i] == "teacher" else agrees[i]
        rows.append(
            [
                round(float(t.confidences[i]), 6),
                bool(t.correct[i]),
                base,
                sources[i],
                None if agree is None else bool(agree),
            ]
        )
    rows.sort(key=_order)
    triples = sorted(r[:3] for r in rows)
    assert [r[:3] for r in rows] == triples == v1_rows, "v2 rows project onto v1's"
    return rows


def _order(r: list[Any]) -> tuple:
    return (r[0], r[1], -1 if r[2] is None else int(r[2]), r[3], -1 if r[4] is None else int(r[4]))


def _people(rows: list[list[Any]], target: float, delta: float) -> dict[str, Any]:
    people = [r for r in rows if r[3] == "people"]
    n, k = len(people), sum(1 for r in people if r[1])
    need = rows_to_certify(target, delta)[0].rows
    return {
        "n": n,
        "correct": k,
        "precision": k / n if n else 0.0,
        "min_rows": int(need),
        "lower_bound": float(clopper_pearson_lower(k, n, delta)) if n and n >= need else None,
    }


def _teacher(rows: list[list[Any]], delta: float) -> dict[str, Any]:
    known = [r for r in rows if r[4] is not None]
    n, a = len(known), sum(1 for r in known if r[4])
    return {
        "n": n,
        "agree": a,
        "rate": a / n if n else 0.0,
        "lower_bound": float(clopper_pearson_lower(a, n, delta)) if n else 0.0,
    }


def task_section(t: TaskOutcomes, target: float, delta: float, grid: Sequence[float]) -> dict[str, Any]:
    """A task's v2 section (module docstring): v1's over the same rows, the rows with their label sources, and the
    people and teacher-agreement sections."""
    section = v1_task_section(t, target, delta, grid)
    rows = _rows(t, section["rows"])
    return {
        **section,
        "rows": rows,
        "people": _people(rows, target, delta),
        "teacher_agreement": _teacher(rows, delta),
    }


def build(**kw: Any) -> dict[str, Any]:
    """The v2 predicate (``ratchet_stats.certificate.common.build_predicate``'s arguments)."""
    predicate = build_predicate(**kw, section=task_section)
    counts = dict.fromkeys(LABEL_SOURCES, 0)
    for s in predicate["tasks"].values():
        for r in s["rows"]:
            counts[r[3]] += 1
    return {**predicate, "labels": counts}


def _check_task(name: str, s: Mapping[str, Any], target: float, delta: float, grid: list[float]) -> list[str]:
    rows = s.get("rows")
    if not isinstance(rows, list) or any(not isinstance(r, list) or len(r) != 5 for r in rows):
        return [f"{name}: rows are not [confidence, correct, baseline_correct, label_source, teacher_agrees]"]
    problems = check_task_section(name, {**s, "rows": [r[:3] for r in rows]}, target, delta, grid)
    if rows != sorted(rows, key=_order):
        problems.append(f"{name}: rows are not in canonical (sorted) order")
    for r in rows:
        if r[3] not in LABEL_SOURCES or r[4] not in (True, False, None):
            return [*problems, f"{name}: a row's label source or teacher agreement is malformed"]
        if r[3] == "teacher" and r[4] != r[1]:
            return [
                *problems,
                f"{name}: a teacher-labelled row's teacher agreement differs from its correctness",
            ]
    for key, again in (
        ("people", _people(rows, target, delta)),
        ("teacher_agreement", _teacher(rows, delta)),
    ):
        got = s.get(key)
        if not isinstance(got, Mapping):
            problems.append(f"{name}: no {key} section")
            continue
        for field, want in again.items():
            same = (
                close(got.get(field), want)
                if isinstance(want, float) or want is None
                else got.get(field) == want
            )
            if not same:
                problems.append(f"{name}: {key}.{field} is {got.get(field)!r}, recomputed {want!r}")
    return problems


def check_certificate(predicate: Mapping[str, Any]) -> list[str]:
    """Recompute every number of a v2 predicate from its signed rows; [] means consistent."""
    problems = check_predicate(predicate, _check_task)
    counts = dict.fromkeys(LABEL_SOURCES, 0)
    for s in (predicate.get("tasks") or {}).values():
        for r in (s.get("rows") if isinstance(s, Mapping) else None) or []:
            if isinstance(r, list) and len(r) == 5 and r[3] in counts:
                counts[r[3]] += 1
    if predicate.get("labels") != counts:
        problems.append(f"labels is {predicate.get('labels')!r}, the rows say {counts!r}")
    return problems


def summary_lines(predicate: Mapping[str, Any]) -> list[str]:
    """v1's lines, then per task its bound against people's labels and its agreement with the teacher."""
    lines = v1_summary(predicate)
    for name, s in sorted((predicate.get("tasks") or {}).items()):
        p, t = s.get("people") or {}, s.get("teacher_agreement") or {}
        bound = p.get("lower_bound")
        people = (
            f"lower bound {bound:.4f}"
            if bound is not None
            else f"too few to bound (needs {p.get('min_rows')} rows)"
        )
        lines.append(
            f"{name}: people's labels {p.get('correct')}/{p.get('n')} correct, {people}; teacher agreement "
            f"{t.get('agree')}/{t.get('n')}, lower bound {t.get('lower_bound', 0):.4f}"
        )
    return lines


def check_statement(statement: Mapping[str, Any]) -> list[str]:
    return check_certificate(statement["predicate"])


FORMAT = DocumentFormat(PREDICATE_TYPE, check_statement, summary_lines)
