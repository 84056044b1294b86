"""Anytime-valid canary decisions: a betting e-process on a Bernoulli error rate.

A gambler starts with wealth 1 and, before each audited canary answer, stakes a fraction lambda_t (chosen from
past answers only) on the answer being right (promote) or wrong (rollback). Each bet is fair or worse for the
gambler when H0 holds, so the wealth is a nonnegative supermartingale under H0 and, by Ville's inequality,

    P_H0(sup_t wealth_t >= 1 / alpha) <= alpha.

The wealth is the e-value; crossing 1/alpha rejects H0 at level alpha however often anyone peeks.

  promote(eps0):  H0: error >= eps0.  payoff g = eps0 - X   (X = 1 for an error), wealth *= 1 + lambda g.
                  E_H0[g] = eps0 - p <= 0. Rejecting H0 is evidence the error rate is below eps0.
  rollback(eps1): H0: error <= eps1.  payoff g = X - eps1.  Rejecting H0 is evidence the error is above eps1.

Betting rule (aGRAPA, predictable): with mu = sum(g_i) / (t + 1) and s2 = (eps (1 - eps) + sum(g_i^2)) / (t + 1)
over the t answers seen so far (a pseudo-observation at the null boundary keeps the first bets small),
lambda_{t+1} = clip(mu / s2, 0, max_fraction / worst_loss), worst_loss = 1 - eps0 (promote) or eps1 (rollback).
max_fraction < 1 keeps every factor 1 + lambda g >= 1 - max_fraction > 0.

References: Waudby-Smith, I. & Ramdas, A. (2023), "Estimating means of bounded random variables by betting",
JRSS-B 86(1), 1-27 (aGRAPA, Section 5.3 / Appendix); Shafer, G. (2021), "Testing by betting", JRSS-A 184(2),
407-431; Ville, J. (1939), Etude critique de la notion de collectif.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Literal

import numpy as np

from ratchet_stats.bounds import _count, _open_unit

__all__ = ["BettingEProcess", "log_wealth_paths"]

Kind = Literal["promote", "rollback"]
_STATE_VERSION = 1


def _payoffs(kind: str, eps: float) -> tuple[float, float]:
    """(payoff when the answer is wrong, payoff when it is right)."""
    if kind == "promote":
        return eps - 1.0, eps
    if kind == "rollback":
        return 1.0 - eps, -eps
    raise ValueError(f"kind must be 'promote' or 'rollback' (got {kind!r})")


def _stakes(kind: str, eps: float, max_fraction: float, seen: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """lambda for the next bet after ``seen`` answers with ``errors`` errors (elementwise; aGRAPA, clipped)."""
    g_err, g_ok = _payoffs(kind, eps)
    right = seen - errors
    mu = (errors * g_err + right * g_ok) / (seen + 1.0)
    s2 = (eps * (1.0 - eps) + errors * (g_err * g_err) + right * (g_ok * g_ok)) / (seen + 1.0)
    worst_loss = -g_err if kind == "promote" else -g_ok
    return np.clip(mu / s2, 0.0, max_fraction / worst_loss)


def log_wealth_paths(errors: np.ndarray, kind: Kind, eps: float, max_fraction: float = 0.5) -> np.ndarray:
    """Log-wealth after each observation for many independent runs at once (rows = runs, columns = steps).

    The same betting rule as BettingEProcess.update, vectorised: the stake before step t depends only on the
    counts of steps < t, so stakes come from cumulative sums and log-wealth is a cumulative sum of
    log1p(lambda_t g_t). Used by simulations and benchmarks.
    """
    x = np.asarray(errors, dtype=bool)
    if x.ndim == 1:
        x = x[None, :]
    e = _open_unit(eps, "eps", "0.10")
    f = _open_unit(max_fraction, "max_fraction", "0.5")
    g_err, g_ok = _payoffs(kind, e)
    steps = x.shape[1]
    seen = np.arange(steps, dtype=float)[None, :]
    prior_errors = np.concatenate([np.zeros((x.shape[0], 1)), np.cumsum(x, axis=1)[:, :-1]], axis=1)
    lam = _stakes(kind, e, f, seen, prior_errors)
    g = np.where(x, g_err, g_ok)
    return np.cumsum(np.log1p(lam * g), axis=1)


class BettingEProcess:
    """A betting e-process for a Bernoulli error rate; build with ``promote`` or ``rollback``.

    ``e_value`` is the current wealth; ``rejected`` becomes True the first time e_value >= 1/alpha and stays
    True (Ville's inequality bounds the chance of EVER crossing under H0, so the decision made at that moment is
    valid even if the wealth later falls). ``rejected_at`` is the observation count at that moment.
    """

    def __init__(
        self,
        kind: Kind,
        eps: float,
        alpha: float,
        max_fraction: float = 0.5,
        *,
        n: int = 0,
        errors: int = 0,
        log_wealth: float = 0.0,
        rejected_at: int | None = None,
    ) -> None:
        _payoffs(kind, 0.5)  # validates kind
        self.kind: Kind = kind
        self.eps = _open_unit(eps, "eps0" if kind == "promote" else "eps1", "0.10 for a 10% error rate")
        self.alpha = _open_unit(alpha, "alpha", "0.05")
        self.max_fraction = _open_unit(max_fraction, "max_fraction", "0.5 (stake at most half the wealth)")
        self.n = _count(n, "n")
        self.errors = _count(errors, "errors")
        if self.errors > self.n:
            raise ValueError(f"errors ({self.errors}) cannot exceed n ({self.n}); the saved state is corrupt")
        self.log_wealth = float(log_wealth)
        if math.isnan(self.log_wealth):
            raise ValueError("log_wealth must be a number; the saved state is corrupt")
        self.rejected_at = None if rejected_at is None else _count(rejected_at, "rejected_at")

    @classmethod
    def promote(cls, eps0: float, alpha: float, max_fraction: float = 0.5) -> BettingEProcess:
        """H0: error rate >= eps0. Rejecting (e-value >= 1/alpha) is evidence the error rate is below eps0."""
        return cls("promote", eps0, alpha, max_fraction)

    @classmethod
    def rollback(cls, eps1: float, alpha: float, max_fraction: float = 0.5) -> BettingEProcess:
        """H0: error rate <= eps1. Rejecting is evidence the error rate is above eps1: roll back."""
        return cls("rollback", eps1, alpha, max_fraction)

    @property
    def e_value(self) -> float:
        """Current wealth exp(log_wealth); inf when it overflows a float."""
        try:
            return math.exp(self.log_wealth)
        except OverflowError:
            return math.inf

    @property
    def threshold(self) -> float:
        """The e-value at which H0 is rejected: 1 / alpha."""
        return 1.0 / self.alpha

    @property
    def rejected(self) -> bool:
        return self.rejected_at is not None

    def next_stake(self) -> float:
        """lambda for the next observation (depends only on what has been seen: predictable)."""
        lam = _stakes(self.kind, self.eps, self.max_fraction, np.float64(self.n), np.float64(self.errors))
        return float(lam)

    def update(self, error: bool) -> None:
        """Record one audited answer: ``error`` True when it was wrong."""
        if isinstance(error, bool | np.bool_) or error in (0, 1):
            x = bool(error)
        else:
            raise ValueError(f"error must be True/False (or 1/0) per observation (got {error!r})")
        g_err, g_ok = _payoffs(self.kind, self.eps)
        lam = _stakes(self.kind, self.eps, self.max_fraction, np.float64(self.n), np.float64(self.errors))
        self.log_wealth = float(self.log_wealth + np.log1p(lam * (g_err if x else g_ok)))
        self.n += 1
        self.errors += int(x)
        if self.rejected_at is None and self.e_value >= self.threshold:
            self.rejected_at = self.n

    def update_many(self, errors: Iterable[bool]) -> None:
        """update() for each observation in order."""
        for error in errors:
            self.update(error)

    def to_dict(self) -> dict[str, object]:
        e = self.e_value
        return {
            "version": _STATE_VERSION,
            "kind": self.kind,
            "eps": self.eps,
            "alpha": self.alpha,
            "max_fraction": self.max_fraction,
            "n": self.n,
            "errors": self.errors,
            "log_wealth": self.log_wealth,
            "e_value": e if math.isfinite(e) else None,
            "rejected_at": self.rejected_at,
        }

    def to_json(self) -> str:
        """State as JSON; Python's float repr round-trips exactly, so from_json continues bit-for-bit."""
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, s: str | bytes) -> BettingEProcess:
        try:
            data = json.loads(s)
        except ValueError as exc:
            raise ValueError(
                f"e-process state is not valid JSON ({exc}); pass the text to_json() produced"
            ) from None
        if not isinstance(data, dict) or data.get("version") != _STATE_VERSION:
            raise ValueError(f"e-process state must be a JSON object with version {_STATE_VERSION}")
        try:
            return cls(
                data["kind"],
                data["eps"],
                data["alpha"],
                data["max_fraction"],
                n=data["n"],
                errors=data["errors"],
                log_wealth=data["log_wealth"],
                rejected_at=data["rejected_at"],
            )
        except KeyError as exc:
            raise ValueError(
                f"e-process state lacks the field {exc}; pass the text to_json() produced"
            ) from None

    def __repr__(self) -> str:
        return (
            f"BettingEProcess({self.kind}, eps={self.eps}, alpha={self.alpha}, n={self.n}, errors={self.errors}, "
            f"e_value={self.e_value:.4g}, rejected={self.rejected})"
        )
