"""Exact McNemar test: is a candidate (new adapter) more often right than a baseline on the SAME rows?

Only the discordant pairs carry information: b = rows the candidate gets right and the baseline wrong,
c = rows the candidate gets wrong and the baseline right. Under H0 (both equally accurate) each of the
n = b + c discordant rows is equally likely to fall either way, so b ~ Binom(n, 1/2) given n.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from ratchet_stats.bounds import _count

__all__ = ["McNemarResult", "mcnemar_exact"]

Alternative = Literal["two-sided", "greater", "less"]
_ALTERNATIVES = ("two-sided", "greater", "less")


@dataclass(frozen=True)
class McNemarResult:
    """Result of mcnemar_exact.

    ``p_value`` answers the requested ``alternative``. ``p_greater`` = P(B >= b) (evidence the candidate is
    better), ``p_less`` = P(B <= b) (evidence it is worse), ``p_two_sided`` = min(1, 2 min(p_greater, p_less)).
    ``p_one_sided`` is the requested one-sided p-value, or, for a two-sided request, the one-sided p-value in
    the direction the data point (``less`` when b < c, ``greater`` when b > c, the smaller tail when b == c).
    """

    b: int
    c: int
    n: int
    p_value: float
    alternative: str
    p_one_sided: float
    p_two_sided: float
    p_greater: float
    p_less: float

    def to_dict(self) -> dict[str, int | float | str]:
        return asdict(self)


def mcnemar_exact(b: int, c: int, alternative: Alternative = "two-sided") -> McNemarResult:
    """Exact (binomial) McNemar test on the discordant pairs b and c.

    With n = b + c and B ~ Binom(n, 1/2):
      greater (H1: candidate better):  p = P(B >= b) = sum_{i=b}^{n} C(n, i) / 2^n
      less    (H1: candidate worse):   p = P(B <= b)
      two-sided:                       p = min(1, 2 min(P(B >= b), P(B <= b)))
    (for p = 1/2 the two-sided value equals scipy.stats.binomtest's "sum of outcomes no more likely" rule).
    n = 0 gives p = 1 for every alternative: no discordant rows, no evidence.
    References: McNemar, Q. (1947), Psychometrika 12(2), 153-157; exact conditional form: Fagerland,
    Lydersen & Laake (2013), BMC Medical Research Methodology 13:91.
    """
    from scipy import stats  # here, not at the top: ratchet_stats.bounds says why

    nb = _count(b, "b (rows the candidate got right and the baseline wrong)")
    nc = _count(c, "c (rows the candidate got wrong and the baseline right)")
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(_ALTERNATIVES)} (got {alternative!r})")
    n = nb + nc
    if n == 0:
        p_greater = p_less = 1.0
    else:
        p_greater = float(stats.binom.sf(nb - 1, n, 0.5))
        p_less = float(stats.binom.cdf(nb, n, 0.5))
    p_two = min(1.0, 2.0 * min(p_greater, p_less))
    if alternative == "greater":
        p_value = p_one = p_greater
    elif alternative == "less":
        p_value = p_one = p_less
    else:
        p_value = p_two
        p_one = p_less if nb < nc else p_greater if nb > nc else min(p_less, p_greater)
    return McNemarResult(
        b=nb,
        c=nc,
        n=n,
        p_value=p_value,
        alternative=alternative,
        p_one_sided=p_one,
        p_two_sided=p_two,
        p_greater=p_greater,
        p_less=p_less,
    )
