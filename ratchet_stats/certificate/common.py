"""What every version of the evaluation certificate shares: the adapter digest, a task's outcomes and the v1 task
section (the Clopper-Pearson bound, Learn-then-Test and McNemar) with its recomputation. The formulas are in
``ratchet_stats.certificate.v1``'s docstring; ``v2`` adds label sources (``ratchet_stats.certificate``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet_stats.bounds import clopper_pearson_lower
from ratchet_stats.canonical import sha256_file, sha256_hex
from ratchet_stats.ltt import DEFAULT_GRID as LTT_DEFAULT_GRID
from ratchet_stats.ltt import ltt_calibrate
from ratchet_stats.mcnemar import mcnemar_exact

CONFIDENCE_DIGITS = 6
# Fixed in advance, as LTT requires: 0.00, 0.05, ..., 0.95 (a higher top often accepts too few rows to pass,
# which stops the fixed sequence before it reaches the useful thresholds).
DEFAULT_GRID: tuple[float, ...] = LTT_DEFAULT_GRID
MCNEMAR_ALTERNATIVE = "two-sided"
_TOL = 1e-9


@dataclass(frozen=True)
class TaskOutcomes:
    """One task's golden rows as the evaluator saw them (same order in all three sequences).

    ``baseline_correct`` is the live version's correctness on the same rows, or None when no version is live.
    """

    task: str
    comparator: str
    confidences: Sequence[float]
    correct: Sequence[bool]
    baseline_correct: Sequence[bool] | None = None
    baseline_version: str | None = None
    # v2 (``ratchet_stats.certificate.v2``): each row's label source (teacher | people | import) and whether the
    # answer agrees with the teacher's (None where no teacher answer exists: an imported row)
    label_sources: Sequence[str] | None = None
    teacher_agrees: Sequence[bool | None] | None = None

    @property
    def people_labelled(self) -> bool:
        return "people" in (self.label_sources or ())


def adapter_digest(file_sha256: Mapping[str, str]) -> str:
    """Digest of an adapter directory: SHA-256 of its ``sha256sum`` manifest.

    The manifest is the sorted lines ``"<file sha256>  <relative name>\\n"`` (what ``sha256sum`` prints), so
    ``sha256sum * | sort -k2 | sha256sum`` reproduces it; :func:`adapter_dir_digest` computes it for a folder.
    """
    listing = "".join(f"{d}  {n}\n" for n, d in sorted(file_sha256.items()))
    return sha256_hex(listing.encode("utf-8"))


def adapter_file_hashes(adapter_dir: str | Path) -> dict[str, str]:
    """{relative file name: sha256} for every file in an adapter folder (what :func:`adapter_digest` hashes)."""
    root = Path(adapter_dir)
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def adapter_dir_digest(adapter_dir: str | Path) -> str:
    """The adapter digest of the files in a folder: what a certificate's ``adapter.sha256`` must equal."""
    return adapter_digest(adapter_file_hashes(adapter_dir))


def _finite_or_none(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _task_rows(t: TaskOutcomes) -> list[list[Any]]:
    n = len(t.correct)
    if len(t.confidences) != n:
        raise ValueError(
            f"task {t.task!r}: {len(t.confidences)} confidences for {n} outcomes; pass one per row"
        )
    if t.baseline_correct is not None and len(t.baseline_correct) != n:
        raise ValueError(f"task {t.task!r}: baseline has {len(t.baseline_correct)} outcomes for {n} rows")
    rows = []
    for i in range(n):
        conf = float(t.confidences[i])
        if not (0.0 <= conf <= 1.0):
            raise ValueError(f"task {t.task!r}: confidence {conf} outside [0, 1]")
        base = None if t.baseline_correct is None else bool(t.baseline_correct[i])
        rows.append([round(conf, CONFIDENCE_DIGITS), bool(t.correct[i]), base])
    # Sorted so the payload does not depend on the golden rows' order; None sorts as -1.
    rows.sort(key=lambda r: (r[0], r[1], -1 if r[2] is None else int(r[2])))
    return rows


def _ltt_section(rows: list[list[Any]], grid: Sequence[float], target: float, delta: float) -> dict[str, Any]:
    if not rows:
        return {"threshold": None, "table": []}
    result = ltt_calibrate([r[0] for r in rows], [r[1] for r in rows], list(grid), target, delta)
    table = [
        {
            "threshold": float(row.threshold),
            "n": int(row.n),
            "errors": int(row.errors),
            "precision": _finite_or_none(row.precision),
            "p_value": _finite_or_none(row.p_value),
            "certified": bool(row.certified),
            "tested": bool(getattr(row, "tested", True)),
        }
        for row in result.table
    ]
    return {"threshold": _finite_or_none(result.threshold), "table": table}


def _mcnemar_section(rows: list[list[Any]], baseline_version: str | None) -> dict[str, Any] | None:
    if not rows or rows[0][2] is None:
        return None
    b = sum(1 for r in rows if r[1] and not r[2])
    c = sum(1 for r in rows if not r[1] and r[2])
    result = mcnemar_exact(b, c, alternative=MCNEMAR_ALTERNATIVE)
    return {
        "baseline": baseline_version or "",
        "b": b,
        "c": c,
        "alternative": MCNEMAR_ALTERNATIVE,
        "p_value": float(result.p_value),
    }


def task_section(t: TaskOutcomes, target: float, delta: float, grid: Sequence[float]) -> dict[str, Any]:
    """The certificate's entry for one task (formulas in the module docstring)."""
    rows = _task_rows(t)
    n = len(rows)
    correct = sum(1 for r in rows if r[1])
    lower = float(clopper_pearson_lower(correct, n, delta)) if n else 0.0
    return {
        "comparator": t.comparator,
        "n": n,
        "correct": correct,
        "precision": correct / n if n else 0.0,
        "lower_bound": lower,
        "certified": bool(n > 0 and lower >= target),
        "ltt": _ltt_section(rows, grid, target, delta),
        "mcnemar": _mcnemar_section(rows, t.baseline_version),
        "rows": rows,
    }


# The base identity a certificate names: its files' digest, its chat template's digest and the vLLM tool parser the
# template needs (``ratchet_core.student_model.base_identity``; older certificates have the first three only).
BASE_KEYS = ("name", "sha256", "files", "chat_template_sha256", "tool_parser")


def build_predicate(
    *,
    version: str,
    base: Mapping[str, Any],
    adapter_sha256: str,
    golden_root: str,
    golden_size: int,
    target: float,
    delta: float,
    tasks: Sequence[TaskOutcomes],
    grid: Sequence[float] = DEFAULT_GRID,
    day: str | None = None,
    task_levels: Mapping[str, tuple[float, float]] | None = None,
    section: Any = None,
) -> dict[str, Any]:
    """The certificate predicate for ``version`` (a plain dict, ready for canonical JSON and signing).
    ``section(t, target, delta, grid)`` builds a task's section (default :func:`task_section`, v1's).

    ``base`` is the base model's identity (``ratchet_core.student_model.base_identity``), ``adapter_sha256`` the
    adapter directory digest (``adapter_digest``), ``golden_root``/``golden_size`` the Merkle root (hex) and size
    of the golden set evaluated on; ``day`` the night's partition. ``task_levels``: task -> (target, delta) for tasks
    whose policy sets their own level; such a section carries its ``target`` and ``delta``, which then apply to it.
    """
    if not (0.0 < target < 1.0):
        raise ValueError(f"target must be in (0, 1), got {target}")
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    grid = [float(x) for x in grid]
    if sorted(set(grid)) != grid:
        raise ValueError("grid must be strictly increasing thresholds in [0, 1]")
    names = [t.task for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"each task once: got {names}")
    sections = {}
    # a task's own level (its signed policy, ratchet_core.task_policy) is written in its section
    for t in tasks:
        t_target, t_delta = (task_levels or {}).get(t.task, (target, delta))
        if not (0.0 < t_target < 1.0 and 0.0 < t_delta < 1.0):
            raise ValueError(f"{t.task}: target and delta must be in (0, 1), got {t_target}, {t_delta}")
        sections[t.task] = (section or task_section)(t, t_target, t_delta, grid)
        if (float(t_target), float(t_delta)) != (float(target), float(delta)):
            sections[t.task] = {"target": float(t_target), "delta": float(t_delta), **sections[t.task]}
    return {
        "version": version,
        "day": day,
        "base": {k: base[k] for k in BASE_KEYS if k in base},
        "adapter": {"sha256": adapter_sha256},
        "golden": {"root": golden_root, "size": int(golden_size)},
        "target": float(target),
        "delta": float(delta),
        "grid": grid,
        "confidence": "exp(mean token logprob), rounded to 6 decimals (ratchet_core.confidence)",
        "tasks": sections,
        "certified_tasks": sorted(name for name, s in sections.items() if s["certified"]),
    }


def certificate_subjects(predicate: Mapping[str, Any]) -> list[dict[str, Any]]:
    """in-toto subjects: the adapter version, identified by its directory digest."""
    return [{"name": f"adapter:{predicate['version']}", "digest": {"sha256": predicate["adapter"]["sha256"]}}]


def close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=_TOL, abs_tol=_TOL)


def check_task_section(
    name: str, s: Mapping[str, Any], target: float, delta: float, grid: list[float]
) -> list[str]:
    problems: list[str] = []
    rows = s.get("rows")
    if not isinstance(rows, list):
        return [f"{name}: no signed rows to recompute from"]
    try:
        outcomes = TaskOutcomes(
            task=name,
            comparator=str(s.get("comparator", "")),
            confidences=[float(r[0]) for r in rows],
            correct=[bool(r[1]) for r in rows],
            baseline_correct=None if not rows or rows[0][2] is None else [bool(r[2]) for r in rows],
            baseline_version=(s.get("mcnemar") or {}).get("baseline"),
        )
        if any(len(r) != 3 or not isinstance(r[1], bool) for r in rows):
            raise ValueError("each row is [confidence, correct, baseline_correct]")
        if outcomes.baseline_correct is not None and any(r[2] is None for r in rows):
            raise ValueError("baseline outcomes missing for some rows")
        again = task_section(outcomes, target, delta, grid)
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        return [f"{name}: rows malformed ({exc})"]
    if again["rows"] != rows:
        problems.append(f"{name}: rows are not in canonical (sorted, rounded) form")
    for field in ("n", "correct", "certified"):
        if s.get(field) != again[field]:
            problems.append(f"{name}: {field} is {s.get(field)!r}, recomputed {again[field]!r}")
    for field in ("precision", "lower_bound"):
        if not close(s.get(field), again[field]):
            problems.append(f"{name}: {field} is {s.get(field)!r}, recomputed {again[field]!r}")
    ltt, ltt_again = s.get("ltt") or {}, again["ltt"]
    if not close(ltt.get("threshold"), ltt_again["threshold"]):
        problems.append(
            f"{name}: LTT threshold is {ltt.get('threshold')!r}, recomputed {ltt_again['threshold']!r}"
        )
    table = ltt.get("table") or []
    if len(table) != len(ltt_again["table"]):
        problems.append(f"{name}: LTT table has {len(table)} rows, recomputed {len(ltt_again['table'])}")
    else:
        for got, want in zip(table, ltt_again["table"], strict=True):
            for field in ("n", "errors", "certified", "tested"):
                if got.get(field) != want[field]:
                    problems.append(
                        f"{name}: LTT at {want['threshold']}: {field} {got.get(field)!r} != {want[field]!r}"
                    )
            for field in ("threshold", "precision", "p_value"):
                if not close(got.get(field), want[field]):
                    problems.append(
                        f"{name}: LTT at {want['threshold']}: {field} {got.get(field)!r} != {want[field]!r}"
                    )
    mc, mc_again = s.get("mcnemar"), again["mcnemar"]
    if (mc is None) != (mc_again is None):
        problems.append(
            f"{name}: McNemar present={mc is not None}, but baseline outcomes present={mc_again is not None}"
        )
    elif mc is not None and mc_again is not None:
        for field in ("b", "c", "alternative"):
            if mc.get(field) != mc_again[field]:
                problems.append(
                    f"{name}: McNemar {field} is {mc.get(field)!r}, recomputed {mc_again[field]!r}"
                )
        if not close(mc.get("p_value"), mc_again["p_value"]):
            problems.append(
                f"{name}: McNemar p_value is {mc.get('p_value')!r}, recomputed {mc_again['p_value']!r}"
            )
    return problems


def check_predicate(predicate: Mapping[str, Any], check_task: Any = None) -> list[str]:
    """Recompute every number in a certificate predicate from its signed rows; [] means consistent.
    ``check_task(name, section, target, delta, grid)`` checks one task (default v1's).

    Each string names the task and quantity that disagrees, e.g. "tickets: lower_bound is 0.97, recomputed 0.91".
    """
    if not isinstance(predicate, Mapping):
        return ["predicate is not a JSON object"]
    problems: list[str] = []
    try:
        target, delta = float(predicate["target"]), float(predicate["delta"])
        grid = [float(x) for x in predicate["grid"]]
        tasks = predicate["tasks"]
        golden_size = int(predicate["golden"]["size"])
        if not isinstance(tasks, Mapping):
            raise TypeError("tasks is not an object")
    except (KeyError, TypeError, ValueError) as exc:
        return [f"certificate is missing or has a malformed field: {exc}"]
    if not (0 < target < 1 and 0 < delta < 1):
        return [f"target {target} and delta {delta} must lie in (0, 1)"]
    if sorted(set(grid)) != grid:
        return ["grid is not strictly increasing"]
    total = 0
    for name in sorted(tasks):
        section = tasks[name]
        if not isinstance(section, Mapping):
            problems.append(f"{name}: not an object")
            continue
        total += len(section.get("rows") or [])
        try:
            t_target, t_delta = float(section.get("target", target)), float(section.get("delta", delta))
        except (TypeError, ValueError):
            problems.append(f"{name}: target/delta malformed")
            continue
        if not (0 < t_target < 1 and 0 < t_delta < 1):
            problems.append(f"{name}: target {t_target} and delta {t_delta} must lie in (0, 1)")
            continue
        problems.extend((check_task or check_task_section)(name, section, t_target, t_delta, grid))
    if total > golden_size:
        problems.append(f"tasks cover {total} rows but the golden set has only {golden_size}")
    want = sorted(n for n, s in tasks.items() if isinstance(s, Mapping) and s.get("certified") is True)
    if predicate.get("certified_tasks") != want:
        problems.append(f"certified_tasks is {predicate.get('certified_tasks')!r}, tasks say {want!r}")
    return problems
