"""Clopper-Pearson / Wilson bounds and certification planning, against scipy oracles computed independently."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ratchet_stats.bounds import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    max_errors_certified,
    rows_for_power,
    rows_to_certify,
    wilson_lower,
    wilson_upper,
)

DELTAS = st.sampled_from([0.001, 0.01, 0.05, 0.1, 0.2])


@st.composite
def counts(draw: st.DrawFn, max_n: int = 400) -> tuple[int, int]:
    n = draw(st.integers(min_value=1, max_value=max_n))
    return draw(st.integers(min_value=0, max_value=n)), n


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (190, 200), (3, 10), (59, 59), (0, 500), (499, 500)])
@pytest.mark.parametrize("delta", [0.01, 0.05, 0.1])
def test_clopper_pearson_equals_scipy_exact_interval_tails(k: int, n: int, delta: float) -> None:
    # A two-sided exact interval at level 1 - 2 delta has delta in each tail: its ends are our one-sided bounds.
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * delta, method="exact")
    assert clopper_pearson_lower(k, n, delta) == pytest.approx(ci.low, rel=1e-9, abs=1e-12)
    assert clopper_pearson_upper(k, n, delta) == pytest.approx(ci.high, rel=1e-9, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(counts(), DELTAS)
def test_clopper_pearson_solves_the_binomial_tail_equation(kn: tuple[int, int], delta: float) -> None:
    k, n = kn
    lo, hi = clopper_pearson_lower(k, n, delta), clopper_pearson_upper(k, n, delta)
    # Definition: P(Binom(n, L) >= k) = delta and P(Binom(n, U) <= k) = delta (ends at 0 / 1 when k = 0 / n).
    if k > 0:
        assert stats.binom.sf(k - 1, n, lo) == pytest.approx(delta, rel=1e-6)
    else:
        assert lo == 0.0
    if k < n:
        assert stats.binom.cdf(k, n, hi) == pytest.approx(delta, rel=1e-6)
    else:
        assert hi == 1.0


@settings(max_examples=150, deadline=None)
@given(counts(), DELTAS)
def test_bounds_bracket_the_point_estimate_and_grow_with_successes(kn: tuple[int, int], delta: float) -> None:
    k, n = kn
    p_hat = k / n
    for lower, upper in ((clopper_pearson_lower, clopper_pearson_upper), (wilson_lower, wilson_upper)):
        assert 0.0 <= lower(k, n, delta) <= p_hat + 1e-12
        assert p_hat - 1e-12 <= upper(k, n, delta) <= 1.0
        if k < n:
            assert lower(k + 1, n, delta) > lower(k, n, delta)
            assert upper(k + 1, n, delta) > upper(k, n, delta)
    # the exact interval is never narrower than a delta that is larger
    assert clopper_pearson_lower(k, n, delta / 2) <= clopper_pearson_lower(k, n, delta)


@settings(max_examples=100, deadline=None)
@given(counts(), DELTAS)
def test_wilson_bounds_are_the_roots_of_the_score_equation(kn: tuple[int, int], delta: float) -> None:
    # Wilson (1927): the bounds are the p with (p_hat - p)^2 = z^2 p (1 - p) / n, z = Phi^-1(1 - delta).
    k, n = kn
    z = stats.norm.ppf(1 - delta)
    p_hat = k / n
    for p in (wilson_lower(k, n, delta), wilson_upper(k, n, delta)):
        assert (p_hat - p) ** 2 == pytest.approx(z * z * p * (1 - p) / n, abs=1e-12)


def test_known_value_190_of_200() -> None:
    assert round(clopper_pearson_lower(190, 200, 0.05), 4) == 0.9167
    assert wilson_lower(190, 200, 0.05) > clopper_pearson_lower(
        190, 200, 0.05
    )  # exact is the conservative one


def test_no_rows_gives_the_vacuous_bounds() -> None:
    assert clopper_pearson_lower(0, 0, 0.05) == 0.0 and clopper_pearson_upper(0, 0, 0.05) == 1.0
    assert wilson_lower(0, 0, 0.05) == 0.0 and wilson_upper(0, 0, 0.05) == 1.0


@pytest.mark.parametrize(
    "args,needle",
    [
        ((5, 3, 0.05), "cannot exceed n"),
        ((-1, 3, 0.05), ">= 0"),
        ((1, 3, 0.0), "strictly between 0 and 1"),
        ((1, 3, 1.5), "strictly between 0 and 1"),
        ((1.5, 3, 0.05), "whole number"),
        ((True, 3, 0.05), "whole number"),
    ],
)
def test_invalid_input_says_what_to_fix(args: tuple, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        clopper_pearson_lower(*args)
    with pytest.raises(ValueError, match=needle):
        wilson_upper(*args)


def test_rows_to_certify_zero_errors_is_59_for_95_percent() -> None:
    plan = rows_to_certify(0.95, 0.05, max_errors=0)
    assert [(r.errors, r.rows) for r in plan] == [(0, math.ceil(math.log(0.05) / math.log(0.95)))]
    assert plan[0].rows == 59


@pytest.mark.parametrize("target,delta", [(0.95, 0.05), (0.9, 0.1), (0.99, 0.01)])
def test_rows_to_certify_is_the_least_n_by_the_scipy_oracle(target: float, delta: float) -> None:
    def certifies(errors: int, n: int) -> bool:
        ci = stats.binomtest(n - errors, n).proportion_ci(confidence_level=1 - 2 * delta, method="exact")
        return ci.low >= target

    plan = rows_to_certify(target, delta, max_errors=4)
    assert [r.errors for r in plan] == [0, 1, 2, 3, 4]
    for row in plan:
        assert certifies(row.errors, row.rows)
        assert not certifies(row.errors, row.rows - 1)
    assert all(a.rows < b.rows for a, b in zip(plan, plan[1:], strict=False))


def _power_oracle(target: float, delta: float, q: float, n: int) -> tuple[int, float]:
    ks = np.arange(n + 1)
    ok = ks[stats.binom.cdf(ks, n, 1 - target) <= delta]  # error counts that still certify
    if ok.size == 0:
        return -1, 0.0
    k_max = int(ok.max())
    return k_max, float(stats.binom.cdf(k_max, n, 1 - q))


def test_rows_for_power_is_the_least_n_reaching_the_power() -> None:
    plan = rows_for_power(0.95, 0.05, true_precision=0.98, power=0.8)
    k_max, pw = _power_oracle(0.95, 0.05, 0.98, plan.n)
    assert plan.allowed_errors == k_max and plan.power == pytest.approx(pw, rel=1e-9)
    assert plan.power >= 0.8
    below = [_power_oracle(0.95, 0.05, 0.98, n)[1] for n in range(1, plan.n)]
    assert max(below) < 0.8
    # saw-tooth: some larger n has LESS power, so a bisection on n would be wrong
    later = [_power_oracle(0.95, 0.05, 0.98, n)[1] for n in range(plan.n + 1, plan.n + 60)]
    assert min(later) < plan.power


def test_max_errors_certified_matches_the_plan() -> None:
    for row in rows_to_certify(0.95, 0.05, max_errors=3):
        assert max_errors_certified(row.rows, 0.95, 0.05) == row.errors
        assert max_errors_certified(row.rows - 1, 0.95, 0.05) == row.errors - 1


def test_rows_for_power_refuses_a_true_precision_at_the_target() -> None:
    with pytest.raises(ValueError, match="must be above target"):
        rows_for_power(0.95, 0.05, true_precision=0.95)
    with pytest.raises(ValueError, match="raise max_n"):
        rows_for_power(0.95, 0.05, true_precision=0.951, max_n=300)
