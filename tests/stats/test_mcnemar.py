"""Exact McNemar test against scipy.stats.binomtest on the discordant pairs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ratchet_stats.mcnemar import mcnemar_exact


def test_b3_c15_one_sided_p_is_the_lower_binomial_tail() -> None:
    result = mcnemar_exact(3, 15)
    expected = stats.binomtest(3, 18, 0.5, alternative="less").pvalue
    assert result.p_one_sided == pytest.approx(expected, rel=1e-12)
    assert result.p_two_sided == pytest.approx(stats.binomtest(3, 18, 0.5).pvalue, rel=1e-12)
    assert result.p_value == result.p_two_sided and result.n == 18
    # sum_{i<=3} C(18, i) / 2^18, by hand
    assert result.p_less == pytest.approx((1 + 18 + 153 + 816) / 2**18, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=80),
    st.integers(min_value=0, max_value=80),
    st.sampled_from(["two-sided", "greater", "less"]),
)
def test_every_alternative_matches_scipy_binomtest(b: int, c: int, alternative: str) -> None:
    result = mcnemar_exact(b, c, alternative)  # type: ignore[arg-type]
    if b + c == 0:
        assert result.p_value == 1.0 and result.p_two_sided == 1.0
        return
    expected = stats.binomtest(b, b + c, 0.5, alternative=alternative).pvalue
    assert result.p_value == pytest.approx(expected, rel=1e-9, abs=1e-300)
    assert result.alternative == alternative


def test_one_sided_p_follows_the_data_for_a_two_sided_request() -> None:
    better = mcnemar_exact(15, 3)
    assert better.p_one_sided == pytest.approx(stats.binomtest(15, 18, 0.5, alternative="greater").pvalue)
    assert better.p_greater < 0.01 < better.p_less


def test_symmetry_swapping_b_and_c_swaps_the_tails() -> None:
    a, b = mcnemar_exact(4, 11), mcnemar_exact(11, 4)
    assert a.p_less == pytest.approx(b.p_greater) and a.p_two_sided == pytest.approx(b.p_two_sided)


def test_invalid_input_says_what_to_fix() -> None:
    with pytest.raises(ValueError, match="alternative must be one of"):
        mcnemar_exact(1, 2, "bigger")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=">= 0"):
        mcnemar_exact(-1, 2)
