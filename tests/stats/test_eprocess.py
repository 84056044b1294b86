"""Betting e-processes: Ville-level false alarms under continuous peeking, power, and exact state round-trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from ratchet_stats.eprocess import BettingEProcess, log_wealth_paths

ALPHA = 0.05
RUNS, STEPS = 1000, 2000


def _first_crossing(log_wealth: np.ndarray, alpha: float) -> np.ndarray:
    """1-based step of the first e-value >= 1/alpha per run; a huge number when it never happens."""
    hit = log_wealth >= np.log(1 / alpha)
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 10**9)


def test_scalar_updates_and_vectorised_paths_agree() -> None:
    rng = np.random.default_rng(11)
    x = rng.random((5, 400)) < 0.25
    for kind, eps in (("promote", 0.1), ("rollback", 0.1), ("promote", 0.3)):
        paths = log_wealth_paths(x, kind, eps)  # type: ignore[arg-type]
        for run in range(x.shape[0]):
            proc = BettingEProcess(kind, eps, ALPHA)  # type: ignore[arg-type]
            logs = []
            for err in x[run]:
                proc.update(bool(err))
                logs.append(proc.log_wealth)
            np.testing.assert_allclose(logs, paths[run], rtol=1e-12, atol=1e-12)
            first = _first_crossing(paths[run : run + 1], ALPHA)[0]
            assert proc.rejected_at == (None if first == 10**9 else first)


def test_wealth_follows_the_betting_definition() -> None:
    # Independent recomputation of one path: wealth *= 1 + lambda_t (eps0 - X_t), lambda from past counts only.
    eps0, xs = 0.2, [0, 0, 1, 0, 0, 0, 1, 0, 0, 0]
    proc = BettingEProcess.promote(eps0, ALPHA)
    wealth, seen, errs = 1.0, 0, 0
    for x in xs:
        s = seen - errs
        mu = (errs * (eps0 - 1) + s * eps0) / (seen + 1)
        s2 = (eps0 * (1 - eps0) + errs * (eps0 - 1) ** 2 + s * eps0**2) / (seen + 1)
        lam = min(max(mu / s2, 0.0), 0.5 / (1 - eps0))
        assert proc.next_stake() == pytest.approx(lam)
        wealth *= 1 + lam * (eps0 - x)
        proc.update(bool(x))
        seen, errs = seen + 1, errs + x
    assert proc.e_value == pytest.approx(wealth, rel=1e-12)
    assert proc.n == 10 and proc.errors == 2


@pytest.mark.parametrize("kind", ["promote", "rollback"])
def test_false_alarm_rate_under_h0_with_peeking_after_every_observation(kind: str) -> None:
    eps = 0.10
    rng = np.random.default_rng(1 if kind == "promote" else 2)
    x = rng.random((RUNS, STEPS)) < eps  # the boundary of H0: the hardest null
    alarms = _first_crossing(log_wealth_paths(x, kind, eps), ALPHA) <= STEPS  # type: ignore[arg-type]
    slack = 3 * np.sqrt(ALPHA * (1 - ALPHA) / RUNS)
    assert alarms.mean() <= ALPHA + slack

    # The same simulation catches an invalid monitor: re-running a fixed-n exact test at every peek.
    t = np.arange(1, STEPS + 1)
    k = np.cumsum(x, axis=1)
    # "error rate < eps" (promote) / "> eps" (rollback) claimed whenever the exact one-sided p-value <= alpha
    p = stats.binom.cdf(k, t, eps) if kind == "promote" else stats.binom.sf(k - 1, t, eps)
    naive_alarms = (p <= ALPHA).any(axis=1)
    assert naive_alarms.mean() > ALPHA + slack


def test_promotes_within_a_few_hundred_when_error_is_well_below_eps0() -> None:
    rng = np.random.default_rng(3)
    x = rng.random((RUNS, 600)) < 0.02
    first = _first_crossing(log_wealth_paths(x, "promote", 0.10), ALPHA)
    assert np.mean(first <= 300) >= 0.95


def test_rollback_at_30_percent_errors_rejects_within_200_in_most_runs() -> None:
    rng = np.random.default_rng(4)
    x = rng.random((RUNS, 200)) < 0.30
    first = _first_crossing(log_wealth_paths(x, "rollback", 0.10), ALPHA)
    assert np.mean(first <= 200) >= 0.9
    # and the scalar process used by the sensors agrees on one of those runs
    proc = BettingEProcess.rollback(0.10, ALPHA)
    proc.update_many(x[0].tolist())
    assert proc.rejected == (first[0] <= 200)


def test_no_promotion_when_errors_are_frequent_and_rejection_is_sticky() -> None:
    bad = BettingEProcess.promote(0.10, ALPHA)
    bad.update_many([False, True] * 100)  # 50% errors
    assert not bad.rejected and bad.e_value < 1.0

    good = BettingEProcess.promote(0.10, ALPHA)
    good.update_many([False] * 200)
    assert good.rejected and good.e_value >= 1 / ALPHA
    at = good.rejected_at
    good.update_many([True] * 20)  # the decision already made stays made
    assert good.e_value < 1 / ALPHA and good.rejected and good.rejected_at == at


def test_json_round_trip_continues_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    xs = (rng.random(300) < 0.07).tolist()
    original = BettingEProcess.promote(0.10, ALPHA)
    original.update_many(xs[:150])
    text = original.to_json()
    json.loads(text)  # plain JSON
    restored = BettingEProcess.from_json(text)
    assert restored.to_json() == text
    original.update_many(xs[150:])
    restored.update_many(xs[150:])
    assert restored.log_wealth == original.log_wealth
    assert restored.e_value == original.e_value
    assert restored.to_json() == original.to_json()
    assert (restored.n, restored.errors) == (300, sum(xs))


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda: BettingEProcess.promote(0.0, 0.05), "eps0 must be strictly between 0 and 1"),
        (lambda: BettingEProcess.rollback(0.1, 1.0), "alpha"),
        (lambda: BettingEProcess("sideways", 0.1, 0.05), "promote' or 'rollback"),  # type: ignore[arg-type]
        (lambda: BettingEProcess.promote(0.1, 0.05).update("yes"), "True/False"),  # type: ignore[arg-type]
        (lambda: BettingEProcess.from_json("{"), "not valid JSON"),
        (lambda: BettingEProcess.from_json('{"version": 1}'), "lacks the field"),
    ],
)
def test_invalid_input_says_what_to_fix(make, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=needle):
        make()
