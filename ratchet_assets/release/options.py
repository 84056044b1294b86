"""The release-rule options of the CLI, declared once: ``ratchet admin task set`` signs them into a task's policy
and ``ratchet sim`` compares them, under the same names and help (``ratchet_core.task_policy``).

Each option defaults to None (not given): ``task set`` changes only what is given, ``sim`` leaves the policy's
default. ``--paired-gate/--no-paired-gate`` is a switch for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ratchet_core.task_policy import CALIBRATIONS, PROMOTE_EVIDENCE, RELEASE_RULES

RELEASE_OPTIONS: tuple[Callable[[Any], Any], ...] = (
    click.option(
        "--release",
        "release_rule",
        type=click.Choice(RELEASE_RULES),
        default=None,
        help="What rolls a candidate back (and by default promotes it): sequential (betting e-processes, "
        "anytime-valid; the default) or wilson (a Wilson bound per stage over the stage's audited answers).",
    ),
    click.option(
        "--promote-evidence",
        type=click.Choice(PROMOTE_EVIDENCE),
        default=None,
        help="Promote only on an e-value, or only on the stage's Wilson lower bound (default: the release rule's).",
    ),
    click.option(
        "--canary-audit-rate",
        type=float,
        default=None,
        help="Audit rate while a candidate is in shadow or canary (default: the audit rate).",
    ),
    click.option(
        "--calibration",
        type=click.Choice(CALIBRATIONS),
        default=None,
        help="Confidence threshold: ltt (Learn-then-Test, certified; the default) or point (observed golden "
        "precision).",
    ),
    click.option(
        "--paired-gate/--no-paired-gate",
        default=None,
        help="Admit only a candidate exact McNemar does not show worse than live on the same golden rows.",
    ),
    click.option(
        "--min-certified",
        type=float,
        default=None,
        help="Least certified lower bound to enter shadow, in (0, 1).",
    ),
    click.option(
        "--max-candidate-days",
        type=click.IntRange(0, 365),
        default=None,
        help="Days a candidate keeps the task's candidate slot before a newer certified version may take it "
        "(default 2; sooner only when the newer one is significantly better on the same golden rows).",
    ),
    click.option(
        "--evidence-spend-usd",
        type=click.FloatRange(0.0),
        default=None,
        help="Most the teacher is paid per day for audits of a candidate (caps the evidence budget's audit rate; "
        "default: no cap).",
    ),
)


def release_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the release-rule options to a click command (its parameters: ``release_rule``, ``promote_evidence``,
    ``canary_audit_rate``, ``calibration``, ``paired_gate``, ``min_certified``, ``max_candidate_days``,
    ``evidence_spend_usd``)."""
    for option in reversed(RELEASE_OPTIONS):
        command = option(command)
    return command
