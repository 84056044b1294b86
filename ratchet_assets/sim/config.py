"""The arguments of one ``ratchet sim`` run, the task policy they sign, and the teacher's prices and tokens.

The release and calibration options are not the simulator's own: :meth:`SimConfig.task_policy` turns them into the
task policy (``ratchet_core.task_policy.TaskPolicy``) that ``ratchet admin task set`` would sign, and the simulated
manifest carries it for every task of the workload, so the release sensor's functions read them exactly as they do
in production.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

from ratchet_core.task_policy import CALIBRATIONS, PROMOTE_EVIDENCE, RELEASE_RULES, TaskPolicy
from ratchet_core.workloads import get_workload


class SimError(ValueError):
    """The simulation cannot run with these arguments; the message says what to change."""


@dataclass(frozen=True)
class SimConfig:
    """Arguments of one simulation (days are 1-based; ``drift_day`` is the first day with drifted traffic)."""

    days: int = 7
    requests: int = 600
    workload: str = "tickets"
    drift_day: int | None = None
    bad_deploy_version: int | None = None  # the V-th deployed version serves `corrupt_share` wrong answers
    seed: int = 0
    student: str = "fast"
    audit_rate: float = 0.05
    start_day: str = "2026-01-05"
    tick_requests: int = 20
    target: float = 0.95  # certification target (--cert-target); also what promotion needs evidence of
    delta: float = 0.05  # certification level (--cert-delta)
    golden_share: float = 0.2
    window_days: int = 7
    teacher_model: str = "gpt-4o"
    corrupt_share: float = 0.3
    # The task policy's release rules (None: the policy leaves them at their defaults).
    release_rule: str | None = None
    promote_evidence: str | None = None
    canary_audit_rate: float | None = None
    calibration: str | None = None
    paired_gate: bool = False
    min_certified: float | None = None
    max_candidate_days: int | None = None
    evidence_spend_usd: float | None = None
    # The version trained on night V is wrong on `worse_share` of every request, golden rows included.
    worse_version: int | None = None
    worse_share: float = 0.1
    # Teachers that bill reasoning tokens: per teacher call, Gamma-distributed with this mean and coefficient of
    # variation (seeded by the request), billed as completion tokens.
    teacher_reasoning_mean: float = 0.0
    teacher_reasoning_cv: float = 0.0
    receipts: bool = False  # seal each day's receipt with the night's receipt code

    def check(self) -> None:
        if self.days < 1:
            raise SimError(f"--days must be at least 1 (got {self.days})")
        if self.requests < 1:
            raise SimError(f"--requests must be at least 1 (got {self.requests})")
        if self.student not in ("fast", "lora"):
            raise SimError(f"--student is fast or lora (got {self.student!r})")
        for name, value in (
            ("--audit-rate", self.audit_rate),
            ("--canary-audit-rate", self.canary_audit_rate),
        ):
            if value is not None and not 0.0 <= value <= 1.0:
                raise SimError(f"{name} must be between 0 and 1, e.g. 0.05 (got {value})")
        for name, value in (("--cert-target", self.target), ("--cert-delta", self.delta)):
            if not 0.0 < value < 1.0:
                raise SimError(f"{name} must be strictly between 0 and 1, e.g. 0.95 / 0.05 (got {value})")
        if self.min_certified is not None and not 0.0 < self.min_certified < 1.0:
            raise SimError(f"--min-certified must be strictly between 0 and 1 (got {self.min_certified})")
        for name, value, allowed in (
            ("--release", self.release_rule, RELEASE_RULES),
            ("--promote-evidence", self.promote_evidence, PROMOTE_EVIDENCE),
            ("--calibration", self.calibration, CALIBRATIONS),
        ):
            if value is not None and value not in allowed:
                raise SimError(f"{name} is one of {', '.join(allowed)} (got {value!r})")
        if self.drift_day is not None and self.drift_day < 1:
            raise SimError(f"--drift-day is a day number from 1 (got {self.drift_day})")
        if self.bad_deploy_version is not None and self.bad_deploy_version < 1:
            raise SimError(f"--bad-deploy-version counts deployments from 1 (got {self.bad_deploy_version})")
        if self.worse_version is not None and self.worse_version < 1:
            raise SimError(f"--worse-version counts nights from 1 (got {self.worse_version})")
        if self.teacher_reasoning_mean < 0 or self.teacher_reasoning_cv < 0:
            raise SimError(
                "--teacher-reasoning-mean and --teacher-reasoning-cv are >= 0 (tokens; spread / mean), "
                f"got {self.teacher_reasoning_mean} and {self.teacher_reasoning_cv}"
            )
        if self.tick_requests < 1:
            raise SimError(f"tick_requests must be at least 1 (got {self.tick_requests})")
        try:
            get_workload(self.workload)
        except KeyError as exc:
            raise SimError(str(exc.args[0])) from None
        teacher_prices(self.teacher_model)

    def task_policy(self) -> TaskPolicy:
        """The policy `ratchet admin task set` would sign for each task of the workload with these options."""
        return TaskPolicy(
            target=self.target,
            delta=self.delta,
            release_rule=self.release_rule,
            promote_evidence=self.promote_evidence,
            canary_audit_rate=self.canary_audit_rate,
            calibration=self.calibration,
            paired_gate=True if self.paired_gate else None,
            min_certified=self.min_certified,
            max_candidate_days=self.max_candidate_days,
            evidence_spend_usd=self.evidence_spend_usd,
        )

    def reasoning_tokens(self, request_id: str, call: str) -> int:
        """Reasoning tokens the teacher bills for `call` (``answer`` | ``audit``) of a request: Gamma with mean m
        and coefficient of variation v (shape 1/v^2, scale m v^2; m itself when v = 0), seeded by the request."""
        m, v = self.teacher_reasoning_mean, self.teacher_reasoning_cv
        if m <= 0:
            return 0
        if v <= 0:
            return round(m)
        rng = random.Random(f"reasoning:{self.seed}:{request_id}:{call}")
        return round(rng.gammavariate(1.0 / (v * v), m * v * v))


@lru_cache(maxsize=8)
def teacher_prices(model: str) -> tuple[float, float]:
    """USD per (input, output) token of `model` from litellm's bundled price map (``ratchet_core.pricing``)."""
    from ratchet_core.pricing import known_prices

    try:
        p = known_prices(model)
    except RuntimeError as exc:  # litellm is not installed
        raise SimError(str(exc)) from None
    if p is None:
        raise SimError(f"litellm's price map has no price for {model!r}; pass --teacher-model, e.g. gpt-4o")
    return p.input_per_token, p.output_per_token


def tokens_of(text: str) -> int:
    """Token count estimate: one token per 4 UTF-8 bytes, at least 1 (OpenAI's rule of thumb)."""
    return max(1, math.ceil(len(text.encode("utf-8")) / 4))
