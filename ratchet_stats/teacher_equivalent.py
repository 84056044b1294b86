"""Teacher-equivalent cost: what the teacher would have billed for each request, the method a receipt signs.

Method ``METHOD`` (named, with its prices and inputs, in every v2 receipt; ``ratchet_stats.receipt``):

- a **teacher-served** row is *measured*: the leaf's ``teacher_cost_usd`` (the teacher's own usage at its prices),
  ``micro(teacher_cost_usd)`` micro-USD;
- a **student-served** row answered with status 200 is *estimated*::

      round(10**6 * (teacher_prompt_tokens * p_in + E(task) * p_out))        exact rationals, half to even

  ``teacher_prompt_tokens`` is the prompt counted with the teacher's tokenizer (the gateway records it,
  ``litellm.token_counter`` for the teacher model), ``p_in``/``p_out`` the teacher's USD per token, and ``E(task)``
  the task's completion estimate ``C / k`` (0 when ``k = 0``): the mean completion tokens of the teacher's own
  answers to that task;
- any other student-served row (an error) is 0.

A task's estimate line (``ESTIMATE_FIELDS``)::

    {"task", "source": "day" | "previous" | "none", "day": the day the answers are from (null for none),
     "from_requests": {"answers": k1, "completion_tokens": C1},    teacher-served request rows (leaves)
     "from_audits":   {"answers": k2, "completion_tokens": C2}}    audit pairs: the teacher's off-path answers
    k = k1 + k2, C = C1 + C2

``day``: the teacher's answers of that task that day — request rows served by the teacher with status 200 and
``completion_tokens > 0`` (recomputed from the leaves by the verifier), plus audit pairs (the teacher's answer to a
student-served request; pair rows are not leaves, so this part is a signed input). ``previous``: no teacher answer
that day; the previous receipt's line for the task, carried with its own ``day`` (chained, checked against the
previous receipt's estimates). ``none``: no teacher answer known; the completion is not counted (a lower bound).
Every line of the previous receipt is carried forward, so the chain of estimates never breaks.

Fractions make the arithmetic exact: ``Fraction(float)`` is the float's exact binary value, so the pipeline and
any verifier get the same integers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

METHOD = "teacher-prices/v1"
SOURCES = ("day", "previous", "none")
ESTIMATE_FIELDS = ("task", "source", "day", "from_requests", "from_audits")
RULE = (
    "teacher-served rows: measured, micro(teacher_cost_usd). Student-served rows with status 200: estimated, "
    "round(1e6 * (teacher_prompt_tokens * input_usd_per_token + E(task) * output_usd_per_token)) in exact "
    "rationals, E(task) = completion_tokens / answers of the task's estimate line (0 when no answer): the teacher's "
    "own answers to the task that day (teacher-served request rows with status 200 and completion_tokens > 0, plus "
    "audit pairs), else the previous receipt's line (source previous), else none (completion not counted). Other "
    "student-served rows: 0."
)


def prices_doc(teacher_model: str, input_usd_per_token: float, output_usd_per_token: float) -> dict[str, Any]:
    """The ``prices`` the receipt states (USD per token, as floats: exact in canonical JSON)."""
    return {
        "teacher_model": teacher_model,
        "input_usd_per_token": float(input_usd_per_token),
        "output_usd_per_token": float(output_usd_per_token),
        "source": "litellm model cost map (LITELLM_LOCAL_MODEL_COST_MAP)",
    }


def _part(answers: int, tokens: int) -> dict[str, int]:
    return {"answers": int(answers), "completion_tokens": int(tokens)}


def estimate_line(
    task: str,
    source: str,
    day: str | None,
    from_requests: tuple[int, int] = (0, 0),
    from_audits: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """One task's estimate line (module docstring); parts are (answers, completion tokens)."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, not {source!r}")
    return {
        "task": task,
        "source": source,
        "day": day,
        "from_requests": _part(*from_requests),
        "from_audits": _part(*from_audits),
    }


def answers_of(line: Mapping[str, Any]) -> tuple[int, int]:
    """(k, C): the line's teacher answers and their completion tokens."""
    r, a = line["from_requests"], line["from_audits"]
    return int(r["answers"]) + int(a["answers"]), int(r["completion_tokens"]) + int(a["completion_tokens"])


def completion_estimate(line: Mapping[str, Any] | None) -> Fraction:
    """``E(task) = C / k`` (0 when there is no line or no answer)."""
    if line is None:
        return Fraction(0)
    k, c = answers_of(line)
    return Fraction(c, k) if k else Fraction(0)


def estimated_micro(teacher_prompt_tokens: int, estimate: Fraction, prices: Mapping[str, Any]) -> int:
    """One student-served row's estimated teacher cost in micro-USD (module docstring formula)."""
    usd = Fraction(int(teacher_prompt_tokens)) * Fraction(
        prices["input_usd_per_token"]
    ) + estimate * Fraction(prices["output_usd_per_token"])
    return round(usd * 1_000_000)


def is_estimated(row: Mapping[str, Any]) -> bool:
    """Whether a leaf row's teacher-equivalent is estimated (student-served, status 200)."""
    return row.get("served_by") == "student" and int(row.get("status_code") or 0) == 200


def is_teacher_answer(row: Mapping[str, Any]) -> bool:
    """Whether a request leaf row is a teacher answer that counts towards its task's estimate."""
    return (
        (row.get("served_by") or "teacher") == "teacher"
        and int(row.get("status_code") or 0) == 200
        and int(row.get("completion_tokens") or 0) > 0
    )


def request_answers(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per task, (answers, completion tokens) of the teacher-served request rows that count (``from_requests``)."""
    out: dict[str, tuple[int, int]] = {}
    for row in rows:
        if is_teacher_answer(row):
            k, c = out.get(str(row["task"]), (0, 0))
            out[str(row["task"])] = (k + 1, c + int(row["completion_tokens"]))
    return out


def day_estimates(
    day: str,
    from_requests: Mapping[str, tuple[int, int]],
    from_audits: Mapping[str, tuple[int, int]],
    student_tasks: Iterable[str],
    previous: Mapping[str, Mapping[str, Any]] | None,
) -> list[dict[str, Any]]:
    """The day's estimate lines, sorted by task: ``day`` for tasks with a teacher answer that day, ``previous``
    for every other task of the previous receipt's lines (carried forward), ``none`` for a student-served task
    known to neither."""
    previous = previous or {}
    tasks = set(from_requests) | set(from_audits) | set(student_tasks) | set(previous)
    lines = []
    for task in sorted(tasks):
        req, aud = from_requests.get(task, (0, 0)), from_audits.get(task, (0, 0))
        if req[0] + aud[0] > 0:
            lines.append(estimate_line(task, "day", day, req, aud))
        elif task in previous:
            p = previous[task]
            r, a = p["from_requests"], p["from_audits"]
            source = "previous" if p["source"] != "none" else "none"
            lines.append(
                estimate_line(
                    task,
                    source,
                    p["day"] if source == "previous" else None,
                    (r["answers"], r["completion_tokens"]),
                    (a["answers"], a["completion_tokens"]),
                )
            )
        else:
            lines.append(estimate_line(task, "none", None))
    return lines
