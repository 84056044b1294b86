"""Exact one-sided confidence bounds for a binomial proportion, and how many rows a certificate needs.

Every bound here is ONE-SIDED at confidence level 1 - delta: P(p < lower) <= delta and P(p > upper) <= delta.
(The pair [lower, upper] is therefore a two-sided interval at level 1 - 2 delta.)

A precision claim "p >= target at level 1 - delta" holds exactly when the Clopper-Pearson lower bound is at
least ``target``; equivalently when P(Binom(n, 1 - target) <= errors) <= delta, the same binomial p-value that
Learn-then-Test uses (ratchet_stats.ltt), so planning, bounds and calibration agree on what "certified" means.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import asdict, dataclass

import numpy as np

# scipy (~0.5 s to import) is imported by the functions that compute: a process that loads this module and
# never computes (a Dagster step, the code location, a CLI) does not pay for it.

__all__ = [
    "PlanRow",
    "PowerPlan",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "max_errors_certified",
    "rows_for_power",
    "rows_to_certify",
    "wilson_lower",
    "wilson_upper",
]


def _count(value: object, name: str) -> int:
    """An exact non-negative integer count, or a ValueError saying what to pass instead."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a whole number, not a bool; pass a count such as 190")
    try:
        count = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        if isinstance(value, float) and value.is_integer():
            count = int(value)
        else:
            raise ValueError(
                f"{name} must be a whole number (got {value!r}); pass a count such as 190"
            ) from None
    if count < 0:
        raise ValueError(f"{name} must be >= 0 (got {count}); counts of rows cannot be negative")
    return count


def _open_unit(value: object, name: str, example: str) -> float:
    """A float strictly inside (0, 1), or a ValueError saying what to pass instead."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a number strictly between 0 and 1 (got {value!r}), e.g. {example}"
        ) from None
    if not (0.0 < x < 1.0):
        raise ValueError(f"{name} must be strictly between 0 and 1 (got {value!r}), e.g. {example}")
    return x


def _check(successes: object, n: object, delta: object) -> tuple[int, int, float]:
    k = _count(successes, "successes")
    m = _count(n, "n")
    if k > m:
        raise ValueError(f"successes ({k}) cannot exceed n ({m}); pass the number of rows as n")
    return k, m, _open_unit(delta, "delta", "0.05 for 95% confidence")


def clopper_pearson_lower(successes: int, n: int, delta: float) -> float:
    """Exact one-sided lower confidence bound for p at level 1 - delta.

    L = B(delta; k, n - k + 1), the delta-quantile of a Beta(k, n - k + 1) distribution; L = 0 when k = 0.
    Equivalently L is the p at which P(Binom(n, p) >= k) = delta.
    Reference: Clopper, C. J. & Pearson, E. S. (1934), "The use of confidence or fiducial limits illustrated in
    the case of the binomial", Biometrika 26(4), 404-413.
    """
    from scipy import stats

    k, m, d = _check(successes, n, delta)
    if k == 0:
        return 0.0
    return float(stats.beta.ppf(d, k, m - k + 1))


def clopper_pearson_upper(successes: int, n: int, delta: float) -> float:
    """Exact one-sided upper confidence bound for p at level 1 - delta.

    U = B(1 - delta; k + 1, n - k), the (1 - delta)-quantile of Beta(k + 1, n - k); U = 1 when k = n.
    Equivalently U is the p at which P(Binom(n, p) <= k) = delta.
    Reference: Clopper & Pearson (1934), Biometrika 26(4), 404-413.
    """
    from scipy import stats

    k, m, d = _check(successes, n, delta)
    if k == m:
        return 1.0
    return float(stats.beta.isf(d, k + 1, m - k))


@functools.lru_cache(maxsize=64)
def _z(delta: float) -> float:
    """Phi^-1(1 - delta); cached: the release rule asks for the same level after every audited answer."""
    from scipy import stats

    return float(stats.norm.isf(delta))


def _wilson(successes: object, n: object, delta: object) -> tuple[float, float]:
    k, m, d = _check(successes, n, delta)
    if m == 0:
        return 0.0, 1.0
    z = _z(d)
    p_hat = k / m
    denom = 1.0 + z * z / m
    centre = (p_hat + z * z / (2 * m)) / denom
    half = z / denom * math.sqrt(p_hat * (1.0 - p_hat) / m + z * z / (4 * m * m))
    return max(0.0, centre - half), min(1.0, centre + half)


def wilson_lower(successes: int, n: int, delta: float) -> float:
    """Wilson score one-sided lower bound at level 1 - delta (approximate, not exact).

    With z = Phi^-1(1 - delta) and p^ = k / n:
    L = (p^ + z^2 / 2n - z sqrt(p^ (1 - p^) / n + z^2 / 4n^2)) / (1 + z^2 / n); 0 when n = 0.
    Reference: Wilson, E. B. (1927), "Probable inference, the law of succession, and statistical inference",
    JASA 22(158), 209-212.
    """
    return _wilson(successes, n, delta)[0]


def wilson_upper(successes: int, n: int, delta: float) -> float:
    """Wilson score one-sided upper bound at level 1 - delta: the formula of wilson_lower with +z; 1 when n = 0.

    Reference: Wilson (1927), JASA 22(158), 209-212.
    """
    return _wilson(successes, n, delta)[1]


@dataclass(frozen=True)
class PlanRow:
    """``rows`` is the least n such that n - ``errors`` correct rows out of n certify the target."""

    errors: int
    rows: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def _certifies(errors: int, rows: int, target: float, delta: float) -> bool:
    return rows > errors and clopper_pearson_lower(rows - errors, rows, delta) >= target


def rows_to_certify(target: float, delta: float, max_errors: int = 0) -> list[PlanRow]:
    """For each error count e = 0..max_errors, the least n with clopper_pearson_lower(n - e, n, delta) >= target.

    For e = 0 the bound is delta^(1/n), so n = ceil(ln delta / ln target) (59 rows for target 0.95, delta 0.05:
    the "rule of three" in exact form). For fixed e the bound grows with n, so a doubling then bisection search
    finds the least n exactly.
    Reference: Clopper & Pearson (1934); Hanley & Lippman-Hand (1983), JAMA 249(13), 1743-1745 (rule of three).
    """
    t = _open_unit(target, "target", "0.95 for a 95% precision claim")
    d = _open_unit(delta, "delta", "0.05 for 95% confidence")
    top = _count(max_errors, "max_errors")
    plan: list[PlanRow] = []
    for errors in range(top + 1):
        lo = errors  # never certifies (no successes)
        hi = max(errors + 1, 2 * errors + 2)
        while not _certifies(errors, hi, t, d):
            lo, hi = hi, hi * 2
        while hi - lo > 1:  # invariant: lo does not certify, hi does
            mid = (lo + hi) // 2
            if _certifies(errors, mid, t, d):
                hi = mid
            else:
                lo = mid
        plan.append(PlanRow(errors=errors, rows=hi))
    return plan


def _max_errors_array(ns: np.ndarray, target: float, delta: float) -> np.ndarray:
    """Vectorised max_errors_certified over an array of sample sizes (-1 where none certifies)."""
    from scipy import stats

    ns = np.asarray(ns, dtype=np.int64)
    # Certifying k errors out of n  <=>  P(Binom(n, 1 - target) <= k) <= delta; ppf gives a guess, then the
    # exact Clopper-Pearson criterion (the one rows_to_certify uses) settles the off-by-one at float ties.
    k = stats.binom.ppf(delta, ns, 1.0 - target).astype(np.int64)
    k = np.clip(k, -1, ns - 1)

    def ok(errs: np.ndarray) -> np.ndarray:
        valid = (errs >= 0) & (errs < ns)
        succ = np.where(valid, ns - errs, 1)
        lower = stats.beta.ppf(delta, succ, np.where(valid, errs, 0) + 1)
        return valid & (lower >= target)

    for _ in range(3):
        up = ok(k + 1)
        k = np.where(up, k + 1, k)
    for _ in range(3):
        down = (k >= 0) & ~ok(k)
        k = np.where(down, k - 1, k)
    return k


def max_errors_certified(n: int, target: float, delta: float) -> int:
    """The largest error count k such that n - k correct out of n still certify ``target``; -1 if none.

    k_max(n) = max {k : clopper_pearson_lower(n - k, n, delta) >= target}
             = max {k : P(Binom(n, 1 - target) <= k) <= delta}.
    """
    m = _count(n, "n")
    t = _open_unit(target, "target", "0.95 for a 95% precision claim")
    d = _open_unit(delta, "delta", "0.05 for 95% confidence")
    if m == 0:
        return -1
    return int(_max_errors_array(np.array([m]), t, d)[0])


@dataclass(frozen=True)
class PowerPlan:
    """The least sample size whose certification power reaches ``desired_power``.

    ``allowed_errors`` is k_max(n): the most errors that still certify at that n.
    """

    n: int
    power: float
    allowed_errors: int
    target: float
    delta: float
    true_precision: float
    desired_power: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def rows_for_power(
    target: float,
    delta: float,
    true_precision: float,
    power: float = 0.8,
    max_n: int = 200_000,
) -> PowerPlan:
    """The least n whose probability of certifying ``target`` reaches ``power`` when precision is true_precision.

    power(n) = P(Binom(n, 1 - true_precision) <= k_max(n)), k_max as in max_errors_certified. power(n) is
    saw-toothed in n (it drops each time n grows without k_max growing), so n is searched upward, in vectorised
    blocks, and the least n with power(n) >= power is returned, not the first n of a monotone bisection.
    Reference: Chernick & Liu (2002), "The saw-toothed behavior of power versus sample size and software
    solutions: single binomial proportion using exact methods", The American Statistician 56(2), 149-155.
    """
    from scipy import stats

    t = _open_unit(target, "target", "0.95 for a 95% precision claim")
    d = _open_unit(delta, "delta", "0.05 for 95% confidence")
    q = _open_unit(true_precision, "true_precision", "0.98 (the precision you expect the student to have)")
    want = _open_unit(power, "power", "0.8")
    limit = _count(max_n, "max_n")
    if q <= t:
        raise ValueError(
            f"true_precision ({q}) must be above target ({t}): a model exactly at or below the target certifies "
            f"with probability at most delta, whatever the sample size; plan for the precision you expect"
        )
    start, block = 1, 512
    while start <= limit:
        ns = np.arange(start, min(limit, start + block - 1) + 1, dtype=np.int64)
        k = _max_errors_array(ns, t, d)
        pw = np.where(k >= 0, stats.binom.cdf(k, ns, 1.0 - q), 0.0)
        hit = np.flatnonzero(pw >= want)
        if hit.size:
            i = int(hit[0])
            return PowerPlan(
                n=int(ns[i]),
                power=float(pw[i]),
                allowed_errors=int(k[i]),
                target=t,
                delta=d,
                true_precision=q,
                desired_power=want,
            )
        start += block
        block = min(block * 2, 16_384)
    raise ValueError(
        f"no sample size up to max_n={limit} reaches power {want}; raise max_n, lower the power, "
        f"or plan for a true precision further above the target"
    )
