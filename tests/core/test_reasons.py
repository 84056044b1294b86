"""The one rule for reasons: 3-500 characters after stripping, not blank, a string."""

from __future__ import annotations

import pytest

from ratchet_core.reasons import ReasonError, check_reason


@pytest.mark.parametrize("reason", ["abc", "  customer report #123  ", "x" * 500])
def test_reasons_that_say_why_are_kept_stripped(reason: str) -> None:
    assert check_reason(reason) == reason.strip()


@pytest.mark.parametrize("reason", [None, "", "no", "   \t\n  ", " ab ", "x" * 501, 42])
def test_blank_short_long_or_missing_reasons_are_refused_with_the_rule(reason) -> None:
    with pytest.raises(ReasonError, match="3-500 characters"):
        check_reason(reason)
