"""Learn then Test: the loosest confidence threshold whose served precision is certified at level 1 - delta.

The student answers a request only when its confidence is >= the version's threshold. For each threshold t of a
grid fixed before looking at the data, H0(t): precision(t) < target, where precision(t) = P(correct | conf >= t).
With n(t) accepted golden rows of which e(t) are wrong, the exact binomial p-value is

    p(t) = P(Binom(n(t), 1 - target) <= e(t)),

valid because under H0(t) the error count is Binomial with rate > 1 - target, whose lower tail is smaller.
The thresholds are tested in a fixed sequence from the most conservative (highest) downwards, each at level
delta, stopping at the first p(t) > delta (or the first threshold accepting no rows); the last threshold that
passed is certified. Fixed-sequence testing controls the family-wise error rate at delta with no correction, so
P(certified threshold has precision < target) <= delta.

Reference: Angelopoulos, Bates, Candes, Jordan & Lei (2021), "Learn then Test: Calibrating Predictive Algorithms
to Achieve Risk Control", arXiv:2110.01052 (Sections 2-4, fixed-sequence testing with binomial p-values).

:func:`point_threshold` is the rule LTT replaces, kept to compare against (``ratchet sim --calibration point``):
the same grid and sequence, but a threshold passes when its observed precision (n(t) - e(t)) / n(t) reaches the
target. It controls nothing: when the true precision at the chosen threshold is just under the target, the
observed share is above it about half the time, so it serves more and is wrong more often than LTT's choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ratchet_stats.bounds import _open_unit, clopper_pearson_lower

__all__ = ["DEFAULT_GRID", "LTTResult", "LTTRow", "default_grid", "ltt_calibrate", "point_threshold"]


def default_grid(step: float = 0.05, top: float = 0.95) -> list[float]:
    """Thresholds 0, step, 2 step, ... up to ``top`` (rounded to 6 places): the grid fixed in advance.

    The top stops below 1.0 on purpose: a threshold that accepts no rows stops the fixed sequence at once.
    """
    if not (0.0 < step <= 1.0):
        raise ValueError(f"grid step must be in (0, 1] (got {step}), e.g. 0.05")
    count = int(math.floor(top / step + 1e-9))
    return [round(i * step, 6) for i in range(count + 1)]


DEFAULT_GRID: tuple[float, ...] = tuple(default_grid())


@dataclass(frozen=True)
class LTTRow:
    """One threshold of the grid: rows accepted (conf >= threshold), their errors, and the test's outcome.

    ``precision`` is None when no row is accepted. ``tested`` is False for thresholds after the sequence stopped.
    """

    threshold: float
    n: int
    errors: int
    precision: float | None
    p_value: float
    certified: bool
    tested: bool = True


@dataclass(frozen=True)
class LTTResult:
    """The certified threshold (None = nothing certified: serve the teacher) and the per-threshold table.

    ``table`` is ordered as tested: highest threshold first. ``precision_lower_bound`` is the one-sided
    Clopper-Pearson lower bound at level 1 - delta on the certified threshold's rows (None if not certified).
    """

    threshold: float | None
    table: list[LTTRow]
    target: float
    delta: float
    n_total: int
    precision_lower_bound: float | None = None
    method: str = field(default="learn-then-test/fixed-sequence/binomial")

    @property
    def certified(self) -> bool:
        return self.threshold is not None

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["certified"] = self.certified
        return data


def _as_arrays(confidences: Sequence[float], correct: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    conf = np.asarray(confidences, dtype=float).reshape(-1)
    ok = np.asarray(correct).reshape(-1)
    if conf.shape != ok.shape:
        raise ValueError(
            f"confidences ({conf.size} values) and correct ({ok.size} values) must have one entry per row"
        )
    if conf.size and not np.all(np.isfinite(conf)):
        raise ValueError("confidences must be finite numbers; drop or fix the rows with NaN/inf confidence")
    if ok.dtype != bool:
        if ok.size and not np.all((ok == 0) | (ok == 1)):
            raise ValueError("correct must hold booleans (or 0/1) per row; got other values")
        ok = ok.astype(bool)
    return conf, ok


def _check_grid(grid: Sequence[float]) -> np.ndarray:
    g = np.asarray(list(grid), dtype=float).reshape(-1)
    if g.size == 0:
        raise ValueError("grid must hold at least one threshold, e.g. default_grid() = 0.00, 0.05, ..., 0.95")
    if not np.all(np.isfinite(g)):
        raise ValueError("grid thresholds must be finite numbers")
    if np.unique(g).size != g.size:
        raise ValueError("grid thresholds must be distinct; remove the repeated values")
    return np.sort(g)[::-1]


def ltt_calibrate(
    confidences: Sequence[float],
    correct: Sequence[bool],
    grid: Sequence[float],
    target: float,
    delta: float,
) -> LTTResult:
    """Certify the loosest threshold t (serve when confidence >= t) with precision(t) >= target w.p. >= 1 - delta.

    For each t (highest first): n(t) = #{conf >= t}, e(t) = #{conf >= t and wrong},
    p(t) = P(Binom(n(t), 1 - target) <= e(t)); certified while p(t) <= delta and n(t) > 0, stopping at the
    first failure. See the module docstring for why this controls the error at delta.
    Reference: Angelopoulos et al. (2021), arXiv:2110.01052.
    """
    from scipy import stats  # here, not at the top: ratchet_stats.bounds says why

    t = _open_unit(target, "target", "0.95 for a 95% precision claim")
    d = _open_unit(delta, "delta", "0.05 for 95% confidence")
    conf, ok = _as_arrays(confidences, correct)
    thresholds = _check_grid(grid)

    order = np.argsort(-conf, kind="stable")
    conf_desc = conf[order]
    wrong_cum = np.concatenate([[0], np.cumsum(~ok[order])])
    # rows with conf >= t are a prefix of the descending order: its length via a search on the ascending copy
    n_acc = conf.size - np.searchsorted(conf_desc[::-1], thresholds, side="left")
    errs = wrong_cum[n_acc]
    pvals = np.where(n_acc > 0, stats.binom.cdf(errs, n_acc, 1.0 - t), 1.0)

    rows: list[LTTRow] = []
    certified_at: int | None = None
    running = True
    for i, thr in enumerate(thresholds):
        n_i, e_i, p_i = int(n_acc[i]), int(errs[i]), float(pvals[i])
        tested = running
        passed = running and n_i > 0 and p_i <= d
        if passed:
            certified_at = i
        else:
            running = False
        rows.append(
            LTTRow(
                threshold=float(thr),
                n=n_i,
                errors=e_i,
                precision=(n_i - e_i) / n_i if n_i else None,
                p_value=p_i,
                certified=passed,
                tested=tested,
            )
        )
    if certified_at is None:
        return LTTResult(threshold=None, table=rows, target=t, delta=d, n_total=int(conf.size))
    best = rows[certified_at]
    return LTTResult(
        threshold=best.threshold,
        table=rows,
        target=t,
        delta=d,
        n_total=int(conf.size),
        precision_lower_bound=clopper_pearson_lower(best.n - best.errors, best.n, d),
    )


def point_threshold(
    confidences: Sequence[float], correct: Sequence[bool], grid: Sequence[float], target: float
) -> float | None:
    """The loosest grid threshold t, tested highest first and stopping at the first failure, whose observed
    precision (n(t) - e(t)) / n(t) >= target (n(t) > 0); None when the highest fails. No error control (module
    docstring): the plug-in rule, to compare with :func:`ltt_calibrate`."""
    t = _open_unit(target, "target", "0.95 for a 95% precision claim")
    conf, ok = _as_arrays(confidences, correct)
    chosen: float | None = None
    for thr in _check_grid(grid):
        accepted = conf >= thr
        n = int(accepted.sum())
        if n == 0 or int((accepted & ok).sum()) / n < t:
            break
        chosen = float(thr)
    return chosen
