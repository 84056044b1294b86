"""Which certified candidate may enter shadow, at which threshold: the admission rules a task's policy chooses.

A candidate is a version whose verified certificate certifies a task (``ratchet_stats.certificate``). Its numbers
come from the certificate's section for the task (:func:`certificate_numbers`, the same for the sensor's verified
certificates and the simulator's), and the task's :class:`~ratchet_assets.release.decision.ReleaseRule` decides,
one pure function each:

- the bound (:func:`bound_problem`): the certificate's Clopper-Pearson lower bound reaches the release target and
  the policy's ``min_certified`` (a stricter bar for entering shadow than for promotion);
- the threshold (:func:`calibrated_threshold`): ``ltt``, the Learn-then-Test threshold the certificate signs
  (P(served precision < target) <= delta; ``ratchet_stats.ltt``), or ``point``, the loosest grid threshold whose
  observed golden precision reaches the target (no error control; ``ratchet_stats.ltt.point_threshold``);
- the paired gate (:func:`paired_gate_problem`, when the policy sets ``paired_gate``): on the golden rows both
  versions answered, the candidate must not be worse than the live version by the exact one-sided McNemar test at
  level delta (``ratchet_stats.mcnemar``: p = P(B <= b), B ~ Binom(b + c, 1/2), b = rows only the candidate got
  right, c = rows only the live version got right). A certificate compared with another version than the one
  live now cannot say, so the candidate waits for a night evaluated against the live version.

:func:`admission_problem` applies them in that order; ``ratchet_assets.release.tick.decide_tick`` calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ratchet_assets.release.decision import ReleaseRule
from ratchet_stats.ltt import point_threshold
from ratchet_stats.mcnemar import mcnemar_exact


@dataclass(frozen=True)
class Paired:
    """The certificate's paired comparison: its McNemar section (baseline version, b, c)."""

    baseline: str
    b: int  # rows the candidate got right and the baseline wrong
    c: int  # rows the candidate got wrong and the baseline right


@dataclass(frozen=True)
class Candidate:
    """A version whose verified certificate certifies `task` (the newest per task is considered).

    ``lower_bound``: the certificate's Clopper-Pearson lower bound for the task; ``threshold``: its calibrated
    (LTT) confidence threshold; ``point_threshold``: the point rule's on the same rows; ``paired``: its McNemar
    comparison with the version live when it was evaluated (None: nothing was live); ``source``: the
    certificate's name, for messages; ``problem``: why the caller could not verify the certificate (then it is
    never admitted)."""

    version: str
    task: str
    threshold: float | None
    lower_bound: float | None
    source: str
    problem: str = ""
    point_threshold: float | None = None
    paired: Paired | None = None


@dataclass(frozen=True)
class CertificateNumbers:
    lower_bound: float
    ltt_threshold: float | None
    point_threshold: float | None
    paired: Paired | None
    target: float  # the level the section was certified at (its own, else the certificate's)


def certificate_numbers(predicate: Mapping[str, Any], task: str) -> CertificateNumbers:
    """The numbers of `task`'s section of a certificate predicate that admission reads (KeyError: no section)."""
    section = predicate["tasks"][task]
    target = float(section.get("target") or predicate.get("target") or 0.0)
    rows = section.get("rows") or []
    point = (
        point_threshold([r[0] for r in rows], [bool(r[1]) for r in rows], predicate["grid"], target)
        if rows and 0.0 < target < 1.0
        else None
    )
    mc = section.get("mcnemar")
    return CertificateNumbers(
        lower_bound=float(section.get("lower_bound") or 0.0),
        ltt_threshold=(section.get("ltt") or {}).get("threshold"),
        point_threshold=point,
        paired=Paired(str(mc.get("baseline") or ""), int(mc["b"]), int(mc["c"])) if mc else None,
        target=target,
    )


def bound_problem(c: Candidate, rule: ReleaseRule) -> str | None:
    """Why `c`'s certified bound is too low under `rule` (the target, then ``min_certified``), or None."""
    if c.lower_bound is None or c.lower_bound < rule.target:
        bound = "no bound" if c.lower_bound is None else f"lower bound {c.lower_bound:.4f}"
        return (
            f"its certificate ({c.source}) has {bound} on {c.task}, below the release target {rule.target:g}"
        )
    if rule.min_certified is not None and c.lower_bound < rule.min_certified:
        return (
            f"its certificate ({c.source}) has lower bound {c.lower_bound:.4f} on {c.task}, below the task's "
            f"minimum certified bound {rule.min_certified:g}"
        )
    return None


def calibrated_threshold(c: Candidate, rule: ReleaseRule) -> float | None:
    """The confidence threshold `c` serves at under the rule's calibration (None: none certified)."""
    return c.point_threshold if rule.calibration == "point" else c.threshold


def paired_gate_problem(c: Candidate, rule: ReleaseRule, live: str | None) -> str | None:
    """Why the paired gate refuses `c` against the version `live` now (None: admitted, or no gate, or nothing
    live to compare with)."""
    if not rule.paired_gate or not live:
        return None
    if c.paired is None or c.paired.baseline != live:
        with_what = f"with {c.paired.baseline}" if c.paired else "with no version"
        return (
            f"the paired gate needs its certificate to compare it with the live version {live} on the same "
            f"golden rows, and {c.source} compares it {with_what}: wait for a night evaluated against {live}"
        )
    test = mcnemar_exact(c.paired.b, c.paired.c, alternative="less")
    if test.p_value <= rule.delta:
        return (
            f"the paired gate: on the same golden rows it is worse than the live version {live} (right where "
            f"{live} was wrong {c.paired.b}, wrong where {live} was right {c.paired.c}; exact McNemar one-sided "
            f"p = {test.p_value:.3g} <= {rule.delta:g})"
        )
    return None


def admission_problem(c: Candidate, rule: ReleaseRule, live: str | None) -> str | None:
    """Why `c` may not enter shadow under `rule` with `live` serving the task (None when it may)."""
    if c.problem:
        return c.problem
    why = bound_problem(c, rule)
    if why:
        return why
    if calibrated_threshold(c, rule) is None:
        how = "point-rule" if rule.calibration == "point" else "calibrated (LTT)"
        return f"its certificate ({c.source}) has no {how} confidence threshold for {c.task}"
    return paired_gate_problem(c, rule, live)
